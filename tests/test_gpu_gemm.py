"""The GPU GEMM kernel forms (kernels/gpu/gemm.py, gemm_cutlass.py) on synthetic data only."""

from __future__ import annotations

import numpy as np
import pytest

from krakenlm.hardware import load_system
from krakenlm.simulator.calibration.fit import fit_model
from krakenlm.simulator.kernels import base
from krakenlm.simulator.kernels.base import BurstHeat, Conditions, Setting
from krakenlm.simulator.kernels.gpu import gemm, gemm_cutlass

# Constants of the order the H100 tables give.
P = {"floor_s": 2e-6, "compute_efficiency": 0.75, "memory_efficiency": 0.85,
     "l2_efficiency": 0.25, "memory_latency_s": 1e-6, "wave_overhead_s": 1e-6,
     "k_step_latency_s": 5e-8, "split_k_overhead_s": 3e-6, "quantize_efficiency": 0.5,
     "quant_cta_s": 7e-9}


H100 = load_system("h100-80gb-x8")
CUBLAS = gemm.CUBLAS
VLLM = gemm_cutlass.VLLM_CUTLASS
SGLANG = gemm_cutlass.SGLANG_CUTLASS


@pytest.fixture(scope="module")
def h100():
    return H100.device


def predict(form, c, p, dtype="bf16", structure=None, conditions=base.SERVING,
            framework="trtllm"):
    """Seconds per row of `c` on H100 with `form` (cuBLAS without a power limit by default)."""
    structure = form.Structure() if structure is None else structure
    return form.predict(Setting(H100, framework, dtype), c, p, structure, conditions)


def cols(m, n, k):
    m, n, k = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x)) for x in (m, n, k)))
    return {"m": m.astype(np.int64), "n": n.astype(np.int64), "k": k.astype(np.int64)}


@pytest.mark.parametrize("m,n,k,tile", [
    (8, 4096, 4096, (16, 64)),     # M <= 16: swap-AB, 64 weight columns x 16 tokens
    (32, 1024, 4096, (16, 64)),    # M <= 64, N <= 1280
    (32, 4096, 4096, (64, 64)),    # M <= 64, N > 1280
    (100, 4096, 4096, (64, 128)),  # M <= 128
    (200, 4096, 4096, (128, 128)),
])
def test_vllm_sm90_tiles_follow_its_dispatch(m, n, k, tile):
    mt, nt, _, _ = gemm_cutlass.tiles(gemm_cutlass.VLLM, 0, False,
                                      *(np.array([x]) for x in (m, n, k)))
    assert (mt[0], nt[0]) == tile


def test_vllm_sm100_and_sglang_tiles():
    M = np.array([8, 64, 64, 200, 1000])
    K = np.array([4096, 1024, 8192, 4096, 4096])
    N = np.full(5, 4096)
    mt, nt, _, _ = gemm_cutlass.tiles(gemm_cutlass.VLLM, 0, True, M, N, K)
    assert list(zip(mt, nt)) == [(32, 128), (64, 64), (64, 128), (128, 128), (128, 128)]
    M = np.array([64, 100, 200, 300])
    N, K = np.full(4, 4096), np.full(4, 4096)
    read = gemm_cutlass.tiles(gemm_cutlass.SGLANG, 0, False, M, N, K)[:2]
    steps = gemm_cutlass.tiles(gemm_cutlass.SGLANG, 1, False, M, N, K)[:2]
    assert list(zip(*read)) == [(64, 64), (64, 64), (64, 64), (128, 128)]
    assert list(zip(*steps)) == [(64, 64), (64, 128), (128, 128), (128, 128)]


@pytest.mark.parametrize("m,n,tile", [
    (8, 1024, (16, 64, 2, 1)),     # swap-AB: 16 token columns, clusters of 2 when N <= 1280
    (8, 4096, (16, 64, 1, 1)),
    (24, 1024, (16, 64, 4, 1)),    # M in (16, 64], N <= 1280: 16 tokens in clusters of 4
    (24, 4096, (32, 64, 1, 1)),    # ... else 32 token columns up to M = 32
    (48, 4096, (64, 64, 1, 1)),
    (100, 4096, (64, 64, 1, 1)),   # M in (64, 128], N <= 4096
    (100, 8192, (64, 128, 2, 1)),  # ... N > 4096
    (300, 1024, (128, 128, 2, 1)),
])
def test_sglang_sm90_swap_ab_dispatch(m, n, tile):
    got = gemm_cutlass.tiles(gemm_cutlass.SGLANG, 3, False, np.array([m]), np.array([n]),
                             np.array([4096]))
    assert tuple(x[0] for x in got) == tile


