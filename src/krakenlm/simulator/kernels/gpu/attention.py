"""Fused attention on a GPU: prefill ("context") and decode ("generation") kernel forms.

Constants are fitted per device, framework and dtype on aiconfigurator-core's tables; rates,
L2 and SM count come from the hardware description. TensorRT-LLM's decode forms are in
trtllm_decode.py, FlashAttention-3's in fa3_decode.py.

Context attention (causal self-attention over a whole prompt, q_len = kv_len = isl)
----------------------------------------------------------------------------------
FlashAttention-2/3 and TensorRT-LLM's FMHA run one CTA (a *work item*) per tile of block_m query
rows of one head (or of one KV head's GQA group when the kernel packs it, FA3's PackGQA),
looping over block_n-key blocks up to the diagonal (prefill_tiles.py: the tile menus and their
sources):

    g         = heads / kv_heads if the kernel packs GQA else 1      (query heads per tile)
    tiles     = ceil(isl * g / block_m)                  (query tiles per sequence and head group)
    items     = batch * heads / g * tiles
    blocks_j  = ceil(min(ceil(j block_m / g), isl) / block_n)   (key blocks tile j visits)
    t_block   = block_m * block_n * (4 head_dim / (peak / SMs * mma_efficiency) + softmax_s)
    compute   = max(ceil(items / SMs) * (item_s + mean_j blocks_j * t_block),  (waves of average
                    item_s + max_j blocks_j * t_block)                          tiles; the longest)
    memory    = batch * isl * head_dim * bytes * (2 heads + 2 kv_heads * kv_passes)
                / (bandwidth * memory_efficiency)
    time      = floor_s + smooth_max(compute, memory; p = overlap_exponent)
                [+ batch * isl * min(kv_heads * head_dim, 512) * cache_write_thread_s / SMs]

`softmax_s` is the online softmax's fixed cost per score element beside the MMAs' 4 head_dim
FLOPs, so one parameter set covers every head_dim. K and V cross HBM `kv_passes` times (the
read plus the measured op's cache write, RoPE, TRT-LLM's QKV preprocessing). The tile shape
(`block_m`, `kv_tile`) and GQA packing (`gqa_packing`) are structural (CONTEXT_MENUS per
framework, each fitted in turn). The L40S collectors replay the op on the same tensors: a
footprint that fits the L2 streams at the L2's bandwidth under the harness's
`Conditions.warm_replay` (measurements/harness.py), never in a query.

vLLM times its KV-cache write with the attention (structure `cache_write`):
`reshape_and_cache_flash` launches one latency-bound CTA per token with min(kv_heads x
head_dim, 512) threads; a model graph that writes the cache in an op of its own passes the
column `cache_write` False. TensorRT-LLM runs its FP8 context FMHA whenever the KV cache is FP8
on Hopper and Blackwell, not on Ada (`context_kernel_dtype`).

Generation attention (one new token per sequence over kv_len cached tokens)
--------------------------------------------------------------------------
FlashDecoding / split-KV (`generation/smooth`): a CTA handles one (sequence, KV head) -- the
`group = heads / kv_heads` query heads of a GQA group share one read of K and V -- and, when
there are fewer such pairs than SMs, a slice of the sequence of at least DECODE_CHUNK keys:

    splits    = clip(floor(SMs / (batch * kv_heads)), 1, ceil(kv_len / DECODE_CHUNK))
    items     = batch * kv_heads * splits
    chunk     = ceil(ceil(kv_len / splits) / DECODE_BLOCK) * DECODE_BLOCK   (keys per CTA)
    item      = (mha_item_s if group == 1 else item_s)
                + chunk * head_dim * 2 * kv_bytes / sm_bandwidth
    exec      = ceil(items / SMs) * item + items * group * head_s / SMs
    kv        = batch * kv_heads * kv_len * head_dim * 2 * kv_bytes
    time      = floor_s + smooth_max(exec, kv / (HBM bandwidth * memory_efficiency);
                                     p = overlap_exponent)

The per-query-head work (`head_s`) runs in parallel warps: throughput, not latency. MHA has
its own CTA latency (frameworks switch kernels there). Under the benchmark's warm replay a KV
cache that fits the L2 is read at HBM x memory_efficiency x (1 + l2_gain) (`kv_bandwidth`).

vLLM and SGLang decode with FlashAttention's split-KV kernels (`generation/flash-splitkv`):

    tiles     = batch * kv_heads * ceil(group / SPLIT_Q_ROWS)
    slots     = SMs * ctas_per_sm                        (CTAs resident at once)
    splits    = 1 if tiles >= SPLIT_BUSY * slots, else the fewest s <= min(slots, blocks,
                SPLIT_MAX) whose last wave tiles * s / slots is filled within SPLIT_EFFICIENCY
                of the best s, counting only s that change the blocks per split (`splitkv_count`)
    floor     = floor_s + (splits > 1) * multiblock_s    (the combine kernel of the partials)
    exec      = ceil(items / slots) * item + items * group * head_s / SMs

with item, kv and bandwidth as in the smooth form; `ctas_per_sm` (1 or 2) and `split_mha` are
structural. Structure `fa2_swap` is FlashAttention-2's varlen decode (vllm_flash_attn,
flash_api.cpp mha_varlen_fwd; vLLM on A100): 2 CTAs per SM, MHA never split, and GQA query
heads swapped into the rows of one tile (seqlenq_ngroups_swapped), which copies q and the
output unless the batch or the KV heads are 1 (`swap_copy_s`). Generation forms are fitted
within their device's ceilings (`generation_ceilings`).

Rows of other kernels (`supported`: sliding windows, head_dim > 256, fallbacks) and rows
faster than the device allows (`plausible`; A100 TensorRT-LLM 1.0.0 has GQA decode rows up to
1.69x the HBM bandwidth) are left out of the fits.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ....hardware.schema import DTYPE_BYTES, Device
from ..base import SERVING, Conditions, KernelForm, Setting, one_of, register
from ..numerics import smooth_max
from ..params import BOOST_MARGIN, Param, l2_over_dram, sm_load_bytes_per_s, with_ceilings
from . import prefill_tiles as tiles
from .gemm import hopper_class

BLOCK_M = tiles.BLOCK_M  # default query rows per prefill CTA (menus: prefill_tiles.py)
BLOCK_N = tiles.BLOCK_N  # default keys per step of a prefill CTA's inner loop
DECODE_CHUNK = 256  # fewest keys a split-KV decode CTA is given
DECODE_BLOCK = 128  # keys per step of a decode CTA (a CTA streams whole blocks)
PLAUSIBLE_MARGIN = BOOST_MARGIN  # boost clocks reach ~1.08x the datasheet peaks


def sm90(dev: Device) -> bool:
    """Hopper: a device that declares sm_version 90-99 (hardware/identity.py)."""
    from ....hardware.identity import lookup
    return lookup(dev).kernel_generation == "hopper"


def _col(cols: dict, name: str) -> np.ndarray:
    return np.atleast_1d(np.asarray(cols[name], dtype=float))


def kv_len(cols: dict) -> np.ndarray:
    """Cached tokens per row: `kv_len`, or the table's isl + step."""
    if "kv_len" in cols:
        return _col(cols, "kv_len")
    return _col(cols, "isl") + (_col(cols, "step") if "step" in cols else 0.0)


