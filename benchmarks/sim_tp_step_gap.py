"""Where the simulator's tensor-parallel scaling departs from Argonne's vLLM rows: latency per
output token at batch 1 against TP, measured and predicted (each source left out), on the
source's two nodes.

    python benchmarks/sim_tp_step_gap.py [--rows docs/data/sim-loso/rows.csv] [--length 128]
                                         [--json docs/data/sim-tp-step-gap.json]

LLM-Inference-Bench ran the same vLLM 0.5-0.6 engine arguments (`LLM(dtype=float16,
tensor_parallel_size=tp)`, random prompts, `ignore_eos`) on an ALCF Polaris node (4x A100
40GB) and an ALCF JLSE H100 node (`simulator/measurements/data/SOURCES.md`). A row is the
end-to-end latency of one batch whose prompt and output both have `--length` tokens; divided
by the output length it is the latency per output token, prefill included (at 128 + 128 tokens
the prefill is a few percent of it). The prediction is the left-out one that
`benchmarks/sim_loso.py` stored (`rows.csv`: ln(measured / predicted) per row), so this reads
no simulation of its own. Printed per node, model and TP: measured and predicted ms per token,
their difference, and the measured and predicted gain from the TP before. Nothing is fitted.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from krakenlm.fileio import write_text_atomically
from krakenlm.simulator.measurements.models import data_path

SOURCE = "llm_inference_bench"


def step_table(rows_csv: Path, length: int) -> pd.DataFrame:
    """Per (system, model, tp) at batch 1 and prompt = output = `length`: measured and
    predicted latency per output token (s)."""
    rows = pd.read_csv(rows_csv)
    rows = rows[(rows.source == SOURCE) & (rows.batch == 1) & (rows.prompt == length)
                & (rows.output == length)]
    measured = pd.read_csv(data_path("model_measurements.csv"))
    measured = measured[(measured.source == SOURCE) & (measured.metric == "e2e")]
    joined = rows.merge(measured, left_on=["model", "system", "tp", "batch", "prompt", "output"],
                        right_on=["model", "system", "tp", "batch", "prompt_tokens",
                                  "output_tokens"])
    joined["measured_s"] = joined.value_ms / 1e3 / length
    joined["predicted_s"] = joined.measured_s / np.exp(joined.log_ratio)
    return joined[["system", "model", "tp", "measured_s", "predicted_s"]].sort_values(
        ["system", "model", "tp"]).reset_index(drop=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="docs/data/sim-loso/rows.csv")
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    table = step_table(Path(args.rows), args.length)
    out = []
    print(f"{'system':14s} {'model':11s} {'TP':>2s} {'measured':>9s} {'predicted':>9s} "
          f"{'excess':>8s} {'gain meas.':>10s} {'gain pred.':>10s}")
    for (system, model), group in table.groupby(["system", "model"], sort=True):
        previous = None
        for r in group.itertuples():
            gain_m = gain_p = None
            if previous is not None:
                gain_m = 1 - r.measured_s / previous.measured_s
                gain_p = 1 - r.predicted_s / previous.predicted_s
            out.append({"system": system, "model": model, "tp": int(r.tp),
                        "measured_s_per_token": r.measured_s,
                        "predicted_s_per_token": r.predicted_s,
                        "excess_s_per_token": r.measured_s - r.predicted_s,
                        "measured_gain_from_previous_tp": gain_m,
                        "predicted_gain_from_previous_tp": gain_p})
            gains = ("" if gain_m is None else
                     f" {100 * gain_m:9.1f}% {100 * gain_p:9.1f}%")
            print(f"{system:14s} {model:11s} {r.tp:2d} {1e3 * r.measured_s:7.2f}ms "
                  f"{1e3 * r.predicted_s:7.2f}ms {1e3 * (r.measured_s - r.predicted_s):+6.2f}ms"
                  + gains)
            previous = r
    if args.json:
        doc = {"command": f"python benchmarks/sim_tp_step_gap.py --length {args.length} --json "
                          f"{args.json}", "source": SOURCE, "length": args.length, "rows": out}
        write_text_atomically(Path(args.json), json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
