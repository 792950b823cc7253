"""FlashAttention-3's Hopper decode form (kernels/gpu/fa3_decode.py) on synthetic inputs."""

from __future__ import annotations

import numpy as np
import pytest

from krakenlm.hardware import load_system
from krakenlm.simulator.kernels.base import Setting
from krakenlm.simulator.kernels.gpu import fa3_decode as F

P = {"floor_s": 2e-6, "item_s": 1e-6, "head_s": 8e-9, "sm_bandwidth": 2e10,
     "memory_efficiency": 0.9, "l2_gain": 0.5, "overlap_exponent": 4.0, "multiblock_s": 7e-6,
     "split_item_s": 2.5e-7, "combine_row_s": 4e-8, "seq_s": 1.5e-8, "serial_gain": 0.6}


VLLM_GRAPH = F.Fa3Structure(graph_splits=32)
HEURISTIC = F.Fa3Structure()


def time(*args, structure=HEURISTIC, bandwidth=np.inf, peak_per_sm=None):
    """F.time with `args` up to the constants; bandwidth inf: the KV bytes never bind."""
    return F.time(*args, structure, bandwidth, peak_per_sm)


def test_tiles_follow_head_dim_dtype_and_packed_group():
    assert [float(x) for x in F.tile(256, 8, fp8=True)] == [128.0, 128.0]
    assert [float(x) for x in F.tile(128, 8, fp8=False)] == [64.0, 128.0]  # one MMA warpgroup
    assert [float(x) for x in F.tile(128, 128, fp8=False)] == [128.0, 128.0]
    assert [float(x) for x in F.tile(64, 8, fp8=False)] == [192.0, 160.0]


def test_vllm_graph_cap_bounds_splits_and_large_batches_do_not_split():
    s = F.splits(132, np.array([1.0, 2048.0]), 1.0, 128, 8, 131072, False, 32, "vllm-flash-attn")
    assert s["static"][0] == 32 and s["dynamic"][0] == 32  # capped, not a full wave
    assert s["static"][1] == 1 and s["dynamic"][1] == 1  # beyond one prepare CTA's batches
    # many sequences fill the SMs: each gets one split although the launch bound is 32
    s = F.splits(132, 512.0, 8.0, 128, 8, 4096, False, 32, "vllm-flash-attn")
    assert s["static"] == 32 and s["dynamic"] == 1


def test_split_kernel_pays_combine_launch_and_varlen_walk_grows_with_batch():
    h100 = load_system("h100-80gb-x8").device
    sms = h100.core_count
    bw = h100.memory.bandwidth_bytes_per_s
    one = (sms, np.array([1.0]), 8.0, 1.0, 128.0, np.array([2.0]), 2.0, False, P)
    short = time(*one, structure=VLLM_GRAPH, bandwidth=bw)
    unsplit = time(*one, bandwidth=bw)
    assert short[0] - unsplit[0] >= P["multiblock_s"]  # the split kernel and its combine
    b = np.array([1000.0, 2000.0])
    no_walk = time(sms, b, 8.0, 8.0, 128.0, np.full(2, 2.0), 2.0, False, {**P, "seq_s": 0.0},
                   bandwidth=bw)
    walk = time(sms, b, 8.0, 8.0, 128.0, np.full(2, 2.0), 2.0, False, P, bandwidth=bw)
    extra = walk - no_walk
    assert extra[1] > 1.5 * extra[0] > 0


def test_fp8_head_256_streams_slower_only_at_head_dim_above_192():
    args = (132, np.array([64.0]), 8.0, 8.0)
    L = np.array([8192.0])
    for d, slower in ((256.0, True), (128.0, False)):
        a = time(*args, d, L, 1.0, True, {**P, "serial_gain": 0.0})
        b = time(*args, d, L, 1.0, True, P)
        assert (b[0] > a[0]) == slower


def test_fa3_offered_only_on_hopper_and_serial_gain_only_for_fp8():
    h100 = load_system("h100-80gb-x8")
    for system in ("a100-80gb-x8", "b200-x8"):
        assert not F.FA3_DECODE.offered(Setting(load_system(system), "vllm", "fp8"))
    assert not F.FA3_DECODE.offered(Setting(h100, "trtllm", "fp8"))
    fp8 = Setting(h100, "vllm", "fp8")
    fa3 = F.FA3_DECODE.structures(fp8)
    # FP8: each launch rule with the gather-bound and with the MMA-bound key loop
    assert len(fa3) == 2 * len(F.SPLIT_CHOICES["vllm"])
    assert [s.mma_bound for s in fa3] == [False] * 3 + [True] * 3
    for s in fa3:  # the MMA efficiency is fitted with the MMA-bound loop only
        names = {q.name for q in F.FA3_DECODE.params(fp8, s)}
        assert ("mma_efficiency" in names) == s.mma_bound and "serial_gain" in names
    bf16 = Setting(h100, "sglang", "bf16")
    structures = F.FA3_DECODE.structures(bf16)
    assert structures and not any(s.mma_bound for s in structures)
    assert all(s.graph_splits == 0 for s in structures)  # SGLang: no vLLM graph cap
    assert "serial_gain" not in {q.name for q in F.FA3_DECODE.params(bf16, structures[0])}


def test_mma_bound_key_loop_costs_the_padded_tile_not_the_bytes():
    """mma_bound: with a gather far faster than the MMAs, one more key tile costs its MMAs on
    all block_m rows at the peak x mma_efficiency, x (1 + serial_gain) at FP8 head_dim 256
    only; without it the form is the gather-bound one, unchanged by mma_efficiency."""
    sms, peak_per_sm = 132, 1.9789e15 / 132
    q = {**P, "mma_efficiency": 0.8, "sm_bandwidth": 1e13}
    mma = F.Fa3Structure(mma_bound=True)
    args = (sms, np.array([1.0]), 512.0, 128.0)  # 128 CTAs: one wave, the heuristic splits none
    for d, block_m, serial in ((128.0, 128.0, 1.0), (256.0, 128.0, 1.0 + P["serial_gain"])):
        # 160 / 128 keys per tile (FP8 tile); two lengths one tile apart, both unsplit
        block_n = F.tile(d, 4, fp8=True)[1]
        t = [time(*args, d, np.array([n * block_n]), 1.0, True, q, structure=mma,
                  peak_per_sm=peak_per_sm)[0] for n in (4, 5)]
        per_key = (t[1] - t[0]) / block_n
        assert per_key == pytest.approx(4 * block_m * d / (peak_per_sm * 0.8) * serial, rel=1e-9)
    gather = time(*args, 256.0, np.array([4096.0]), 1.0, True, P)
    same = time(*args, 256.0, np.array([4096.0]), 1.0, True, {**P, "mma_efficiency": 0.1},
                peak_per_sm=peak_per_sm)
    assert same[0] == gather[0]