def _key(cols: dict, names: tuple[str, ...]) -> list[str]:
    present = [np.atleast_1d(np.asarray(cols[n])) for n in names if n in cols]
    return [",".join(str(v) for v in row) for row in zip(*present)]


# ---------------------------------------------------------------------------------- context
CONTEXT_PARAMS = (
    Param("floor_s", "seconds", 1e-5,
          "fixed cost of the op: launches, QKV preprocessing, RoPE and KV-cache write setup"),
    Param("mma_efficiency", "fraction", 0.7,
          "fraction of the tensor-core peak the QK^T and PV MMAs of a tile reach"),
    Param("softmax_s", "seconds", 2e-11,
          "per-SM time per score element for the online softmax (exp, row max, rescale)"),
    Param("item_s", "seconds", 1e-6,
          "fixed time of one CTA besides its MMAs: launch, Q load, first K/V tile, epilogue"),
    Param("memory_efficiency", "fraction", 0.7, "fraction of the HBM bandwidth reached"),
    Param("kv_passes", "positive", 2.0,
          "HBM passes over K and V per token (attention read, KV-cache write, RoPE)"),
    Param("overlap_exponent", "positive", 1.5,
          "p of the smooth maximum of compute and memory time (1: sum, large: max)"),
)
CACHE_WRITE = Param("cache_write_thread_s", "seconds", 2e-9,
                    "SM time per thread of vLLM's KV-cache write, one CTA of min(kv_heads x "
                    "head_dim, 512) threads per token (the CTA's latency over the threads an SM "
                    "holds at once)")
