"""The client's inter-token latency of vLLM 0.6.0's multi-step runs against the replay's: a check
of the multi-step rounds (tokens reach the client once per round, so vLLM's client measures one
gap per chunk of about N tokens), not one of the validation's scores.

    python benchmarks/serve_multi_step_itl.py [--json docs/data/serve-multi-step-itl.json]

`benchmarks/serve_validation.py` does not score inter-token latencies (`replay_run` summarises
the measured requests without them, because runs that replay earlier runs first mix their
gaps). The `lambda_v060` runs are bursts with nothing served before them, so the replay's
gaps are theirs: this prints, per run, the measured and replayed ITL mean, median and p99
(client-side replay, the engine's defaults with the run's flags, arrival seed 0) and the
medians of the relative errors.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from krakenlm.fileio import write_text_atomically
from krakenlm.serving.validation import load_runs, replay_run

SOURCE = "lambda_v060"
STATS = ("mean", "p50", "p99")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None, help="write the table here (atomically)")
    args = ap.parse_args(argv)
    runs = {r.id: r for r in load_runs()[1]}
    rows = []
    for run in (r for r in runs.values() if r.source == SOURCE):
        if run.served_before:
            print(f"error: run {run.id} replays earlier runs first; its gaps would mix",
                  file=sys.stderr)
            return 2
        report, _ = replay_run(run, runs)
        row = {"run": run.id}
        for stat in STATS:
            measured, predicted = run.measured["itl_s"][stat], report.summary["itl_s"][stat]
            row[stat] = {"measured_s": measured, "predicted_s": predicted,
                         "error": (predicted - measured) / measured}
        rows.append(row)
        print(f"{run.id:42s} " + "  ".join(
            f"{stat} {1e3 * row[stat]['measured_s']:7.1f} / {1e3 * row[stat]['predicted_s']:7.1f}"
            f" ms ({100 * row[stat]['error']:+6.1f} %)" for stat in STATS))
    summary = {stat: {"median_abs_pct": float(100 * np.median([abs(r[stat]["error"])
                                                                for r in rows])),
                      "median_signed_pct": float(100 * np.median([r[stat]["error"]
                                                                  for r in rows])),
                      "runs": len(rows)} for stat in STATS}
    for stat, s in summary.items():
        print(f"ITL {stat}: median |error| {s['median_abs_pct']:.1f} %, signed "
              f"{s['median_signed_pct']:+.1f} % over {s['runs']} runs")
    if args.json:
        write_text_atomically(args.json, json.dumps(
            {"command": f"python benchmarks/serve_multi_step_itl.py --json {args.json}",
             "source": SOURCE, "seed": 0, "summary": summary, "runs": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