def test_sglang_swap_ab_kernels_run_256_deep_k_tiles(h100):
    # K = 300 runs two 256-deep K tiles up to M = 64 tokens, three 128-deep ones beyond
    M = np.array([64.0, 65.0])
    one = np.ones(2)
    g = gemm_cutlass.build_geometry(h100, M, 8192 * one, 300 * one, one, "fp8",
                                    gemm_cutlass.SGLANG, 3, np.zeros(2, bool))
    assert list(g["wave_steps"] / g["waves"]) == [8.0, 6.0]  # 512 / 64 and 384 / 64


def test_padded_token_rows_cross_l2_once_per_weight_tile_column(h100):
    # 128 x 128 tiles in 2 x 1 clusters: M = 129 pads 127 rows, M = 256 none; the padded bytes
    # grow with the weight tile columns (N / 128); vLLM's geometry has no such bytes
    M = np.array([129.0, 256.0, 129.0])
    N = np.array([4096.0, 4096.0, 8192.0])
    K, B, off = np.full(3, 4096.0), np.ones(3), np.zeros(3, bool)
    g = gemm_cutlass.build_geometry(h100, M, N, K, B, "fp8", gemm_cutlass.SGLANG, 3, off)
    loaded = M * K + K * N + 2 * M * N
    assert list(g["l2_bytes"] - loaded) == [32 * 127 * 4096, 0.0, 64 * 127 * 4096]
    v = gemm_cutlass.build_geometry(h100, M, N, K, B, "fp8", gemm_cutlass.VLLM, 0, off)
    assert np.array_equal(v["l2_bytes"], loaded)


POWERED = gemm.CublasStructure(power_limit=True)
SGL = {**P, "power_efficiency": 1 - 1e-9, "oob_row_s": 0.0}  # SGLang's form without either term


def test_power_limit_caps_the_rate_of_large_gemms_only(h100):
    # M = 16: 1 us of flops at the capped rate, far below one 64 x 64 tile's K loop
    c = cols([16, 8192], [4096, 8192], [4096, 8192])
    base = predict(CUBLAS, c, P)
    capped = predict(CUBLAS, c, {**P, "power_efficiency": 0.5}, structure=POWERED)
    assert capped[0] == base[0]  # a small GEMM never reaches the cap
    cap_s = 2.0 * 8192 ** 3 / (h100.matrix_rate("bf16") * 0.5)
    assert base[1] < cap_s and capped[1] >= cap_s  # floor under the compute time
    # the same floor on SGLang's CUTLASS path
    t = predict(SGLANG, c, {**SGL, "power_efficiency": 0.5}, "fp8",
                gemm_cutlass.SglangStructure(1), framework="sglang")[1]
    assert t >= 2.0 * 8192 ** 3 / (h100.matrix_rate("fp8") * 0.5)


def test_burst_heat_saturates_and_only_a_benchmark_has_it(h100):
    # the power-limited time t becomes t (1 + gain (1 - e^(-t / time constant))) under the
    # harness's burst heating: a 142 ms power-limited GEMM is 1.75x slower, a GEMM of
    # microseconds unchanged; a query (no harness conditions) never heats
    c = cols([512, 65536], [4096, 8192], [512, 65536])
    capped = {**P, "power_efficiency": 0.5}
    t_s = 2.0 * 65536 * 8192 * 65536 / (h100.matrix_rate("bf16") * 0.5)
    base = predict(CUBLAS, c, capped, structure=POWERED)
    hot = predict(CUBLAS, c, capped, structure=POWERED,
                  conditions=Conditions(burst_heat=BurstHeat(0.05, 0.8)))
    assert hot[0] == pytest.approx(base[0], rel=1e-3)
    assert t_s > 0.14 and hot[1] == pytest.approx(t_s * (1 + 0.8 * (1 - np.exp(-t_s / 0.05))),
                                                  rel=1e-4)  # + the launch floor
    assert hot[1] < t_s * 1.8 and base[1] == pytest.approx(t_s, rel=1e-3)
    # without a power limit there is nothing to heat
    assert np.array_equal(predict(CUBLAS, c, P, conditions=Conditions(
        burst_heat=BurstHeat(0.05, 0.8))), predict(CUBLAS, c, P))
    short = gemm.power_time(h100, np.array([2e13]), 0.5, "bf16",
                            Conditions(burst_heat=BurstHeat(0.05, 0.8)))
    t0 = 2e13 / (h100.matrix_rate("bf16") * 0.5)  # ~40 ms
    assert short[0] == pytest.approx(t0 * (1 + 0.8 * (1 - np.exp(-t0 / 0.05))))