CACHE_WRITE_FRAMEWORKS = ("vllm",)  # whose context op times its KV-cache write kernel too


@dataclass(frozen=True)
class ContextStructure:
    """A prefill kernel's tiles (prefill_tiles.py) and whether the op writes the KV cache."""

    block_m: int = BLOCK_M  # query rows per tile
    kv_tile: int = 0  # keys x head_dim of one K tile (0: fixed BLOCK_N-key blocks)
    gqa_packing: str = "none"  # "none", "packed" or "single_query" (prefill_tiles.PACKINGS)
    cache_write: bool = False  # vLLM's reshape_and_cache_flash timed with the op

    def __post_init__(self) -> None:
        one_of("gqa_packing", self.gqa_packing, tiles.PACKINGS)
        one_of("block_m", self.block_m, (64, 128, 192))
        if self.kv_tile < 0:
            raise ValueError(f"kv_tile must be 0 or more, not {self.kv_tile}")


# Tile menus tried per framework (prefill_tiles.py has their sources); the fit half picks one.
# Each list keeps the 128 x 128 forms, so no entry can lose to the form it replaces.
_SQUARE = tuple((128, 0, p) for p in ("none", "packed"))
# fmha_v2: 64-row Q steps on Ampere/Ada, 128 (two warpgroups) on Hopper; 256/128/64 keys
_FMHA_V2 = tuple((m, 16384, p) for m in (64, 128) for p in ("none", "packed"))
# TensorRT-LLM's FMHA as vLLM (through FlashInfer) and SGLang (trtllm_mha) call it on Blackwell
_TRTLLM_BLACKWELL = tuple(v for v in _FMHA_V2 if v[0] == 128)
# FA2's split-KV kernel (vLLM's paged cache, Ampere and Ada): 64 rows, 256/128/64 keys, GQA
# swapped into the rows only for single-token queries
_FA2_SPLIT = ((64, 16384, "single_query"),)
# FA3's sm8x path (SGLang on Ampere): 128 x 64 at head_dim 128, PackGQA (forced below sm90)
_FA3_SM8X = ((128, 8192, "packed"),)
CONTEXT_MENUS: dict[str, tuple[tuple[int, int, str], ...]] = {
    "trtllm": _SQUARE + _FMHA_V2,
    "vllm": _SQUARE + _FA2_SPLIT + _TRTLLM_BLACKWELL,  # FA3 on Hopper: the 128 x 128 form
    "sglang": _SQUARE + _FA3_SM8X + _TRTLLM_BLACKWELL,
}
# Backends a framework runs for some context rows besides its prefill kernel: SGLang's Triton
# fallback (head_dim 64/192 on L40S, 192/256 on B200), vLLM-FlashInfer's decode kernel for
# single-token queries (B200). Their rows are left out when the prefill kernel is measured too.
CONTEXT_OTHER_KERNELS = ("triton", "decode")
CONTEXT_KEY = ("batch", "isl", "heads", "kv_heads", "head_dim", "window")


