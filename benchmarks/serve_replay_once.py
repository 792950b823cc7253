"""One replay of N requests of `serve_speed.py`'s synthetic trace (Azure conversation lengths,
Poisson 4/s, seed 0) on one Llama-2-70B TP4 H100 replica, in a fresh process: the unit an
instruction count compares (CPU seconds on a loaded machine vary more than a small change).

    valgrind --tool=callgrind --callgrind-out-file=OUT python benchmarks/serve_replay_once.py N
    grep ^summary: OUT     # instructions of the whole process

The replay's own count is N's less a small N's (the imports and the step-time oracle's build
are the same in both). Prints the engine steps.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from krakenlm.models import get_preset
from krakenlm.serving.replay import serve
from krakenlm.serving.traces import synthetic_trace

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("requests", type=int)
    parser.add_argument("--traces", default=str(ROOT.parent / "shared" / "data" / "traces"))
    args = parser.parse_args()
    conv = Path(args.traces) / "azure2023_conv.csv"
    if not conv.exists():
        print(f"error: {conv} not found; pass --traces DIR (the shared request traces)",
              file=sys.stderr)
        sys.exit(2)
    trace = synthetic_trace(np.random.default_rng(0), args.requests, 4.0, f"trace:{conv}")
    report = serve(trace, get_preset("llama2-70b"), "h100-80gb-x8", software="vllm", tp=4,
                   replicas=1, model_name="llama2-70b", skip_long=True)
    print(report.summary["steps"])


if __name__ == "__main__":
    main()
