"""TensorRT-LLM's XQA / masked-MHA decode dispatch (kernels/gpu/trtllm_decode.py), on
synthetic inputs with hand-computed outcomes."""

from __future__ import annotations

import numpy as np
import pytest

from krakenlm.hardware import load_system
from krakenlm.simulator.calibration.fit import fit_model
from krakenlm.simulator.kernels import base
from krakenlm.simulator.kernels.base import Conditions, Setting
from krakenlm.simulator.kernels.gpu import trtllm_decode as T

SMS = 132  # H100 SXM
# constants of the order the H100 tables give
DISPATCH = {"floor_s": 5.4e-6, "item_s": 3e-6, "mha_item_s": 5.5e-6, "head_s": 4e-8,
            "sm_bandwidth": 8e10, "memory_efficiency": 0.87, "l2_gain": 0.1,
            "overlap_exponent": 3.5, "mha_floor_s": 3e-6, "multiblock_s": 2e-6,
            "mha_multiblock_s": 3e-6, "mha_sm_bandwidth": 6e10, "row_tile_s": 8e-9,
            "token_tile_s": 4e-11, "mha_loop_s": 1.5e-6, "rope_s": 2.5e-6, "merge_s": 2e-7}
H100 = load_system("h100-80gb-x8")
HMMA, QGMMA = T.XqaStructure("hmma"), T.XqaStructure("qgmma")
WARM = Conditions(warm_replay=True)  # the benchmark's conditions


@pytest.fixture(scope="module")
def h100():
    return H100.device


def xqa(c, p, structure=HMMA, conditions=WARM):
    return T.TRTLLM_XQA.predict(Setting(H100, "trtllm", "bf16"), c, p, structure, conditions)


def cols(batch, kv_len, heads, kv_heads, head_dim, rope_dim=None):
    arrays = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x)) for x in
                                   (batch, kv_len, heads, kv_heads, head_dim)))
    c = dict(zip(("batch", "kv_len", "heads", "kv_heads", "head_dim"),
                 (a.astype(np.int64) for a in arrays)))
    if rope_dim is not None:
        c["rope_dim"] = np.full(len(c["batch"]), rope_dim)
    return c


def test_xqa_blocks_follow_compute_multi_block_count():
    """One block per 128 tokens, at most round(sqrt(8 mb)), cut back past 8 waves, >= 1."""
    got = T.xqa_blocks(SMS, [16, 16, 16, 1, 2048, 1],
                       [8, 8, 8, 8, 1, 8], [128, 256, 2048, 65536, 1024, 100])
    # 2048 tokens: 16 -> min(16, round(sqrt(128)) = 11) -> 10.67 waves -> floor(11 * 8 / 10.67)
    # 65536: 512 -> 64 (3.9 waves, kept); batch 2048: 124 waves -> 0 -> 1; 100 tokens -> 1
    assert got.tolist() == [1.0, 2.0, 8.0, 64.0, 1.0, 1.0]


def test_xqa_only_with_enough_ctas():
    """mayHavePerfGain: batch x KV heads x max(1, kv_len // 128) x 4 >= SMs."""
    got = T.xqa_worth_it(SMS, [1, 1, 16, 4, 4], [8, 8, 8, 8, 8], [512, 1024, 2, 128, 256])
    assert got.tolist() == [False, True, True, False, True]  # 128, 256, 512, 128, 256 vs 132


def test_mmha_block_size_and_tiles():
    # 32 CTAs leave SMs idle: 1024 threads; 256 CTAs: 256 x ceil(528 / 256) = 768 -> 512;
    # 512: 512; >= 528: the default 256
    assert T.mmha_threads(SMS, [32, 140, 256, 512, 528, 4096]).tolist() == \
        [1024.0, 1024.0, 512.0, 512.0, 256.0, 256.0]
    # one 1024-thread unrolled K loop covers 512 keys at head 128, 256 at 256; tiles fill the
    # SMs once (ceil(132 / 32) = 5)
    got = T.mmha_tiles(SMS, 1, 32, [511, 512, 100000, 256], [128, 128, 128, 256])
    assert got.tolist() == [1.0, 2.0, 5.0, 2.0]


