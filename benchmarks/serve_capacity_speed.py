"""Capacity search speed: CPU seconds of `--capacity` with the warm start and early stop
against the plain search (from the trace's rate, every probe replayed to the end).

    python benchmarks/serve_capacity_speed.py [--traces DIR] [--requests N]

Llama-2-70B, TP 4 on the H100 preset, vLLM V1 defaults; N requests (default 3,000) with
lengths resampled from the Azure 2023 conversation trace, Poisson arrivals at 1 request/s
(the search scales the rate); SLOs p99 TTFT <= 1 s and TPOT <= 0.1 s. Prints per search the
capacity, the probes, how many were stopped early and the CPU time (the step-time oracle is
tabulated before either search and shared).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from krakenlm.models import get_preset
from krakenlm.serving.capacity import find_capacity, ttft_misses_deciding
from krakenlm.serving.replay import serve, throughput_bound_per_s
from krakenlm.serving.traces import scale_rate, synthetic_trace

ROOT = Path(__file__).resolve().parents[1]
SLO = {"slo_ttft_s": 1.0, "slo_tpot_s": 0.1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(ROOT.parent / "shared" / "data" / "traces"))
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    conv = Path(args.traces) / "azure2023_conv.csv"
    trace = synthetic_trace(np.random.default_rng(0), args.requests, 1.0, f"trace:{conv}")
    model = get_preset("llama2-70b")
    kw = {"software": "vllm", "tp": 4, "model_name": "llama2-70b"}
    trace = replace(trace, requests=tuple(r for r in trace.requests  # as --skip-long
                                          if r.prompt_tokens + r.output_tokens - 1
                                          <= model.context_len))
    serve(replace(trace, requests=trace.requests[:50]), model, "h100-80gb-x8", **kw)  # oracle
    stop = ttft_misses_deciding(len(trace.requests), 99)
    for name, fast in (("plain", False), ("warm start + early stop", True)):
        def replay(scale, fast=fast):
            return serve(scale_rate(trace, scale), model, "h100-80gb-x8",
                         stop_after_ttft_misses=stop if fast else None, **kw, **SLO)
        cpu = time.process_time()
        start = throughput_bound_per_s(trace, model, "h100-80gb-x8", **kw) / \
            trace.rate_per_s() if fast else 1.0
        cap = find_capacity(replay, trace.rate_per_s(), percentile=99, start_scale=start,
                            **SLO)
        cpu = time.process_time() - cpu
        print(json.dumps({"search": name, "requests": len(trace.requests),
                          "capacity_per_s": round(cap.rate_per_s, 4),
                          "probes": len(cap.evaluations),
                          "stopped_early": sum(e["stopped_early"] for e in cap.evaluations),
                          "cpu_s": round(cpu, 2)}), flush=True)


if __name__ == "__main__":
    main()
