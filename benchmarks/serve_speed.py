"""Serving simulator speed: simulated requests per second of wall time, on one core.

    python benchmarks/serve_speed.py [--traces DIR] [--requests N] [--json OUT.json]

Llama-2-70B, TP 4 on the H100 preset, vLLM V1 (chunked prefill with vLLM's H100 defaults:
8192 batched tokens, 1024 sequences; paging, recompute preemption, prefix caching):

1. the Azure 2023 conversation trace as recorded (19,366 requests over 58 minutes; the 1,611
   longer than Llama 2's 4,096-token context dropped), one replica and two (round-robin);
2. N requests (default 10^5) with lengths resampled from that trace, Poisson arrivals at
   4 requests/s (a rate one replica sustains: below its throughput on the trace), one replica;
3. the same N requests at 8 x the rate on 8 replicas (round-robin).

Reported per case: wall time of the whole replay, of which the step-time oracle's tables,
requests per second of wall time excluding the tables (the replay loop) and including them,
the process's CPU time and requests per CPU second (on a shared, loaded machine the CPU time
is the comparable figure: wall time counts other processes' turns on the core),
engine steps, the simulated p50/p99 TTFT and a digest of every output (so a speed-up that
changes results shows).
The process is pinned to one core (os.sched_setaffinity).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from krakenlm.models import get_preset
from krakenlm.serving.replay import serve
from krakenlm.serving.traces import Trace, read_trace, scale_rate, synthetic_trace

ROOT = Path(__file__).resolve().parents[1]


def digest(report) -> str:
    """sha256 of every request row, the summary and the timeline (floats in repr): equal
    digests before and after a change to the engines mean identical replays."""
    text = json.dumps({"rows": report.rows, "summary": report.summary,
                       "timeline": report.timeline}, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def case(name: str, trace: Trace, replicas: int) -> dict:
    cpu = time.process_time()
    report = serve(trace, get_preset("llama2-70b"), "h100-80gb-x8", software="vllm", tp=4,
                   replicas=replicas, model_name="llama2-70b", skip_long=True)
    cpu = time.process_time() - cpu
    s = report.summary
    loop = report.wall_s - report.build_s
    row = {"case": name, "requests": s["requests"], "replicas": replicas,
           "wall_s": round(report.wall_s, 2), "oracle_build_s": round(report.build_s, 2),
           "requests_per_s_loop": round(s["requests"] / loop),
           "requests_per_s_total": round(s["requests"] / report.wall_s),
           "cpu_s": round(cpu, 2), "requests_per_cpu_s": round(s["requests"] / cpu),
           "steps": s["steps"], "ttft_p50_s": s["ttft_s"]["p50"], "ttft_p99_s": s["ttft_s"]["p99"],
           "preemptions": s["kv_cache"]["preemptions"], "overloaded": s["overloaded"],
           "digest": digest(report)}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(ROOT.parent / "shared" / "data" / "traces"))
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    conv = Path(args.traces) / "azure2023_conv.csv"
    if not conv.exists():
        sys.exit(f"error: {conv} not found; pass --traces DIR (the shared request traces)")
    trace = read_trace(conv)
    rows = [case("azure2023_conv as recorded, 1 replica", trace, 1),
            case("azure2023_conv as recorded, 2 replicas", trace, 2)]
    long = synthetic_trace(np.random.default_rng(0), args.requests, 4.0, f"trace:{conv}")
    rows.append(case(f"{args.requests:,} requests, Azure conv lengths, Poisson 4/s, 1 replica",
                     long, 1))
    rows.append(case(f"{args.requests:,} requests, Azure conv lengths, Poisson 32/s, 8 replicas "
                     "(round-robin)", scale_rate(long, 8.0), 8))
    if args.json:
        from krakenlm.fileio import write_text_atomically
        write_text_atomically(args.json, json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