def test_padded_head_dim():
    assert T.padded_head_dim([32, 64, 96, 128, 192, 256]).tolist() == [64, 64, 128, 128, 256, 256]


def test_waves_time_by_hand():
    """300 CTAs over 132 slots: two full waves and a tail of 36, each the max (large p) of the
    CTA latency and the wave's bytes at the bandwidth."""
    t = T.waves_time(np.array([300.0]), 132, np.array([1e-5]), np.array([1e6]), 1e12, 200.0)
    full = max(1e-5, 132 * 1e6 / 1e12)  # 132 us, bandwidth-bound
    tail = max(1e-5, 36 * 1e6 / 1e12)   # 36 us
    assert t[0] == pytest.approx(2 * full + tail, rel=1e-3)
    short = T.waves_time(np.array([300.0]), 132, np.array([1e-5]), np.array([1e3]), 1e12, 200.0)
    assert short[0] == pytest.approx(3 * 1e-5, rel=1e-3)  # latency-bound: 3 waves of one CTA


def test_gqa_falls_back_to_mmha_only_with_the_hmma_kernel(h100):
    """Batch 1 with 8 KV heads below 1024 tokens takes masked MHA under the HMMA dispatch (its
    time moves with mha_item_s, not item_s); the QGMMA dispatch keeps XQA."""
    c = cols(1, [512, 1024], 32, 8, 128)
    t = xqa(c, DISPATCH)
    mha = xqa(c, {**DISPATCH, "mha_item_s": 9e-6})
    gqa = xqa(c, {**DISPATCH, "item_s": 9e-6})
    assert mha[0] > t[0] and mha[1] == t[1]
    assert gqa[0] == t[0] and gqa[1] > t[1]
    assert (xqa(c, {**DISPATCH, "mha_item_s": 9e-6}, QGMMA) == xqa(c, DISPATCH, QGMMA)).all()


def test_separate_rope_launch_only_for_qgmma_with_a_wider_rotary(h100):
    """The QGMMA kernel applies RoPE itself unless the rotary dimension exceeds the head; then
    exactly rope_s more. The HMMA dispatch always runs RoPE apart (inside floor_s)."""
    c = cols(64, 2, 32, 8, [64, 128], rope_dim=128)
    plain = xqa(cols(64, 2, 32, 8, [64, 128]), DISPATCH, QGMMA)
    np.testing.assert_allclose(xqa(c, DISPATCH, QGMMA) - plain, [2.5e-6, 0.0], atol=1e-15)
    hmma = {k: v for k, v in DISPATCH.items() if k != "rope_s"}  # HMMA reads no rope_s
    np.testing.assert_allclose(xqa(c, hmma), xqa(cols(64, 2, 32, 8, [64, 128]), hmma),
                               rtol=1e-15)


def test_head_192_is_timed_as_256_but_reads_192(h100):
    """A latency-bound CTA (2 tokens) costs the same at head 192 as at 256 (padded tiles); a
    bandwidth-bound long cache reads only the valid 192 elements per head."""
    p = {**DISPATCH, "overlap_exponent": 200.0}
    short = xqa(cols(1024, 2, 32, 8, [192, 256]), p, conditions=Conditions())
    assert short[0] == pytest.approx(short[1], rel=1e-6)
    long = xqa(cols(64, 65536, 32, 8, [192, 256]), p, conditions=Conditions())
    assert long[0] / long[1] == pytest.approx(0.75, rel=0.05)


def test_discrete_form_reads_none_of_the_dispatch_constants(h100):
    """The discrete form is its own form: the dispatch's constants do not move it."""
    c = cols([1, 16, 256], [128, 4096, 32768], 32, 8, 128)
    setting = Setting(H100, "trtllm", "bf16")
    reads = {p.name for p in T.TRTLLM_DISCRETE.params(setting, T.DiscreteStructure())}
    only = {k: v for k, v in DISPATCH.items() if k in reads}
    np.testing.assert_array_equal(
        T.TRTLLM_DISCRETE.predict(setting, c, only, T.DiscreteStructure()),
        T.TRTLLM_DISCRETE.predict(setting, c, DISPATCH, T.DiscreteStructure()))


