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


def decode_steps(rows: list[dict], runs: dict) -> dict[tuple, list[tuple[float, float]]]:
    """The median gap's relative error, and the difference per step in ms, of the 10- and
    20-prompt bursts, per (system, model, TP): between rounds the host is idle, so the median gap over the round's steps is the
    GPU's decode step at the burst's batch (the 160-prompt bursts prefill for long and are
    left out)."""
    out: dict[tuple, list[tuple[float, float]]] = {}
    for row in rows:
        run = runs[row["run"]]
        if len(run.prompt_tokens) > 20:
            continue
        steps = run.engine_options["num_scheduler_steps"]
        gap_ms = 1e3 * (row["p50"]["predicted_s"] - row["p50"]["measured_s"]) / steps
        out.setdefault((run.system, run.model, run.tp), []).append((row["p50"]["error"], gap_ms))
    return out


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
    decode = decode_steps(rows, runs)
    print("the host-free decode step (median ITL / steps per round), 10- and 20-prompt bursts:"
          " the replay's against the measured, signed, per GPU, model and TP")
    for (system, model, tp), errors in sorted(decode.items()):
        print(f"  {system:14s} {model:11s} TP {tp}: " +
              ", ".join(f"{100 * e:+.0f} % ({ms:+.2f} ms a step)" for e, ms in errors))
    if args.json:
        write_text_atomically(args.json, json.dumps(
            {"command": f"python benchmarks/serve_multi_step_itl.py --json {args.json}",
             "source": SOURCE, "seed": 0, "summary": summary, "runs": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