def test_zero_filled_token_rows_cost_only_past_the_last_token(h100):
    # 128 x 128 tiles in 2 x 1 clusters from M = 129 (tile_table 1): M = 256 fills its tiles,
    # M = 129 and M = 200 leave 127 and 56 rows of the second tile row past the last token
    m = np.array([129, 200, 256])
    c = cols(m, 4096, 4096)
    table1 = gemm_cutlass.SglangStructure(1)
    extra = predict(SGLANG, c, {**SGL, "oob_row_s": 1e-9}, "fp8", table1, framework="sglang") \
        - predict(SGLANG, c, SGL, "fp8", table1, framework="sglang")
    assert extra[2] == 0 and extra[0] > extra[1] > 0
    assert extra[0] / extra[1] == pytest.approx(127 / 56, rel=0.05)


def test_tile_grid_is_rounded_to_whole_clusters(h100):
    # vLLM sm90 beyond M = 128: 128 x 128 tiles in 2 x 1 clusters. M = 257 needs 3 tile rows,
    # the scheduler runs 4: with 34 tile columns that is 136 CTAs, two waves on 132 SMs
    M = np.array([256.0, 257.0])
    N, K, B = np.full(2, 34 * 128.0), np.full(2, 4096.0), np.ones(2)
    g = gemm_cutlass.build_geometry(h100, M, N, K, B, "fp8", gemm_cutlass.VLLM, 0,
                                    np.zeros(2, bool))
    assert list(g["waves"]) == [1, 2]  # 2 x 34 = 68 CTAs; 4 x 34 = 136 (3 x 34 would be 102)


def offered(system, framework, dtype):
    """The GEMM forms a calibration tries for (system, framework, dtype), with structures."""
    setting = Setting(load_system(system), framework, dtype)
    return {f.name: f.structures(setting) for f in base.forms("gemm") if f.offered(setting)}


def test_each_framework_is_offered_its_own_gemm_kernels():
    vllm = offered("h100-80gb-x8", "vllm", "fp8")
    assert list(vllm) == [VLLM.name]
    setting = Setting(H100, "vllm", "fp8")
    names = {q.name for q in VLLM.params(setting, VLLM.Structure())}
    assert "quant_cta_s" in names and "split_k_overhead_s" not in names  # CUTLASS: no split-K
    sgl = offered("h100-80gb-x8", "sglang", "fp8")
    assert [s.tile_table for s in sgl[SGLANG.name]] == [0, 1, 3]  # 3: sm90's dispatch as read
    assert [s.tile_table for s in offered("b200-x8", "sglang", "fp8")[SGLANG.name]] == [0, 1]
    for system, fw, dtype in (("h100-80gb-x8", "trtllm", "fp8"), ("h100-80gb-x8", "vllm", "bf16"),
                              ("a100-80gb-x8", "vllm", "fp8")):
        assert list(offered(system, fw, dtype)) == [CUBLAS.name]
    # SGLang's tables: a power-limited rate on every device, zero-filled rows on its CUTLASS path
    assert {q.name for q in SGLANG.params(Setting(H100, "sglang", "fp8"),
                                          SGLANG.Structure(3))} >= {"power_efficiency",
                                                                    "oob_row_s"}
    a100 = Setting(load_system("a100-80gb-x8"), "sglang", "bf16")
    (structure,) = CUBLAS.structures(a100)
    names = {q.name for q in CUBLAS.params(a100, structure)}
    assert structure.power_limit and "power_efficiency" in names and "oob_row_s" not in names
    # a 16-bit GEMM reads no quantiser constant: it is not stored
    assert "quantize_efficiency" not in names


def test_cutlass_kernel_cannot_split_k(h100):
    # two 128 x 128 tiles over K = 65536: cuBLAS splits K over the SMs, vLLM's kernel cannot
    c = cols(256, 128, 65536)
    cublas = predict(CUBLAS, c, P, "fp8")[0]
    vllm = predict(VLLM, c, P, "fp8", framework="vllm")[0]
    one_sm_s = 2 * 128 * 128 * 65536 / (h100.matrix_rate("fp8") / h100.core_count)
    assert vllm > one_sm_s / P["compute_efficiency"] > 3 * cublas


