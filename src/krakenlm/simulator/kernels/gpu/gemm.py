"""GEMM (and batched GEMM) on a GPU: CUDA thread-block tiles in waves over the SMs.

C[b, M, N] = A[b, M, K] @ B[b, K, N] runs as thread blocks (CTAs), each computing an Mt x Nt
tile of C over a K range. A library (cuBLAS, CUTLASS) has a menu of kernels; the model builds
the menu of the device's architecture class and takes the kernel a library would run.

Candidates, for every tile (Mt, Nt) of the class and every K split s in 1, 2, 4, 8, 16:

    CTAs      = b * ceil(M / Mt) * ceil(N / Nt) * s
    waves     = ceil(CTAs / SMs)                 (the last wave may be partial)
    CTA time  = max(2 Mt Nt ceil(K/s) / (peak / SMs) / compute_efficiency,
                    ceil(ceil(K/s) / 64) * k_step_latency_s) + wave_overhead_s
    compute   = waves * CTA time

A split (s > 1) needs a K slice of at least 256 and costs `split_k_overhead_s` plus the fp32
partial sums written and read once. Hopper-class devices also have persistent stream-K kernels:
the same tiles with the MAC loop spread evenly over the SMs (waves = CTAs / SMs, not rounded
up), and a fix-up of split tiles costing `split_k_overhead_s` when CTAs is not a multiple of
SMs.

Memory: the weights B stream from DRAM; the activations A are re-read from L2 when they fit in
it (the measured benchmarks, like a transformer layer, read an activation that the previous
kernel or call left in L2), from DRAM otherwise; the output C goes to DRAM. Every byte also
crosses L2:

    memory = max(DRAM bytes / (bandwidth * memory_efficiency),
                 (A + B + C bytes) / (L2 bandwidth * l2_efficiency)) + memory_latency_s
    time   = floor_s + min over candidates of (compute^p + memory^p)^(1/p)  [+ split costs]

The p-norm (p = 2.5, OVERLAP_EXPONENT) is a smooth maximum: compute and memory overlap well
but not perfectly.

Architecture classes, told apart by the dense 16-bit tensor rate per SM and clock (Ampere 2048
flop/clk, Hopper 4096, Blackwell 8192; HOPPER_CLASS_FLOP_PER_CLK):
* Ampere class (cuBLAS sm80 kernels): tiles 64..256 x 64..256, data-parallel only (no
  stream-K), and the epilogue (C store) runs after each CTA's main loop, so the C write time
  adds to the kernel rather than overlapping. cuBLAS's heuristic is not the fastest candidate:
  for K <= BIG_TILE_MAX_K it takes its largest tiles (256x128 or 128x256) whenever they give
  at least BIG_TILE_MIN_FILL x SMs CTAs, even when that leaves a nearly empty last wave
  (n = k = 4096 on A100: m = 1024 takes 204 us, m = 768 104 us). Otherwise the fastest
  candidate is taken.
* Hopper class (sm90, sm100 kernels): warp-specialised persistent kernels, tiles up to
  128x256 / 256x128, stream-K, an epilogue that overlaps the next tile's main loop; the fastest
  candidate is taken.

FP8 (dtype "fp8"): the measured call also quantises the 16-bit activation A (read 2 bytes,
write 1 per element, a separate kernel): + 3 b M K / (bandwidth * quantize_efficiency). The
output C is 16-bit. That is TensorRT-LLM's FP8 path (a static-scale quantiser, then cuBLAS).
vLLM's and SGLang's FP8 GEMMs are different kernels, with a different quantiser: on Hopper and
Blackwell they take `library` = 1 (vLLM) or 2 (SGLang), modelled in gemm_cutlass.py (the tile
each framework's CUTLASS dispatch picks from M, waves without split-K or stream-K, a
quantisation kernel with one CTA per token row). `library` is a structural constant stored with
the fitted ones (0, cuBLAS, when absent); `tile_table` picks between four SGLang tile tables
on the fit half (gemm_cutlass.py; table 3, sm90 only, is sgl-kernel's dispatch as read).

The benchmark (aiconfigurator's collectors) times 5 (TensorRT-LLM) or 6 (vLLM, SGLang) copies
of the layer in turn, each with its own weights, and divides by the copies. When all the copies'
weights and outputs fit in L2 together with the activation (`weight_copies` x (B + C bytes) +
A bytes <= L2), the weights are read from L2, not DRAM. `weight_copies` (0, 5 or 6) is a
structural constant chosen on the fit half: it matters on L40S (96 MB of L2 in front of
864 GB/s of GDDR6; held-out 24.1 -> 19.7 % for TensorRT-LLM bf16); on the HBM parts the fit
half picks it for some tables, for a few tenths of a point. A real model's layer reads its
weights once per step, so the simulator calls `predict(..., warm_l2=False)`: the copies then
never fit, and only the benchmark is described by them.

Constants (fitted per device, framework and dtype on measured kernels, calibrate.py):
  floor_s               launch floor: the time of an empty kernel (fp8: two kernels)
  compute_efficiency    fraction of the tensor-core peak a busy SM sustains
  memory_efficiency     fraction of the DRAM bandwidth a streaming kernel reaches
  l2_efficiency         fraction of the device's L2 bandwidth (preset global_buffer) reached
  memory_latency_s      DRAM round trips a kernel cannot overlap: pipeline fill and drain
  wave_overhead_s       per-wave CTA prologue and epilogue
  k_step_latency_s      latency of one 64-deep K step a CTA cannot hide (narrow tiles, long K)
  split_k_overhead_s    reduction (split-K) or fix-up (stream-K) of partial tiles
  quantize_efficiency   (fp8 only) bandwidth fraction of the activation quantisation kernel
  quant_cta_s           (vLLM/SGLang FP8 only) GPU time per CTA of their quantisation kernel
  oob_row_s             (SGLang FP8 only) cost of zero-filled token rows (gemm_cutlass.py)
  power_efficiency      (SGLang tables only) fraction of the tensor peak sustained under the
                        board's power limit: every candidate's compute time is at least
                        t = 2 b M N K / (peak * power_efficiency)
  heat_s, heat_gain     (SGLang tables only) the power-limited rate falls as the die heats,
                        toward a hot steady state: the floor becomes
                        t (1 + heat_gain (1 - exp(-t / heat_s)))
Constants missing from `p` (a calibration written by an older version of this model) take
their initial values below; re-run `krakenlm sim calibrate` to refit them. The OPTIONAL ones are
the exception: absent, their term is absent (fit_setup offers them only to SGLang's tables).

Power-limited rate (`power_efficiency`, SGLang): the tile model's rate grows with K (fewer
prologues per flop), but in SGLang's tables the rate of large GEMMs falls with K: on the fit
half, M, N >= 4096, median 1133 -> 1067 -> 918 TFLOP/s for FP8 on H100 at K in (1024, 4096],
(4096, 8192], > 8192 (H200 1184 -> 1140 -> 1076; bf16 H100 720 -> 722 -> 710, H200 706 -> 689
-> 679). We read this as the clocks dropping below boost once a long GEMM holds the board at
its power limit (the collector's weights are uniform over the whole FP8 range: many toggling
bits), so the cap is a rate, not a tile property, and compute_efficiency is left to describe
short GEMMs at boost clocks. Refitting SGLang's gemm with it improved the fit half of every
entry on all six devices (H100 fp8 9.18 -> 8.38 %, with oob_row_s and tile_table 2; H200 bf16
8.35 -> 7.99 %; the fitted cap is 0.55-0.81 of the datasheet peak). vLLM's and TensorRT-LLM's
entries were not refitted with it and do not use it.

Heating (`heat_s`, SGLang): the power-limited rate of SGLang's tables also falls with how long
a GEMM runs: on the fit half, M, N >= 4096, K >= 2048, FP8 H100 median 1080 TFLOP/s for runs of
0.1-1 ms, 1069 for 1-5 ms, then 940, 783 and 670 for 5-10, 10-30 and > 30 ms (H200 1168, 1130,
1109, 917, 808; `python benchmarks/sim_sglang_gemm_tables.py`). We read it as the die heating
during the benchmark's burst (each shape is timed back to back, 6 copies x 9 passes): leakage
grows with temperature and the clocks at the power limit fall. The die reaches a hot steady
state, so the slowdown saturates: t (1 + heat_gain (1 - exp(-t / heat_s))). A first version
used the linear form t (1 + t / heat_s) (its first order), which fits runs up to ~30 ms but
grows without bound: the tables' longest H100 FP8 runs (180-380 ms, ~580 TFLOP/s) came out
2.5-4.6x too slow. heat_s is stated per kernel of such a burst, so a layer of a real model
(which runs many kernels in turn) is described only roughly by it. A100's entry gains nothing
from it and does not carry it.

The fit (calibrate.py) starts from FIT_STARTS as well as the initial values: the objective is
kinked (the fastest candidate changes with the constants) and Nelder-Mead from one start
stopped in a worse basin (A100 TensorRT-LLM bf16: 8.49 % on the fit half from the initial
values, 7.78 % from a start with a 0.3 us K-step latency).

Held-out MAPE (half the shapes of each table fitted, the other half scored) and what each piece
bought are in the report of the recalibration; the structure is evaluated as a handful of
arrays (rows x candidates), and the geometry of the shapes (everything that does not depend on
the constants) is kept for the last few column sets, so a fit re-evaluates only the constants'
arithmetic.
"""