def context_kernel_dtype(framework: str, dtype: str, kv_dtype: str,
                         dev: Device | None = None) -> str:
    """The dtype the context kernel computes in: TRT-LLM runs FP8 FMHA with an FP8 KV cache on
    Hopper and Blackwell (`dev` None: assumed), not on Ada."""
    if dtype == "fp8":
        return "fp8"
    if framework == "trtllm" and kv_dtype == "fp8" and (dev is None or hopper_class(dev)):
        return "fp8"
    return dtype


def causal_pairs(isl, window=None) -> np.ndarray:
    """(query, key) pairs of causal attention over isl tokens, within a sliding window if > 0."""
    s = np.atleast_1d(np.asarray(isl, float))
    full = s * (s + 1) / 2
    if window is None:
        return full
    w = np.atleast_1d(np.asarray(window, float))
    windowed = w * (w + 1) / 2 + (s - w) * w
    return np.where((w > 0) & (w < s), windowed, full)


def context_flops(cols: dict) -> np.ndarray:
    """Useful FLOPs of causal attention (QK^T and PV), counting a sliding window if present."""
    b, h, d = (_col(cols, k) for k in ("batch", "heads", "head_dim"))
    return 4.0 * b * h * d * causal_pairs(cols["isl"], cols.get("window"))


class FlashContext(KernelForm):
    """Causal prefill by query tiles (the module docstring): FlashAttention-2/3, TensorRT-LLM's
    fmha_v2, as each framework's tile menu reads."""

    family = "context_attention"
    name = "context/flash"
    Structure = ContextStructure

    def structures(self, setting: Setting, measured=None) -> tuple:
        write = setting.framework in CACHE_WRITE_FRAMEWORKS
        return tuple(ContextStructure(m, t, p, write)
                     for m, t, p in CONTEXT_MENUS.get(setting.framework, _SQUARE))

    def params(self, setting: Setting, structure: ContextStructure,
               measured=None) -> tuple[Param, ...]:
        return CONTEXT_PARAMS + ((CACHE_WRITE,) if structure.cache_write else ())

    def supported(self, setting: Setting, cols) -> np.ndarray:
        """No sliding window, head_dim <= 256, FlashAttention-class kernels (not SGLang's
        Triton fallback, nor its padded head_dim 192; the module docstring)."""
        window = np.asarray(cols["window"]) if "window" in cols else 0
        head_dim = np.asarray(cols["head_dim"])
        ok = (window == 0) & (head_dim <= 256)
        if "kernel" in cols:  # one kernel per fit: fallbacks go when the main kernel is measured
            other = np.array([any(w in str(k).lower() for w in CONTEXT_OTHER_KERNELS)
                              for k in np.atleast_1d(cols["kernel"])])
            if not other.all():
                ok = ok & ~other
        if setting.framework == "sglang":  # FA3 at head_dim 192 adds a fixed ~7 us pass
            ok = ok & ~((head_dim == 192) & np.isin(np.atleast_1d(cols.get("kernel", "fa3")),
                                                    ("fa3", "flash_attention")))
        return ok

    def unsupported_note(self, setting: Setting) -> str:
        return ("not this kernel (sliding window, head dim > 256, Triton fallback, SGLang's "
                "padded head dim 192)")

    def plausible(self, setting: Setting, cols, latency_s) -> np.ndarray:
        """False for rows whose implied FLOP rate exceeds the variant's tensor peak by the
        margin."""
        rate = context_flops(cols) / np.atleast_1d(np.asarray(latency_s, float))
        return rate <= PLAUSIBLE_MARGIN * setting.dev.matrix_rate(setting.variant)

    def implausible_note(self, setting: Setting) -> str:
        return "faster than the tensor peak allows"

    def key(self, cols) -> list[str]:
        """Shape key for the split (dtype left out: a shape is in the same half for every
        dtype, framework and device)."""
        return _key(cols, CONTEXT_KEY)

    def predict(self, setting: Setting, cols, constants, structure: ContextStructure,
                conditions: Conditions = SERVING) -> np.ndarray:
        """Seconds per row of `cols` (batch, isl, heads, kv_heads, head_dim; optionally
        cache_write, False where the graph writes the KV cache in an op of its own); causal,
        no window. The variant is the kernel's compute dtype (`context_kernel_dtype`)."""
        dev, p, s_ = setting.dev, constants, structure
        b, s, h, kvh, d = (_col(cols, k) for k in ("batch", "isl", "heads", "kv_heads",
                                                     "head_dim"))
        nbytes = DTYPE_BYTES[setting.variant]
        sms = dev.core_count
        per_sm = dev.matrix_rate(setting.variant) / sms
        bm = s_.block_m
        bn = tiles.block_n(d, s_.kv_tile)
        g = tiles.query_group(s, h, kvh, s_.gqa_packing)
        n_tiles, mean_blocks, max_blocks = tiles.causal_tiles(s, g, bm, bn)
        items = b * (h / g) * n_tiles
        t_block = bm * bn * (4 * d / (per_sm * p["mma_efficiency"]) + p["softmax_s"])
        compute = np.maximum(np.ceil(items / sms) * (p["item_s"] + mean_blocks * t_block),
                             p["item_s"] + max_blocks * t_block)
        bandwidth = dev.memory.bandwidth_bytes_per_s
        if conditions.warm_replay:  # the benchmark replays the op on the same tensors
            footprint = b * s * d * nbytes * (2 * h + 4 * kvh)  # Q, O, K, V and their cache copy
            bandwidth = np.where(footprint <= dev.global_buffer.capacity_bytes,
                                 dev.global_buffer_bandwidth_bytes_per_s, bandwidth)
        memory = b * s * d * nbytes * (2 * h + 2 * kvh * p["kv_passes"]) / (
            bandwidth * p["memory_efficiency"])
        time = p["floor_s"] + smooth_max(compute, memory, p["overlap_exponent"])
        if s_.cache_write:  # vLLM: its own kernel, one CTA per token
            write = b * s * tiles.cache_write_threads(kvh, d) * p["cache_write_thread_s"] / sms
            if "cache_write" in cols:
                write = np.where(np.asarray(cols["cache_write"], bool), write, 0.0)
            time = time + write
        return time


