"""Replays whose every output is pinned (tests/test_serving_golden.py): each scheduler (vLLM
V1 and V0, TensorRT-LLM's two capacity policies, SGLang), a KV cache small enough to preempt,
prefix caching from block ids, several replicas and routers. The digest covers every
per-request row, the summary and the binned timeline, so a change to the engines' hot path
that moves any simulated time, count or order shows as a different digest."""

from __future__ import annotations

import hashlib
import json

import numpy as np

from krakenlm.models import get_preset
from krakenlm.serving.kv_cache import with_accounting
from krakenlm.serving.replay import serve
from krakenlm.serving.traces import Request, Trace, synthetic_trace
from krakenlm.serving.vllm_v1 import V1Options

MODEL = "gpt3-1.3b"
TIGHT = 0.065  # gpu_memory_utilization leaving GPT-3 1.3B a few hundred KV blocks on an H100
# vLLM V1 with the accounting of its versions before vllm-project/vllm#19312 (serving/kv_cache.py)
V1_TOTAL_USED = with_accounting("vllm", "total-used")
# SGLang sized as it was before its own accounting ("free-share", serving/kv_cache.py): the
# activations and the runtime reserve inside the share keep the TIGHT pools small enough to
# retract (230 blocks; 921 under free-share, where "sglang fcfs preempting" retracts nothing)
SGLANG_TOTAL_USED = with_accounting("sglang", "total-used")


def prefix_trace(n: int = 120, seed: int = 5) -> Trace:
    """Requests sharing prompt prefixes (block ids of 64 tokens from a few conversations)."""
    rng = np.random.default_rng(seed)
    t, reqs = 0.0, []
    for i in range(n):
        t += float(rng.exponential(1 / 40.0))
        conv = int(rng.integers(0, 6))
        blocks = int(rng.integers(1, 9))
        ids = tuple(conv * 1000 + b for b in range(blocks))
        prompt = blocks * 64 + int(rng.integers(1, 64))
        reqs.append(Request(i, t, prompt, int(rng.integers(2, 120)), ids))
    return Trace("prefix", tuple(reqs), 64)


def cases() -> dict[str, dict]:
    """name -> serve() keyword arguments."""
    load = synthetic_trace(np.random.default_rng(7), 150, 60.0, "lognormal:400,60,0.9")
    both = synthetic_trace(np.random.default_rng(8), 120, 12.0, "lognormal:300,80,0.8")
    return {
        # the two tight V1 cases size as V1 before vllm-project/vllm#19312 (0.8-0.9: the
        # runtime reserve charged), which keeps their pools small enough to preempt and evict
        "vllm-v1 preempting": {"trace": load, "software": V1_TOTAL_USED,
                                   "options": V1Options(1024, 16, gpu_memory_utilization=TIGHT)},
        "vllm-v1 prefix cache 2 replicas prefix-affinity": {
            "trace": prefix_trace(), "software": V1_TOTAL_USED, "replicas": 2,
            "router": "prefix-affinity",
            "options": V1Options(512, 16, gpu_memory_utilization=TIGHT)},
        "vllm-v1 roomy 3 replicas least-loaded": {
            "trace": both, "software": "vllm", "replicas": 3, "router": "least-loaded",
            "options": V1Options(1024, 16)},
        "vllm-v0 preempting": {"trace": load, "software": "vllm-v0",
                                   "options": V1Options(2048, 16, gpu_memory_utilization=TIGHT,
                                                     enable_prefix_caching=False,
                                                     chunked_prefill=False)},
        "trtllm no-evict": {"trace": load, "software": "trtllm",
                                "options": V1Options(2048, 16, 32, TIGHT,
                                                  enable_prefix_caching=False,
                                                  chunked_prefill=False)},
        "trtllm max-utilization chunked": {
            "trace": load, "software": "trtllm",
            "options": V1Options(1024, 16, 32, TIGHT, enable_prefix_caching=False,
                              capacity_policy="max-utilization")},
        "sglang lpm prefix cache": {"trace": prefix_trace(seed=6),
                                    "software": SGLANG_TOTAL_USED,
                                    "options": V1Options(512, 16, 16, TIGHT)},
        "sglang fcfs preempting": {"trace": load, "software": SGLANG_TOTAL_USED,
                                       "options": V1Options(1024, 16, 16, TIGHT,
                                                         schedule_policy="fcfs")},
    }


def digest(report) -> str:
    """sha256 of the rows, the summary (wall-clock fields excluded: none are in it) and the
    timeline, floats in repr (every bit)."""
    text = json.dumps({"rows": report.rows, "summary": report.summary,
                       "timeline": report.timeline}, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def run(name: str):
    kw = dict(cases()[name])
    trace = kw.pop("trace")
    return serve(trace, get_preset(MODEL), "h100-80gb-x8", model_name=MODEL, slo_ttft_s=0.5,
                 slo_tpot_s=0.05, **kw)


if __name__ == "__main__":
    for name in cases():
        r = run(name)
        s = r.summary
        print(json.dumps([name, digest(r), s["kv_cache"]["preemptions"], s["steps"],
                          s["ttft_s"]["p99"]]))
