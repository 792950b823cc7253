"""vLLM's and SGLang's FP8 GEMM on Hopper and Blackwell: a quantisation kernel, then one CUTLASS
kernel whose tile the framework's dispatch picks from M.

What the aiconfigurator collectors time per FP8 row (collector/vllm/collect_gemm.py and
collector/sglang/collect_gemm.py, 6 copies of the layer in a CUDA graph, latency / 6):

* vLLM (`RowParallelLinear` with `Fp8Config(activation_scheme="static")`,
  CutlassFP8ScaledMMLinearKernel): `static_scaled_fp8_quant` (csrc/quantization/w8a8/fp8/
  common.cu: one 256-thread CTA per token row; reads the 16-bit activation, writes FP8), then
  `cutlass_scaled_mm`.
* SGLang: `sgl_per_token_quant_fp8` (sgl-kernel per_token_quant_fp8.cu: a dynamic per-token
  scale, so each row's amax is found before it is quantised; one CTA per row below 16 rows per
  SM, one warp per row and 8 rows per CTA above), then sgl-kernel's `fp8_scaled_mm`.

Neither CUTLASS kernel splits K or uses stream-K: the tiles run in waves over the SMs
(persistent, data-parallel), so a GEMM of a few large tiles leaves SMs idle, unlike cuBLAS's
stream-K kernels that TensorRT-LLM's FP8 path and the 16-bit tables measure (gemm.py).
The tile (rows Mt x columns Nt of C per CTA) per M, as dispatched:

* vLLM sm90 (scaled_mm_sm90_fp8_dispatch.cuh): M <= 16: 16 x 64 (swap-AB: a 64-wide tile of
  weights against 16 tokens); M <= 64: 16 x 64 when N <= 1280, else 64 x 64; M <= 128:
  64 x 128; above: 128 x 128.
* vLLM sm100 (scaled_mm_sm100_fp8_dispatch.cuh): M <= 16: 32 x 128 (swap-AB); M <= 64:
  64 x 128 (swap-AB), 64 x 64 when M = 64 and K < 4096; above: 128 x 128 per SM (256 x 128
  over an SM pair beyond M = 256).
* SGLang sm90 (fp8_gemm_kernel.cu `sm90_fp8_dispatch_shape`): 64 x 64 up to M = 256, then
  128 x 128; sm100: 64 x 64 up to M = 64, then 128 x 128 per SM.
* `tile_table = 1` (a structural variant chosen on the fit half, for SGLang): 64 x 64 up to
  M = 64, 64 x 128 up to 128, then 128 x 128 in clusters of 2 along M. The sm90 tables step
  where this table does (SGLang's time at N = 1024, K = 4096 on H100: 7.5 us to M = 64,
  10.3 us to 128, 17.5 us from 129, like vLLM's 128 x 128 tiles), not at M = 256 as the
  source we read says: the measured sgl-kernel is newer than that source. The fit half picks
  it on all four devices.
* `tile_table = 2`: table 1 with 32-row tiles up to M = 32, a fit-half variant (no source read
  says so): the fit half picks it on H100 (8.86 vs 9.03 % with oob_row_s, 8.38 vs 8.71 % with
  power_efficiency too) and H200 (9.39 vs 9.71 %); B200 and GB200 keep table 1.
* `tile_table = 3` (sm90 only): the dispatch the measured sgl-kernel runs, read in
  csrc/cutlass_extensions/gemm/fp8_gemm_sm90_dispatch.cuh (sglang PR #25532, merged May 2026,
  "SM90 swap-AB scaled_mm dispatch": `sgl_kernel.fp8_scaled_mm`, which the collector times with
  per-token activation and per-channel weight scales, calls it on sm90). Up to M = 64 tokens
  it swaps A and B (the weights fill the 64-row kernel tile, the tokens the narrow one) with
  256-deep K tiles: 16 token columns up to M = 16 (clusters of 2 along the tokens when
  N <= 1280), then 16 in clusters of 4 when N <= 1280, else 32 up to M = 32 and 64 up to 64;
  M in (64, 128]: 64 x 64 (N <= 4096) or 64 x 128 in 2 x 1 clusters; beyond, 128 x 128 in
  2 x 1 clusters, all 128-deep. The tables bear it out where tables 0-2 and vLLM's differ:
  for N > 1280 and K >= 4096 SGLang's median time steps from M = 32 to 33 (+4 % H100, +21 %
  H200) but not from 16 to 17 (+0 / +2 %), where vLLM's 64-token swap tile steps (+14 / +35 %;
  fit half, `python benchmarks/sim_sglang_gemm_tables.py`).
  Tables 1 and 2 were the fit half's approximations of it. (The older in-file dispatch of
  fp8_gemm_kernel.cu, table 0, is what the source read before said.)

CUTLASS's persistent scheduler rounds the tile grid up to whole thread-block clusters (vLLM
sm90: 2 x 1 tiles from M = 65; SGLang beyond M = 1024 as read, from 129 in `tile_table` 1):
M = 257 runs 4 rows of 128-row tiles, not 3, and costs SGLang 20-40 % more than M = 256 on
H200 (held-out H200 SGLang 10.5 -> 10.1 %, vLLM 7.3 -> 6.9 % with the clusters).

Time (same constants as gemm.py, plus `quant_cta_s`):

    compute = waves * max(2 Mt Nt K / (peak / SMs) / compute_efficiency,
                          ceil(K / 64) * k_step_latency_s) + waves * wave_overhead_s
              + oob waves * ceil(K / 64) * oob rows * oob_row_s
    compute = max(compute, t (1 + t / heat_s)), t = 2 M N K / (peak * power_efficiency)
                                                 (gemm.power_time; SGLang only)
    memory  = max(DRAM bytes / (bandwidth * memory_efficiency),
                  (L2 bytes + padded bytes) / (L2 bandwidth * l2_efficiency)) + memory_latency_s
    quant   = smooth max(3 M K bytes / (bandwidth * quantize_efficiency),
                         quantisation CTAs * quant_cta_s)
    time    = floor_s + smooth max(compute, memory) + quant

SGLang's sm90 kernels all have 128-deep K tiles (TileShape Mt x Nt x 128; table 3's swap-AB
ones 256-deep), so their main loop runs ceil(K / 128) whole tiles: K = 32 or 64 costs what
K = 128 does (fit half H100 8.38 -> 8.30 %, H200 9.39 -> 9.25 % with everything else below).

`oob_row_s` (SGLang only; absent: no term): the rows of the last token tile past the last
token are loaded as zeros (the TMA box crosses the tensor's edge) and multiplied like the
others. On the fit half SGLang's FP8 rows just past a tile boundary (M = 129, 257, 513 ...)
were 6 % too fast on H100 (mean signed error; 12 % of the absolute error from 9 % of the rows)
with the tile work alone; charging each wave that holds such a tile a cost per zero-filled
row and K step lowers the fit half 9.18 -> 9.03 % on H100 (8.38 % with power_efficiency and
tile_table 2). The fitted cost is 3-4e-10 s per row and K step on H100/H200 (a 127-row pad
then costs about a third of a 128 x 128 x 64 FP8 step at the per-SM peak) and ten times less on
B200/GB200, where it buys nothing. Which waves hold such a tile follows CUTLASS's raster order.

Padded bytes (SGLang on sm90): the zero-filled token rows also cost like rows moved through
L2, once per weight tile column: weight tile columns x padded rows x K bytes. On the fit half
the cost of a padded tile row grows with N, which a per-wave cost cannot give: t(129) / t(256)
(127 padded rows of 128 x 128 tiles, or none) is 0.97 / 0.98 (H100 / H200) for N <= 4096 and
1.26 / 1.30 above, and SGLang's 64 x 64 tiles (N <= 4096, twice vLLM's weight tile columns)
pay t(65) / t(128) = 1.24 / 1.27 where vLLM's 64 x 128 pay 1.01 / 1.03 (`python
benchmarks/sim_sglang_gemm_tables.py`). Counting them as L2 traffic lowers the fit half
8.05 -> 7.85 % on H100 and 9.12 -> 8.81 % on H200, and brings l2_efficiency off its bound on
H100 and memory_efficiency off it on H200 (l2_efficiency 0.27 / 0.32: the padding crosses at
about 4 TB/s). With table 3 and no weight copies, counting every re-read of the token panel
instead (real rows too) fits worse (H100 7.94 vs 7.87 %, H200 9.25 vs 8.85 %), and so does
counting the padded rows as DRAM bytes (H100 8.44 %). Why zero-filled rows cost like loaded
ones was not found in a source; Blackwell's tables were not examined for it.

`quant_cta_s` is the GPU time a CTA of the quantisation kernel costs, spread over the SMs
(launch, one load-convert-store chain): vLLM's one CTA per token costs 0.24 ms for 32768
tokens of K = 32 on H100 whatever N, where SGLang's 8-rows-per-CTA kernel costs 0.02 ms.
"""

