"""How the V0 sources' TTFT depends on the measured API-server hand-over: the shipped
`vllm-v0` profile's `frontend.engine_loop_request_s` and `engine_loop_token_s` (0.6.0's form)
and its `front_loop_*` times (0.5.4's), all measured by benchmarks/vllm_v0_frontend/run.py on
this machine's CPU, scaled together.

    python benchmarks/serve_v0_hand_over.py [--scales 0.8,1,1.2] [--json FILE]

A server's CPU may be faster or slower than this machine's, and single servers of the
measurement lay up to 25-50 % from their median: this replays every `lambda` (vLLM 0.5.4) and
`lambda_v060` (0.6.0) run client-side, as benchmarks/serve_validation.py does, with both
constants times each scale, and prints the median |TTFT mean error| per source and scale.
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

SOURCES = ("lambda", "lambda_v060")


def scaled(scale: float):
    """The `vllm-v0` profile with its hand-over times (both forms) times `scale`."""
    profile = load_software("vllm-v0")
    front = profile.frontend
    times = ("engine_loop_request_s", "engine_loop_token_s", "front_loop_request_s",
             "front_loop_token_s", "front_loop_send_s")
    return dataclasses.replace(profile, frontend=dataclasses.replace(
        front, **{name: getattr(front, name) * scale for name in times}))


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", default="0.8,1,1.2")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    try:
        scales = [float(x) for x in args.scales.split(",")]
    except ValueError:
        fail(f"--scales {args.scales!r} is not a comma-separated list of numbers (e.g. 0.8,1)")
    if not scales or min(scales) < 0:
        fail("--scales needs at least one value, none negative")
    _, runs = load_runs()
    by_id = {r.id: r for r in runs}
    table = {}
    for scale in scales:
        profile = scaled(scale)
        table[scale] = {}
        for source in SOURCES:
            errors = [abs(score(r, replay_run(r, by_id, software=profile)[1])
                          ["ttft_mean"]["error"]) for r in runs if r.source == source]
            table[scale][source] = statistics.median(errors)
        print(f"x{scale}: " + ", ".join(f"{s} {100 * e:.1f} %" for s, e in table[scale].items()))
    if args.json:
        write_text_atomically(args.json, json.dumps(
            {"command": "python benchmarks/serve_v0_hand_over.py"
             + (f" --scales {args.scales}" if args.scales != "0.8,1,1.2" else "")
             + f" --json {args.json}",
             "median_abs_ttft_mean": {str(k): v for k, v in table.items()}}, indent=1) + "\n")


if __name__ == "__main__":
    main()
