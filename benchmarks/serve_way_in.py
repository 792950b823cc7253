"""What-ifs behind docs/serving.md's "Stop 49: the prompt's way in": each replays public runs
client-side (as `benchmarks/serve_validation.py` does) with one thing changed, and prints the
signed errors. Attributions and sensitivities, not validation scores: nothing here is shipped.

    python benchmarks/serve_way_in.py attribution   # scicom_vllm: BOS count x prompt way in
    python benchmarks/serve_way_in.py request-time  # in4096 at 10 in flight, TP 8: fixed request_s
    python benchmarks/serve_way_in.py jitter        # a random delay on each request's way in
    python benchmarks/serve_way_in.py sglang        # the same way in on the SGLang sources

`jitter` adds a uniform random delay of up to A seconds (seed 0) to each request's arrival at
the engine, by wrapping the `replace` the replay uses to move an arrival (serving/replay.py);
no source gives such a jitter, which is why it is only a what-if.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import random
import statistics
import sys

import krakenlm.serving.replay as replay_module
from krakenlm.serving.validation import load_runs, replay_run, score
from krakenlm.simulator.constants.software import load_software

IN4096_C10 = "scicom-vllm-h100-tp8-llama3-70b-in4096-c10"
JITTER_RUNS = ("scicom-vllm-h100-tp4-dp2-llama3-70b-in2048-c10",
               "scicom-vllm-h100-tp4-dp2-llama3-70b-in1024-c10",
               "scicom-vllm-h100-tp4-dp2-llama3-70b-in128-c50", IN4096_C10)
METRICS = ("ttft_mean", "ttft_p99", "tpot_mean", "e2e_mean", "e2e_p99")


def with_frontend(name: str, **changes):
    profile = load_software(name)
    return dataclasses.replace(profile, frontend=dataclasses.replace(profile.frontend,
                                                                     **changes))


def scores(run, runs, software=None) -> dict[str, float]:
    _, summary = replay_run(run, runs, software=software)
    return {k: v["bias"] for k, v in score(run, summary).items()}


def medians(per_run: list[dict[str, float]]) -> str:
    return ", ".join(f"{k} {100 * statistics.median(abs(s[k]) for s in per_run if k in s):.1f} %"
                     for k in METRICS if any(k in s for s in per_run))


@contextlib.contextmanager
def jittered(amplitude_s: float, seed: int = 0):
    """Every request's engine arrival moved by a uniform delay in [0, amplitude_s)."""
    rng = random.Random(seed)
    original = replay_module.replace

    def replace(obj, **changes):
        if "arrival_s" in changes and type(obj).__name__ == "Request" and amplitude_s > 0:
            changes["arrival_s"] += rng.uniform(0.0, amplitude_s)
        return original(obj, **changes)

    replay_module.replace = replace
    try:
        yield
    finally:
        replay_module.replace = original


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("attribution", "request-time", "jitter", "sglang"))
    args = ap.parse_args(argv)
    runs = {r.id: r for r in load_runs()[1]}
    if args.what == "attribution":
        scicom = [r for r in runs.values() if r.source == "scicom_vllm"]
        for way_in in (0.0, load_software("vllm").frontend.per_prompt_token_s):
            profile = with_frontend("vllm", per_prompt_token_s=way_in)
            for added in (0, 1):
                per_run = [scores(dataclasses.replace(r, special_tokens_added=added), runs,
                                  profile) for r in scicom]
                print(f"way in {1e6 * way_in:.1f} us a token, BOS {added}: {medians(per_run)}")
    elif args.what == "request-time":
        run = runs[IN4096_C10]
        for request_ms in (8.7, 20.0, 40.0, 60.0):
            s = scores(run, runs, with_frontend("vllm", request_s=request_ms * 1e-3))
            print(f"{IN4096_C10}, request_s {request_ms} ms: "
                  + ", ".join(f"{k} {100 * s[k]:+.1f} %" for k in ("ttft_mean", "tpot_mean")))
    elif args.what == "jitter":
        for amplitude_ms in (0.0, 1.0, 5.0):
            for run_id in JITTER_RUNS:
                with jittered(amplitude_ms * 1e-3):
                    s = scores(runs[run_id], runs)
                print(f"{run_id}, jitter up to {amplitude_ms} ms: "
                      + ", ".join(f"{k} {100 * s[k]:+.1f} %" for k in ("ttft_mean", "tpot_mean")))
    else:
        way_in = load_software("vllm").frontend.per_prompt_token_s
        for source in ("scicom_sglang", "datacrunch"):
            for w in (0.0, way_in):
                profile = with_frontend("sglang", per_prompt_token_s=w)
                per_run = [scores(r, runs, profile) for r in runs.values() if r.source == source]
                print(f"{source}, way in {1e6 * w:.1f} us a token: {medians(per_run)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
