"""How the public vLLM V1 runs depend on the front end's loop of the `vllm` profile
(`frontend.front_loop_*`, measured with vLLM 0.19's own server on this machine by
benchmarks/vllm_v1_frontend/handover.py): without it, and with its times scaled.

    python benchmarks/serve_v1_front_loop.py [--scales 1,0.5,0.25] [--json FILE]

A server's CPU is faster or slower than this 2-core machine's, where the client and the engine
core also share a core. This replays every `scicom_vllm` (vLLM V1 of 2026) and `llmk8s` (vLLM
0.8.3) run client-side with one arrival seed (benchmarks/serve_validation.py averages three for
Poisson runs), with the loop's three times (handler, its per-token part, hand-over) at 0 and
times each scale, and prints the median |error| per source and metric.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys

from krakenlm.fileio import write_text_atomically
from krakenlm.serving.validation import load_runs, replay_run, score
from krakenlm.simulator.constants.software import load_software

SOURCES = ("scicom_vllm", "llmk8s")
METRICS = ("ttft_mean", "ttft_p90", "ttft_p99", "tpot_mean", "e2e_mean", "e2e_p99")
TIMES = ("front_loop_request_s", "front_loop_token_s", "front_loop_send_s")


def scaled(scale: float):
    """The `vllm` profile with its front-end loop's times times `scale` (0: without it)."""
    profile = load_software("vllm")
    front = profile.frontend
    return dataclasses.replace(profile, frontend=dataclasses.replace(
        front, **{name: getattr(front, name) * scale for name in TIMES}))


def medians(runs, by_id, software) -> dict[str, dict[str, float]]:
    """Per source, the median |error| of each metric its runs state."""
    out = {}
    for source in SOURCES:
        scored = [score(r, replay_run(r, by_id, software=software)[1])
                  for r in runs if r.source == source]
        out[source] = {m: statistics.median(abs(s[m]["bias"]) for s in scored if m in s)
                       for m in METRICS if any(m in s for s in scored)}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", default="1,0.5,0.25")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    try:
        scales = [float(x) for x in args.scales.split(",")]
    except ValueError:
        scales = []
    if not scales or min(scales) < 0:
        print(f"error: --scales {args.scales!r} is not a comma-separated list of numbers >= 0 "
              "(e.g. 1,0.5)", file=sys.stderr)
        raise SystemExit(2)
    _, runs = load_runs()
    by_id = {r.id: r for r in runs}
    table = {f"x{scale:g}": medians(runs, by_id, scaled(scale)) for scale in [0.0, *scales]}
    for form, per_source in table.items():
        for source, figs in per_source.items():
            print(f"{form:6s} {source:12s} " + "  ".join(f"{m} {100 * v:5.1f} %"
                                                      for m, v in figs.items()))
    if args.json:
        write_text_atomically(args.json, json.dumps(
            {"command": "python benchmarks/serve_v1_front_loop.py"
             + (f" --scales {args.scales}" if args.scales != "1,0.5,0.25" else "")
             + f" --json {args.json}", "median_abs": table}, indent=1) + "\n")


if __name__ == "__main__":
    main()