from __future__ import annotations

import numpy as np

from ....hardware.schema import DTYPE_BYTES, Device
from ..numerics import smooth_max
from ..params import Param
from . import gemm_cutlass

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
CUTLASS_PARAMS = tuple(q for q in PARAMS if q.name != "split_k_overhead_s") + (
    gemm_cutlass.QUANT_CTA,)
POWER = Param("power_efficiency", "fraction", 0.75, "fraction of the dense tensor peak the "
              "board sustains under its power limit on the benchmark's random operands, once a "
              "GEMM runs long enough for the clocks to drop below boost")
HEAT = Param("heat_s", "seconds", 0.05, "thermal time constant of the power-limited rate: over "
             "a run of this length a GEMM's own heat takes the rate most of the way to its hot "
             "steady state (the die warms, leakage rises, the clocks at the power limit fall); "
             "stated per kernel of the benchmark's back-to-back bursts")
HEAT_GAIN = Param("heat_gain", "positive", 0.5, "how much slower the power-limited rate is once "
                  "the die has reached its hot steady state: the floor tends to t (1 + heat_gain)")
# Constants fitted only where fit_setup offers them (SGLang's tables); absent, the term is
# absent: every other calibration keeps its predictions.
OPTIONAL = (POWER.name, HEAT.name, HEAT_GAIN.name, gemm_cutlass.OOB_ROW.name)
POWER_FRAMEWORKS = ("sglang",)
_INITIAL = {q.name: q.initial for q in PARAMS + CUTLASS_PARAMS}
# Starts of the fit besides the initial values: the K-step latency and the per-wave overhead
# decide which candidate kernels win, so each combination of regimes is a separate basin.
FIT_STARTS = tuple({"k_step_latency_s": ks, "wave_overhead_s": wo}
                   for ks in (1e-9, 3e-8, 3e-7) for wo in (4e-7, 1.5e-6))