FLASH_CONTEXT = register(FlashContext())


# ------------------------------------------------------------------------------- generation
GENERATION_PARAMS = (
    Param("floor_s", "seconds", 7e-6, "fixed cost of the op: launch(es), split-KV combine"),
    Param("item_s", "seconds", 3e-6,
          "fixed time of one decode CTA (GQA kernel): setup, Q load, reduction, epilogue"),
    Param("mha_item_s", "seconds", 2e-6,
          "fixed time of one decode CTA when group == 1 (frameworks switch kernel for MHA)"),
    Param("head_s", "seconds", 5e-8,
          "SM time per query head a CTA serves (throughput, not latency: warps run in parallel)"),
    Param("sm_bandwidth", "positive", 6e10, "bytes/s one CTA streams from memory"),
    Param("memory_efficiency", "fraction", 0.9, "fraction of the HBM bandwidth reached"),
    Param("l2_gain", "positive", 0.5,
          "how much faster than HBM an L2-resident KV cache is read (1 + l2_gain times)"),
    Param("overlap_exponent", "positive", 1.5,
          "p of the smooth maximum of CTA latency chain and bandwidth time"),
)
GENERATION_KEY = ("batch", "isl", "step", "kv_len", "heads", "kv_heads", "head_dim", "window")
# Serialising a kernel's softmax with its MMAs (FA3's FP8 build at head_dim > 192) at most adds
# the softmax's time to the MMAs': the key loop gets at most this much slower.
SERIAL_GAIN_CEILING = 1.0


def generation_ceilings(dev: Device) -> dict[str, float]:
    """Upper limits no fit may pass, from the device's description: a decode CTA streams at
    most its SM's L1 load path, an L2-resident KV cache at most 1 + l2_gain <= L2 / DRAM
    bandwidth (both with the boost margin)."""
    sm_load = sm_load_bytes_per_s(dev)
    return {"sm_bandwidth": sm_load, "mha_sm_bandwidth": sm_load,
            "l2_gain": max(l2_over_dram(dev) - 1.0, 0.1), "serial_gain": SERIAL_GAIN_CEILING}


