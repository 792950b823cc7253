"""Slices of one source's serving validation scores: the median |error| (and the median signed
error) of each metric per GPU, TP, burst size or rate, and model, read from the JSON that
`benchmarks/serve_validation.py` writes (nothing is replayed here).

    python benchmarks/serve_validation_slices.py [--source lambda_v060]
                                                 [--scores docs/data/serve-validation.json]

The tables of docs/serving.md's per-source sections come from this command.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
METRICS = ("ttft_mean", "tpot_mean", "tpot_p50", "e2e_mean", "e2e_p99",
           "throughput_output_tokens_per_s")


def load(path: Path) -> dict | None:
    """The validation's scores, or None after one `error:` line on stderr."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        print(f"error: cannot read the scores {path} ({e}); run "
              "benchmarks/serve_validation.py --json first", file=sys.stderr)
        return None


def slices(runs: list[dict]) -> dict[str, dict[str, list[float]]]:
    """Signed errors per slice label and metric: GPU, TP, load (a closed loop's requests in
    flight, the prompts of a burst, or the Poisson rate), model, and all runs."""
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        if r.get("max_concurrency"):
            load_label = f"{r['max_concurrency']} in flight"
        elif r["rate_per_s"] is None:
            load_label = f"{r['requests']} prompts at once"
        else:
            load_label = f"{r['rate_per_s']:g} requests/s"
        for label in (f"GPU {r['system']}", f"TP {r['tp']}", load_label, f"model {r['model']}",
                      "all"):
            for metric in METRICS:
                if metric in r["scores"]:
                    out[label][metric].append(r["scores"][metric]["bias"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default="lambda_v060")
    ap.add_argument("--scores", default=str(ROOT / "docs" / "data" / "serve-validation.json"))
    args = ap.parse_args(argv)
    data = load(Path(args.scores))
    if data is None:
        return 2
    runs = [r for r in data["runs"] if r["source"] == args.source]
    if not runs:
        known = sorted({r["source"] for r in data["runs"]})
        print(f"error: no run of source {args.source!r} in {args.scores}; sources: "
              f"{', '.join(known)}", file=sys.stderr)
        return 2
    table = slices(runs)
    print(f"{args.source}: median |error| (median signed), per slice")
    print("| slice (runs) | " + " | ".join(METRICS) + " |")
    print("|---|" + "---:|" * len(METRICS))
    for label in sorted(table, key=lambda k: (k == "all", k)):
        cells = table[label]
        n = max(len(v) for v in cells.values())
        row = []
        for metric in METRICS:
            v = np.array(cells.get(metric, []))
            row.append(f"{100 * np.median(np.abs(v)):.1f} % ({100 * np.median(v):+.1f})"
                       if len(v) else "-")
        print(f"| {label} ({n}) | " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
