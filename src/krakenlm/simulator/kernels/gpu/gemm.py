"""GEMM (and batched GEMM) on a GPU: CUDA thread-block tiles in waves over the SMs.

C[b, M, N] = A[b, M, K] @ B[b, K, N] runs as thread blocks (CTAs), each computing an Mt x Nt
tile of C over a K range. A form builds the kernel menu of the device's class and takes the
kernel the library would run: `gemm/cublas` here (cuBLAS: TensorRT-LLM's FP8 path and every
16-bit table), vLLM's and SGLang's FP8 CUTLASS kernels in gemm_cutlass.py.

cuBLAS (`gemm/cublas`), for every tile (Mt, Nt) of the class and every K split s in SPLITS:

    CTAs    = b * ceil(M / Mt) * ceil(N / Nt) * s
    waves   = ceil(CTAs / SMs)                 (the last wave may be partial)
    compute = waves * (max(2 Mt Nt ceil(K/s) / (peak / SMs) / compute_efficiency,
                           ceil(ceil(K/s) / 64) * k_step_latency_s) + wave_overhead_s)
    memory  = max(DRAM bytes / (bandwidth * memory_efficiency),
                  (A + B + C bytes) / (L2 bandwidth * l2_efficiency)) + memory_latency_s
    time    = floor_s + min over candidates of [smooth_max(compute, memory; p = 2.5)
              + split cost]

A split (s > 1) needs a K slice of at least MIN_SPLIT_K and costs `split_k_overhead_s` plus its
fp32 partial sums written and read once. B and C cross DRAM; A is re-read from L2 when it fits
there (the previous kernel left it there). The smooth maximum (kernels/numerics.py): compute
and memory overlap well but not perfectly.

Device classes, by the declared kernel generation (hardware/identity.py):
* Ampere (cuBLAS sm80 kernels): AMPERE_TILES, data-parallel only, and the C store runs after
  each CTA's main loop (+ C bytes / (bandwidth * memory_efficiency), not overlapped). cuBLAS's
  heuristic: for K <= BIG_TILE_MAX_K its largest tiles (256x128, 128x256) whenever they give
  at least BIG_TILE_MIN_FILL x SMs CTAs, even with a nearly empty last wave; else the fastest.
* Hopper and Blackwell (sm90, sm100): warp-specialised persistent kernels, HOPPER_TILES, an
  epilogue that overlaps the next tile's main loop, and stream-K: the same tiles with the MAC
  loop spread evenly over the SMs (waves = CTAs / SMs, not rounded up) plus
  `split_k_overhead_s` of fix-up when CTAs is not a multiple of SMs; the fastest candidate.

FP8 (variant "fp8"): TensorRT-LLM's path quantises A in a separate static-scale kernel, then
calls cuBLAS: + 3 b M K / (bandwidth * quantize_efficiency); C is 16-bit.

Power limit (structure `power_limit`, SGLang's tables): there the rate of large GEMMs falls with
K, read as the clocks dropping below boost under the board's power limit: every candidate's
compute is at least 2 b M N K / (peak * power_efficiency). The die heating over a benchmark's
bursts and its weight copies kept in L2 belong to the harness (measurements/harness.py:
`Conditions.burst_heat`, `weight_copies`); a query has neither.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ....hardware.schema import DTYPE_BYTES, Device
from ..base import SERVING, Conditions, KernelForm, Setting, register
from ..numerics import smooth_max
from ..params import Param

PARAMS = (
    Param("floor_s", "seconds", 1.5e-6, "launch floor: the time of the smallest kernel"),
    Param("compute_efficiency", "fraction", 0.8, "fraction of the tensor-core peak a busy SM "
          "sustains"),
    Param("memory_efficiency", "fraction", 0.85, "fraction of the DRAM bandwidth reached"),
    Param("l2_efficiency", "fraction", 0.35, "fraction of the (preset) L2 bandwidth reached by "
          "L2-resident operands"),
    Param("memory_latency_s", "seconds", 1e-6, "DRAM latency a kernel cannot overlap (pipeline "
          "fill and drain)"),
    Param("wave_overhead_s", "seconds", 8e-7, "per-wave CTA prologue and epilogue"),
    Param("k_step_latency_s", "seconds", 1e-7, "latency of one 64-deep K step a CTA cannot "
          "hide"),
    Param("split_k_overhead_s", "seconds", 2.5e-6, "reduction (split-K) or fix-up (stream-K) "
          "of partial tiles"),
    Param("quantize_efficiency", "fraction", 0.35, "fp8 only: bandwidth fraction of the "
          "activation quantisation kernel"),
)
POWER = Param("power_efficiency", "fraction", 0.75, "fraction of the dense tensor peak the "
              "board sustains under its power limit on the benchmark's random operands, once a "
              "GEMM runs long enough for the clocks to drop below boost")
POWER_FRAMEWORKS = ("sglang",)  # whose tables show the power-limited rate
CUTLASS_FRAMEWORKS = ("vllm", "sglang")  # whose FP8 GEMM is their own CUTLASS kernel (sm90+)
# Starts of the fit besides the initial values: the K-step latency and the per-wave overhead
# decide which candidate kernels win, so each combination of regimes is a separate basin.
FIT_STARTS = tuple({"k_step_latency_s": ks, "wave_overhead_s": wo}
                   for ks in (1e-9, 3e-8, 3e-7) for wo in (4e-7, 1.5e-6))

OVERLAP_EXPONENT = 2.5  # p of the smooth max of compute and memory time
AMPERE_TILES = ((64, 64), (64, 128), (128, 64), (128, 128), (64, 256), (256, 64), (128, 256),
                (256, 128))
HOPPER_TILES = ((64, 64), (64, 128), (128, 64), (128, 128), (64, 256), (128, 256), (256, 128))
SPLITS = (1, 2, 4, 8, 16)
MIN_SPLIT_K = 256  # a split-K slice shorter than this is not worth a reduction pass
K_STEP = 64
PARTIAL_BYTES = 4  # split-K partial sums are fp32, written once and read once
QUANT_BYTES = 3  # fp8 activation quantisation: read 2 bytes, write 1 per element
BIG_TILE_MIN_FILL = 0.75  # Ampere heuristic: largest tiles once they give >= 0.75 SMs of CTAs
BIG_TILE_MAX_K = 6144  # ... for K up to this (longer K: split-K kernels, fastest candidate)
PEAK_MARGIN = 1.05  # a kernel may not beat the datasheet peak by more than measurement noise

_cache: list = []  # geometry of the last few (device, dtype, column set, form structure)
_CACHE_SIZE = 4


def hopper_class(dev: Device) -> bool:
    """True for devices with Hopper/Blackwell-style persistent, stream-K GEMM kernels: those
    that declare sm_version 90 or above (hardware/identity.py)."""
    from ....hardware.identity import lookup
    return lookup(dev).kernel_generation in ("hopper", "blackwell")


def cutlass_fp8(setting: Setting) -> bool:
    """Whether `setting`'s GEMM is its framework's own FP8 CUTLASS kernel (gemm_cutlass.py):
    vLLM and SGLang on Hopper and Blackwell."""
    return (setting.variant.startswith("fp8") and setting.framework in CUTLASS_FRAMEWORKS
            and hopper_class(setting.dev))


def dtype_of(setting: Setting) -> str:
    return setting.variant if setting.variant in DTYPE_BYTES else "bf16"


def columns(cols: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
    m = np.asarray(cols["m"], float).reshape(-1)
    n = np.asarray(cols["n"], float).reshape(-1)
    k = np.asarray(cols["k"], float).reshape(-1)
    b = cols.get("batch")
    b = np.ones_like(m) if b is None else np.broadcast_to(np.asarray(b, float), m.shape)
    return m, n, k, b


def geometry(dev: Device, cols: Mapping[str, Any], dtype: str, variant: tuple,
             build: Callable[..., dict]) -> dict:
    """`build(dev, cols, dtype)` (everything that does not depend on the fitted constants),
    memoised per device, column set and `variant` (the form's structure and weight copies)."""
    arrays = tuple(cols.get(c) for c in ("m", "n", "k", "batch"))
    for key, copies, g in _cache:
        if key[0] is dev and key[1] == dtype and key[3] == variant and all(
                a is b for a, b in zip(key[2], arrays)) and all(
                c is None or np.array_equal(c, a) for c, a in zip(copies, arrays)):
            return g
    g = build(dev, cols, dtype)
    copies = tuple(None if a is None else np.array(a, copy=True) for a in arrays)
    _cache.append(((dev, dtype, arrays, variant), copies, g))
    del _cache[:-_CACHE_SIZE]
    return g


def resident(dev: Device, a_bytes, b_bytes, c_bytes, weight_copies: int) -> np.ndarray:
    """Rows whose benchmark weight copies and outputs all stay in L2 with the activation
    (never without copies)."""
    if not weight_copies:
        return np.zeros(np.shape(a_bytes), bool)
    return weight_copies * (b_bytes + c_bytes) + a_bytes <= dev.global_buffer.capacity_bytes


def power_time(dev: Device, flops: np.ndarray, power_efficiency: float | None, dtype: str,
               conditions: Conditions) -> np.ndarray:
    """The GEMM's useful flops at the power-limited tensor rate (0 without a power limit): a
    floor under the compute time of every candidate kernel. A benchmark's burst heating
    (`conditions.burst_heat`) lowers that rate further as the run lengthens, toward a hot
    steady state: t (1 + gain (1 - e^(-t / time_constant_s)))."""
    if power_efficiency is None:
        return np.zeros_like(flops)
    t = flops / (dev.matrix_rate(dtype) * power_efficiency)
    heat = conditions.burst_heat
    if heat is not None:
        t = t * (1.0 + heat.gain * -np.expm1(-t / heat.time_constant_s))
    return t


def flops(cols: Mapping[str, Any]) -> np.ndarray:
    batch = np.asarray(cols.get("batch", np.ones(len(cols["m"]))), float)
    return 2.0 * batch * np.asarray(cols["m"], float) * cols["n"] * cols["k"]


def shape_key(cols: Mapping[str, Any]) -> list[str]:
    return [f"{m},{n},{k}" for m, n, k in zip(cols["m"], cols["n"], cols["k"])]


class GemmForm(KernelForm):
    """What every GEMM form shares: its rows, their plausibility, the split key, the starts."""

    family = "gemm"

    def plausible(self, setting: Setting, cols, latency_s) -> np.ndarray:
        return flops(cols) / latency_s <= PEAK_MARGIN * setting.dev.matrix_rate(setting.variant)

    def implausible_note(self, setting: Setting) -> str:
        peak = setting.dev.matrix_rate(setting.variant)
        return f"faster than the {setting.variant} peak ({peak / 1e12:.0f} TFLOP/s)"

    def key(self, cols) -> list[str]:
        return shape_key(cols)

    def starts(self, setting: Setting, structure) -> tuple[dict[str, float], ...]:
        return FIT_STARTS


@dataclass(frozen=True)
class CublasStructure:
    """The structural choice of the cuBLAS GEMM form: whether the power-limited rate (POWER, module
    docstring) floors every candidate kernel's compute, as SGLang's tables show."""
    power_limit: bool = False  # the power-limited rate floors every candidate (POWER)


class Cublas(GemmForm):
    """cuBLAS's kernels (the module docstring): every GEMM but vLLM's and SGLang's FP8."""

    name = "gemm/cublas"
    Structure = CublasStructure

    def offered(self, setting: Setting) -> bool:
        return not cutlass_fp8(setting)

    def structures(self, setting: Setting, measured=None) -> tuple:
        return (CublasStructure(power_limit=setting.framework in POWER_FRAMEWORKS),)

    def params(self, setting: Setting, structure: CublasStructure,
               measured=None) -> tuple[Param, ...]:
        fp8 = dtype_of(setting).startswith("fp8")
        return tuple(q for q in PARAMS if fp8 or q.name != "quantize_efficiency") + (
            (POWER,) if structure.power_limit else ())

    def predict(self, setting: Setting, cols, constants, structure: CublasStructure,
                conditions: Conditions = SERVING) -> np.ndarray:
        dev, dtype, p = setting.dev, dtype_of(setting), constants
        copies = conditions.weight_copies
        g = geometry(dev, cols, dtype, ("cublas", copies),
                     lambda d, c, t: _build_geometry(d, c, t, copies))
        eff, kst, wo, sko = (p["compute_efficiency"], p["k_step_latency_s"],
                             p["wave_overhead_s"], p["split_k_overhead_s"])
        bw = dev.memory.bandwidth_bytes_per_s * p["memory_efficiency"]
        l2bw = dev.global_buffer_bandwidth_bytes_per_s * p["l2_efficiency"]

        comp = np.maximum(g["wave_work"] / eff, g["wave_steps"] * kst) + g["waves"] * wo
        per_split = comp.min(axis=1)  # (R, S): the best tile for every split
        if g["hopper"]:
            sk = (np.maximum(g["sk_work"] / eff, g["sk_steps"] * kst) + g["sk_waves"] * wo
                  + g["sk_fixup"] * sko).min(axis=1)
            compute = np.concatenate([per_split, sk[:, None]], axis=1)
            extra = np.concatenate([np.where(g["split"], sko + g["partial_bytes"] / bw, 0.0),
                                    np.zeros((len(sk), 1))], axis=1)
        else:
            big = np.where(g["big"], comp[:, :, 0], np.inf).min(axis=1)
            per_split[:, 0] = np.where(g["big_any"], big, per_split[:, 0])
            compute = per_split
            extra = np.where(g["split"], sko + g["partial_bytes"] / bw, 0.0)
        power = p["power_efficiency"] if structure.power_limit else None
        compute = np.maximum(compute, power_time(dev, g["flops"], power, dtype,
                                                 conditions)[:, None])
        memory = np.maximum(g["dram_bytes"] / bw, g["l2_bytes"] / l2bw) + p["memory_latency_s"]
        time = (smooth_max(compute, memory[:, None], OVERLAP_EXPONENT) + extra).min(axis=1)
        if "epilogue_bytes" in g:
            time = time + g["epilogue_bytes"] / bw
        if g["quant_bytes"] is not None:
            time = time + g["quant_bytes"] / (dev.memory.bandwidth_bytes_per_s
                                              * p["quantize_efficiency"])
        return p["floor_s"] + time


@functools.lru_cache(maxsize=2)
def _candidates(hopper: bool) -> tuple[np.ndarray, ...]:
    """The candidate kernels' grid, the same for every GEMM of a generation (read-only arrays):
    tiles (T, 2), tile rows and columns (1, T, 1), splits (1, 1, S), 2 x tile rows x tile
    columns (1, T, 1), the largest tiles (T,) and the splits that split (S,)."""
    tiles = np.array(HOPPER_TILES if hopper else AMPERE_TILES, float)
    tm, tn = tiles[None, :, 0, None], tiles[None, :, 1, None]
    sp = np.array(SPLITS, float)[None, None, :]
    area = tiles[:, 0] * tiles[:, 1]
    out = (tiles, tm, tn, sp, 2.0 * tm * tn, area >= area.max(), sp[0] > 1)
    for a in out:
        a.setflags(write=False)
    return out


def _build_geometry(dev: Device, cols, dtype: str, weight_copies: int) -> dict:
    M, N, K, B = columns(cols)
    ebytes = DTYPE_BYTES[dtype]
    obytes = max(ebytes, 2)  # fp8 GEMMs write a 16-bit output
    a_bytes, b_bytes, c_bytes = B * M * K * ebytes, B * K * N * ebytes, B * M * N * obytes
    cap = dev.global_buffer.capacity_bytes
    in_l2 = resident(dev, a_bytes, b_bytes, c_bytes, weight_copies)
    hopper = hopper_class(dev)
    tiles, tm, tn, sp, tile_flops, big, split = _candidates(hopper)
    m, n, k, b = (x[:, None, None] for x in (M, N, K, B))  # (R, 1, 1)
    sms = dev.core_count
    per_sm = dev.matrix_rate(dtype) / sms

    tiles_mn = b * np.ceil(m / tm) * np.ceil(n / tn)  # (R, T, 1)
    ctas = tiles_mn * sp
    waves = np.ceil(ctas / sms)
    kp = np.ceil(k / sp)  # (R, 1, S)
    ksteps = np.ceil(kp / K_STEP)
    work = tile_flops * kp / per_sm  # one CTA's main loop at the full per-SM rate
    valid = (sp == 1) | (kp >= MIN_SPLIT_K)
    g = {"hopper": hopper,
         "wave_work": np.where(valid, waves * work, np.inf),
         "wave_steps": waves * ksteps, "waves": waves}
    if hopper:  # stream-K: the same tiles, the MAC loop spread evenly over the SMs
        t2 = tiles_mn[:, :, 0]  # (R, T)
        frac = t2 / sms
        work_sk = 2.0 * tiles[None, :, 0] * tiles[None, :, 1] * K[:, None] / per_sm
        g["sk_work"] = frac * work_sk
        g["sk_steps"] = frac * np.ceil(K[:, None] / K_STEP)
        g["sk_waves"] = frac
        g["sk_fixup"] = (np.mod(t2, sms) != 0).astype(float)
    else:  # cuBLAS's big-tile heuristic
        qual = (big[None, :] & (tiles_mn[:, :, 0] >= BIG_TILE_MIN_FILL * sms)
                & (tiles[None, :, 0] <= M[:, None]) & (tiles[None, :, 1] <= N[:, None])
                & (K[:, None] <= BIG_TILE_MAX_K))
        g["big"] = qual
        g["big_any"] = qual.any(axis=1)

    hot = a_bytes <= cap  # activations re-read from L2
    dram = np.where(in_l2, 0.0, b_bytes + c_bytes) + np.where(hot, 0.0, a_bytes)
    l2 = a_bytes + b_bytes + c_bytes
    if not hopper:  # the epilogue's C store is timed after the main loop, not overlapped
        dram, l2 = dram - np.where(in_l2, 0.0, c_bytes), l2 - c_bytes
        g["epilogue_bytes"] = c_bytes
    g["dram_bytes"], g["l2_bytes"] = dram, l2
    g["partial_bytes"] = (B * M * N)[:, None] * sp[0] * 2 * PARTIAL_BYTES  # (R, S)
    g["split"] = split
    g["quant_bytes"] = B * M * K * QUANT_BYTES if dtype.startswith("fp8") else None
    g["flops"] = 2.0 * B * M * N * K
    return g


CUBLAS = register(Cublas())
