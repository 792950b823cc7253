"""Where the SGLang replay of the `datacrunch` runs is too fast: the simulator's decode step
against the server's median inter-token latency, at the number of requests the server ran.

    python benchmarks/serve_sglang_step_gap.py [--json docs/data/serve-sglang-step-gap.json]

For each Poisson run of the source up to 8 requests/s (Llama-3.3-70B, 4x H200, TP 4, SGLang) the running batch is
taken from Little's law on the measured numbers (rate x measured mean E2E: every request of
those runs is in the engine from arrival to finish, and SGLang's default
max_running_requests, 4096 here, never binds), the KV length of a decoding request as the
mean prompt plus half the mean output. The simulator's pure-decode step at that batch
(`StepTimer.batch_s`, the SGLang profile, CUDA-graph decode) and the same step with the decode
graph off (SGLang of December 2024 captured decode graphs up to `cuda_graph_max_bs` 160 only)
are printed beside the run's measured median ITL, with the excess per running request and
per KV token, and the simulator's decode attention per KV token (all layers).
Nothing is fitted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np

from krakenlm.fileio import write_text_atomically
from krakenlm.models import get_preset
from krakenlm.serving.step_time import StepTimer
from krakenlm.serving.validation import load_runs
from krakenlm.simulator import Simulator


def _timer(run, ungraphed: bool) -> StepTimer:
    sim = Simulator(run.system, run.software, dtype="fp16")
    if ungraphed:
        profile = dataclasses.replace(
            sim.profile, graphs=dataclasses.replace(sim.profile.graphs, decode=False))
        sim = Simulator(run.system, profile, dtype="fp16")
    return StepTimer(sim, get_preset(run.model), run.tp, max_tokens=8192, max_sequences=512,
                     max_context=8192)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    _, runs = load_runs()
    # at 16 requests/s the server queued (rate x E2E exceeds what its KV holds): not Little's
    runs = [r for r in runs if r.source == "datacrunch" and r.arrival == "poisson"
            and r.rate_per_s <= 8]
    graphed, eager = _timer(runs[0], False), _timer(runs[0], True)
    rows = []
    print(f"{'run':8s} {'batch':>6s} {'KV':>6s} {'ITL p50':>8s} {'step':>7s} "
          f"{'no graph':>8s} {'excess/request':>15s} {'excess/KV token':>16s} "
          f"{'attention/KV token':>19s}")
    for run in runs:
        batch = round(run.rate_per_s * run.measured["e2e_s"]["mean"])
        kv = int(np.mean(run.prompt_tokens) + np.mean(run.output_tokens) / 2)
        itl = run.measured["itl_s"]["p50"]
        step = graphed.batch_s([], [kv] * batch)
        no_graph = eager.batch_s([], [kv] * batch)
        excess = (itl - step) / batch
        layers = get_preset(run.model).n_layers
        attention = graphed.decode_attention_s(batch, kv) * layers / (batch * kv)
        rows.append({"attention_per_kv_token_s": attention,
                     "excess_per_kv_token_s": excess / kv, "id": run.id, "rate_per_s": run.rate_per_s, "batch": batch,
                     "kv_tokens": kv, "itl_p50_s": itl, "step_s": step,
                     "step_no_graph_s": no_graph, "excess_per_request_s": excess})
        print(f"{run.rate_per_s:5g}/s {batch:6d} {kv:6d} {1e3 * itl:6.1f}ms {1e3 * step:5.1f}ms "
              f"{1e3 * no_graph:6.1f}ms {1e3 * excess:11.3f} ms {1e6 * excess / kv:13.3f} us "
              f"{1e6 * attention:16.3f} us")
    if args.json:
        out = {"command": "python benchmarks/serve_sglang_step_gap.py --json "
                          "docs/data/serve-sglang-step-gap.json", "runs": rows}
        write_text_atomically(Path(args.json), json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
