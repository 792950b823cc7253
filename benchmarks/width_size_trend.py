"""The Kraken 2-way / GPT perplexity ratio against model size (issue 25, item 2): reads one
`study compare` summary.json per size, fits the log ratio against log10(parameters), and writes
the trend with its extrapolation (studies/size_trend.py) as JSON and a PNG.

    python benchmarks/width_size_trend.py --size d64=runs/size-d64/summary.json:kraken-mini8-d64-2way \\
        --size d128=runs/width-ablation/summary.json:kraken-mini8-2way \\
        --json docs/data/width-size-trend.json --plot docs/img/width-size-trend.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from krakenlm.errors import KrakenError
from krakenlm.fileio import write_text_atomically
from krakenlm.studies.plots import plot_ratio_vs_size
from krakenlm.studies.size_trend import extrapolate, point_from_summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", action="append", required=True,
                        help="LABEL=SUMMARY_JSON:MODEL, one per size")
    parser.add_argument("--target", type=float, default=1.02, help="ratio to extrapolate to")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--plot", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        points = []
        for item in args.size:
            label, _, rest = item.partition("=")
            path, _, model = rest.rpartition(":")
            if not (label and path and model):
                raise KrakenError(f"--size {item!r}: use LABEL=SUMMARY_JSON:MODEL")
            points.append(point_from_summary(Path(path), model, label))
        points.sort(key=lambda p: p.params)
        trend = None
        if len(points) >= 2:
            grid = [points[0].params * 10 ** (k / 8) for k in range(8 * 3 + 1)]  # 3 decades
            trend = extrapolate(points, target_ratio=args.target, band_params=grid)
    except KrakenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    plot_ratio_vs_size(points, trend, args.plot,
                       title="Kraken 2-way / GPT perplexity ratio against size\n(equal tokens per "
                             "parameter, 95 % intervals)")
    out = {"points": [vars(p) | {"log_se": p.log_se} for p in points], "trend": trend}
    write_text_atomically(args.json, json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in (trend or {}).items() if k != "band"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
