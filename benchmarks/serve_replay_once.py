"""One replay of N requests of `serve_speed.py`'s synthetic trace (Azure conversation lengths,
Poisson 4/s, seed 0) on one Llama-2-70B TP4 H100 replica, in a fresh process: the unit an
instruction count compares (CPU seconds on a loaded machine vary more than a small change).

    valgrind --tool=callgrind --callgrind-out-file=OUT python benchmarks/serve_replay_once.py N
    grep ^summary: OUT     # instructions of the whole process

The replay's own count is N's less a small N's (the imports and the step-time oracle's build
are the same in both). Or count the replay alone: `--warm 200` replays 200 requests first
(the oracle's build) and `--callgrind` switches callgrind's counting on around the N-request
replay only (`callgrind_control -i on/off`; start valgrind with `--instr-atstart=no`):

    valgrind --tool=callgrind --instr-atstart=no --dump-instr=no --callgrind-out-file=OUT \\
        python benchmarks/serve_replay_once.py N --warm 200 --callgrind
    grep ^totals: OUT     # instructions of the N-request replay

Prints the engine steps. `--repeat K` replays the N requests K times in the process (a fresh
trace each time, the same requests) and prints each replay's CPU seconds, the figure stop 38
compared across trees in alternated processes:

    python benchmarks/serve_replay_once.py 100000 --warm 200 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from krakenlm.models import get_preset
from krakenlm.serving.replay import serve
from krakenlm.serving.traces import synthetic_trace

ROOT = Path(__file__).resolve().parents[1]


def trace_of(requests: int, conv: Path):
    return synthetic_trace(np.random.default_rng(0), requests, 4.0, f"trace:{conv}")


def replay(trace):
    return serve(trace, get_preset("llama2-70b"), "h100-80gb-x8", software="vllm", tp=4,
                 replicas=1, model_name="llama2-70b", skip_long=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("requests", type=int)
    parser.add_argument("--traces", default=str(ROOT.parent / "shared" / "data" / "traces"))
    parser.add_argument("--warm", type=int, default=0,
                        help="replay this many requests first (builds the step-time oracle)")
    parser.add_argument("--callgrind", action="store_true",
                        help="count instructions (callgrind_control -i) around the replay only")
    parser.add_argument("--repeat", type=int, default=1,
                        help="replay the N requests this many times; print each one's CPU s")
    args = parser.parse_args()
    conv = Path(args.traces) / "azure2023_conv.csv"
    if not conv.exists():
        print(f"error: {conv} not found; pass --traces DIR (the shared request traces)",
              file=sys.stderr)
        sys.exit(2)
    if args.warm:
        replay(trace_of(args.warm, conv))
    cpu_s = []
    for _ in range(max(1, args.repeat)):
        trace = trace_of(args.requests, conv)
        if args.callgrind:
            subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True,
                           capture_output=True)
        started = time.process_time()
        report = replay(trace)
        cpu_s.append(time.process_time() - started)
        if args.callgrind:
            subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=True,
                           capture_output=True)
    print(report.summary["steps"])
    if args.repeat > 1:
        print("cpu_s " + " ".join(f"{t:.2f}" for t in cpu_s))


if __name__ == "__main__":
    main()