# Copies of the layer the collectors cycle through (collector/*/collect_gemm.py)
BENCHMARK_COPIES = {"trtllm": 5, "vllm": 6, "sglang": 6}

OVERLAP_EXPONENT = 2.5  # p of the smooth max of compute and memory time
HOPPER_CLASS_FLOP_PER_CLK = 3000  # dense 16-bit flop per SM and clock: A100 2048, H100 4096
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

_cache: list = []  # geometry of the last few (device, dtype, column set)
_CACHE_SIZE = 4


def hopper_class(dev: Device) -> bool:
    """True for devices with Hopper/Blackwell-style persistent, stream-K GEMM kernels."""
    rate = dev.matrix_flops_per_s.get("bf16") or dev.matrix_flops_per_s.get("fp16")
    if rate is None:
        return False
    return rate / dev.core_count / dev.frequency_hz >= HOPPER_CLASS_FLOP_PER_CLK


def fit_setup(dev: Device, framework: str, dtype: str
              ) -> tuple[tuple[Param, ...], tuple[dict[str, float], ...]]:
    """The constants to fit and the structural variants to try for one measured table: vLLM's
    and SGLang's FP8 GEMMs on Hopper/Blackwell are their CUTLASS kernels (gemm_cutlass.py),
    everything else cuBLAS; each with and without the benchmark's weight copies in L2."""
    library = 0
    if dtype.startswith("fp8") and hopper_class(dev):
        library = {"vllm": gemm_cutlass.VLLM, "sglang": gemm_cutlass.SGLANG}.get(framework, 0)
    base: list[dict[str, float]] = [{"library": float(library)}] if library else [{}]
    if library == gemm_cutlass.SGLANG:
        tables = (0, 1, 2) if gemm_cutlass.blackwell_class(dev) else (0, 1, 2, 3)
        base = [{**b, "tile_table": float(t)} for b in base for t in tables]
    copies = BENCHMARK_COPIES.get(framework, 0)
    structures = tuple({**b, "weight_copies": float(c)} for b in base
                       for c in sorted({0, copies}))
    params = CUTLASS_PARAMS if library else PARAMS
    if library == gemm_cutlass.SGLANG:
        params = params + (gemm_cutlass.OOB_ROW,)
    if framework in POWER_FRAMEWORKS:
        params = params + (POWER, HEAT, HEAT_GAIN)
    return params, structures


