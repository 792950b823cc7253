"""Fit each shared server's host time scale, leaving each source out (serving/host_fit.py).

    python benchmarks/serve_host_fit.py [--json src/krakenlm/serving/data/host_scales.json]

For every server that runs of two or more sources of serving/data/serving_runs.json name, and
for each of those sources, the host time scale that best replays the server's runs of the
*other* sources (the median |error| of their TTFT mean; `--metrics` averages others, a
sensitivity check), on a grid of 2^(k/16). `benchmarks/serve_validation.py` replays each run with the scale fitted without its
own source (`validation.host_scale`). Prints every objective value as it is evaluated; a few
minutes on one core. Without --json nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sys

from krakenlm.fileio import write_text_atomically
from krakenlm.serving.host_fit import OBJECTIVE_METRICS, fit_servers
from krakenlm.serving.validation import METRICS, ValidationDataError, load_runs

COMMAND = "python benchmarks/serve_host_fit.py --json src/krakenlm/serving/data/host_scales.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None, help="write the fitted scales here (atomically)")
    ap.add_argument("--metrics", default=",".join(OBJECTIVE_METRICS),
                    help="the validation metrics whose median |error| the fit averages "
                         f"(default {','.join(OBJECTIVE_METRICS)}; another set: a sensitivity "
                         "check, not what the validation uses)")
    args = ap.parse_args(argv)
    metrics = tuple(m for m in args.metrics.split(",") if m)
    known = {f"{section.removesuffix('_s')}_{stat}" for section, stat in METRICS}
    if not metrics or set(metrics) - known:
        print(f"error: --metrics {args.metrics!r}: each must be one of {', '.join(sorted(known))}",
              file=sys.stderr)
        return 2
    try:
        _, runs = load_runs()
    except ValidationDataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    def progress(server: str, left_out: str, scale: float, value: float) -> None:
        print(f"{server}  without {left_out:12s}  scale {scale:6.3f}  objective {value:.4f}",
              flush=True)

    servers = fit_servers(runs, progress, metrics)
    if not servers:
        print("error: no server is named by runs of two or more sources; nothing to fit",
              file=sys.stderr)
        return 2
    for server, fit in servers.items():
        print(f"{server}: runs {fit['runs']}; fitted without each source: "
              + ", ".join(f"{src} {s:.3f}" for src, s in fit["without"].items()))
    if args.json:
        out = {"about": "Per server, the host time scale fitted on the runs of every source but "
                        "one (`without`: the source left out, which is replayed with it); "
                        "serving/host_fit.py. Not fitted on the source it is used for.",
               "command": COMMAND if metrics == OBJECTIVE_METRICS else
               f"{COMMAND} --metrics {','.join(metrics)}",
               "objective_metrics": list(metrics), "servers": servers}
        write_text_atomically(args.json, json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