def test_synthetic_fit_recovers_the_dispatch_constants(h100):
    grid = [(b, L, h, k, d) for b in (1, 4, 16, 64, 256, 1024) for L in (2, 64, 256, 1024, 8192,
            65536) for h, k in ((8, 8), (32, 8), (32, 32), (64, 4), (32, 1)) for d in (64, 128)]
    c = cols(*(np.array(x) for x in zip(*grid)))
    truth = DISPATCH
    truth = {k: v for k, v in truth.items() if k != "rope_s"}
    measured = xqa(c, truth)
    params = T.TRTLLM_XQA.params(Setting(H100, "trtllm", "bf16"), HMMA)
    start = {k: v * 1.3 for k, v in truth.items()}
    start["memory_efficiency"] = 0.95

    r = fit_model("dispatch", xqa, params, c, measured, T.TRTLLM_XQA.key(c), starts=[start])
    assert r.mape_held_out < 1.0, (r.mape_held_out, r.params)


def test_multiblock_merge_is_one_round_trip_per_block(h100):
    """The last CTA merges the blocks' partials one after another: mb x merge_s more, and
    nothing for a sequence that runs as one block."""
    c = cols([1, 1], [8192, 64], 32, 8, 128)  # 23 blocks (min(64, round(sqrt(512)))), 1 block
    blocks = T.xqa_blocks(SMS, c["batch"], c["kv_heads"], c["kv_len"])
    assert blocks.tolist() == [23.0, 1.0]
    t = xqa(c, {**DISPATCH, "merge_s": 0.0})
    more = xqa(c, {**DISPATCH, "merge_s": 1e-7})
    np.testing.assert_allclose(more - t, [23 * 1e-7, 0.0], atol=1e-15)


def test_large_qgmma_tiles_hold_two_thirds_of_the_slots(h100):
    """mha_sm90.cu's launch bound: CTAs of more than 128 x 16 rows x head elements are resident
    2 per SM instead of 3, so their waves count SMs x 2/3 slots; smaller tiles are unchanged."""
    p = {**DISPATCH, "l2_gain": 0.0}
    # 8 x 128 = 1024 and 16 x 128 = 2048 (small), 32 x 128 = 4096 and 16 x 256 = 4096 (large)
    c = cols(512, 2048, [64, 128, 256, 128], 8, [128, 128, 128, 256])
    off = xqa(c, p, QGMMA)
    on = xqa(c, p, T.XqaStructure("qgmma", large_tile_residency=True))
    np.testing.assert_array_equal(on[:2], off[:2])
    assert (on[2:] > off[2:]).all()
    # by hand: only the waves change, from SMS slots to SMS x 2/3
    b, kvh, L, d = 512.0, 8.0, 2048.0, 128.0
    mb = T.xqa_blocks(SMS, b, kvh, L)
    chunk = np.ceil(np.ceil(L / mb) / T.XQA_TILE_TOKENS) * T.XQA_TILE_TOKENS
    cta = (p["item_s"] + 4 * d * (p["row_tile_s"] + chunk * p["token_tile_s"])
           + chunk * d * 2 * 2 / p["sm_bandwidth"])  # bf16 cache: 2 bytes
    hbm = h100.memory.bandwidth_bytes_per_s * p["memory_efficiency"]
    waves = [T.waves_time(b * kvh * mb, s, cta, chunk * d * 2 * 2, hbm, p["overlap_exponent"])
             for s in (SMS, SMS * 2 / 3)]
    np.testing.assert_allclose(on[2] - off[2], waves[1] - waves[0], rtol=1e-9)


def test_qgmma_is_offered_on_hopper_only():
    """supportConfigQGMMA: the FP8 QGMMA XQA kernel runs on sm90 only, so Ada, Ampere and
    Blackwell fits never choose it."""
    def kernels(system):
        setting = Setting(load_system(system), "trtllm", "fp8")
        return {getattr(s, "kernel", "discrete") for f in base.forms("generation_attention")
                if f.offered(setting) for s in f.structures(setting)}

    assert "qgmma" in kernels("h200-x8") and "qgmma" in kernels("h100-80gb-x8")
    for system in ("l40s-x8", "a100-80gb-x8", "b200-x8"):
        assert kernels(system) == {"discrete", "hmma"}
