"""FlashAttention-3's Hopper decode form (simulator/gpu/fa3_decode.py) on synthetic inputs."""

from __future__ import annotations

import numpy as np
import pytest

from krakenlm.hardware import load_system
from krakenlm.simulator.kernels.gpu import attention as A
from krakenlm.simulator.kernels.gpu import fa3_decode as F

P = {"floor_s": 2e-6, "item_s": 1e-6, "head_s": 8e-9, "sm_bandwidth": 2e10,
     "memory_efficiency": 0.9, "l2_gain": 0.5, "overlap_exponent": 4.0, "multiblock_s": 7e-6,
     "split_item_s": 2.5e-7, "combine_row_s": 4e-8, "seq_s": 1.5e-8, "serial_gain": 0.6}


def _pnorm(a, b, p):
    return (a ** p + b ** p) ** (1.0 / p)


def test_tiles_follow_head_dim_dtype_and_packed_group():
    assert [float(x) for x in F.tile(256, 8, fp8=True)] == [128.0, 128.0]
    assert [float(x) for x in F.tile(128, 8, fp8=False)] == [64.0, 128.0]  # one MMA warpgroup
    assert [float(x) for x in F.tile(128, 128, fp8=False)] == [128.0, 128.0]
    assert [float(x) for x in F.tile(64, 8, fp8=False)] == [192.0, 160.0]


def test_vllm_graph_cap_bounds_splits_and_large_batches_do_not_split():
    s = F.splits(132, np.array([1.0, 2048.0]), 1.0, 128, 8, 131072, False, 32.0, 1)
    assert s["static"][0] == 32 and s["dynamic"][0] == 32  # capped, not a full wave
    assert s["static"][1] == 1 and s["dynamic"][1] == 1  # beyond one prepare CTA's batches
    # many sequences fill the SMs: each gets one split although the launch bound is 32
    s = F.splits(132, 512.0, 8.0, 128, 8, 4096, False, 32.0, 1)
    assert s["static"] == 32 and s["dynamic"] == 1


def test_split_kernel_pays_combine_launch_and_varlen_walk_grows_with_batch():
    h100 = load_system("h100-80gb-x8").device
    sms = h100.core_count
    bw = h100.memory.bandwidth_bytes_per_s
    short = F.predict(sms, np.array([1.0]), 8.0, 1.0, 128.0, np.array([2.0]), 2.0, False,
                      {**P, "fa3_graph_splits": 32.0}, bw, _pnorm)
    unsplit = F.predict(sms, np.array([1.0]), 8.0, 1.0, 128.0, np.array([2.0]), 2.0, False,
                        {**P, "fa3_graph_splits": 0.0}, bw, _pnorm)
    assert short[0] - unsplit[0] >= P["multiblock_s"]  # the split kernel and its combine
    b = np.array([1000.0, 2000.0])
    no_walk = F.predict(sms, b, 8.0, 8.0, 128.0, np.full(2, 2.0), 2.0, False,
                        {**P, "seq_s": 0.0}, bw, _pnorm)
    walk = F.predict(sms, b, 8.0, 8.0, 128.0, np.full(2, 2.0), 2.0, False, P, bw, _pnorm)
    extra = walk - no_walk
    assert extra[1] > 1.5 * extra[0] > 0


def test_fp8_head_256_streams_slower_only_at_head_dim_above_192():
    args = (132, np.array([64.0]), 8.0, 8.0)
    L = np.array([8192.0])
    for d, slower in ((256.0, True), (128.0, False)):
        a = F.predict(*args, d, L, 1.0, True, {**P, "serial_gain": 0.0}, 1e15, _pnorm)
        b = F.predict(*args, d, L, 1.0, True, P, 1e15, _pnorm)
        assert (b[0] > a[0]) == slower


def test_fa3_variants_only_on_hopper_and_serial_gain_only_for_fp8():
    h100 = load_system("h100-80gb-x8").device
    for system in ("a100-80gb-x8", "b200-x8"):
        dev = load_system(system).device
        assert A.generation_variants_for("vllm", dev, "fp8") == A.SPLITKV_VARIANTS
    fa3 = [v for v in A.generation_variants_for("vllm", h100, "fp8") if v.get("fa3")]
    # FP8: each launch rule with the gather-bound and with the MMA-bound key loop
    assert len(fa3) == 2 * len(A.FA3_VARIANTS["vllm"])
    assert sorted(v["fa3_mma"] for v in fa3) == [0.0] * 3 + [1.0] * 3
    assert all("mma_efficiency" not in v for v in fa3 if v["fa3_mma"])  # fitted there only
    bf16 = [v for v in A.generation_variants_for("sglang", h100, "bf16") if v.get("fa3")]
    assert bf16 and all(v["serial_gain"] == 0.0 and v["fa3_mma"] == 0.0 for v in bf16)
    assert all(v["fa3_graph_splits"] == 0.0 for v in bf16)  # SGLang: no vLLM graph cap


def test_mma_bound_key_loop_costs_the_padded_tile_not_the_bytes():
    """fa3_mma: with a gather far faster than the MMAs, one more key tile costs its MMAs on all
    block_m rows at the peak x mma_efficiency, x (1 + serial_gain) at FP8 head_dim 256 only;
    without the flag the form is the gather-bound one, unchanged."""
    sms, peak_per_sm = 132, 1.9789e15 / 132
    q = {**P, "fa3_mma": 1.0, "mma_efficiency": 0.8, "sm_bandwidth": 1e13, "fa3_graph_splits": 0.0}
    args = (sms, np.array([1.0]), 512.0, 128.0)  # 128 CTAs: one wave, the heuristic splits none
    for d, block_m, serial in ((128.0, 128.0, 1.0), (256.0, 128.0, 1.0 + P["serial_gain"])):
        # 160 / 128 keys per tile (FP8 tile); two lengths one tile apart, both unsplit
        block_n = F.tile(d, 4, fp8=True)[1]
        t = [F.predict(*args, d, np.array([n * block_n]), 1.0, True, q, 1e18, lambda a, b, p: a,
                       peak_per_sm)[0] for n in (4, 5)]
        per_key = (t[1] - t[0]) / block_n
        assert per_key == pytest.approx(4 * block_m * d / (peak_per_sm * 0.8) * serial, rel=1e-9)
    old = F.predict(*args, 256.0, np.array([4096.0]), 1.0, True, P, 1e15, _pnorm)
    same = F.predict(*args, 256.0, np.array([4096.0]), 1.0, True,
                     {**P, "fa3_mma": 0.0, "mma_efficiency": 1.0}, 1e15, _pnorm, peak_per_sm)
    assert same[0] == old[0]