def generation_bytes(cols: dict, kv_dtype: str = "bf16") -> np.ndarray:
    """K and V bytes one decode step must read (within a sliding window if present)."""
    b, kvh, d = (_col(cols, k) for k in ("batch", "kv_heads", "head_dim"))
    L = kv_len(cols)
    if "window" in cols:
        w = _col(cols, "window")
        L = np.where((w > 0) & (w < L), w, L)
    if "kv_dtype" in cols:
        nbytes = np.array([DTYPE_BYTES[str(x)] for x in np.atleast_1d(cols["kv_dtype"])], float)
    else:
        nbytes = DTYPE_BYTES[kv_dtype]
    return b * kvh * L * d * 2 * nbytes


def kv_bandwidth(dev: Device, kv_bytes, p, conditions: Conditions) -> np.ndarray:
    """The bandwidth a decode step reads its KV cache at: HBM x memory_efficiency, x (1 +
    l2_gain) for a cache that fits the L2 when the benchmark replays it warm."""
    hbm = dev.memory.bandwidth_bytes_per_s * p["memory_efficiency"]
    if not conditions.warm_replay:
        return hbm
    return np.where(kv_bytes <= dev.global_buffer.capacity_bytes, hbm * (1 + p["l2_gain"]), hbm)


class GenerationForm(KernelForm):
    """What every generation-attention form shares: its rows, their plausibility, the split
    key, the device's ceilings on its constants."""

    family = "generation_attention"
    frameworks: tuple[str, ...] = ()

    def offered(self, setting: Setting) -> bool:
        return setting.framework in self.frameworks

    def bounded(self, setting: Setting, params: tuple[Param, ...]) -> tuple[Param, ...]:
        return with_ceilings(params, generation_ceilings(setting.dev))

    def supported(self, setting: Setting, cols) -> np.ndarray:
        """Rows these forms describe (the module docstring: the kernel switches left out)."""
        head_dim = np.asarray(cols["head_dim"])
        ok = head_dim <= 256
        if "window" in cols:
            ok = ok & (np.asarray(cols["window"]) == 0)
        if setting.framework == "trtllm":  # XQA serves groups <= 32; larger ones fall back
            ok = ok & (np.asarray(cols["heads"]) // np.asarray(cols["kv_heads"]) <= 32)
        if setting.framework == "sglang":  # head_dim 192 is padded by an extra pass
            ok = ok & (head_dim != 192)
        return ok

    def unsupported_note(self, setting: Setting) -> str:
        return "not this kernel (sliding window, head dim > 256, fallback kernels)"

    def plausible(self, setting: Setting, cols, latency_s) -> np.ndarray:
        """False for rows reading K/V faster than PLAUSIBLE_MARGIN x the bandwidth of the
        memory they come from (the L2 for a cache that fits it: the benchmark replays warm)."""
        dev = setting.dev
        kv = generation_bytes(cols, setting.variant)
        bandwidth = np.where(kv <= dev.global_buffer.capacity_bytes,
                             dev.global_buffer_bandwidth_bytes_per_s,
                             dev.memory.bandwidth_bytes_per_s)
        return kv / np.atleast_1d(np.asarray(latency_s, float)) <= PLAUSIBLE_MARGIN * bandwidth

    def implausible_note(self, setting: Setting) -> str:
        return "faster than the memory the KV cache comes from allows"

    def key(self, cols) -> list[str]:
        return _key(cols, GENERATION_KEY)


def decode_columns(cols: dict) -> tuple[np.ndarray, ...]:
    """(batch, heads, kv_heads, head_dim, kv_len) as float arrays."""
    return (*(_col(cols, k) for k in ("batch", "heads", "kv_heads", "head_dim")), kv_len(cols))


def split_time(setting: Setting, cols, p, splits_of, conditions: Conditions, *,
               slots_per_sm: int = 1, multiblock: bool = False) -> tuple[np.ndarray, ...]:
    """The smooth form's time (module docstring) with `splits_of(b, kvh, group, L)` splits per
    (sequence, KV head), `slots_per_sm` resident CTAs per SM and, with `multiblock`, the
    combine kernel's launch when a row splits. Returns (time, group, b, kvh)."""
    dev = setting.dev
    b, h, kvh, d, L = decode_columns(cols)
    nbytes = DTYPE_BYTES[setting.variant]
    sms = dev.core_count
    group = h / kvh
    pairs = b * kvh
    mha = group == 1
    splits = splits_of(b, kvh, group, L)
    items = pairs * splits
    chunk = np.ceil(np.ceil(L / splits) / DECODE_BLOCK) * DECODE_BLOCK
    stream_s = chunk * d * 2 * nbytes
    item = np.where(mha, p["mha_item_s"], p["item_s"]) + stream_s / p["sm_bandwidth"]
    floor_s = p["floor_s"] + (np.where(splits > 1, p["multiblock_s"], 0.0) if multiblock else 0.0)
    slots = sms * slots_per_sm  # CTAs that run at once
    exec_s = np.ceil(items / slots) * item + items * group * p["head_s"] / sms
    kv = b * kvh * L * d * 2 * nbytes
    bandwidth = kv_bandwidth(dev, kv, p, conditions)
    return floor_s + smooth_max(exec_s, kv / bandwidth, p["overlap_exponent"]), group, b, kvh


class SmoothDecode(GenerationForm):
    """FlashDecoding with floor(SMs / pairs) splits (the module docstring): frameworks without
    a form of their own."""

    name = "generation/smooth"

    def offered(self, setting: Setting) -> bool:
        return setting.framework not in ("trtllm", *SPLITKV_FRAMEWORKS)

    def params(self, setting: Setting, structure, measured=None) -> tuple[Param, ...]:
        return self.bounded(setting, GENERATION_PARAMS)

    def predict(self, setting: Setting, cols, constants, structure,
                conditions: Conditions = SERVING) -> np.ndarray:
        sms = setting.dev.core_count

        def splits(b, kvh, group, L):
            return np.clip(np.floor(sms / (b * kvh)), 1, np.ceil(L / DECODE_CHUNK))

        return split_time(setting, cols, constants, splits, conditions)[0]


SMOOTH_DECODE = register(SmoothDecode())


# FlashAttention's split-KV form (vLLM, SGLang; see the module docstring)
SPLITKV_FRAMEWORKS: tuple[str, ...] = ("vllm", "sglang")
MULTIBLOCK = Param("multiblock_s", "seconds", 4e-6,
                   "extra fixed cost of a launch split along the cache (combine kernel of the "
                   "partials)")
SWAP_COPY = Param("swap_copy_s", "seconds", 3e-6,
                  "FlashAttention-2's GQA decode: the two copy kernels that transpose the query "
                  "heads into rows and the output back (fa2_swap only)")
SPLIT_MAX = 128  # most splits the heuristic considers
SPLIT_BUSY = 0.8  # tiles >= this fraction of the slots: no split
SPLIT_EFFICIENCY = 0.85  # fewest splits whose wave efficiency is within this of the best
SPLIT_Q_ROWS = 64  # query rows of one split-KV tile (the query heads of a group are its rows)


@dataclass(frozen=True)
class SplitKVStructure:
    """The split heuristic's CTA slots per SM, whether MHA rows split, FA2's swapped varlen
    decode (the module docstring)."""

    ctas_per_sm: int = 1
    split_mha: bool = True
    fa2_swap: bool = False

    def __post_init__(self) -> None:
        one_of("ctas_per_sm", self.ctas_per_sm, (1, 2))


# tried in turn (lowest fit-half error wins); the last is FlashAttention-2's varlen decode as
# its source states it (flash_api.cpp, mha_varlen_fwd: "128 threads per block")
SPLITKV_STRUCTURES = tuple(SplitKVStructure(c, m) for c in (1, 2) for m in (False, True)) + (
    SplitKVStructure(2, False, True),)


class FlashSplitKV(GenerationForm):
    """FlashAttention's split-KV decode (vLLM, SGLang): splits by wave efficiency."""

    name = "generation/flash-splitkv"
    Structure = SplitKVStructure
    frameworks = SPLITKV_FRAMEWORKS

    def structures(self, setting: Setting, measured=None) -> tuple:
        return SPLITKV_STRUCTURES

    def params(self, setting: Setting, structure: SplitKVStructure,
               measured=None) -> tuple[Param, ...]:
        return self.bounded(setting, GENERATION_PARAMS + (MULTIBLOCK,) + (
            (SWAP_COPY,) if structure.fa2_swap else ()))

    def predict(self, setting: Setting, cols, constants, structure: SplitKVStructure,
                conditions: Conditions = SERVING) -> np.ndarray:
        slots = setting.dev.core_count * structure.ctas_per_sm

        def splits(b, kvh, group, L):
            n = splitkv_count(slots, b * kvh * np.ceil(group / SPLIT_Q_ROWS), L)
            return n if structure.split_mha else np.where(group == 1, 1.0, n)

        t, group, b, kvh = split_time(setting, cols, constants, splits, conditions,
                                      slots_per_sm=structure.ctas_per_sm, multiblock=True)
        if structure.fa2_swap:  # q and the output transposed by copies
            t = t + np.where((group > 1) & (b >= 2) & (kvh >= 2), constants["swap_copy_s"], 0.0)
        return t


FLASH_SPLITKV = register(FlashSplitKV())


def splitting_mha(found: tuple) -> tuple:
    """(entry, framework) of a split-KV decode table as an engine whose decode kernel also
    splits MHA rows runs it (profile `attention.decode_splits_mha`): the same constants with
    structure `split_mha` true. vLLM V0 decodes with FA2's `flash_attn_with_kvcache`
    (`mha_fwd_kvcache` calls `set_params_splitkv`, num_splits 0 = the heuristic, for every head
    layout) or PagedAttention v2; vLLM V1 on A100 runs FA2's varlen kernel, which splits only
    when GQA heads are swapped into the query rows. Other forms and structures are returned
    as they are."""
    entry, framework = found
    s = entry.structure
    if not isinstance(s, SplitKVStructure) or s.split_mha:
        return found
    return dataclasses.replace(entry, structure=dataclasses.replace(s, split_mha=True)), framework


def splitkv_count(slots: float, tiles, kv_len) -> np.ndarray:
    """See `_splitkv_unique`; evaluated once per distinct (tiles, kv_len) (fits call it often)."""
    tiles = np.atleast_1d(np.asarray(tiles, float))
    kv_len = np.atleast_1d(np.asarray(kv_len, float))
    tiles, kv_len = np.broadcast_arrays(tiles, kv_len)
    shapes, inverse = np.unique(np.stack([tiles, kv_len], axis=1), axis=0, return_inverse=True)
    return _splitkv_unique(slots, shapes[:, 0], shapes[:, 1])[inverse.reshape(-1)]


def _splitkv_unique(slots: float, tiles: np.ndarray, kv_len: np.ndarray) -> np.ndarray:
    """Splits per tile by wave efficiency: the module docstring's `splits` of
    `generation/flash-splitkv`."""
    blocks = np.ceil(kv_len / DECODE_BLOCK)
    s = np.arange(1, SPLIT_MAX + 1, dtype=float)[None, :]
    waves = tiles[:, None] * s / slots
    efficiency = waves / np.ceil(waves)
    # s blocks-per-split identical to s - 1 would only add CTAs with nothing more to overlap
    distinct = (s == 1) | (np.ceil(blocks[:, None] / s) != np.ceil(blocks[:, None] / np.maximum(s - 1, 1)))
    allowed = distinct & (s <= np.minimum(slots, blocks)[:, None])
    efficiency = np.where(allowed, efficiency, 0.0)
    good = efficiency >= SPLIT_EFFICIENCY * efficiency.max(axis=1, keepdims=True)
    first = s[0, np.argmax(good & allowed, axis=1)]
    return np.where(tiles >= SPLIT_BUSY * slots, 1.0, first)