def test_vllm_quantiser_costs_one_cta_per_token(h100):
    # K = 32, N = 128: the GEMM is tiny, the quantisation kernel's CTAs are what grows with M
    m = np.array([4096, 32768])
    vllm = predict(VLLM, cols(m, 128, 32), P, "fp8", framework="vllm")
    sglang = predict(SGLANG, cols(m, 128, 32), SGL, "fp8", gemm_cutlass.SglangStructure(0),
                     framework="sglang")
    assert vllm[1] - vllm[0] == pytest.approx((32768 - 4096) * P["quant_cta_s"], rel=0.1)
    assert sglang[1] - sglang[0] < 0.3 * (vllm[1] - vllm[0])  # 8 rows per CTA from 2112 rows


def test_cutlass_waves_quantise(h100):
    # 4 x 33 = 132 tiles of 128 x 128 fill one wave of the 132 SMs; 4 x 34 need a second one
    t = predict(VLLM, cols(512, 33 * 128, 8192), P, "fp8", framework="vllm")[0]
    t2 = predict(VLLM, cols(512, 33 * 128 + 1, 8192), P, "fp8", framework="vllm")[0]
    assert t2 > 1.5 * t


def test_weight_copies_in_l2_only_describe_the_benchmark(h100):
    small = cols(1, 2048, 2048)  # 8 MB of weights: 5 copies fit the 50 MB L2
    big = cols(1, 8192, 8192)  # 128 MB: they do not
    p = {**P, "l2_efficiency": 0.5}  # L2 twice as fast as DRAM
    bench = Conditions(weight_copies=5)
    assert predict(CUBLAS, small, p, conditions=bench)[0] < 0.9 * predict(CUBLAS, small, p)[0]
    assert predict(CUBLAS, big, p, conditions=bench)[0] == predict(CUBLAS, big, p)[0]


def test_predictions_are_monotone_in_k_for_every_library(h100):
    k = np.array([256, 1024, 4096, 16384, 65536])
    for form, p, fw, structure in ((CUBLAS, P, "trtllm", None), (VLLM, P, "vllm", None),
                                   (SGLANG, SGL, "sglang", gemm_cutlass.SglangStructure(0))):
        for m in (1, 64, 300, 4096):
            t = predict(form, cols(m, 4096, k), p, "fp8", structure, framework=fw)
            assert np.all(np.diff(t) > 0), (form.name, m, t)


def test_fit_recovers_cutlass_constants_from_several_starts(h100):
    rng = np.random.default_rng(3)
    m = rng.choice([1, 8, 32, 64, 100, 128, 200, 512, 2048, 8192], 600)
    n = rng.choice([128, 1024, 4096, 8192, 16384], 600)
    k = rng.choice([256, 1024, 4096, 8192], 600)
    c = cols(m, n, k)
    lat = predict(VLLM, c, P, "fp8", framework="vllm")
    keys = gemm.shape_key(c)
    params = VLLM.params(Setting(H100, "vllm", "fp8"), VLLM.Structure())
    r = fit_model("gemm", lambda cc, p: predict(VLLM, cc, p, "fp8", framework="vllm"),
                  params, c, lat, keys, starts=[{}, *gemm.FIT_STARTS])
    assert r.mape_held_out < 1.0
    assert r.params["quant_cta_s"] == pytest.approx(P["quant_cta_s"], rel=0.15)


def test_sglang_sm90_main_loop_runs_whole_128_deep_k_tiles(h100):
    # K = 32, 64 and 128 run one K tile each on SGLang's sm90 kernel; vLLM's model is unchanged
    M, N, B = np.full(3, 4096.0), np.full(3, 4096.0), np.ones(3)
    K = np.array([32.0, 64.0, 128.0])
    sgl = gemm_cutlass.build_geometry(h100, M, N, K, B, "fp8", gemm_cutlass.SGLANG, 1,
                                      np.zeros(3, bool))
    vllm = gemm_cutlass.build_geometry(h100, M, N, K, B, "fp8", gemm_cutlass.VLLM, 0,
                                       np.zeros(3, bool))
    assert sgl["wave_work"][0] == sgl["wave_work"][1] == sgl["wave_work"][2]
    assert vllm["wave_work"][0] * 4 == pytest.approx(vllm["wave_work"][2])
    assert sgl["flops"][0] * 4 == pytest.approx(sgl["flops"][2])  # useful flops stay exact