from __future__ import annotations

import numpy as np

from ....hardware.schema import DTYPE_BYTES, Device
from ..params import Param

QUANT_CTA = Param("quant_cta_s", "seconds", 5e-9, "GPU time per CTA of the activation "
                  "quantisation kernel (vLLM: one CTA per token row), amortised over the SMs")
OOB_ROW = Param("oob_row_s", "seconds", 5e-10, "extra K-loop time per 64-deep K step and per "
                "row of a token tile that lies past the last token (the TMA load of a box "
                "crossing the tensor's edge zero-fills those rows), paid once by every wave "
                "that holds such a tile")
VLLM, SGLANG = 1, 2  # values of the structural constant `library` (0: cuBLAS, gemm.py)
BLACKWELL_CLASS_FLOP_PER_CLK = 6000  # dense 16-bit flop per SM and clock: H100 4096, B200 8192
K_STEP = 64
SGLANG_SM90_K_TILE = 128  # fp8_gemm_kernel.cu: every sm90 TileShape is Mt x Nt x 128
SWAP_K_TILE = 256  # fp8_gemm_sm90_dispatch.cuh: the swap-AB TileShapes are 64 x Nt x 256
SWAP_MAX_M = 64  # ... used up to M = 64 tokens
SWAP_N_SMALL = 1280  # kNThreshold: narrower token tiles in wider clusters up to this N
M128_N_SMALL = 4096  # kM128NThreshold: 64 x 64 tiles for M in (64, 128] up to this N
QUANT_BYTES = 3  # read 2 bytes, write 1 per activation element
SGLANG_WARP_ROWS_PER_SM = 16  # sgl_per_token_quant_fp8: warp kernel from 2 * 8 rows per SM
SGLANG_ROWS_PER_CTA = 8


