"""vLLM's and SGLang's FP8 GEMM on Hopper and Blackwell: a quantisation kernel, then one CUTLASS
kernel whose tile the framework's dispatch picks from M (forms `gemm/vllm-cutlass-fp8` and
`gemm/sglang-cutlass-fp8`).

Per FP8 row the collectors (collector/{vllm,sglang}/collect_gemm.py) time:

* vLLM (`RowParallelLinear` with `Fp8Config(activation_scheme="static")`,
  CutlassFP8ScaledMMLinearKernel): `static_scaled_fp8_quant` (csrc/quantization/w8a8/fp8/
  common.cu: one 256-thread CTA per token row), then `cutlass_scaled_mm`.
* SGLang: `sgl_per_token_quant_fp8` (sgl-kernel per_token_quant_fp8.cu: a dynamic per-token
  scale; one CTA per row below 16 rows per SM, one warp per row and 8 rows per CTA above), then
  sgl-kernel's `fp8_scaled_mm`.

Neither CUTLASS kernel splits K or uses stream-K: the tiles run in persistent, data-parallel
waves over the SMs. The tile (Mt x Nt of C per CTA) per M, as dispatched:

* vLLM sm90 (scaled_mm_sm90_fp8_dispatch.cuh): M <= 16: 16 x 64 (swap-AB: a 64-wide tile of
  weights against 16 tokens); M <= 64: 16 x 64 when N <= 1280, else 64 x 64; M <= 128:
  64 x 128; above: 128 x 128.
* vLLM sm100 (scaled_mm_sm100_fp8_dispatch.cuh): M <= 16: 32 x 128 (swap-AB); M <= 64:
  64 x 128 (swap-AB), 64 x 64 when M = 64 and K < 4096; above: 128 x 128 per SM (256 x 128
  over an SM pair beyond M = 256).
* SGLang, structure `tile_table` (chosen by the fit):
  - 0: fp8_gemm_kernel.cu's in-file dispatch (`sm90_fp8_dispatch_shape`): sm90 64 x 64 up to
    M = 256, then 128 x 128; sm100 64 x 64 up to M = 64, then 128 x 128 per SM.
  - 1: 64 x 64 up to M = 64, 64 x 128 up to 128, then 128 x 128 in clusters of 2 along M (the
    sm90 tables step at M = 64 and 128, not at 256: the measured sgl-kernel is newer than
    table 0's source).
  - 3 (sm90 only): csrc/cutlass_extensions/gemm/fp8_gemm_sm90_dispatch.cuh (sglang PR #25532,
    "SM90 swap-AB scaled_mm dispatch"). Up to M = 64 it swaps A and B (the weights fill the
    64-row kernel tile) with 256-deep K tiles: 16 token columns up to M = 16 (clusters of 2
    along the tokens when N <= 1280), then 16 in clusters of 4 when N <= 1280, else 32 up to
    M = 32 and 64 up to 64; M in (64, 128]: 64 x 64 (N <= 4096) or 64 x 128 in 2 x 1
    clusters; beyond, 128 x 128 in 2 x 1 clusters, all 128-deep.

CUTLASS's persistent scheduler rounds the tile grid up to whole thread-block clusters (`tiles`).
SGLang's sm90 main loop runs whole 128-deep K tiles (256 for table 3's swap-AB ones):
K' = ceil(K / K tile) * K tile. Time (gemm.py's constants without split-K, plus `quant_cta_s`):

    compute = waves * (max(2 Mt Nt K' / (peak / SMs) / compute_efficiency,
                           ceil(K' / 64) * k_step_latency_s) + wave_overhead_s)
              [+ oob waves * ceil(K' / 64) * oob rows * oob_row_s]           (SGLang)
    compute = max(compute, 2 M N K / (peak * power_efficiency))             (SGLang)
    memory  = max(DRAM bytes / (bandwidth * memory_efficiency),
                  (L2 bytes + padded bytes) / (L2 bandwidth * l2_efficiency)) + memory_latency_s
    quant   = smooth_max(3 M K bytes / (bandwidth * quantize_efficiency),
                         quantisation CTAs * quant_cta_s; p = 2.5)
    time    = floor_s + smooth_max(compute, memory; p = 2.5) + quant

SGLang loads the rows of the last token tile past the last token as zeros (the TMA box crosses
the tensor's edge) and multiplies them: each wave holding such a tile (CUTLASS's raster order)
pays `oob_row_s` per row and K step, and on sm90 they cross L2 once per weight tile column
(padded bytes = weight tile columns x padded rows x K' bytes; read from the tables, not a
source). `quant_cta_s`: one quantisation CTA's GPU time, spread over the SMs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....hardware.schema import DTYPE_BYTES, Device
from ..base import SERVING, Conditions, Setting, one_of, register
from ..numerics import smooth_max
from ..params import Param
from .gemm import (
    OVERLAP_EXPONENT,
    PARAMS,
    POWER,
    GemmForm,
    columns,
    cutlass_fp8,
    geometry,
    power_time,
    resident,
)

QUANT_CTA = Param("quant_cta_s", "seconds", 5e-9, "GPU time per CTA of the activation "
                  "quantisation kernel (vLLM: one CTA per token row), amortised over the SMs")
OOB_ROW = Param("oob_row_s", "seconds", 5e-10, "extra K-loop time per 64-deep K step and per "
                "row of a token tile that lies past the last token (the TMA load of a box "
                "crossing the tensor's edge zero-fills those rows), paid once by every wave "
                "that holds such a tile")
VLLM, SGLANG = "vllm", "sglang"  # whose dispatch (the framework)
CUTLASS_PARAMS = tuple(q for q in PARAMS if q.name != "split_k_overhead_s") + (QUANT_CTA,)
SGLANG_TABLES = (0, 1, 3)  # tile tables (the module docstring); 3 is sm90's
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


def tiles(library: str, tile_table: int, blackwell: bool, M: np.ndarray, N: np.ndarray,
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
                   dtype: str, library: str, tile_table: int,
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


class _Cutlass(GemmForm):
    """What both frameworks' CUTLASS forms share: offered for their FP8 GEMM on sm90+, timed
    by the module docstring's formula."""

    library: str
    oob_rows = False  # zero-filled token rows charged per wave (oob_row_s)
    power_limit = False  # the power-limited rate floors the compute time (POWER)

    def offered(self, setting: Setting) -> bool:
        return cutlass_fp8(setting) and setting.framework == self.library

    def params(self, setting: Setting, structure, measured=None) -> tuple[Param, ...]:
        return CUTLASS_PARAMS + ((OOB_ROW,) if self.oob_rows else ()) + (
            (POWER,) if self.power_limit else ())

    def predict(self, setting: Setting, cols, constants, structure,
                conditions: Conditions = SERVING) -> np.ndarray:
        dev, dtype, p = setting.dev, setting.variant, constants
        table = getattr(structure, "tile_table", 0)  # vLLM: its one dispatch
        copies = conditions.weight_copies

        def build(d, c, t):
            M, N, K, B = columns(c)
            ebytes = DTYPE_BYTES[t]
            in_l2 = resident(d, B * M * K * ebytes, B * K * N * ebytes, B * M * N * 2, copies)
            return build_geometry(d, M, N, K, B, t, self.library, table, in_l2)

        g = geometry(dev, cols, dtype, (self.library, table, copies), build)
        eff, kst, wo = p["compute_efficiency"], p["k_step_latency_s"], p["wave_overhead_s"]
        bw = dev.memory.bandwidth_bytes_per_s * p["memory_efficiency"]
        l2bw = dev.global_buffer_bandwidth_bytes_per_s * p["l2_efficiency"]
        compute = np.maximum(g["wave_work"] / eff, g["wave_steps"] * kst) + g["waves"] * wo
        if self.oob_rows:
            compute = compute + g["oob_steps"] * p["oob_row_s"]
        power = p["power_efficiency"] if self.power_limit else None
        compute = np.maximum(compute, power_time(dev, g["flops"], power, dtype, conditions))
        memory = np.maximum(g["dram_bytes"] / bw, g["l2_bytes"] / l2bw) + p["memory_latency_s"]
        quant = smooth_max(g["quant_bytes"] / (dev.memory.bandwidth_bytes_per_s
                                               * p["quantize_efficiency"]),
                           g["quant_ctas"] * p["quant_cta_s"], OVERLAP_EXPONENT)
        return p["floor_s"] + smooth_max(compute, memory, OVERLAP_EXPONENT) + quant


