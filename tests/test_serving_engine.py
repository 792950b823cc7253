"""The vLLM V1 engine replay on hand-computed cases: one request's TTFT is one prefill step,
a long prompt is chunked by the token budget, requests queue when the engine is full, a tiny
KV cache preempts (recompute), prefix-cache hits cut the prefill, windows of decode steps
equal single steps, the KV cache is sized like vLLM's worker, the output is byte-identical for
a seed."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

import pytest

from serving_cases import MODEL, replay, small_timer

from krakenlm.models import get_preset
from krakenlm.serving import vllm_v1
from krakenlm.serving.kv_cache import size_kv_cache
from krakenlm.serving.replay import ServeError, serial_session, serve
from krakenlm.serving.step_time import StepTimer
from krakenlm.serving.traces import Request, Trace, synthetic_trace
from krakenlm.serving.trtllm import TRTEngine
from krakenlm.serving.vllm_v0 import V0Engine
from krakenlm.serving.vllm_v1 import V1Engine, V1Options
from krakenlm.simulator import Simulator



def timer() -> StepTimer:
    return small_timer("vllm")


def run(requests, blocks=100_000, block_tokens=0, engine_class=V1Engine, **options):
    return replay(timer(), engine_class, requests, blocks, block_tokens, **options)


def test_a_single_request_takes_one_prefill_step_then_one_decode_step_per_token():
    st = timer()
    _, (s,) = run([Request(0, 0.0, 512, 4)])
    prefill = st.batch_s([(512, 0)], [])
    assert s.first_token_s == pytest.approx(prefill, rel=1e-12)
    # and that step is the simulator's prefill of a 512-token prompt, without a CUDA graph:
    # max_num_seqs 16 captures steps of up to 32 tokens only (`Graphs.largest_captured`)
    p = st.sim.profile
    ungraphed = replace(p, graphs=replace(p.graphs, prefill=False, decode=False, pad_tiers=()))
    direct = Simulator("h100-80gb-x8", ungraphed).run(get_preset(MODEL), 1, 1, 512,
                                                        2).prefill.time_s
    assert s.first_token_s == pytest.approx(direct, rel=1e-9)
    decodes = sum(st.batch_s([], [512 + i]) for i in (1, 2, 3))
    assert s.finish_s == pytest.approx(prefill + decodes, rel=1e-12)
    assert s.first_scheduled_s == 0.0 and s.preemptions == 0


def test_async_scheduling_gives_an_idle_engine_burst_its_first_request_alone():
    """vLLM V1 with async scheduling fixes step j + 1's batch as step j starts. A burst of
    three at an idle engine: the first request starts at once and alone (the API server hands
    the others over after it), step 2 was fixed with only its decode, and the other two
    join step 3; without async scheduling they join step 2."""
    st = timer()
    burst = [Request(i, 0.0, 512, 4) for i in range(3)]
    engine, (a, b, c) = run(burst, async_scheduling=True)
    alone, decode = st.batch_s([(512, 0)], []), st.batch_s([], [513])
    assert a.first_token_s == pytest.approx(alone, rel=1e-12)
    assert b.first_scheduled_s == c.first_scheduled_s == pytest.approx(alone + decode,
                                                                        rel=1e-12)
    assert b.first_token_s == engine.timeline.t_s[2]  # step 3's end (c's prompt is chunked
    assert c.first_token_s == engine.timeline.t_s[3]  # by the 1,024-token budget)
    _, (a, b, c) = run(burst)
    assert b.first_scheduled_s == 0.0  # synchronous: the burst's first step takes a and b


def test_async_scheduling_starts_a_request_arriving_mid_step_after_the_next_step():
    """A request that arrives while step j runs joins step j + 2 (step j + 1 was fixed when
    step j started); a request arriving at an idle engine starts at once."""
    st = timer()
    prefill = st.batch_s([(512, 0)], [])
    late = Request(1, prefill / 2, 64, 2)
    _, (a, b) = run([Request(0, 0.0, 512, 8), late], async_scheduling=True)
    step2 = prefill + st.batch_s([], [513])
    assert b.first_scheduled_s == pytest.approx(step2, rel=1e-12)
    _, (a, b) = run([Request(0, 0.0, 512, 8), late])
    assert b.first_scheduled_s == pytest.approx(prefill, rel=1e-12)
    _, (a, b) = run([Request(0, 0.0, 512, 2), Request(1, 10.0, 64, 2)], async_scheduling=True)
    assert b.first_scheduled_s == 10.0  # the engine was idle


def test_async_scheduling_on_another_engine_is_an_error():
    from krakenlm.serving.replay import ServeError, serial_session, serve
    from krakenlm.serving.traces import Trace

    trace = Trace("one", (Request(0, 0.0, 64, 2),))
    with pytest.raises(ServeError, match="async_scheduling is vLLM V1's"):
        serve(trace, get_preset(MODEL), "h100-80gb-x8", software="vllm-v0",
              options=V1Options(1024, 16, async_scheduling=True, enable_prefix_caching=False,
                                chunked_prefill=False))


def test_a_long_prompt_is_chunked_by_the_token_budget():
    st = timer()
    _, (s,) = run([Request(0, 0.0, 2000, 1)], max_num_batched_tokens=768)
    chunks = [(768, 0), (768, 768), (464, 1536)]
    assert s.first_token_s == pytest.approx(sum(st.batch_s([c], []) for c in chunks), rel=1e-12)
    assert s.finish_s == s.first_token_s  # one output token: done at the first


def test_requests_queue_behind_a_full_engine():
    """max_num_seqs 1: each request starts when the one before it finishes."""
    reqs = [Request(i, 0.0, 100, 5) for i in range(4)]
    _, seqs = run(reqs, max_num_seqs=1)
    assert seqs[0].first_scheduled_s == 0.0
    for before, after in itertools.pairwise(seqs):
        assert after.first_scheduled_s == pytest.approx(before.finish_s, rel=1e-12)
    queue = [s.first_scheduled_s - s.req.arrival_s for s in seqs]
    assert queue == sorted(queue) and queue[-1] > 0


def test_a_tiny_kv_cache_preempts_the_last_request_and_recomputes_it():
    # 12 blocks of 16 tokens; each request grows to 60 + 60 = 120 tokens = 8 blocks
    reqs = [Request(0, 0.0, 60, 60), Request(1, 0.0, 60, 60)]
    engine, (a, b) = run(reqs, blocks=12, block_size=16)
    assert engine.preemptions >= 1
    assert a.preemptions == 0 and b.preemptions >= 1  # the later one (running.pop())
    assert np.isfinite(a.finish_s) and np.isfinite(b.finish_s)
    assert b.finish_s > a.finish_s
    assert engine.pool.available == engine.pool.total  # everything freed at the end
    # without the squeeze nobody is preempted
    engine, _ = run(reqs, blocks=100, block_size=16)
    assert engine.preemptions == 0


def test_prefix_cache_hits_cut_the_prefill():
    st = timer()
    first = Request(0, 0.0, 1600, 2, (1, 2, 3, 4))
    second = Request(1, 10.0, 1600, 2, (1, 2, 3, 9))  # arrives after the first has finished
    _, (a, b) = run([first, second], block_tokens=512)
    assert a.cached_tokens == 0 and b.cached_tokens == 3 * 512
    ttft_b = b.first_token_s - b.req.arrival_s
    assert ttft_b == pytest.approx(st.batch_s([(1600 - 1536, 1536)], []), rel=1e-12)
    assert ttft_b < a.first_token_s
    # prefix caching off: no hit
    _, (_, b_off) = run([first, second], block_tokens=512, enable_prefix_caching=False)
    assert b_off.cached_tokens == 0
    assert b_off.first_token_s - 10.0 == pytest.approx(a.first_token_s, rel=1e-12)


def test_decode_windows_equal_single_steps(monkeypatch):
    trace = synthetic_trace(np.random.default_rng(3), 60, 20.0, "lognormal:300,80,0.8")
    windowed = run(trace.requests, blocks=600)
    monkeypatch.setattr(vllm_v1.V1Engine, "_decode_window", lambda self, until: False)
    single = run(trace.requests, blocks=600)
    assert windowed[0].steps == single[0].steps
    assert windowed[0].preemptions == single[0].preemptions
    for w, s in zip(windowed[1], single[1]):
        assert w.first_token_s == pytest.approx(s.first_token_s, rel=1e-9)
        assert w.finish_s == pytest.approx(s.finish_s, rel=1e-9)


def test_kv_blocks_are_sized_like_the_vllm_worker():
    sim = Simulator("h100-80gb-x8", "vllm")
    sizing = size_kv_cache(sim, get_preset("llama2-70b"), 4, max_num_batched_tokens=8192)
    # 16 tokens x (K and V) x 80 layers x 2 KV heads per shard (8 / TP 4) x 128 x 2 bytes
    assert sizing.bytes_per_block == 16 * 2 * 80 * 2 * 128 * 2
    # the engine's fraction of the total the runtime reports (79.22 GiB on an H100 80GB); V1
    # since vllm-project/vllm#19312 charges no runtime reserve (its init snapshot excludes it)
    free = 85061827297 * 0.9 - sizing.weights_bytes - sizing.activation_bytes
    assert sizing.reserve_bytes == 0
    assert sizing.blocks == int(free // sizing.bytes_per_block)
    assert 31_000 < sizing.blocks < 32_000


def test_the_replay_is_byte_identical_for_a_seed(tmp_path):
    def once(seed, out):
        trace = synthetic_trace(np.random.default_rng(seed), 40, 8.0, "fixed:200,20")
        report = serve(trace, get_preset(MODEL), "h100-80gb-x8", tp=1, replicas=2,
                       router="least-loaded", model_name=MODEL, slo_ttft_s=0.5,
                       slo_tpot_s=0.05, options=V1Options(1024, 16))
        report.write(out)
        return report
    a = once(1, tmp_path / "a")
    once(1, tmp_path / "b")
    once(2, tmp_path / "c")
    for name in ("requests.csv", "timeline.csv", "summary.json", "serve.png"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "requests.csv").read_bytes() != \
        (tmp_path / "c" / "requests.csv").read_bytes()
    assert {r["replica"] for r in a.rows} == {0, 1}
    assert a.summary["requests"] == 40 and 0 <= a.summary["slo"]["attainment"] <= 1


def test_a_replay_runs_without_the_cycle_collector_and_restores_its_state(monkeypatch):
    """`serve` turns the cycle collector off while it replays (its objects form no cycles) and
    leaves it as it found it, on, off, or after an error."""
    import gc

    from krakenlm.serving import replay as replay_module

    seen = []
    inner = replay_module.engine_summary

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return inner(*args, **kwargs)

    monkeypatch.setattr(replay_module, "engine_summary", spy)
    trace = synthetic_trace(np.random.default_rng(1), 10, 8.0, "fixed:100,5")
    was = gc.isenabled()
    try:
        gc.enable()
        serve(trace, get_preset(MODEL), "h100-80gb-x8", model_name=MODEL)
        assert seen == [False] and gc.isenabled()
        gc.disable()
        serve(trace, get_preset(MODEL), "h100-80gb-x8", model_name=MODEL)
        assert seen == [False, False] and not gc.isenabled()
        gc.enable()
        with pytest.raises(ServeError):
            serve(trace, get_preset(MODEL), "h100-80gb-x8", router="random")
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def test_bad_setups_are_one_line_errors():
    trace = Trace("t", (Request(0, 0.0, 3000, 100),))
    with pytest.raises(ServeError, match="exceed gpt3-1.3b's context of 2048 tokens"):
        serve(trace, get_preset(MODEL), "h100-80gb-x8", model_name=MODEL)
    ok = Trace("t", (Request(0, 0.0, 30, 3),))
    with pytest.raises(ServeError, match="no scheduler model for software 'lmdeploy'"):
        serve(ok, get_preset(MODEL), "h100-80gb-x8", software="lmdeploy")
    with pytest.raises(ServeError, match="--router 'random' is not one of"):
        serve(ok, get_preset(MODEL), "h100-80gb-x8", router="random")
    with pytest.raises(ServeError, match="--slo-ttft-s must be a positive"):
        serve(ok, get_preset(MODEL), "h100-80gb-x8", slo_ttft_s=0.0)
    from krakenlm.serving.kv_cache import KVCacheError
    with pytest.raises(KVCacheError, match="leaves no KV cache"):
        serve(ok, get_preset("llama2-70b"), "h100-80gb-x8", tp=1)


def test_vllm_v0_runs_a_new_prompt_alone_while_v1_mixes_it_with_the_decodes():
    st = timer()
    reqs = [Request(0, 0.0, 100, 40), Request(1, 0.05, 1000, 2)]
    _, (a0, b0) = run(reqs, engine_class=V0Engine, chunked_prefill=False)
    _, (a1, b1) = run(reqs)
    alone = st.batch_s([(1000, 0)], [])
    assert b0.first_token_s - b0.first_scheduled_s == pytest.approx(alone, rel=1e-12)
    # V1: the same prompt shares its step with A's decode, which costs a little more
    assert b1.first_token_s - b1.first_scheduled_s > alone * (1 + 1e-9)
    # V0 stalls A's decodes for that step: A finishes later than under V1
    assert a0.finish_s > a1.finish_s


def test_engine_defaults_follow_vllm():
    from krakenlm.hardware import load_system
    from krakenlm.serving.replay import default_options

    h100, a100 = load_system("h100-80gb-x8"), load_system("a100-80gb-x8")
    llama = get_preset("llama2-70b")
    assert default_options("vllm-v1", h100, llama) == V1Options(8192, 1024, 16, 0.9, True,
                                                                 async_scheduling=True)
    assert default_options("vllm-v1", a100, llama) == V1Options(2048, 256, 16, 0.9, True,
                                                                 async_scheduling=True)
    assert default_options("vllm-v0", h100, llama) == V1Options(4096, 256, 16, 0.9, False,
                                                                 chunked_prefill=False)
    assert default_options("trtllm", h100, llama) == V1Options(
        8192, 2048, 32, 0.9, False, chunked_prefill=False, capacity_policy="guaranteed-no-evict")


def test_trtllm_guaranteed_no_evict_admits_only_what_can_finish():
    """12 blocks of 16 tokens; each request needs 8 for its prompt and output: the second
    waits for the first to finish instead of being preempted (vLLM V1 preempts it)."""
    reqs = [Request(0, 0.0, 60, 60), Request(1, 0.0, 60, 60)]
    engine, (a, b) = run(reqs, blocks=12, block_size=16, engine_class=TRTEngine,
                         chunked_prefill=False)
    assert engine.preemptions == 0
    assert b.first_scheduled_s == pytest.approx(a.finish_s, rel=1e-12)
    engine, (a, b) = run(reqs, blocks=12, block_size=16, engine_class=TRTEngine,
                         chunked_prefill=False, capacity_policy="max-utilization")
    assert engine.preemptions >= 1 and b.first_scheduled_s == 0.0


def test_trtllm_without_chunking_runs_a_context_whole_or_not_at_all():
    st = timer()
    reqs = [Request(0, 0.0, 700, 3), Request(1, 0.0, 500, 3)]
    # 1024 tokens: the first context (700) fits, the second (500) does not: it waits a step
    _, (a, b) = run(reqs, engine_class=TRTEngine, chunked_prefill=False)
    assert a.first_token_s == pytest.approx(st.batch_s([(700, 0)], []), rel=1e-12)
    assert b.first_scheduled_s == pytest.approx(a.first_token_s, rel=1e-12)
    # chunked: the second takes the 324 tokens left, rounded down to whole blocks (320); only
    # the first samples a token in that step
    _, (a, b) = run(reqs, engine_class=TRTEngine, chunked_prefill=True)
    assert a.first_token_s == pytest.approx(st.batch_s([(700, 0), (320, 0)], [], logits=1),
                                            rel=1e-12)
    assert b.first_scheduled_s == 0.0


def test_one_at_a_time_with_a_fixed_service_time_the_waits_are_lindleys():
    """Batching off (max_num_seqs 1), every request one 512-token prefill (one output token):
    a single server with deterministic service S. Each request's queueing delay must equal
    Lindley's recursion W' = max(0, W + S - gap) on the same arrivals (exact, no sampling
    error), and their mean the M/D/1 mean wait rho S / (2 (1 - rho)) within sampling error."""
    # the replay's session: vLLM V1 without async scheduling steps serially
    sim = serial_session(Simulator("h100-80gb-x8", "vllm"), V1Options(1024, 1), "vllm-v1")
    st = StepTimer(sim, get_preset(MODEL), 1, max_tokens=1024, max_sequences=1)
    service = st.batch_s([(512, 0)], [])
    rho = 0.6
    trace = synthetic_trace(np.random.default_rng(1), 5000, rho / service, "fixed:512,1")
    report = serve(trace, get_preset(MODEL), "h100-80gb-x8", options=V1Options(1024, 1))
    waits = np.array([r["queue_s"] for r in report.rows])
    arrivals = np.array([r.arrival_s for r in trace.requests])
    lindley = np.zeros(len(arrivals))
    for i in range(1, len(arrivals)):
        lindley[i] = max(0.0, lindley[i - 1] + service - (arrivals[i] - arrivals[i - 1]))
    assert np.max(np.abs(waits - lindley)) < 1e-9
    md1 = rho * service / (2 * (1 - rho))
    assert waits.mean() == pytest.approx(md1, rel=0.1)


def test_prefix_affinity_routes_a_shared_prefix_to_the_replica_that_caches_it():
    """Two replicas. Request 0 (prefix blocks 1, 2, 3, 4) decodes for a while on replica 0;
    request 1 (unrelated) finishes at once on replica 1. Request 2 shares blocks 1-3 with
    request 0: least-loaded sends it to the idle replica 1 (no hit), prefix-affinity to
    replica 0, where 3 x 512 of its prompt tokens are cached."""
    trace = Trace("t", (Request(0, 0.0, 1600, 400, (1, 2, 3, 4)),
                        Request(1, 0.01, 600, 2, (7, 8)),
                        Request(2, 0.5, 1600, 2, (1, 2, 3, 5))), 512)
    rows = {}
    for router in ("least-loaded", "prefix-affinity"):
        report = serve(trace, get_preset(MODEL), "h100-80gb-x8", replicas=2, router=router,
                       options=V1Options(1024, 16))
        rows[router] = {r["id"]: r for r in report.rows}
    assert rows["least-loaded"][0]["finish_s"] > 0.5  # replica 0 is still busy at 0.5 s
    assert (rows["least-loaded"][2]["replica"], rows["least-loaded"][2]["cached_tokens"]) == (1, 0)
    assert rows["prefix-affinity"][2]["replica"] == 0
    assert rows["prefix-affinity"][2]["cached_tokens"] == 3 * 512



def _swap_run(bytes_per_block: float, mode: str = "swap"):
    """A(60, 60) and B(60, 60) on 12 blocks of 16 tokens under vLLM V0: both prefill (4 blocks
    each), grow to 6 blocks each at 96 tokens, then A's seventh block evicts B (6 blocks out);
    A finishes at 8 blocks and B comes back (its 6 blocks in, 7 held for token 97)."""
    engine = V0Engine(timer(), V1Options(1024, 16, 16, chunked_prefill=False, preemption_mode=mode), 12, 0)
    if mode == "swap":
        engine.enable_swap(bytes_per_block, 32e9, cpu_blocks=100)
    seqs = []
    for req in (Request(0, 0.0, 60, 60), Request(1, 0.0, 60, 60)):
        seq = vllm_v1.Seq(req)
        engine.add(seq)
        seqs.append(seq)
    engine.advance(float("inf"))
    return engine, seqs


def test_vllm_v0_swap_moves_the_victims_blocks_over_the_host_link_and_resumes_it():
    st = timer()
    free, (a0, b0) = _swap_run(0.0)
    assert free.swapped_blocks_total == 12 and b0.preemptions == 1 and a0.preemptions == 0
    # resumed without recompute: after A finishes, B only decodes tokens 97..119 of its KV
    decodes = sum(st.batch_s([], [t]) for t in range(97, 120))
    assert b0.finish_s == pytest.approx(a0.finish_s + decodes, rel=1e-12)
    # each copied block costs bytes / host-link bandwidth, charged before its step's model
    engine, (a, b) = _swap_run(1e6)
    per_block_s = 1e6 / 32e9
    assert engine.swapped_blocks_total == 12
    assert a.finish_s - a0.finish_s == pytest.approx(6 * per_block_s, rel=1e-9)
    assert b.finish_s - b0.finish_s == pytest.approx(12 * per_block_s, rel=1e-9)
    assert engine.pool.available == engine.pool.total and engine.cpu_blocks_free == 100
    # recompute (the default) re-prefills B's 96 tokens instead: unchanged by this option
    _, (ar, br) = _swap_run(0.0, mode="recompute")
    _, (a_def, b_def) = run([Request(0, 0.0, 60, 60), Request(1, 0.0, 60, 60)], blocks=12,
                            engine_class=V0Engine, chunked_prefill=False)
    assert (ar.finish_s, br.finish_s) == (a_def.finish_s, b_def.finish_s)
    assert br.preemptions == 1 and br.finish_s > b0.finish_s


def test_vllm_v0_swap_space_that_is_full_aborts_like_vllm():
    from krakenlm.serving.kv_cache import KVCacheError

    engine = V0Engine(timer(), V1Options(1024, 16, 16, chunked_prefill=False, preemption_mode="swap"), 12, 0)
    engine.enable_swap(1e6, 32e9, cpu_blocks=5)
    for req in (Request(0, 0.0, 60, 60), Request(1, 0.0, 60, 60)):
        engine.add(vllm_v1.Seq(req))
    with pytest.raises(KVCacheError, match="needs 6 KV blocks of CPU swap space and 5 are free"):
        engine.advance(float("inf"))


def test_swap_preemption_is_checked_against_engine_and_hardware():
    trace = Trace("t", (Request(0, 0.0, 100, 10),), 0)
    llama = get_preset(MODEL)
    with pytest.raises(ServeError, match="--preemption-mode swap is vLLM V0's"):
        serve(trace, llama, "h100-80gb-x8", options=V1Options(preemption_mode="swap"))
    with pytest.raises(ServeError, match="needs the host link of l40s-x8"):
        serve(trace, llama, "l40s-x8", software="vllm-v0",
              options=V1Options(2048, 256, enable_prefix_caching=False, chunked_prefill=False,
                                preemption_mode="swap"))
    report = serve(trace, llama, "h100-80gb-x8", software="vllm-v0",
                   options=V1Options(2048, 256, enable_prefix_caching=False,
                                     chunked_prefill=False, preemption_mode="swap"))
    assert report.summary["swapped_blocks"] == 0


@pytest.mark.parametrize("policy", ["guaranteed-no-evict", "max-utilization"])
def test_trtllm_kv_block_reuse_skips_the_cached_prefix(policy):
    st = timer()
    first = Request(0, 0.0, 1600, 2, (1, 2, 3, 4))
    second = Request(1, 10.0, 1600, 2, (1, 2, 3, 9))  # the first 3 x 512 tokens repeat
    trt = {"engine_class": TRTEngine, "block_tokens": 512, "block_size": 32,
           "chunked_prefill": False, "capacity_policy": policy, "max_num_batched_tokens": 2048}
    on, (a, b) = run([first, second], enable_prefix_caching=True, **trt)
    off, (_, b_off) = run([first, second], enable_prefix_caching=False, **trt)
    assert (a.cached_tokens, b.cached_tokens, b_off.cached_tokens) == (0, 1536, 0)
    assert sum(on.timeline.tokens) == sum(off.timeline.tokens) - 1536
    assert b.first_token_s - 10.0 == pytest.approx(st.batch_s([(64, 1536)], []), rel=1e-12)
    assert b_off.first_token_s - 10.0 == pytest.approx(a.first_token_s, rel=1e-12)
    assert on.pool.available == on.pool.total


def test_weighted_stats_sorts_runs_as_the_stable_sort_of_every_entry():
    """`weighted_stats` sorts runs of equal (gap, weight) entries as one entry: its mean and
    percentiles are bit for bit those of a stable sort of every entry, with ties between
    runs of different weights and equal values apart."""
    from krakenlm.serving.report import PERCENTILES, _stable_sorted, weighted_stats
    rng = np.random.default_rng(3)
    for _ in range(50):
        pool = rng.uniform(0.01, 0.05, 40).round(3)  # few distinct gaps: many ties
        runs = rng.integers(1, 30, 300)
        values = np.repeat(rng.choice(pool, 300), runs)
        weights = np.repeat(rng.choice([1.0, 1.0, 7.0, 18.0], 300), runs)
        order = np.argsort(values, kind="stable")
        v, w = values[order], weights[order]
        got_v, got_w = _stable_sorted(values, weights)
        assert got_v.tobytes() == v.tobytes() and got_w.tobytes() == w.tobytes()
        cum = np.cumsum(w)
        expected = {"mean": float((v * w).sum() / cum[-1])}
        for p in PERCENTILES:
            expected[f"p{p}"] = float(v[min(len(v) - 1,
                                            int(np.searchsorted(cum, cum[-1] * p / 100)))])
        assert weighted_stats(values, weights) == expected


def test_weighted_stats_of_runs_equal_those_of_the_expanded_entries_bit_for_bit():
    """`weighted_stats` given runs (value, whole-number weight, count) returns exactly what
    it returns for the runs expanded entry by entry: ties of equal values with different
    weights, adjacent runs of the same pair, one-entry runs and long ones."""
    from krakenlm.serving.report import weighted_stats
    rng = np.random.default_rng(8)
    for _ in range(50):
        n = 400
        values = rng.choice(rng.uniform(0.01, 0.05, 30).round(3), n)
        weights = rng.choice([1.0, 1.0, 7.0, 18.0], n)
        counts = rng.choice([1, 1, 2, 40], n)
        expanded = weighted_stats(np.repeat(values, counts), np.repeat(weights, counts))
        assert weighted_stats(values, weights, counts) == expanded
    empty = weighted_stats(np.zeros(0), np.zeros(0), np.zeros(0, dtype=int))
    assert empty == weighted_stats(np.zeros(0), np.zeros(0))


def test_expanded_sum_is_numpys_sum_of_the_expanded_runs_bit_for_bit():
    """`_expanded_sum` splits the expanded runs as numpy's pairwise sum does and sums leaves
    of at most `leaf` entries: the same double as summing `np.repeat` of them (runs of 0,
    1 and many entries, values over twelve orders of magnitude, leaves from numpy's 128 up);
    `_sort_key` orders positive doubles as a stable argsort of the doubles does."""
    from krakenlm.serving.report import _expanded_sum, _sort_key
    rng = np.random.default_rng(11)
    for _ in range(100):
        n = int(rng.integers(1, 4000))
        products = rng.random(n) * rng.choice([1e-6, 1e-3, 1.0, 1e3, 1e6], n)
        counts = rng.choice([0, 1, 1, 2, 7, 40, 300], n)
        counts[0] = 1
        leaf = int(rng.integers(128, 700))
        assert _expanded_sum(products, counts, leaf) == float(np.repeat(products, counts).sum())
        values = rng.choice(rng.uniform(0.01, 0.05, 50), n)
        assert (np.argsort(_sort_key(values), kind="stable") ==
                np.argsort(values, kind="stable")).all()
    assert _sort_key(np.array([0.5, 0.0])).dtype == np.float64  # not all positive: the doubles


def test_timeline_bins_equal_the_per_step_ufunc_at_sums_bit_for_bit():
    """`report.timeline` sums each bin's KV use with one bincount over every replica's steps
    and finds each bin's last step from where the bins change: the floats of `np.add.at` in
    engine and step order and the positions of `np.maximum.at`, for steps in time order and
    not (the fallback)."""
    from types import SimpleNamespace

    from krakenlm.serving.report import _bin_index, _last_index_per_bin, timeline

    rng = np.random.default_rng(11)
    engines = []
    for n in (3000, 0, 1700):
        tl = vllm_v1.Timeline(977)
        for t in np.sort(rng.uniform(0, 50, n)):
            tl.step(float(t), int(rng.integers(0, 978)), int(rng.integers(0, 9)), 0, 0, 1)
        engines.append(SimpleNamespace(timeline=tl))
    bins = 40
    got = timeline(engines, 50.0, bins)
    edges = np.linspace(0.0, 50.0, bins + 1)
    kv, kv_n = np.zeros(bins), np.zeros(bins)
    for e in engines:
        t = np.array(e.timeline.t_s)
        idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, bins - 1)
        np.add.at(kv, idx, np.array(e.timeline.kv_used))
        np.add.at(kv_n, idx, 1)
    expected = np.divide(kv, kv_n, out=np.zeros(bins), where=kv_n > 0)
    assert got["kv_used"] == expected.tolist()
    for t in (np.sort(rng.uniform(-5, 55, 700)), rng.uniform(-5, 55, 700),
              np.repeat(np.sort(rng.uniform(0, 50, 50)), 3), np.array([50.0, 50.0]),
              np.zeros(0)):
        for e in (edges, np.zeros(bins + 1)):
            expected_idx = np.clip(np.searchsorted(e, t, side="right") - 1, 0, bins - 1)
            assert _bin_index(e, t, bins).tolist() == expected_idx.tolist()
    for idx in (np.sort(rng.integers(0, bins, 500)), rng.integers(0, bins, 500)):
        last = np.full(bins, -1)
        np.maximum.at(last, idx, np.arange(len(idx)))
        assert _last_index_per_bin(idx, bins).tolist() == last.tolist()


def test_timeline_values_at_steps_equal_the_expanded_columns():
    """`Timeline.values_at` reads a column at some steps from the records: the values of the
    expanded column there, for steps, windows (whose last step holds the running requests
    after it) and a log with an empty window (expanded)."""
    rng = np.random.default_rng(5)
    for empty in (False, True):
        tl = vllm_v1.Timeline(100)
        t = 0.0
        for _ in range(300):
            if rng.random() < 0.5:
                t += 1.0
                tl.step(t, 3, int(rng.integers(0, 9)), int(rng.integers(0, 9)),
                        int(rng.integers(0, 4)), int(rng.integers(1, 99)))
            else:
                k = int(rng.integers(0 if empty else 1, 6))
                ends = [t + i + 1.0 for i in range(k)]
                t += k
                tl.window(ends, [3] * k, int(rng.integers(1, 9)), int(rng.integers(0, 9)),
                          int(rng.integers(0, 4)))
        steps = len(tl.t_s)
        at = np.unique(rng.integers(0, steps, 60))
        for i in (1, 3, 4, 5):
            got = tl.values_at(i, at)
            assert got.dtype == np.float64 and got.tolist() == tl._column(i)[at].tolist()


def test_request_rows_by_column_equal_the_per_request_formulas():
    """`replay._rows` computes the rows' times on columns: each row equals the per-request
    formulas on Python floats (queue, TTFT, E2E, TPOT; TPOT None for one output token, a
    never-scheduled request's NaN kept), with the same value types, and its
    `RequestColumns` equals `RequestColumns.of_rows` of the rows bit for bit."""
    import math

    from krakenlm.serving.replay import _rows
    from krakenlm.serving.report import RequestColumns
    from krakenlm.serving.traces import Request
    from krakenlm.serving.vllm_v1 import Seq
    rng = np.random.default_rng(4)
    seqs = []
    for i in range(60):
        t = float(rng.uniform(0, 100))
        s = Seq(Request(i, t, int(rng.integers(1, 900)), int(rng.choice([1, 2, 37, 400]))),
                i % 3)
        s.first_scheduled_s = t + float(rng.exponential(0.3)) if i != 7 else math.nan
        s.first_token_s = s.first_scheduled_s + float(rng.exponential(0.1))
        s.finish_s = s.first_token_s + float(rng.exponential(5.0))
        s.cached_tokens, s.preemptions = int(rng.integers(0, 64)), int(rng.integers(0, 3))
        seqs.append(s)
    client_first = [s.first_token_s + 0.001 for s in seqs]
    for first, finish in ((None, None), (client_first, [s.finish_s + 0.002 for s in seqs])):
        rows, columns = _rows(seqs, first, finish)
        for k, (s, row) in enumerate(zip(seqs, rows)):
            f = s.first_token_s if first is None else first[k]
            e = s.finish_s if finish is None else finish[k]
            a = s.req.arrival_s
            expected = {"id": s.req.id, "replica": s.replica, "arrival_s": a,
                        "queue_s": s.first_scheduled_s - a, "first_token_s": f, "finish_s": e,
                        "ttft_s": f - a,
                        "tpot_s": (e - f) / (s.output - 1) if s.output > 1 else None,
                        "e2e_s": e - a, "prompt_tokens": s.prompt, "output_tokens": s.output,
                        "cached_tokens": s.cached_tokens, "preemptions": s.preemptions}
            assert list(row) == list(expected)
            assert [type(v) for v in row.values()] == [type(v) for v in expected.values()]
            assert repr(row) == repr(expected)  # NaN == NaN by its text
        reference = RequestColumns.of_rows(rows)
        for name in ("arrival_s", "queue_s", "ttft_s", "e2e_s", "finish_s", "tpot_s",
                     "has_tpot"):
            assert getattr(columns, name).tobytes() == getattr(reference, name).tobytes()
        assert (columns.output_tokens, columns.prompt_tokens, columns.cached_tokens) == \
            (reference.output_tokens, reference.prompt_tokens, reference.cached_tokens)
    assert _rows([])[0] == []


def test_vllm_v0_chunked_prefill_mixes_a_prompt_chunk_with_the_decodes_like_its_scheduler():
    """`_schedule_chunked_prefill`: A decodes first, then B's prompt takes what is left of the
    budget; B's blocks for its whole prompt are taken at admission."""
    st = timer()
    reqs = [Request(0, 0.0, 100, 40), Request(1, 0.05, 1000, 2)]
    engine, (a, b) = run(reqs, engine_class=V0Engine, max_num_batched_tokens=512,
                         chunked_prefill=True)
    _, (a_plain, b_plain) = run(reqs, engine_class=V0Engine, chunked_prefill=False)
    # B's prompt goes in chunks of 511 (A's decode takes one token of the 512), then 489
    assert b.first_token_s - b.first_scheduled_s > st.batch_s([(1000, 0)], []) * (1 + 1e-9)
    # A keeps decoding during B's prefill: it finishes before it does without chunking
    assert a.finish_s < a_plain.finish_s
    assert b.first_token_s > b_plain.first_token_s


def test_vllm_v0_chunked_prefill_step_by_step():
    """Two steps by hand: a running decode takes 1 token, the new prompt 511, then 489."""
    st = timer()
    engine = V0Engine(st, V1Options(512, 256, 16, enable_prefix_caching=False,
                                    chunked_prefill=True), 1000, 0)
    from krakenlm.serving.vllm_v1 import Seq
    a = Seq(Request(0, 0.0, 100, 40))
    engine.add(a)
    assert engine.step()  # A's prompt, alone
    assert a.generated == 1
    b = Seq(Request(1, 0.0, 1000, 2))
    engine.add(b)
    t0 = engine.now
    assert engine.step()
    assert b.computed == 511 and b.private == 63  # ceil(1000 / 16): the whole prompt's blocks
    assert engine.now - t0 == pytest.approx(st.batch_s([(511, 0)], [101], logits=1), rel=1e-12)  # B's chunk samples nothing
    t1 = engine.now
    assert engine.step()
    assert b.computed == 1000 and b.generated == 1 and a.generated == 3
    assert engine.now - t1 == pytest.approx(st.batch_s([(489, 511)], [102]), rel=1e-12)


def test_vllm_v0_defaults_with_chunked_prefill_are_its_512_token_budget():
    from krakenlm.hardware import load_system
    from krakenlm.serving.replay import default_options

    h100 = load_system("h100-80gb-x8")
    assert default_options("vllm-v0", h100, get_preset("llama2-70b"), True) == V1Options(
        512, 256, 16, 0.9, False, chunked_prefill=True)


def test_vllm_v0_turns_chunked_prefill_on_past_a_32k_context_unless_told_not_to():
    # arg_utils: `use_long_context = max_model_len > 32768` with the flag unset
    from krakenlm.hardware import load_system
    from krakenlm.serving.replay import default_options

    h100 = load_system("h100-80gb-x8")
    long, at_limit = get_preset("llama3.1-8b"), get_preset("mistral-7b")  # 131072, 32768
    assert default_options("vllm-v0", h100, long) == V1Options(
        512, 256, 16, 0.9, False, chunked_prefill=True)
    assert default_options("vllm-v0", h100, long, False) == V1Options(
        131072, 256, 16, 0.9, False, chunked_prefill=False)
    assert default_options("vllm-v0", h100, at_limit) == V1Options(
        32768, 256, 16, 0.9, False, chunked_prefill=False)


def test_vllm_v0_chunked_prefill_preempts_the_last_running_request_by_recompute():
    """A(60, 60) and B(60, 60) on 9 blocks of 16 tokens with chunked prefill: when a decode
    needs a block that is not free, B (the last running) is preempted by recompute, goes back
    to the front of the queue and is prefilled again later; both finish with every token and
    every block is free at the end."""
    engine, (a, b) = run([Request(0, 0.0, 60, 60), Request(1, 0.0, 60, 60)], blocks=9,
                         engine_class=V0Engine, max_num_batched_tokens=512,
                         chunked_prefill=True)
    assert b.preemptions >= 1 and a.preemptions == 0
    assert a.generated == b.generated == 60
    assert b.finish_s > a.finish_s
    assert engine.pool.available == engine.pool.total


def _multi_step_engine(steps=10, blocks=1000):
    return V0Engine(timer(), V1Options(2048, 16, 16, enable_prefix_caching=False,
                                       chunked_prefill=False, num_scheduler_steps=steps),
                    blocks, 0)


def test_vllm_v0_multi_step_runs_decode_rounds_of_n_steps_with_the_host_once_per_round():
    """One request of 100 + 25 tokens at --num-scheduler-steps 10: its prompt is a one-step
    round; its 24 decodes run as rounds of 10, 10 and 10 steps (the last round keeps its row
    for 6 steps after its last token, and its finish reaches the client at that round's end);
    only each round's first step carries the host's per-step and per-sequence work; the
    client gets one chunk per round."""
    from krakenlm.serving.vllm_v1 import Seq

    # vLLM V0's host work is on the GPU's critical path (the profile's overlapped V1 host
    # would hide it): the timer of the same profile stepping serially
    st = StepTimer(serial_session(Simulator("h100-80gb-x8", "vllm"), V1Options(1024, 16),
                                  "vllm-v1"), get_preset(MODEL), 1, max_tokens=1024,
                   max_sequences=16)
    engine = V0Engine(st, V1Options(2048, 16, 16, enable_prefix_caching=False,
                                    chunked_prefill=False, num_scheduler_steps=10), 1000, 0)
    s = Seq(Request(0, 0.0, 100, 25))
    engine.add(s)
    engine.advance(float("inf"))
    prefill = st.batch_s([(100, 0)], [])
    assert s.first_token_s == pytest.approx(prefill, rel=1e-12)
    t, ends = prefill, []
    for r in range(3):
        for k in range(10):
            kv = 100 + 10 * r + k + 1
            t += st.step_s(1, 1, 1, st.decode_attention_s(1, kv), False, "memory", host=k == 0)
            ends.append(t)
    assert s.generated == 25 and s.finish_s == pytest.approx(ends[29], rel=1e-12)
    assert engine.now == pytest.approx(ends[-1], rel=1e-12)  # the round ran to its end
    assert engine.steps == 31
    assert engine.itl_s == pytest.approx([ends[9] - prefill, ends[19] - ends[9],
                                          ends[29] - ends[19]], rel=1e-12)
    # the host work is on the first step of a round only
    no_host = st.step_s(1, 1, 1, st.decode_attention_s(1, 102), False, "memory", host=False)
    with_host = st.step_s(1, 1, 1, st.decode_attention_s(1, 102), False, "memory")
    host = st.sim.profile.host
    assert with_host - no_host == pytest.approx(host.decode_step_s + host.per_sequence_s,
                                                rel=1e-9)


def test_vllm_v0_multi_step_hands_out_a_finish_when_the_host_next_looks():
    """The host issues a round's later steps `decode_step_s` apart from the round's GPU start
    and, at each, processes the steps the GPU has finished: with 2 ms GPU steps from t = 0 and
    x = decode_step_s, a request whose last token is step 1 (done at 4 ms) is handed out at the
    first issue at or after 4 ms, k = ceil(4 / x); one whose last token is step 6 (14 ms) is
    still running when the host issues the last step (9 x < 14 ms), so it waits for the round's
    end (20 ms). The what-if rules give the round's end and the step's own end."""
    import krakenlm.simulator.constants.software as software

    assert software.load_software("vllm-v0").host.decode_step_s == 1.5e-3
    engine = _multi_step_engine()
    x = 1.5e-3  # the vllm-v0 profile's decode_step_s
    ends = [2e-3 * (k + 1) for k in range(10)]
    assert engine._handed_out(ends, 1, 0.0, x) == pytest.approx(3 * x, rel=1e-12)  # 4.5 ms
    assert engine._handed_out(ends, 6, 0.0, x) == ends[-1]  # 9 x = 13.5 ms < 14 ms
    assert engine._handed_out(ends, 1, 0.0, 0.0) == ends[-1]  # a host with no time: all ahead
    engine.finish_rule = "round_end"
    assert engine._handed_out(ends, 1, 0.0, x) == ends[-1]
    engine.finish_rule = "own_step"
    assert engine._handed_out(ends, 1, 0.0, x) == ends[1]


def test_vllm_v0_multi_step_sends_a_prompt_rounds_first_tokens_with_the_next_round():
    """Two prompts of 1,500 tokens under a 2,048-token budget take two prompt rounds: the
    first round's first token reaches the client at the end of the second (the output
    processor makes it while that round runs, which waits for its own tokens), the second's
    as the decode round starts; both at the second round's end."""
    from krakenlm.serving.vllm_v1 import Seq

    st = timer()
    engine = _multi_step_engine()
    a, b = Seq(Request(0, 0.0, 1500, 30)), Seq(Request(1, 0.0, 1500, 30))
    engine.add(a)
    engine.add(b)
    engine.advance(float("inf"))
    first_round = st.batch_s([(1500, 0)], [])
    second_round = first_round + st.batch_s([(1500, 0)], [])
    assert a.first_token_s == pytest.approx(second_round, rel=1e-12)
    assert b.first_token_s == pytest.approx(second_round, rel=1e-12)
    assert a.generated == b.generated == 30 and a.finish_s == b.finish_s


def test_vllm_v0_multi_step_holds_a_new_request_until_the_round_ends():
    from krakenlm.serving.vllm_v1 import Seq

    engine = _multi_step_engine()
    a = Seq(Request(0, 0.0, 100, 40))
    engine.add(a)
    engine.advance(1e-9)  # A's prompt step runs
    round_start = engine.now
    assert a.generated == 1
    engine.advance(round_start + 1e-6)  # a decode round starts before B arrives
    round_end = engine.now
    assert round_end > round_start + 1e-6 and a.generated == 11
    b = Seq(Request(1, round_start + 1e-6, 100, 5))
    engine.add(b)
    engine.advance(float("inf"))
    assert b.first_scheduled_s == round_end


def test_vllm_v0_multi_step_reserves_the_rounds_blocks_at_its_start():
    """A decode at 106 computed tokens reserves blocks for the round's 10 tokens at its start:
    ceil(116 / 16) = 8 blocks, where a single step would need ceil(107 / 16) = 7."""
    from krakenlm.serving.vllm_v1 import Seq

    engine = _multi_step_engine()
    s = Seq(Request(0, 0.0, 106, 40))
    engine.add(s)
    engine.step()  # the prompt: 7 blocks, 1 token out
    assert s.private == 7 and s.computed == 106
    engine.step()  # a round: 106 + 10 tokens need 8 blocks
    assert s.private == 8 and s.computed == 116 and s.generated == 11


@pytest.mark.parametrize("change, message", [
    ({"num_scheduler_steps": 0}, "--num-scheduler-steps must be at least 1"),
    ({"num_scheduler_steps": 8, "chunked_prefill": True}, "Chunked prefill is not supported"),
    ({"num_scheduler_steps": 8, "preemption_mode": "swap"}, "is not modelled"),
])
def test_vllm_v0_multi_step_options_vllm_refuses_are_one_error(change, message):
    trace = Trace("t", (Request(0, 0.0, 100, 10),))
    options = replace(V1Options(2048, 16, enable_prefix_caching=False, chunked_prefill=False),
                      **change)
    with pytest.raises(ServeError, match=message):
        serve(trace, get_preset(MODEL), "h100-80gb-x8", software="vllm-v0", options=options)


def test_a_multi_step_round_at_tp_2_waits_for_the_input_broadcast_before_each_later_step():
    """vLLM 0.6.0 broadcasts the whole model input again before every step of a round (one NCCL
    broadcast per GPU tensor, `host.multi_step_broadcast_tensors`): at TP 2 each of a round's
    later steps is that much longer; at TP 1, and in a single-step engine, nothing changes."""
    from krakenlm.serving.step_time import BROADCAST_TENSOR_BYTES
    from krakenlm.serving.vllm_v1 import Seq

    sim = Simulator("h100-80gb-x8", "vllm-v0")
    tp2 = StepTimer(sim, get_preset(MODEL), 2, max_tokens=1024, max_sequences=16)
    assert sim.profile.host.multi_step_broadcast_tensors == 10
    assert tp2.multi_step_broadcast_s == pytest.approx(
        10 * sim.timer.collective_s("all_gather", BROADCAST_TENSOR_BYTES, 2), rel=1e-12)
    assert 2e-5 < tp2.multi_step_broadcast_s < 5e-4  # ten NCCL latency floors
    assert StepTimer(sim, get_preset(MODEL), 1, max_tokens=1024,
                     max_sequences=16).multi_step_broadcast_s == 0.0

    def finish(broadcast_s: float, steps: int = 10) -> float:
        tp2.multi_step_broadcast_s = broadcast_s
        engine = V0Engine(tp2, V1Options(2048, 16, 16, enable_prefix_caching=False,
                                         chunked_prefill=False, num_scheduler_steps=steps), 1000)
        s = Seq(Request(0, 0.0, 100, 21))
        engine.add(s)
        engine.advance(float("inf"))
        return s.finish_s

    b = tp2.multi_step_broadcast_s
    # 20 decodes: two rounds of 10 steps, 9 later steps each
    assert finish(b) - finish(0.0) == pytest.approx(18 * b, rel=1e-9)
    assert finish(b, steps=1) == finish(0.0, steps=1)


def test_a_multi_step_later_step_lasts_at_least_the_hosts_cycle():
    """vLLM 0.6.0's host goes round its loop for every later step (the output processor and
    the pythonizing of the previous step before the sampler's launch) without waiting for the
    GPU, which cannot start a step before its launch (`host.multi_step_host_seq_s` x the
    batch): a later step lasts the longer of its GPU time and that; the round's first step, and a floor below every
    GPU step, change nothing."""
    import dataclasses

    from krakenlm.serving.vllm_v1 import Seq

    from krakenlm.simulator.constants.software import load_software

    assert load_software("vllm-v0").host.multi_step_host_seq_s == pytest.approx(4.73e-5)
    st = timer()
    base = st.profile

    def finish(per_seq_s: float) -> float:
        st.profile = dataclasses.replace(base, host=dataclasses.replace(
            base.host, multi_step_host_seq_s=per_seq_s))
        engine = _multi_step_engine()
        s = Seq(Request(0, 0.0, 100, 21))
        engine.add(s)
        engine.advance(float("inf"))
        return s.finish_s

    try:
        free = finish(0.0)
        assert finish(1e-9) == free  # below every GPU step
        # one sequence, 20 decodes: two rounds of 10 steps, the 18 later ones each 1 s
        later = [st.step_s(1, 1, 1, st.decode_attention_s(1, 100 + 10 * r + k + 1), False,
                           "memory", host=False) for r in range(2) for k in range(1, 10)]
        assert finish(1.0) - free == pytest.approx(sum(1.0 - t for t in later), rel=1e-9)
    finally:
        st.profile = base


def test_a_multi_step_later_step_runs_its_samplers_gpu_kernels():
    """vLLM 0.6.0's greedy sampler (`profile.sampler`: 42 bytes per logit in 6 kernels, read in
    its sampler.py) runs on the GPU after each step's forward pass; a later step of a round
    carries it, timed as six streaming kernels over the batch x the whole vocabulary; the
    round's first step (its sampler is in the host's measured per-sequence work) and a
    single-step engine do not."""
    import dataclasses

    from krakenlm.serving.step_time import sampler_s
    from krakenlm.serving.vllm_v1 import Seq
    from krakenlm.simulator.constants.software import Sampler, load_software
    from krakenlm.simulator.graph import OpSpec

    assert load_software("vllm-v0").sampler == Sampler(bytes_per_logit=42.0, kernels=6)
    assert load_software("vllm").sampler == Sampler()  # charged nowhere else
    sim = Simulator("h100-80gb-x8", "vllm-v0")
    vocab = get_preset(MODEL).vocab_size
    one = sim.timer(OpSpec("s", "Sampler", "stream", ("residual", 64, vocab, 7.0))).time_s
    v0 = sim.profile.sampler
    assert sampler_s(sim, v0, vocab, 64) == pytest.approx(6 * one, rel=1e-12)
    assert sampler_s(sim, v0, vocab, 0) == 0.0 == sampler_s(sim, Sampler(), vocab, 64)
    assert 0 < sampler_s(sim, v0, vocab, 8) < sampler_s(sim, v0, vocab, 64) < \
        sampler_s(sim, v0, vocab, 256)

    st = timer()
    base = st.profile

    def finish(sampler: Sampler, steps: int = 10) -> float:
        st.profile = dataclasses.replace(base, sampler=sampler)
        st._sampler = {}
        engine = _multi_step_engine(steps)
        s = Seq(Request(0, 0.0, 100, 21))
        engine.add(s)
        engine.advance(float("inf"))
        return s.finish_s

    try:
        with_sampler, without = finish(v0), finish(Sampler())
        # one sequence, 20 decodes: two rounds of 10 steps, 18 later steps
        assert with_sampler - without == pytest.approx(
            18 * sampler_s(st.sim, v0, vocab, 1), rel=1e-9)
        assert finish(v0, steps=1) == finish(Sampler(), steps=1)
    finally:
        st.profile, st._sampler = base, {}


def test_multi_step_on_another_engine_is_one_error():
    trace = Trace("t", (Request(0, 0.0, 100, 10),))
    with pytest.raises(ServeError, match="multi-step scheduling"):
        serve(trace, get_preset(MODEL), "h100-80gb-x8", software="vllm",
              options=V1Options(2048, 16, num_scheduler_steps=4))


def test_a_multi_step_replay_charges_the_host_of_vllm_0_6_0():
    """Multi-step came with 0.6.0, which also runs output processing beside the GPU: the
    replay's steps carry `per_sequence_async_s` per sequence, not `per_sequence_s`."""
    trace = Trace("t", tuple(Request(i, 0.0, 100, 30) for i in range(8)))
    single = serve(trace, get_preset(MODEL), "h100-80gb-x8", software="vllm-v0",
                   options=V1Options(2048, 16, enable_prefix_caching=False,
                                     chunked_prefill=False))
    multi = serve(trace, get_preset(MODEL), "h100-80gb-x8", software="vllm-v0",
                  options=V1Options(2048, 16, enable_prefix_caching=False,
                                    chunked_prefill=False, num_scheduler_steps=1))
    assert single.summary == multi.summary  # N = 1 is the plain V0 engine
    from krakenlm.simulator.constants.software import load_software
    host = load_software("vllm-v0").host
    assert host.at_version("0.6.0").per_sequence_s == host.per_sequence_async_s < \
        host.per_sequence_s
    assert host.at_version("0.5.4") is host and host.at_version(None) is host


def test_vllm_v1_without_async_scheduling_adds_its_host_work_to_each_step():
    """The vllm profile's engine-core host work per step (source VS1) runs beside the GPU with
    async scheduling (the step lasts the longer of the two) and after it without
    (`serial_session`: V1 0.8-0.13, `--no-async-scheduling`); other schedulers and async V1
    keep the session as it is."""
    sim = Simulator("h100-80gb-x8", "vllm")
    host = sim.profile.host
    assert host.decode_step_s > 0 and host.per_sequence_s > 0 and host.step_overlaps_gpu
    serial = serial_session(sim, V1Options(1024, 16), "vllm-v1")
    assert not serial.profile.host.step_overlaps_gpu
    assert serial_session(sim, V1Options(1024, 16, async_scheduling=True), "vllm-v1") is sim
    assert serial_session(sim, V1Options(1024, 16), "sglang") is sim
    model = get_preset(MODEL)
    beside = StepTimer(sim, model, 1, max_tokens=1024, max_sequences=16)
    after = StepTimer(serial, model, 1, max_tokens=1024, max_sequences=16)
    a = beside.decode_attention_s(16, 600)
    gpu = beside.step_s(16, 16, 16, a, False, host=False)  # the launch hidden beside it
    work = host.decode_step_s + 16 * host.per_sequence_s + host.graph_launch_s
    assert after.step_s(16, 16, 16, a, False) == pytest.approx(gpu + work, rel=1e-12)
    assert beside.step_s(16, 16, 16, a, False) == pytest.approx(max(gpu, work), rel=1e-12)
