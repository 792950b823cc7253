"""Paired ratios between any two models of a `krakenlm study compare` summary.

`study compare` reports every model against one baseline; this prints model A against model B
for every pair asked, paired by seed: exp(mean over seeds of A's minus B's validation loss)
with the same t interval (`studies.stats.ratio_interval`), and the gap in nats.

    python benchmarks/paired_ratios.py docs/data/width-budget4x-summary.json \
        --against kraken-mini8-2way --against gpt-mini8
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from krakenlm.studies.stats import mean_interval, ratio_interval  # noqa: E402


def paired_rows(summary: dict, against: str) -> list[str]:
    losses: dict[str, dict[int, float]] = {}
    for run in summary["runs"]:
        losses.setdefault(run["preset"], {})[run["seed"]] = run["val_loss"]
    if against not in losses:
        raise SystemExit(f"error: {against!r} is not in the summary; it has {sorted(losses)}")
    rows = []
    for model, by_seed in losses.items():
        seeds = sorted(set(by_seed) & set(losses[against]))
        if model == against or not seeds:
            continue
        diffs = [by_seed[s] - losses[against][s] for s in seeds]
        ratio, nats = ratio_interval(diffs), mean_interval(diffs)
        if ratio.low is None:
            rows.append(f"| {model} / {against} | {len(seeds)} | {ratio.mean:.3f} | "
                        f"{nats.mean:+.3f} |")
        else:
            rows.append(f"| {model} / {against} | {len(seeds)} | {ratio.mean:.3f} "
                        f"[{ratio.low:.3f}, {ratio.high:.3f}] | {nats.mean:+.3f} "
                        f"[{nats.low:+.3f}, {nats.high:+.3f}] |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("summary", type=Path, help="summary.json of `krakenlm study compare`")
    parser.add_argument("--against", action="append", required=True, help="the model divided by")
    args = parser.parse_args()
    summary = json.loads(args.summary.read_text())
    print("| pair | seeds | ratio, paired [95 % CI] | gap, nats [95 % CI] |")
    print("|---|---:|---:|---:|")
    for against in args.against:
        print("\n".join(paired_rows(summary, against)))


if __name__ == "__main__":
    main()
