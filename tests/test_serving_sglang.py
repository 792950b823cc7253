"""SGLang's scheduler on hand-computed cases: prefill batches run apart from decode batches
(a new prompt stalls the decodes), a long prompt is chunked by chunked_prefill_size, the
waiting queue is ordered by longest prefix match (FCFS with `fcfs`), admission reserves
new_token_ratio x the running requests' output left, a tiny cache retracts the request with
the fewest output tokens, the software profile picks the engine, and max_running_requests is
sized from the KV pool as SGLang sizes it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from serving_cases import MODEL, replay, small_timer

from krakenlm.hardware import load_system
from krakenlm.models import get_preset
from krakenlm.serving.replay import default_options, serve
from krakenlm.serving.sglang import (
    INIT_NEW_TOKEN_RATIO,
    MIN_NEW_TOKEN_RATIO,
    SGLangEngine,
    max_running_requests,
)
from krakenlm.serving.step_time import StepTimer
from krakenlm.serving.traces import Request, Trace
from krakenlm.serving.vllm_v1 import V1Engine


def timer() -> StepTimer:
    return small_timer("sglang")


def run(requests, blocks=100_000, block_tokens=0, engine_class=SGLangEngine, **options):
    return replay(timer(), engine_class, requests, blocks, block_tokens, **options)


def test_a_new_prompt_runs_alone_and_stalls_the_decodes():
    st = timer()
    first_end = st.batch_s([(200, 0)], [])
    a = Request(0, 0.0, 200, 50)
    b = Request(1, first_end + 1e-6, 300, 5)
    _, (_, sb) = run([a, b])
    _, (_, vb) = run([a, b], engine_class=V1Engine)
    second = st.batch_s([], [201])  # a's first decode step, in progress when b arrives
    # SGLang: b's prompt is a prefill batch of its own (a does not decode in it)
    assert sb.first_token_s == pytest.approx(first_end + second + st.batch_s([(300, 0)], []),
                                             rel=1e-12)
    # vLLM V1 runs b's prompt and a's next decode in one mixed step instead
    assert vb.first_token_s == pytest.approx(
        first_end + second + st.batch_s([(300, 0)], [202]), rel=1e-12)


def test_a_long_prompt_is_chunked_by_the_chunk_size():
    st = timer()
    _, (s,) = run([Request(0, 0.0, 1600, 3)], max_num_batched_tokens=512)
    chunks = [(512, 0), (512, 512), (512, 1024), (64, 1536)]
    assert s.first_token_s == pytest.approx(sum(st.batch_s([c], []) for c in chunks),
                                            rel=1e-12)


def test_waiting_requests_are_ordered_by_longest_prefix_match_or_fcfs():
    # r0 caches blocks 1, 2; while it runs r1 (no shared prefix) and r2 (shares both) wait;
    # with lpm r2 is admitted first although it arrived later
    r0 = Request(0, 0.0, 1100, 400, (1, 2, 3))
    r1 = Request(1, 0.01, 1000, 4, (7, 8))
    r2 = Request(2, 0.02, 1100, 4, (1, 2, 4))
    reqs = [r0, r1, r2]
    _, (_, l1, l2) = run(reqs, block_tokens=512, max_num_seqs=1)
    _, (_, f1, f2) = run(reqs, block_tokens=512, max_num_seqs=1, schedule_policy="fcfs")
    assert l2.first_scheduled_s < l1.first_scheduled_s and l2.cached_tokens == 1024
    assert f1.first_scheduled_s < f2.first_scheduled_s


def test_admission_reserves_the_running_requests_output():
    # 1008 tokens of cache (63 blocks of 16): a runs with ~890 output tokens to go; b
    # (300 + 100) fits the free blocks but not beside new_token_ratio x a's output left, so
    # it waits until the ratio has decayed and a's output left shrunk; vLLM V1 admits it now
    a = Request(0, 0.0, 50, 900)
    b = Request(1, 0.05, 300, 100)
    engine, (sa, sb) = run([a, b], blocks=63, block_size=16)
    _, (_, vb) = run([a, b], blocks=63, block_size=16, engine_class=V1Engine)
    assert vb.first_scheduled_s < 0.06
    assert 0.3 < sb.first_scheduled_s < sa.finish_s
    assert engine.preemptions == 0


def test_a_full_cache_retracts_the_request_with_the_fewest_output_tokens():
    # a decodes long enough for new_token_ratio to reach its floor, so b is admitted on an
    # optimistic estimate of a's output left; together they outgrow the 200-block cache and
    # b (fewer output tokens) is retracted and recomputed; vLLM V1 preempts the last too
    a = Request(0, 0.0, 16, 2000)
    b = Request(1, 1.5, 16, 1500)
    engine, (sa, sb) = run([a, b], blocks=200, block_size=16)
    assert engine.preemptions >= 1
    assert sb.preemptions >= 1 and sa.preemptions == 0
    assert sa.finish_s < sb.finish_s


def test_the_new_token_ratio_decays_per_decode_step_and_has_a_floor():
    engine, _ = run([Request(0, 0.0, 10, 1000)])
    assert engine.new_token_ratio == pytest.approx(MIN_NEW_TOKEN_RATIO)
    engine, _ = run([Request(0, 0.0, 10, 101)])
    assert MIN_NEW_TOKEN_RATIO < engine.new_token_ratio < INIT_NEW_TOKEN_RATIO


def test_the_sglang_profile_runs_the_sglang_scheduler():
    trace = Trace("t", tuple(Request(i, 0.05 * i, 200, 20) for i in range(30)))
    report = serve(trace, get_preset(MODEL), "h100-80gb-x8", software="sglang",
                   model_name=MODEL)
    assert report.setup["scheduler"] == "sglang"
    assert report.setup["options"]["max_num_batched_tokens"] == 8192  # 80 GB: 8192
    assert report.setup["options"]["schedule_policy"] == "lpm"
    assert report.summary["requests"] == 30


def test_max_running_requests_is_sized_from_the_kv_pool_as_sglang_does():
    # the request-slot pool: KV tokens / context x 512, clamped to 2048-4096; at most half
    # the KV tokens
    assert max_running_requests(1_066_816, 131_072) == 4096
    assert max_running_requests(300_000, 131_072) == 2048
    assert max_running_requests(600_000, 100_000) == 3072
    assert max_running_requests(3000, 8192) == 1500
    # by default the replay runs as many as SGLang would (Llama-3-70B on 4x H200: 4096), an
    # explicit --max-num-seqs is kept
    trace = Trace("t", tuple(Request(i, 0.0, 100, 5) for i in range(3)))
    report = serve(trace, get_preset("llama3-70b"), "h200-x8", software="sglang", tp=4,
                   model_name="llama3-70b")
    kv = report.setup["kv_cache"]
    assert report.setup["options"]["max_num_seqs"] == max_running_requests(
        kv["blocks"] * kv["block_size"], get_preset("llama3-70b").context_len) == 4096
    report = serve(trace, get_preset("llama3-70b"), "h200-x8", software="sglang", tp=4,
                   model_name="llama3-70b", options=replace(
                       default_options("sglang", load_system("h200-x8"),
                                       get_preset("llama3-70b")), max_num_seqs=7))
    assert report.setup["options"]["max_num_seqs"] == 7