def blackwell_class(dev: Device) -> bool:
    """True for devices that declare sm_version 100 or above (hardware/identity.py)."""
    from ....hardware.identity import lookup
    return lookup(dev).kernel_generation == "blackwell"


def tiles(library: int, tile_table: int, blackwell: bool, M: np.ndarray, N: np.ndarray,
          K: np.ndarray) -> tuple[np.ndarray, ...]:
    """(Mt, Nt, cm, cn) per row: the C tile one CTA (one SM) computes, as the framework
    dispatches, and its thread-block cluster in tiles along M and N (CUTLASS's persistent
    scheduler rounds the tile grid up to whole clusters)."""
    one = np.ones_like(M, dtype=float)
    if library == SGLANG and tile_table == 3 and not blackwell:  # sgl-kernel's swap-AB dispatch
        mt = np.select([M <= 16, (M <= 64) & (N <= SWAP_N_SMALL), M <= 32, M <= 64], [16, 16, 32, 64],
                       np.where(M <= 128, 64, 128))
        nt = np.select([M <= 64, (M <= 128) & (N <= M128_N_SMALL)], [64, 64], 128)
        # clusters along the tokens: (1, 2) / (1, 4) for swap-AB with N <= 1280 (kernel N is the
        # tokens), 2 x 1 for the 64 x 128 tile and beyond M = 128
        cm = np.select([(M <= 16) & (N <= SWAP_N_SMALL), (M <= 64) & (N <= SWAP_N_SMALL), M <= 64,
                        (M <= 128) & (N <= M128_N_SMALL)], [2, 4, 1, 1], 2)
        cn = one
    elif library == SGLANG and tile_table == 2:  # tile_table 1 with 32 token rows to M = 32
        mt = np.select([M <= 32, M <= 128], [32, 64], 128)
        nt = np.select([M <= 64, M <= 128], [64, 128], 128)
        cm, cn = np.where(M <= 128, 1, 2), one
    elif library == SGLANG and tile_table == 1:
        mt = np.where(M <= 128, 64, 128)
        nt = np.select([M <= 64, M <= 128], [64, 128], 128)
        cm, cn = np.where(M <= 128, 1, 2), one
    elif library == VLLM and not blackwell:
        mt = np.select([M <= 16, (M <= 64) & (N <= 1280), M <= 64, M <= 128],
                       [16, 16, 64, 64], 128)
        nt = np.select([M <= 64, M <= 128], [64, 128], 128)
        # swap-AB configs cluster along the tokens: (1, 2), (1, 1), (1, 4), (1, 1); then 2 x 1
        cm = np.select([M <= 16, M <= 64], [np.where(N <= 1280, 2, 1), np.where(N <= 1280, 4, 1)],
                       2)
        cn = one
    elif library == VLLM:
        mt = np.select([M <= 16, M <= 64], [32, 64], 128)
        nt = np.select([M <= 16, (M == 64) & (K < 4096), M <= 64], [128, 64, 128], 128)
        # swap-AB (4, 1, 1) clusters along the weights; 2 x 1 to M = 256; 256 x 128 tiles on
        # SM pairs in 2 x 2 clusters beyond: 4 x 2 tiles of 128 x 128
        swap = (M <= 16) | ((M <= 64) & ~((M == 64) & (K < 4096)))
        cm = np.select([swap, M <= 64, M <= 256], [1, 1, 2], 4)
        cn = np.where(swap, 4, np.where(M <= 256, 1, 2))
    else:  # SGLang as read: 64 x 64 up to 256 rows (sm90) or 64 rows (sm100), then 128 x 128
        small = M <= (64 if blackwell else 256)
        mt = np.where(small, 64, 128)
        nt = mt
        if blackwell:  # (1, 4) to M = 16, (1, 1), (2, 1) to 256, 256 x 128 in 2 x 2 beyond
            cm = np.select([M <= 64, M <= 256], [1, 2], 4)
            cn = np.select([M <= 16, M <= 256], [4, 1], 2)
        else:  # (1, 8) at M = 1, (1, 4) to 64, (1, 1) to 1024, (2, 1) beyond
            cm = np.where(M > 1024, 2, 1)
            cn = np.select([M <= 1, M <= 64], [8, 4], 1)
    return tuple(np.asarray(x, float) for x in (mt, nt, cm, cn))