class VllmCutlass(_Cutlass):
    """vLLM's `cutlass_scaled_mm` after its static per-tensor quantiser."""

    name = "gemm/vllm-cutlass-fp8"
    library = VLLM


@dataclass(frozen=True)
class SglangStructure:
    """The structural choice of SGLang's FP8 CUTLASS GEMM: which tile table its dispatch follows (0,
    1 or 3, SGLANG_TABLES; described in the module docstring), chosen by the fit."""
    tile_table: int  # one of SGLANG_TABLES (the module docstring)

    def __post_init__(self) -> None:
        one_of("tile_table", self.tile_table, SGLANG_TABLES)


class SglangCutlass(_Cutlass):
    """sgl-kernel's `fp8_scaled_mm` after its per-token quantiser, with the zero-filled token
    rows and the power-limited rate its tables show."""

    name = "gemm/sglang-cutlass-fp8"
    library = SGLANG
    Structure = SglangStructure
    oob_rows = True
    power_limit = True

    def structures(self, setting: Setting, measured=None) -> tuple:
        blackwell = blackwell_class(setting.dev)
        return tuple(SglangStructure(t) for t in SGLANG_TABLES if not (t == 3 and blackwell))


VLLM_CUTLASS = register(VllmCutlass())
SGLANG_CUTLASS = register(SglangCutlass())
