"""The GPU attention kernel forms (kernels/gpu/attention.py, trtllm_decode.py) on synthetic data
only."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from krakenlm.hardware import load_system
from krakenlm.simulator.calibration.fit import fit_model
from krakenlm.simulator.kernels import base
from krakenlm.simulator.kernels.base import Conditions, Setting
from krakenlm.simulator.kernels.gpu import attention as A
from krakenlm.simulator.kernels.gpu import trtllm_decode as T

# Constants of the order the H100 tables give (TRT-LLM / FA3).
CTX = {"floor_s": 1.2e-5, "mma_efficiency": 0.78, "softmax_s": 3e-11, "item_s": 1e-6,
       "memory_efficiency": 0.6, "kv_passes": 2.0, "overlap_exponent": 1.1}
GEN = {"floor_s": 6e-6, "item_s": 3.2e-6, "mha_item_s": 1e-6, "head_s": 6e-8,
       "sm_bandwidth": 9e10, "memory_efficiency": 0.9, "l2_gain": 0.3,
       "overlap_exponent": 1.4}


H100 = load_system("h100-80gb-x8")
WARM = Conditions(warm_replay=True)  # the benchmark: a KV cache that fits the L2 is read from it


@pytest.fixture(scope="module")
def h100():
    return H100.device


def ctx(c, p, packing="none", dtype="bf16", system=H100):
    return A.FLASH_CONTEXT.predict(Setting(system, "trtllm", dtype), c, p,
                                   A.ContextStructure(gqa_packing=packing))


def gen(c, p, kv_dtype="bf16", conditions=WARM, form=A.SMOOTH_DECODE, structure=None,
        system=H100):
    structure = form.Structure() if structure is None else structure
    return form.predict(Setting(system, "any", kv_dtype), c, p, structure, conditions)


def trt(c, p, q_tile_rows=16, conditions=WARM):
    return gen(c, p, form=T.TRTLLM_DISCRETE, structure=T.DiscreteStructure(q_tile_rows),
               conditions=conditions)


def ctx_cols(batch, isl, heads, kv_heads, head_dim):
    arrays = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x)) for x in
                                   (batch, isl, heads, kv_heads, head_dim)))
    names = ("batch", "isl", "heads", "kv_heads", "head_dim")
    cols = {n: a.astype(np.int64) for n, a in zip(names, arrays)}
    cols["window"] = np.zeros_like(cols["batch"])
    return cols


def gen_cols(batch, kv_len, heads, kv_heads, head_dim):
    b, kv, h, k, d = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x)) for x in
                                           (batch, kv_len, heads, kv_heads, head_dim)))
    cols = ctx_cols(b, 1, h, k, d)
    cols["step"] = kv.astype(np.int64) - 1
    cols["kv_len"] = kv.astype(np.int64)
    return cols


ISL = np.array([1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384])
KV_LEN = np.array([2, 16, 128, 256, 1024, 4096, 16384, 65536, 131072])


@pytest.mark.parametrize("pack", ["none", "packed"])
@pytest.mark.parametrize("batch,heads,kv_heads,head_dim",
                         [(1, 32, 8, 128), (8, 64, 8, 64), (64, 16, 16, 256), (2, 96, 1, 128)])
def test_context_is_monotone_in_isl(h100, pack, batch, heads, kv_heads, head_dim):
    t = ctx(ctx_cols(batch, ISL, heads, kv_heads, head_dim), CTX, pack)
    assert np.all(np.diff(t) >= 0), t
    assert np.all(np.isfinite(t)) and np.all(t >= CTX["floor_s"])


@pytest.mark.parametrize("batch,heads,kv_heads,head_dim",
                         [(1, 32, 8, 128), (64, 64, 8, 64), (512, 16, 16, 256), (2048, 8, 1, 128)])
def test_generation_is_monotone_in_kv_len_and_batch(h100, batch, heads, kv_heads, head_dim):
    t = gen(gen_cols(batch, KV_LEN, heads, kv_heads, head_dim), GEN)
    assert np.all(np.diff(t) >= 0), t
    # cold L2 (a decode step inside a model: a query) is never faster than the warm benchmark
    cold = gen(gen_cols(batch, KV_LEN, heads, kv_heads, head_dim), GEN, conditions=Conditions())
    assert np.all(cold >= t - 1e-15)
    batches = np.array([1, 2, 4, 16, 64, 256, 1024])
    tb = gen(gen_cols(batches, 4096, heads, kv_heads, head_dim), GEN)
    assert np.all(np.diff(tb) >= 0), tb


def test_context_never_beats_the_tensor_peak(h100):
    """For fitted-looking constants (even optimistic ones) the causal FLOP rate stays <= peak."""
    grid = list(itertools.product([1, 4, 32, 256], ISL, [8, 32, 96], [1, 8], [64, 128, 256]))
    b, s, h, kv, d = (np.array(x) for x in zip(*grid))
    kv = np.minimum(kv, h)
    cols = ctx_cols(b, s, h, kv, d)
    for p in (CTX, {**CTX, "mma_efficiency": 0.999, "softmax_s": 1e-15, "item_s": 1e-9,
                    "floor_s": 1e-7, "overlap_exponent": 50.0}):
        for pack in ("none", "packed"):
            for dtype in ("bf16", "fp8"):
                t = ctx(cols, p, pack, dtype)
                rate = A.context_flops(cols) / t
                assert rate.max() <= h100.matrix_rate(dtype), rate.max()


def test_generation_gqa_with_fewer_kv_heads_is_not_slower(h100):
    """Sharing K/V among more query heads never costs time within one kernel.

    The MHA -> GQA step may: frameworks switch kernel there (TRT-LLM measured 13.6 us for
    16 heads / 16 KV heads at batch 64, kv_len <= 128, and 24.3 us for 16 / 8), which
    `mha_item_s` != `item_s` expresses; once bandwidth-bound, fewer KV heads win again.
    """
    same = {**GEN, "mha_item_s": GEN["item_s"]}
    kvs = np.array([32, 16, 8, 4, 2, 1])
    for batch, kv_len, head_dim in itertools.product([1, 8, 64, 512], [16, 1024, 32768],
                                                     [64, 128, 256]):
        t = gen(gen_cols(batch, kv_len, 32, kvs, head_dim), same)
        assert np.all(np.diff(t) <= 1e-12), (batch, kv_len, head_dim, t)
        t = gen(gen_cols(batch, kv_len, 32, kvs, head_dim), GEN)
        assert np.all(np.diff(t[1:]) <= 1e-12), (batch, kv_len, head_dim, t)  # GQA kernel only
        if kv_len >= 32768 and batch >= 8:  # bandwidth-bound: the KV bytes decide
            assert t[1] < t[0] and t[-1] < 0.2 * t[0]


def test_generation_is_memory_bound_for_long_caches(h100):
    cols = gen_cols(256, 65536, 64, 8, 128)
    t = gen(cols, GEN, "bf16")[0]
    floor = A.generation_bytes(cols, "bf16")[0] / h100.memory.bandwidth_bytes_per_s
    assert floor <= t <= 2 * floor
    # an FP8 cache moves half the bytes
    t8 = gen(cols, GEN, "fp8")[0]
    assert 0.45 * t < t8 < 0.8 * t


def plausible_context(cols, latency, dtype="bf16"):
    return A.FLASH_CONTEXT.plausible(Setting(H100, "trtllm", dtype), cols, latency)


def plausible_generation(cols, latency, kv_dtype="bf16"):
    return A.SMOOTH_DECODE.plausible(Setting(H100, "any", kv_dtype), cols, latency)


def test_plausibility_filter(h100):
    cols = ctx_cols([1, 1, 1], [8192, 8192, 8192], [32, 32, 32], [8, 8, 8], [128, 128, 128])
    flops = A.context_flops(cols)
    peak = h100.matrix_rate("bf16")
    latency = flops / np.array([2.0 * peak, 0.5 * peak, 0.5 * peak])
    ok = plausible_context(cols, latency, "bf16")
    assert list(ok) == [False, True, True]
    # what is impossible at the bf16 peak is possible at the fp8 peak (1.5x bf16 peak)
    assert plausible_context(cols, flops / (1.5 * peak), "fp8").all()
    # a sliding window: the same latency is plausible once only the window's keys count
    win = dict(cols, window=np.array([128, 128, 128]))
    fast = flops / (4 * peak)
    assert not plausible_context(cols, fast).any()
    assert plausible_context(win, fast).all()

    g = gen_cols([64, 64], [8192, 8192], [32, 32], [8, 8], [128, 128])
    nbytes = A.generation_bytes(g, "bf16")
    assert nbytes[0] > h100.global_buffer.capacity_bytes
    bw = h100.memory.bandwidth_bytes_per_s
    ok = plausible_generation(g, nbytes / np.array([2.0 * bw, 0.8 * bw]))
    assert list(ok) == [False, True]
    # an L2-resident cache may beat HBM, up to the L2 bandwidth
    small = gen_cols([1], [1024], [32], [8], [128])
    sb = A.generation_bytes(small)
    assert plausible_generation(small, sb / (1.5 * bw)).all()
    l2 = h100.global_buffer_bandwidth_bytes_per_s
    assert not plausible_generation(small, sb / (2 * l2)).any()


def test_context_kernel_dtype():
    assert A.context_kernel_dtype("trtllm", "bf16", "fp8") == "fp8"
    assert A.context_kernel_dtype("trtllm", "bf16", "bf16") == "bf16"
    assert A.context_kernel_dtype("vllm", "bf16", "fp8") == "bf16"
    assert A.context_kernel_dtype("sglang", "fp8", "fp8") == "fp8"


def test_single_row_and_scalar_inputs(h100):
    one = {"batch": 4, "isl": 2048, "heads": 32, "kv_heads": 8, "head_dim": 128, "window": 0}
    t = ctx(one, CTX)
    assert t.shape == (1,) and 1e-5 < t[0] < 1e-2
    g = {"batch": 4, "isl": 1, "step": 2047, "heads": 32, "kv_heads": 8, "head_dim": 128}
    assert gen(g, GEN).shape == (1,)
    assert A.FLASH_CONTEXT.key(one) == ["4,2048,32,8,128,0"]
    assert A.SMOOTH_DECODE.key(dict(g, kv_len=2048)) == ["4,1,2047,2048,32,8,128"]


def _grid_ctx():
    grid = list(itertools.product([1, 2, 8, 32, 128], [16, 128, 512, 2048, 8192],
                                  [(8, 8), (32, 8), (32, 32), (64, 4), (96, 1)], [64, 128, 256]))
    b, s, hk, d = zip(*grid)
    h, kv = zip(*hk)
    return ctx_cols(np.array(b), np.array(s), np.array(h), np.array(kv), np.array(d))


def _grid_gen():
    grid = list(itertools.product([1, 4, 16, 64, 256, 1024], [2, 128, 1024, 8192, 65536],
                                  [(8, 8), (32, 8), (32, 32), (64, 4), (16, 1)], [64, 128, 256]))
    b, L, hk, d = zip(*grid)
    h, kv = zip(*hk)
    return gen_cols(np.array(b), np.array(L), np.array(h), np.array(kv), np.array(d))


@pytest.mark.parametrize("kind", ["context", "generation"])
def test_synthetic_fit_recovers_known_parameters(h100, kind):
    if kind == "context":
        cols, truth, params = _grid_ctx(), CTX, A.CONTEXT_PARAMS
        predict = lambda c, p: ctx(c, p, "packed")
        key = A.FLASH_CONTEXT.key(cols)
    else:
        cols, truth, params = _grid_gen(), GEN, A.GENERATION_PARAMS
        predict = lambda c, p: gen(c, p)
        key = A.SMOOTH_DECODE.key(cols)
    measured = predict(cols, truth)
    start = {k: v * 1.3 for k, v in truth.items()}
    for k in start:
        if params[[q.name for q in params].index(k)].kind == "fraction":
            start[k] = min(start[k], 0.95)
    r = fit_model(kind, predict, params, cols, measured, key, starts=[start])
    assert r.n_fit > 100 and r.n_held_out > 100
    assert r.mape_held_out < 1.0, (r.mape_held_out, r.params)


# ------------------------------------------------------ TensorRT-LLM's discrete decode form
TRT_GEN = {**GEN, "mha_floor_s": 7e-6, "multiblock_s": 3e-6, "mha_multiblock_s": 5e-6,
           "mha_sm_bandwidth": 2e11, "row_tile_s": 7e-9}


def test_multiblock_count_follows_the_rule():
    """One block per 256 cached tokens, at most 4 waves of CTAs over 132 SMs, at least one:
    hand-computed values."""
    sms = 132
    # batch 1, 8 KV heads: 4 * 132 / 8 = 66 blocks at most
    assert T.multiblock_count(sms, 1, 8, 255)[()] == 1  # fewer tokens than one block
    assert T.multiblock_count(sms, 1, 8, 512)[()] == 2
    assert T.multiblock_count(sms, 1, 8, 4096)[()] == 16
    assert T.multiblock_count(sms, 1, 8, 131072)[()] == 66  # capped by the waves
    # 128 x 8 = 1024 CTAs already fill 4 waves (528 CTAs): never split
    assert T.multiblock_count(sms, 128, 8, 131072)[()] == 1
    # 64 x 1 pairs: floor(528 / 64) = 8
    assert T.multiblock_count(sms, 64, 1, 65536)[()] == 8


def test_trtllm_form_pays_the_multiblock_cost_exactly_where_it_splits(h100):
    """Below 512 cached tokens a lone sequence is one block; at 512 it splits in two and pays
    `multiblock_s` (GQA) or `mha_multiblock_s` (MHA) once; with the costs set to zero the
    difference between the two forms is exactly those constants."""
    cols = gen_cols(1, [256, 511, 512, 1024], [32, 32, 32, 32], [8, 8, 8, 8], 128)
    with_cost = trt(cols, TRT_GEN)
    no_cost = trt(cols, {**TRT_GEN, "multiblock_s": 1e-30})
    np.testing.assert_allclose(with_cost - no_cost, [0, 0, 3e-6, 3e-6], atol=1e-12)
    mha = gen_cols(1, [511, 512], 8, 8, 128)
    diff = trt(mha, TRT_GEN) - trt(mha, {**TRT_GEN, "mha_multiblock_s": 1e-30})
    np.testing.assert_allclose(diff, [0, 5e-6], atol=1e-12)


def test_trtllm_form_by_hand(h100):
    """One row computed by hand: batch 1, 32 heads / 8 KV heads, head_dim 128, 4096 tokens
    (16 blocks of 256 tokens, 128 CTAs in one wave), HBM-resident (a query's conditions)."""
    t = trt(gen_cols(1, 4096, 32, 8, 128), TRT_GEN, conditions=Conditions())[0]
    p, sms = TRT_GEN, h100.core_count
    item = p["item_s"] + 1 * 128 * p["row_tile_s"] + 256 * 128 * 2 * 2 / p["sm_bandwidth"]
    exec_s = 1 * item + 128 * 4 * p["head_s"] / sms
    kv = 8 * 4096 * 128 * 2 * 2 / (h100.memory.bandwidth_bytes_per_s * p["memory_efficiency"])
    q = p["overlap_exponent"]
    expected = p["floor_s"] + p["multiblock_s"] + (exec_s ** q + kv ** q) ** (1 / q)
    assert t == pytest.approx(expected, rel=1e-12)


def test_trtllm_form_second_q_tile_past_16_heads_per_kv_head(h100):
    """Groups of 17-32 query heads take a second 16-row pass: at 2 cached tokens (one block)
    the CTA time grows by exactly head_dim * row_tile_s between group 16 and group 17."""
    p = {**TRT_GEN, "head_s": 1e-30, "overlap_exponent": 50.0}
    t16, t17 = trt(gen_cols(1, 2, [16, 17], 1, 128), p, conditions=Conditions())
    assert t17 - t16 == pytest.approx(128 * p["row_tile_s"], rel=1e-6)
    # with 8-row tiles (the q_tile_rows structure) the second pass starts at 9 heads
    t8, t9, t16_8 = trt(gen_cols(1, 2, [8, 9, 16], 1, 128), p, 8, conditions=Conditions())
    assert t9 - t8 == pytest.approx(128 * p["row_tile_s"], rel=1e-6)
    assert t16_8 == pytest.approx(t9, rel=1e-6)


def offered(system, framework, kv_dtype="bf16"):
    setting = Setting(load_system(system), framework, kv_dtype)
    return {f.name: f.structures(setting) for f in base.forms("generation_attention")
            if f.offered(setting)}


def test_generation_forms_per_framework():
    a100 = offered("a100-80gb-x8", "vllm")
    assert list(a100) == ["generation/flash-splitkv"]
    assert a100["generation/flash-splitkv"] == A.SPLITKV_STRUCTURES
    assert list(offered("h100-80gb-x8", "sglang")) == ["generation/flash-splitkv",
                                                       "generation/fa3"]
    trt_h100 = offered("h100-80gb-x8", "trtllm", "fp8")
    assert list(trt_h100) == ["generation/trtllm-discrete", "generation/trtllm-xqa"]
    assert [s.q_tile_rows for s in trt_h100["generation/trtllm-discrete"]] == [8, 16]
    assert [s.kernel for s in trt_h100["generation/trtllm-xqa"]] == ["hmma", "qgmma", "qgmma"]
    # the QGMMA kernel runs on sm90 only
    assert [s.kernel for s in offered("l40s-x8", "trtllm")["generation/trtllm-xqa"]] == ["hmma"]
    assert list(offered("h100-80gb-x8", "lmdeploy")) == ["generation/smooth"]
    setting = Setting(H100, "trtllm", "bf16")
    for form in (T.TRTLLM_DISCRETE, T.TRTLLM_XQA):
        for structure in form.structures(setting):
            names = [p.name for p in form.params(setting, structure)]
            assert len(names) == len(set(names))
    # the discrete form reads none of the dispatch form's constants, HMMA no RoPE launch
    names = {p.name for p in T.TRTLLM_DISCRETE.params(setting, T.DiscreteStructure(8))}
    assert not names & {"token_tile_s", "mha_loop_s", "rope_s", "merge_s"}
    assert "rope_s" not in {p.name for p in T.TRTLLM_XQA.params(setting, T.XqaStructure())}


def test_splitkv_count_follows_wave_efficiency():
    # 216 slots (108 SMs x 2 CTAs): 8 tiles over 1 block cannot split; over 2 blocks split in 2;
    # at 32768 keys (256 blocks) 23 splits would repeat 22's 12 blocks per split, so the fewest
    # distinct count filling >= 0.85 of the best wave is 24 (192 of 216 slots)
    got = A.splitkv_count(216, [8, 8, 8, 300], [128, 256, 32768, 32768])
    assert got.tolist() == [1.0, 2.0, 24.0, 1.0]  # 300 tiles already fill the slots


def test_splitkv_form_adds_combine_cost_only_when_split():
    p = {**GEN, "multiblock_s": 4e-6}
    a100 = load_system("a100-80gb-x8")
    cols = {"batch": [1, 1], "heads": [32, 32], "kv_heads": [8, 8], "head_dim": [128, 128],
            "kv_len": [128, 256]}
    structure = A.SplitKVStructure(ctas_per_sm=2, split_mha=False)
    with_cost = gen(cols, p, form=A.FLASH_SPLITKV, structure=structure, system=a100)
    without = gen(cols, {**p, "multiblock_s": 0.0}, form=A.FLASH_SPLITKV, structure=structure,
                  system=a100)
    assert with_cost[0] == pytest.approx(without[0])
    assert with_cost[1] - without[1] == pytest.approx(4e-6)