def build_geometry(dev: Device, M: np.ndarray, N: np.ndarray, K: np.ndarray, B: np.ndarray,
                   dtype: str, library: int, tile_table: int,
                   resident: np.ndarray) -> dict:
    """Everything that does not depend on the constants; `resident` (per row) when the
    benchmark's weight copies and outputs all stay in L2 (gemm.py)."""
    sms = dev.core_count
    per_sm = dev.matrix_rate(dtype) / sms
    blackwell = blackwell_class(dev)
    mt, nt, cm, cn = tiles(library, tile_table, blackwell, M, N, K)
    # the main loop runs whole K tiles: K = 32 or 64 costs one 128-deep tile on SGLang's sm90
    # (table 3's swap-AB kernels: one 256-deep tile)
    kt = SGLANG_SM90_K_TILE if library == SGLANG and not blackwell else 1
    if library == SGLANG and tile_table == 3 and not blackwell:
        kt = np.where(M <= SWAP_MAX_M, SWAP_K_TILE, SGLANG_SM90_K_TILE)
    k_run = np.ceil(K / kt) * kt
    tile_rows = np.ceil(np.ceil(M / mt) / cm) * cm  # along the tokens, whole clusters
    tile_cols = np.ceil(np.ceil(N / nt) / cn) * cn
    waves = np.ceil(B * tile_rows * tile_cols / sms)
    # rows of the emptiest token tile past the last token (a cluster's padding tile: all of them)
    oob_rows = np.minimum(mt, tile_rows * mt - M)
    # waves holding such a tile. CUTLASS's sm90 persistent scheduler rasterises along M when
    # the grid has more tile columns than rows (its raster-order heuristic): consecutive tiles
    # then walk down a column, so every wave holds a bottom tile (at most one wave per column).
    # Along N the bottom tiles are the last row's, consecutive: ceil(columns / SMs) waves.
    # (Swap-AB kernels, table 3 to M = 64, have the weights as kernel M: the heuristic then
    # walks along the tokens unless there are more token tiles than weight tiles.)
    swap = (library == SGLANG) & (tile_table == 3) & (not blackwell) & (M <= SWAP_MAX_M)
    along_m = np.where(swap, tile_cols >= tile_rows, tile_cols > tile_rows)
    oob_waves = np.minimum(waves, np.where(along_m, B * tile_cols, np.ceil(B * tile_cols / sms)))
    a_bytes = B * M * K * DTYPE_BYTES[dtype]
    b_bytes = B * K * N * DTYPE_BYTES[dtype]
    c_bytes = B * M * N * 2  # 16-bit output
    hot = a_bytes <= dev.global_buffer.capacity_bytes  # just written by the quantisation kernel
    rows = B * M
    if library == VLLM:
        quant_ctas = rows
    else:
        quant_ctas = np.where(rows >= SGLANG_WARP_ROWS_PER_SM * sms,
                              np.ceil(rows / SGLANG_ROWS_PER_CTA), rows)
    l2_bytes = a_bytes + b_bytes + c_bytes
    if library == SGLANG and not blackwell:
        # the zero-filled rows of the token tiles (past the last token) cross L2 once per weight
        # tile column, like loaded rows (see the module docstring)
        pad_rows = tile_rows * mt - M
        l2_bytes = l2_bytes + B * np.ceil(N / nt) * pad_rows * k_run * DTYPE_BYTES[dtype]
    return {"wave_work": waves * 2.0 * mt * nt * k_run / per_sm,
            "wave_steps": waves * np.ceil(k_run / K_STEP), "waves": waves,
            "dram_bytes": np.where(resident, 0.0, b_bytes + c_bytes) + np.where(hot, 0.0, a_bytes),
            "l2_bytes": l2_bytes,
            "quant_bytes": rows * K * QUANT_BYTES, "quant_ctas": quant_ctas,
            "flops": 2.0 * B * M * N * K,
            "oob_steps": np.where(oob_rows > 0, oob_waves, 0.0) * np.ceil(k_run / K_STEP)
            * oob_rows}


def predict(dev: Device, g: dict, p: dict[str, float], smooth_max,
            power_time: np.ndarray) -> np.ndarray:
    eff, kst, wo = p["compute_efficiency"], p["k_step_latency_s"], p["wave_overhead_s"]
    bw = dev.memory.bandwidth_bytes_per_s * p["memory_efficiency"]
    l2bw = dev.global_buffer_bandwidth_bytes_per_s * p["l2_efficiency"]
    compute = (np.maximum(g["wave_work"] / eff, g["wave_steps"] * kst) + g["waves"] * wo
               + g["oob_steps"] * p.get("oob_row_s", 0.0))
    compute = np.maximum(compute, power_time)
    memory = np.maximum(g["dram_bytes"] / bw, g["l2_bytes"] / l2bw) + p["memory_latency_s"]
    quant = smooth_max(g["quant_bytes"] / (dev.memory.bandwidth_bytes_per_s
                                           * p["quantize_efficiency"]),
                       g["quant_ctas"] * p["quant_cta_s"])
    return p["floor_s"] + smooth_max(compute, memory) + quant
