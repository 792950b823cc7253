"""Matmul timing: the closed-form systolic array, a vectorised tile mapper, a GEMV path.

The tile model (one candidate mapping) of C[b, M, N] = A[b, M, K] @ B[b, K, N]:

* Work is cut into *local tiles* of C (Ml x Nl), one per core at a time; a core streams K in
  steps of Kl, loading an (Ml x Kl) slice of A and a (Kl x Nl) slice of B into its local SRAM
  through a pipeline of `stages` buffers (1: load then compute; 2: double buffering; more:
  more loads in flight, which is what hides the global-buffer latency) and splitting the tile
  over its lanes as an lm x ln grid. A lane computes its (ceil(Ml/lm) x ceil(Nl/ln) x K)
  piece in `systolic_cycles` (the closed form every SCALE-Sim output-stationary table entry
  obeys): output stationary means the partial sums stay in the lane for the whole reduction,
  so fill and drain are paid once per output block, not once per Kl slice (Kl only sizes the
  SRAM staging). The finished tile is written back in an epilogue that is *not* overlapped
  with the core's own compute (as in real GEMM kernels: main loop, then store), at the core's
  share of memory bandwidth: this is what makes small-K batched matmuls (Q K^T) slow.
* Tiles run in waves over the cores; the last wave may be partial (tile quantisation).
* A *global tile* (Mg x Ng) is the block of C whose A and B panels the global buffer keeps:
  off-chip traffic is A once per column of global tiles and B once per row of them, or
  either operand once when its whole panel stays resident (loop order). The global buffer
  must hold the panels' K-slices (double-buffered).
* Time = max(core-side time, off-chip traffic / bandwidth) + memory latency of the first load.

A single row (M == 1) takes the GEMV path instead (`gemv`): a weight streamed once, split over
the cores along N and, when N is narrow, along K.

The mapper evaluates every (local tile, lane split, pipeline stages, global tile, loop order)
candidate at once with numpy broadcasting and keeps the fastest; results are memoised by
(op, shape, dtype, device, efficiencies). Calibration derates the device's peak compute and
bandwidth (efficiencies <= 1), so a calibrated time is never below the roofline bound.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ....hardware.schema import DTYPE_BYTES, Device

ACCUMULATOR_BYTES = 4  # partial sums are fp32 in the core's registers / local SRAM


def systolic_cycles(m, n, k, height: int, width: int):
    """Cycles of an output-stationary height x width array for an (m x k) @ (k x n) tile.

    cycles = ceil(m/H) * ceil(n/W) * (k + H + W - 2) - 1: each H x W block of C streams k
    operands through the array plus H + W - 2 cycles of fill and drain. Vectorised.
    """
    m, n, k = np.asarray(m), np.asarray(n), np.asarray(k)
    blocks = -(-m // height) * -(-n // width)
    return blocks * (k + height + width - 2) - 1


def systolic_cycles_of_one(m: int, n: int, k: int, height: int, width: int) -> int:
    """`systolic_cycles` of one tile in Python ints: the same integer (numpy's int64 holds
    these sizes exactly), without making arrays (the template decode attention asks it for
    every KV length)."""
    blocks = -(-m // height) * -(-n // width)
    return blocks * (k + height + width - 2) - 1


@dataclass(frozen=True)
class MatmulResult:
    """The template model's timing of one matmul (module docstring): time in seconds, FLOPs,
    off-chip bytes of the chosen mapping, the mapping (tile sizes, loop order, ..., or the GEMV
    path and its split-K), and which side bounds it ("compute" or "memory")."""
    time_s: float
    flops: float
    bytes: float  # off-chip traffic of the chosen mapping
    mapping: dict
    bound: str  # "compute" or "memory"


def _pow2_range(low: int, high: int) -> list[int]:
    values, v = [], low
    while v <= high:
        values.append(v)
        v *= 2
    return values


def _axis_tiles(dim: int, choices: list[int]) -> np.ndarray:
    """Tile sizes worth trying along an axis: the choices up to the dimension, and the dimension."""
    sizes = [c for c in choices if c < dim] + [dim] if dim <= max(choices) else \
        [c for c in choices if c <= dim]
    return np.array(sorted(set(sizes)), dtype=np.int64)


def _lane_grids(lanes: int) -> list[tuple[int, int]]:
    return [(a, lanes // a) for a in range(1, lanes + 1) if lanes % a == 0]


LOCAL_MN = [16, 32, 64, 128, 256]
LOCAL_K = [16, 32, 64, 128, 256, 512]
GLOBAL_MN = _pow2_range(64, 1 << 16)
PIPELINE_STAGES = (1, 2, 3, 4)


@functools.lru_cache(maxsize=None)
def _local_candidates(M: int, N: int, K: int, lanes: int):
    ml = _axis_tiles(M, LOCAL_MN)
    nl = _axis_tiles(N, LOCAL_MN)
    kl = _axis_tiles(K, LOCAL_K)
    grids = np.array(_lane_grids(lanes), dtype=np.int64)
    g_idx = np.arange(len(grids))
    stages = np.array(PIPELINE_STAGES)
    mesh = np.meshgrid(ml, nl, kl, g_idx, stages, indexing="ij")
    Ml, Nl, Kl, G, S = (a.reshape(-1) for a in mesh)
    return Ml, Nl, Kl, grids[G, 0], grids[G, 1], S


@functools.lru_cache(maxsize=None)
def _global_candidates(M: int, N: int):
    mg = _axis_tiles(M, GLOBAL_MN)
    ng = _axis_tiles(N, GLOBAL_MN)
    order = np.arange(3)  # 0: C stationary, 1: A panel resident, 2: B panel resident
    mesh = np.meshgrid(mg, ng, order, indexing="ij")
    return tuple(a.reshape(-1) for a in mesh)


def _ceil(a, b):
    return -(-a // b)


def simulate_matmul(dev: Device, M: int, N: int, K: int, batch: int = 1, dtype: str = "fp16",
                    compute_eff: float = 1.0, memory_eff: float = 1.0,
                    detail: bool = False) -> MatmulResult:
    """Best mapping of a (batched) matmul on one device; see the module docstring. A single
    row (M == 1, e.g. batch-1 decode or one query against a KV cache) takes the GEMV path."""
    if M == 1:
        return gemv(dev, N, K, batch, dtype, compute_eff, memory_eff)
    return _simulate_matmul(dev, int(M), int(N), int(K), int(batch), dtype, float(compute_eff),
                            float(memory_eff), detail)


GEMV_COLUMNS_PER_ITEM = 64  # output columns one core produces per work item


@functools.lru_cache(maxsize=65536)
def gemv(dev: Device, N: int, K: int, batch: int = 1, dtype: str = "fp16",
         compute_eff: float = 1.0, memory_eff: float = 1.0) -> MatmulResult:
    """y[b] = x[b] @ W[b] for a single row x: each weight is used once, so the op streams W at
    memory bandwidth. Work items are blocks of output columns; when there are fewer blocks
    than cores, K is split too (split-K) and the partial sums are added in a second, tiny
    pass. A row cannot fill a systolic array (one of its H rows is used), so the products run
    on the vector units; the streaming rate is what the active cores can pull."""
    b = DTYPE_BYTES[dtype]
    core, freq = dev.core, dev.frequency_hz
    blocks = batch * _ceil(N, GEMV_COLUMNS_PER_ITEM)
    split_k = max(1, min(_ceil(dev.core_count, blocks), _ceil(K, 256)))
    active = min(dev.core_count, blocks * split_k)
    moved = float(batch * (K * N + K + N) * b)
    per_core_bw = core.local_sram_bandwidth_bytes_per_cycle * freq
    t_mem = moved / min(dev.memory.bandwidth_bytes_per_s * memory_eff, active * per_core_bw)
    flops = 2.0 * batch * N * K
    vector = dev.vector_rate(dtype) * compute_eff * active / dev.core_count
    t_vec = flops / vector
    time_s = max(t_mem, t_vec) + dev.memory.latency_s + dev.global_buffer.latency_s
    if split_k > 1:  # the partial sums: one more short pass over batch x N x split_k values
        time_s += dev.memory.latency_s
    return MatmulResult(time_s, flops, moved, {"path": "gemv", "split_k": split_k},
                        "memory" if t_mem >= t_vec else "compute")


@functools.lru_cache(maxsize=65536)
def _simulate_matmul(dev: Device, M: int, N: int, K: int, batch: int, dtype: str,
                     compute_eff: float, memory_eff: float, detail: bool) -> MatmulResult:
    b = DTYPE_BYTES[dtype]
    core = dev.core
    freq = dev.frequency_hz
    # A dtype other than the array's native 16-bit runs at the datasheet ratio of peak rates.
    half = dev.matrix_flops_per_s.fp16 or dev.matrix_flops_per_s.bf16
    speed = dev.matrix_rate(dtype) / half * compute_eff
    mem_bw = dev.memory.bandwidth_bytes_per_s * memory_eff  # bytes/s
    l2_bw_cycle = dev.global_buffer.bandwidth_bytes_per_cycle
    cores = dev.core_count

    # ----------------------------------------------------------------- core side (local tiles)
    Ml, Nl, Kl, lm, ln, S = _local_candidates(M, N, K, core.lane_count)
    in_bytes = (Ml * Kl + Kl * Nl) * b
    # Partial sums live in the register file when the core has one, else in the local SRAM.
    acc = Ml * Nl * ACCUMULATOR_BYTES
    if core.register_file_bytes > 0:
        ok = (in_bytes * S <= core.local_sram_bytes) & (acc <= core.register_file_bytes / 2)
    else:
        ok = in_bytes * S + acc <= core.local_sram_bytes
    if not ok.any():  # tiny SRAM: fall back on the smallest tile rather than no answer
        ok = in_bytes == in_bytes.min()
    Ml, Nl, Kl, lm, ln, S, in_bytes = (a[ok] for a in (Ml, Nl, Kl, lm, ln, S, in_bytes))

    units = batch * _ceil(M, Ml) * _ceil(N, Nl)  # local tiles of C over the whole problem
    active = np.minimum(units, cores)
    waves = _ceil(units, cores)
    compute_cycles = systolic_cycles(_ceil(Ml, lm), _ceil(Nl, ln), K, core.systolic_array_height,
                                     core.systolic_array_width) / speed
    # Loads come through the global buffer, shared by the active cores.
    load_bw = np.minimum(core.local_sram_bandwidth_bytes_per_cycle, l2_bw_cycle / active)
    # Each slice load pays the global-buffer latency; with `stages` buffers, stages - 1 loads
    # are in flight, so a slice arrives every max(latency / (stages - 1), transfer) cycles.
    latency_cycles = dev.global_buffer.latency_s * freq
    transfer = in_bytes / load_bw
    load_cycles = latency_cycles + transfer
    ksteps = _ceil(K, Kl)
    per_slice = np.maximum(latency_cycles / np.maximum(S - 1, 1), transfer)
    main_loop = np.where(S > 1, np.maximum(compute_cycles, ksteps * per_slice),
                         compute_cycles + ksteps * load_cycles)
    # Epilogue: the C tile goes out at this core's share of off-chip bandwidth.
    store_cycles = Ml * Nl * b / (mem_bw / freq / active)
    unit_cycles = load_cycles + main_loop + store_cycles
    core_s = waves * unit_cycles / freq
    i_core = int(np.argmin(core_s))
    core_time = float(core_s[i_core])

    # ---------------------------------------------------------- off-chip traffic (global tiles)
    Mg, Ng, order = _global_candidates(M, N)
    cap = dev.global_buffer.capacity_bytes
    kl_best = int(Kl[i_core])
    # Panels resident in the global buffer: the K-slices of the A and B panels, double-buffered.
    fits = 2 * (Mg + Ng) * kl_best * b <= cap
    a_panel_fits = Mg * K * b + 2 * Ng * kl_best * b <= cap
    b_panel_fits = Ng * K * b + 2 * Mg * kl_best * b <= cap
    fits &= np.where(order == 1, a_panel_fits, np.where(order == 2, b_panel_fits, True))
    if not fits.any():
        fits = (Mg == Mg.min()) & (Ng == Ng.min()) & (order == 0)
    Mg, Ng, order = Mg[fits], Ng[fits], order[fits]
    a_reads = np.where(order == 1, 1, _ceil(N, Ng))
    b_reads = np.where(order == 2, 1, _ceil(M, Mg))
    traffic = batch * (M * K * b * a_reads + K * N * b * b_reads + M * N * b)
    i_glob = int(np.argmin(traffic))
    off_chip = float(traffic[i_glob])
    mem_time = off_chip / mem_bw

    latency = dev.memory.latency_s + dev.global_buffer.latency_s
    time_s = max(core_time, mem_time) + latency
    flops = 2.0 * batch * M * N * K
    mapping = {}
    if detail:
        mapping = {"local_tile": (int(Ml[i_core]), int(Nl[i_core]), int(Kl[i_core])),
                   "lane_grid": (int(lm[i_core]), int(ln[i_core])),
                   "pipeline_stages": int(S[i_core]), "waves": int(waves[i_core]),
                   "global_tile": (int(Mg[i_glob]), int(Ng[i_glob])),
                   "loop_order": ("C-stationary", "A-resident", "B-resident")[int(order[i_glob])],
                   "core_time_s": core_time, "memory_time_s": mem_time,
                   "candidates": int(len(core_s) + len(traffic))}
    return MatmulResult(time_s, flops, off_chip, mapping,
                        "compute" if core_time >= mem_time else "memory")


def naive_matmul_time(dev: Device, M: int, N: int, K: int, batch: int = 1,
                      dtype: str = "fp16") -> float:
    """One fixed, reasonable mapping (64x64x64 local tiles, one pipeline stage, C-stationary
    with 512x512 global tiles): the baseline the mapper must never lose to."""
    b = DTYPE_BYTES[dtype]
    core, freq = dev.core, dev.frequency_hz
    half = dev.matrix_flops_per_s.fp16 or dev.matrix_flops_per_s.bf16
    speed = dev.matrix_rate(dtype) / half
    Ml, Nl, Kl = min(64, M), min(64, N), min(64, K)
    units = batch * _ceil(M, Ml) * _ceil(N, Nl)
    active = min(units, dev.core_count)
    lm, ln = _lane_grids(core.lane_count)[-1]
    compute = float(systolic_cycles(_ceil(Ml, lm), _ceil(Nl, ln), K, core.systolic_array_height,
                                    core.systolic_array_width)) / speed
    load = dev.global_buffer.latency_s * freq + (Ml * Kl + Kl * Nl) * b / min(core.local_sram_bandwidth_bytes_per_cycle,
                                         dev.global_buffer.bandwidth_bytes_per_cycle / active)
    mem_bw = dev.memory.bandwidth_bytes_per_s
    store = Ml * Nl * b / (mem_bw / freq / active)
    core_time = _ceil(units, dev.core_count) * (load + compute + _ceil(K, Kl) * load + store) / freq
    Mg, Ng = min(512, M), min(512, N)
    traffic = batch * (M * K * b * _ceil(N, Ng) + K * N * b * _ceil(M, Mg) + M * N * b)
    return max(core_time, traffic / mem_bw) + dev.memory.latency_s + dev.global_buffer.latency_s


def roofline_matmul(dev: Device, M: int, N: int, K: int, batch: int = 1, dtype: str = "fp16",
                    compute_eff: float = 1.0, memory_eff: float = 1.0) -> MatmulResult:
    """Roofline: max(FLOPs / peak, BYTES / bandwidth), with every operand read and the result
    written exactly once, counted in bytes of `dtype` (the original counted elements)."""
    b = DTYPE_BYTES[dtype]
    flops = 2.0 * batch * M * N * K
    moved = float(batch * (M * K + K * N + M * N) * b)
    t_c = flops / (dev.matrix_rate(dtype) * compute_eff)
    t_m = moved / (dev.memory.bandwidth_bytes_per_s * memory_eff)
    return MatmulResult(max(t_c, t_m), flops, moved, {}, "compute" if t_c >= t_m else "memory")