def _columns(cols: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    m = np.asarray(cols["m"], float).reshape(-1)
    n = np.asarray(cols["n"], float).reshape(-1)
    k = np.asarray(cols["k"], float).reshape(-1)
    b = cols.get("batch")
    b = np.ones_like(m) if b is None else np.broadcast_to(np.asarray(b, float), m.shape)
    return m, n, k, b


def _geometry(dev: Device, cols: dict[str, np.ndarray], dtype: str,
              variant: tuple[int, int, int]) -> dict:
    """Everything that does not depend on the fitted constants, memoised per column set and
    structural variant (library, tile_table, weight copies)."""
    arrays = tuple(cols.get(c) for c in ("m", "n", "k", "batch"))
    for key, copies, g in _cache:
        if key[0] is dev and key[1] == dtype and key[3] == variant and all(
                a is b for a, b in zip(key[2], arrays)) and all(
                c is None or np.array_equal(c, a) for c, a in zip(copies, arrays)):
            return g
    g = _build_geometry(dev, cols, dtype, variant)
    copies = tuple(None if a is None else np.array(a, copy=True) for a in arrays)
    _cache.append(((dev, dtype, arrays, variant), copies, g))
    del _cache[:-_CACHE_SIZE]
    return g


def _build_geometry(dev: Device, cols: dict[str, np.ndarray], dtype: str,
                    variant: tuple[int, int, int]) -> dict:
    M, N, K, B = _columns(cols)
    library, tile_table, weight_copies = variant
    ebytes = DTYPE_BYTES[dtype]
    obytes = max(ebytes, 2)  # fp8 GEMMs write a 16-bit output
    a_bytes, b_bytes, c_bytes = B * M * K * ebytes, B * K * N * ebytes, B * M * N * obytes
    cap = dev.global_buffer.capacity_bytes
    # the benchmark's weight copies and outputs all stay in L2 (weight_copies = 0: never)
    resident = (weight_copies * (b_bytes + c_bytes) + a_bytes <= cap) if weight_copies else \
        np.zeros(M.shape, bool)
    hopper = hopper_class(dev)
    if library and hopper:
        g = gemm_cutlass.build_geometry(dev, M, N, K, B, dtype, library, tile_table, resident)
        g["cutlass"] = True
        return g
    tiles = np.array(HOPPER_TILES if hopper else AMPERE_TILES, float)
    tm, tn = tiles[None, :, 0, None], tiles[None, :, 1, None]  # (1, T, 1)
    sp = np.array(SPLITS, float)[None, None, :]  # (1, 1, S)
    m, n, k, b = (x[:, None, None] for x in (M, N, K, B))  # (R, 1, 1)
    sms = dev.core_count
    per_sm = dev.matrix_rate(dtype) / sms

    tiles_mn = b * np.ceil(m / tm) * np.ceil(n / tn)  # (R, T, 1)
    ctas = tiles_mn * sp
    waves = np.ceil(ctas / sms)
    kp = np.ceil(k / sp)  # (R, 1, S)
    ksteps = np.ceil(kp / K_STEP)
    work = 2.0 * tm * tn * kp / per_sm  # one CTA's main loop at the full per-SM rate
    valid = (sp == 1) | (kp >= MIN_SPLIT_K)
    g = {"hopper": hopper, "cutlass": False,
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
        area = tiles[:, 0] * tiles[:, 1]
        big = area >= area.max()
        qual = (big[None, :] & (tiles_mn[:, :, 0] >= BIG_TILE_MIN_FILL * sms)
                & (tiles[None, :, 0] <= M[:, None]) & (tiles[None, :, 1] <= N[:, None])
                & (K[:, None] <= BIG_TILE_MAX_K))
        g["big"] = qual
        g["big_any"] = qual.any(axis=1)

    hot = a_bytes <= cap  # activations re-read from L2
    dram = np.where(resident, 0.0, b_bytes + c_bytes) + np.where(hot, 0.0, a_bytes)
    l2 = a_bytes + b_bytes + c_bytes
    if not hopper:  # the epilogue's C store is timed after the main loop, not overlapped
        dram, l2 = dram - np.where(resident, 0.0, c_bytes), l2 - c_bytes
        g["epilogue_bytes"] = c_bytes
    g["dram_bytes"], g["l2_bytes"] = dram, l2
    g["partial_bytes"] = (B * M * N)[:, None] * sp[0] * 2 * PARTIAL_BYTES  # (R, S)
    g["split"] = sp[0] > 1
    g["quant_bytes"] = B * M * K * QUANT_BYTES if dtype.startswith("fp8") else None
    g["flops"] = 2.0 * B * M * N * K
    return g


def _smooth_max(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return smooth_max(a, b, OVERLAP_EXPONENT)


def predict(dev: Device, cols: dict[str, np.ndarray], p: dict[str, float],
            dtype: str = "bf16", warm_l2: bool = True) -> np.ndarray:
    """Seconds per row of `cols` (arrays m, n, k and optionally batch). `warm_l2=True`
    reproduces the benchmark (its weight copies may all sit in L2, see `weight_copies`); a
    model's own layers call it with `warm_l2=False`."""
    p = {**_INITIAL, **p}
    variant = (int(p.get("library", 0)), int(p.get("tile_table", 0)),
               int(p.get("weight_copies", 0)) if warm_l2 else 0)
    g = _geometry(dev, cols, dtype, variant)
    if g["cutlass"]:
        return gemm_cutlass.predict(dev, g, p, _smooth_max, power_time(dev, g, p, dtype))
    eff, kst, wo, sko = (p["compute_efficiency"], p["k_step_latency_s"], p["wave_overhead_s"],
                         p["split_k_overhead_s"])
    bw = dev.memory.bandwidth_bytes_per_s * p["memory_efficiency"]
    l2bw = dev.global_buffer_bandwidth_bytes_per_s * p["l2_efficiency"]

    comp = np.maximum(g["wave_work"] / eff, g["wave_steps"] * kst) + g["waves"] * wo  # (R,T,S)
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
    compute = np.maximum(compute, power_time(dev, g, p, dtype)[:, None])
    memory = np.maximum(g["dram_bytes"] / bw, g["l2_bytes"] / l2bw) + p["memory_latency_s"]
    time = (_smooth_max(compute, memory[:, None]) + extra).min(axis=1)
    if "epilogue_bytes" in g:
        time = time + g["epilogue_bytes"] / bw
    if g["quant_bytes"] is not None:
        time = time + g["quant_bytes"] / (dev.memory.bandwidth_bytes_per_s
                                          * p["quantize_efficiency"])
    return p["floor_s"] + time


def power_time(dev: Device, g: dict, p: dict[str, float], dtype: str) -> np.ndarray:
    """The GEMM's useful flops at the power-limited tensor rate (0 without `power_efficiency`):
    a floor under the compute time of every candidate kernel. With `heat_s` and `heat_gain` the
    rate falls with that time t toward a hot steady state: t (1 + heat_gain (1 - e^(-t/heat_s)))."""
    if "power_efficiency" not in p:
        return np.zeros_like(g["flops"])
    t = g["flops"] / (dev.matrix_rate(dtype) * p["power_efficiency"])
    if "heat_gain" in p:  # saturating: the die reaches a hot steady state
        t = t * (1.0 + p["heat_gain"] * -np.expm1(-t / p["heat_s"]))
    elif "heat_s" in p:  # the first-order form (t << heat_s) of an older calibration
        t = t * (1.0 + t / p["heat_s"])
    return t


def flops(cols: dict[str, np.ndarray]) -> np.ndarray:
    batch = np.asarray(cols.get("batch", np.ones(len(cols["m"]))), float)
    return 2.0 * batch * np.asarray(cols["m"], float) * cols["n"] * cols["k"]


def shape_key(cols: dict[str, np.ndarray]) -> list[str]:
    return [f"{m},{n},{k}" for m, n, k in zip(cols["m"], cols["n"], cols["k"])]
