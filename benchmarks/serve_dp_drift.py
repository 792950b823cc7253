"""What-if: two data-parallel engines that are not exactly alike. How `scicom_vllm`'s TP 4 x DP 2
runs depend on the second engine's steps being slower by a fraction, under vLLM's balancer as
its releases from 0.14 run it for a dense model (blind to the engines' load) and as earlier
releases ran it (the engines' counts every 100 ms).

    python benchmarks/serve_dp_drift.py [--slower 0,0.005,0.01,0.02] [--json FILE]

The replay's two engines are identical, so a closed loop of requests of one length stays in
phase: each engine groups its wave's prompts the same way forever (at 10 in flight one alone,
four together: TTFT about two prefills). vLLM's own server does the same on one engine over a
stand-in GPU (docs/data/vllm-v1-closed-loop-long.json). A real pair of TP groups is never
exactly alike; once their phases drift apart, the balancer sends a wave's replacements to both
engines and the groups break up. No public figure gives the difference between two TP groups
of one server, so this is not modelled: the script shows the size of the effect. Every step of
engine 1 (its `step_s` and `decode_steps_list`) is multiplied by 1 + slower; one arrival seed
(the runs are closed loops of fixed lengths: the seed does not matter).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from contextlib import contextmanager

from krakenlm.fileio import write_text_atomically
from krakenlm.serving import replay
from krakenlm.serving.validation import load_runs, replay_run, score

METRICS = ("ttft_mean", "ttft_p99", "tpot_mean", "e2e_mean")


class SlowerTimer:
    """A step timer whose steps take (1 + slower) times the wrapped timer's."""

    def __init__(self, timer, slower: float):
        self._timer, self._factor = timer, 1.0 + slower

    def __getattr__(self, name):
        return getattr(self._timer, name)

    def step_s(self, *args, **kwargs) -> float:
        return self._timer.step_s(*args, **kwargs) * self._factor

    def decode_steps_list(self, *args, **kwargs) -> list[float]:
        return [t * self._factor for t in self._timer.decode_steps_list(*args, **kwargs)]


@contextmanager
def second_engine_slower(slower: float, published: bool):
    """Replays inside run engine 1 of vLLM V1 `slower` slower, with the balancer's counts
    `published` (before vLLM 0.14) or not."""
    base = replay.REPLAY_ENGINES["vllm-v1"]

    class Engine(base):
        def __init__(self, timer, options, blocks, hash_block_tokens=0, index=0):
            super().__init__(SlowerTimer(timer, slower) if index == 1 else timer, options,
                             blocks, hash_block_tokens, index)

    counts = replay.dp_counts_published
    replay.REPLAY_ENGINES["vllm-v1"] = Engine
    replay.dp_counts_published = lambda version: published
    try:
        yield
    finally:
        replay.REPLAY_ENGINES["vllm-v1"] = base
        replay.dp_counts_published = counts


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slower", default="0,0.005,0.01,0.02",
                    help="fractions engine 1's steps are slower by, comma-separated")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    try:
        fractions = [float(x) for x in args.slower.split(",")]
    except ValueError:
        fractions = []
    if not fractions or any(not 0 <= f < 1 for f in fractions):
        print(f"error: --slower {args.slower!r}: give comma-separated fractions in [0, 1), "
              "like 0,0.01", file=sys.stderr)
        raise SystemExit(2)
    _, runs = load_runs()
    dp = [r for r in runs if r.source == "scicom_vllm" and r.replicas == 2]
    out = {"command": "python benchmarks/serve_dp_drift.py" + (
        f" --slower {args.slower}" if args.slower != ap.get_default("slower") else "")
        + (f" --json {args.json}" if args.json else ""), "runs": [r.id for r in dp],
        "rows": []}
    print(f"{'balancer':>10s} {'slower':>7s}  " + "  ".join(f"{m:>16s}" for m in METRICS)
          + "  (median |error| / signed over the runs; TTFT mean at 10 in flight)")
    for published in (False, True):
        for slower in fractions:
            with second_engine_slower(slower, published):
                scores = {r.id: score(r, replay_run(r, runs, 0)[1]) for r in dp}
            row = {"balancer": "counts every 100 ms" if published else "load-blind (0.14+)",
                   "slower": slower, "medians": {}, "ttft_mean_at_10": {}}
            for m in METRICS:
                got = [s[m] for s in scores.values() if m in s]
                row["medians"][m] = {"abs": statistics.median(abs(x["error"]) for x in got),
                                     "signed": statistics.median(x["bias"] for x in got)}
            row["ttft_mean_at_10"] = {i: s["ttft_mean"]["bias"] for i, s in scores.items()
                                      if i.endswith("-c10")}
            out["rows"].append(row)
            cells = "  ".join(f"{100 * row['medians'][m]['abs']:6.1f} / {100 * row['medians'][m]['signed']:+6.1f}"
                              for m in METRICS)
            at10 = " ".join(f"{100 * b:+.0f}" for b in row["ttft_mean_at_10"].values())
            print(f"{'published' if published else 'blind':>10s} {slower:7.3f}  {cells}  [{at10}]")
    if args.json:
        write_text_atomically(args.json, json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
