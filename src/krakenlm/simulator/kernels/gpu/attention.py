"""Fused attention on a GPU: prefill ("context") and decode ("generation") kernel forms.

Forms with a handful of physical constants each, fitted per device, framework and dtype on
measured kernels (aiconfigurator-core's tables, measurements/aiconfigurator.py) like gemm.py.
Peak tensor rate, memory and L2 bandwidth, L2 capacity and SM count come from the hardware
description; nothing here is specific to one GPU. Here: the context form `context/flash`, the
generation family's shared rows and constants, and its forms `generation/smooth` and
`generation/flash-splitkv`; TensorRT-LLM's decode forms are in trtllm_decode.py,
FlashAttention-3's in fa3_decode.py.

Context attention (causal self-attention over a whole prompt, q_len = kv_len = isl)
----------------------------------------------------------------------------------
FlashAttention-2/3 and TensorRT-LLM's FMHA run one CTA (a *work item*) per tile of block_m query
rows of one head (or, when the kernel packs the query heads of a GQA group into the rows of one
tile -- FA3's PackGQA -- of one KV head), looping over block_n-key blocks up to the diagonal
(prefill_tiles.py: the tile menus and their sources, the causal block count):

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

The head-dim dependence is physical, not a table: per score element a tile spends 4 head_dim
FLOPs in the MMAs and a fixed `softmax_s` in the online softmax (exp, max, rescale on the
SFU/FMA pipes), so the achieved fraction of peak rises with head_dim (64 -> 128 -> 256 measured
~0.42 -> 0.51 -> 0.54 of peak on H100 TRT-LLM, 0.47 -> 0.60 -> 0.70 on vLLM FA3) and one
parameter set covers every head_dim. The memory term counts Q read and O written once and K/V
`kv_passes` times: the attention kernel's read plus whatever else the measured op does to K and
V (the KV-cache write, RoPE, TRT-LLM's QKV preprocessing); it dominates short prompts with many
sequences. `item_s` is the part of a CTA that is not MMA: launch, Q load, first K/V tile
latency, epilogue; with one CTA per SM it is exposed once per wave. `floor_s` absorbs the op's
fixed cost (TRT-LLM's context op has a ~13 us floor: it includes QKV preprocessing, RoPE and
the KV-cache write as separate launches).

Which kernel runs is structural, not fitted: the tile shape (`block_m`, `kv_tile`) and the GQA
packing (`gqa_packing`) are read from the libraries' sources (CONTEXT_MENUS, per framework);
the calibration fits each and keeps the one with the lower fit-half error. What the tables
chose, by device:

* A100: TensorRT-LLM 64-row fmha_v2 tiles, packed; vLLM FA2's split-KV kernel (64 x 128 at
  head_dim 128, GQA swapped into the rows only for single-token queries); SGLang FA3's sm8x
  path (128 x 64, packed).
* H100/H200: TensorRT-LLM's warp-specialised fmha_v2 (128 rows, 256/128/64 keys by head_dim,
  unpacked); vLLM and SGLang FA3 at 128 x 128, packed.
* B200/GB200: the 128-row forms, unpacked: TensorRT-LLM's kernels, which SGLang (trtllm_mha)
  also runs there (its 256/128/64-key menu); vLLM-FlashInfer the 128 x 128 form (its cache
  write and decode-kernel rows out).
* L40S: the same menus as A100. Its collectors replay the op on the same tensors, and on this
  96 MB-L2, 0.86 TB/s-GDDR6 card a footprint (Q, O, K, V and the cache copy) that fits the L2
  streams at the L2's bandwidth: TensorRT-LLM and SGLang take ~10x longer per token once a
  batch exceeds ~4k tokens of 32 x 128-dim heads (fit half: 140 us at 4096 tokens, 557 us at
  8192 for TRT-LLM at isl 32). That is the harness's `Conditions.warm_replay`
  (measurements/harness.py, chosen on the fit half); a query of a served model never has it.

vLLM times its KV-cache write with the attention (structure `cache_write`):
`reshape_and_cache_flash` launches one CTA per token with min(kv_heads x head_dim, 512)
threads, latency-bound, so with few KV heads the write, not the attention, sets the time of
short prompts (A100 fit half, batch x heads = 512 at isl 256: 4 heads 488 us, 16 heads 236 us
for the same FLOPs and bytes; SGLang and TensorRT-LLM show no such dependence).
`cache_write_thread_s` is that CTA's latency per resident thread; a model graph that writes the
cache in an op of its own passes the column `cache_write` False.

Rows that are another kernel are left out of the fits (`supported`): sliding windows,
head_dim > 256, SGLang's Triton fallback (head_dim 64/192 on L40S, 192/256 on B200) and
vLLM-FlashInfer's decode kernel for single-token queries (B200), when the dataset also has the
main kernel; SGLang's FA3 at head_dim 192, which adds a fixed ~7 us pass as in decode (H200
fit half, isl <= 64 and batch <= 4: median 18.3 us, against 11.6 and 13.2 us at head_dim 128
and 256).

The kernel's compute dtype is not always the table's `attn_dtype`: TensorRT-LLM runs its FP8
context FMHA whenever the KV cache is FP8 on Hopper and Blackwell (rows bf16/fp8 take 0.99x the
time of fp8/fp8 rows and up to 1.28x the BF16 peak), not on Ada (L40S: its bf16/fp8 rows run
like bf16/bf16), see `context_kernel_dtype`.

Generation attention (one new token per sequence over kv_len cached tokens)
--------------------------------------------------------------------------
FlashDecoding / split-KV (`generation/smooth`): a CTA handles one (sequence, KV head) -- all
`group = heads / kv_heads` query heads of a GQA group share one read of K and V -- and, when
there are fewer such pairs than SMs, a slice of the sequence (`splits`, at least DECODE_CHUNK
keys each):

    splits    = clip(floor(SMs / (batch * kv_heads)), 1, ceil(kv_len / DECODE_CHUNK))
    items     = batch * kv_heads * splits
    chunk     = ceil(ceil(kv_len / splits) / DECODE_BLOCK) * DECODE_BLOCK   (keys per CTA)
    item      = (mha_item_s if group == 1 else item_s)
                + chunk * head_dim * 2 * kv_bytes / sm_bandwidth
    exec      = ceil(items / SMs) * item + items * group * head_s / SMs
    kv        = batch * kv_heads * kv_len * head_dim * 2 * kv_bytes
    time      = floor_s + smooth_max(exec, kv / (HBM bandwidth * memory_efficiency);
                                     p = overlap_exponent)

`exec` is the latency-bound side: each CTA pays a fixed setup/epilogue and streams its chunk at
the rate one CTA sustains (`sm_bandwidth`), which is the achieved-bandwidth ramp of small reads
(few CTAs cannot saturate HBM); the per-query-head work (`head_s`: Q load, softmax rows, O
store) is SM time that runs in parallel warps of a lone CTA, so it counts as throughput
(items * group / SMs), not as latency. MHA gets its own CTA latency because frameworks switch
kernels there (TensorRT-LLM: masked-MHA for MHA, XQA for GQA; ~1 us vs ~4.5 us of SM time per
CTA).

The benchmark re-runs the same kernel on the same cache (`Conditions.warm_replay`, every
generation table), so a KV cache smaller than the L2 (50 MB on H100) is partly read from L2
(H100 SGLang: 33.5 MB in 6.6 us above the floor, ~5 TB/s, against ~3.1 TB/s for the bytes
beyond the L2 capacity): under it the bandwidth is HBM x memory_efficiency x (1 + l2_gain)
when kv fits the L2. `l2_gain` >= 0 keeps that bandwidth at or above the HBM one. In a real
decode step the other layers evict the cache: a query reads it from HBM.

vLLM and SGLang decode with FlashAttention's split-KV kernels, whose split count is a heuristic
on wave efficiency rather than `floor(SMs / pairs)` (`generation/flash-splitkv`):

    tiles     = batch * kv_heads * ceil(group / SPLIT_Q_ROWS)
    slots     = SMs * ctas_per_sm                        (CTAs resident at once)
    splits    = 1 if tiles >= SPLIT_BUSY * slots, else the fewest s <= min(slots, blocks,
                SPLIT_MAX) whose last wave tiles * s / slots is filled within SPLIT_EFFICIENCY
                of the best s, counting only s that change the blocks per split (`splitkv_count`)
    floor     = floor_s + (splits > 1) * multiblock_s    (the combine kernel of the partials)
    exec      = ceil(items / slots) * item + items * group * head_s / SMs

with item, kv and bandwidth as in the smooth form; `ctas_per_sm` (1 or 2) and `split_mha`
(whether MHA rows are split at all) are structural choices fitted in turn.

vLLM 0.14 on A100 runs FlashAttention-2 (vllm_flash_attn, kernel_source "vllm_flash_attn"),
whose varlen decode (flash_api.cpp, mha_varlen_fwd) is the structure `fa2_swap`: 2 CTAs per SM
in the heuristic, MHA never split, and for GQA the query heads swapped into the rows of one
tile (seqlenq_ngroups_swapped): q is reshaped (batch, kv_heads, group) -> (batch x group,
kv_heads), a copy unless the batch or the KV heads are 1, and the output back, so those rows
pay two small kernels more (`swap_copy_s`). The tables show it as a step of ~6 us between
batch 1 and 2 at every cache length, absent when kv_heads = 1 (A100 vLLM: 12.5 -> 18.7 us at
2 cached tokens with 32/8 heads; 12.3 -> 12.4 us with 8/1).

Every generation form is fitted within its device's ceilings (`generation_ceilings`). A
constant at its ceiling says the term does not bind in the data (`Param.at_bound`).

Anomalies found in the tables (`plausible` and `supported` of both families)
-------------------------------------------------------------------------------------------
* Rows "above peak" in context attention are sliding-window rows, not broken rows: the vLLM
  0.24.0 H100 row at batch 1, 32 heads, head_dim 128, isl 16384 with 326 us has window=128
  (kv_heads 8); the full-causal row of that shape takes 3310 us (0.54 of peak). Counting only
  the keys inside the window (`causal_pairs`) no context row of any table (A100, H100, H200,
  B200; all frameworks) exceeds the tensor peak, while 23 % of vLLM's window-128 rows would
  exceed it if counted as full causal. Window rows are not modelled (excluded from fitting).
* A100 TensorRT-LLM 1.0.0 generation: 289 of 5026 rows (265 of them GQA) imply more than
  1.1x the HBM bandwidth for KV caches far larger than the L2 (up to 1.69x; e.g. batch 64,
  64 heads / 8 KV heads, kv_len 4096: 342 us for 1.07 GB). The same KV bytes in MHA form take
  2x longer, as do vLLM's and SGLang's: these GQA rows do not read the whole cache (they
  measure something else); `plausible` rejects them. No other table has a row above the
  bandwidth once L2-resident footprints are compared with the L2 bandwidth and sliding windows
  with their window.
* Kernel switches that are not these forms: head_dim > 256 (FA3's limit; vLLM runs an FA4
  port, SGLang a Triton kernel at 0.05-0.36 of peak); TensorRT-LLM decode with groups > 32
  (XQA's limit: it falls back to a kernel that reads K/V once per query head, 15x slower);
  SGLang decode at head_dim 192 (a ~7 us extra pass: 16-18 us where head_dim 128 and 256 take
  9-11 us). These rows are left out of the fits by `supported`.
"""

from __future__ import annotations

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
    Hopper and Blackwell (`dev` None: assumed). Not on Ada: the L40S fit half's bf16-attention
    rows with an FP8 cache take 0.80x the time of its FP8-FMHA rows, as its bf16/bf16 rows do
    (0.81x; H100 1.01x, B200 1.03x)."""
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
    """Upper limits no fit may pass, from the device's description: a decode CTA cannot stream
    faster than its SM's L1 load path (local_sram_bandwidth_bytes_per_cycle x clock, with the
    boost margin), and an L2-resident KV cache cannot be read faster than the L2 delivers
    (1 + l2_gain <= L2 / DRAM bandwidth, with the margin). Without them a fit runs the per-CTA
    bandwidth and l2_gain off to any value where a term does not bind, which reads as a claim
    about the GPU."""
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
        """False for rows reading K/V faster than the memory they must come from allows: a KV
        cache that fits the L2 is compared with the L2 bandwidth (the benchmark re-reads a warm
        cache), a larger one with the HBM bandwidth, both with PLAUSIBLE_MARGIN."""
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
    """The split heuristic's CTA slots per SM, whether MHA (group 1) rows split at all, and
    FlashAttention-2's varlen decode with the query heads swapped into rows (module
    docstring: 2 slots, MHA never split, the swap copies)."""

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


def splitkv_count(slots: float, tiles, kv_len) -> np.ndarray:
    """See `_splitkv_unique`; evaluated once per distinct (tiles, kv_len) (fits call it often)."""
    tiles = np.atleast_1d(np.asarray(tiles, float))
    kv_len = np.atleast_1d(np.asarray(kv_len, float))
    tiles, kv_len = np.broadcast_arrays(tiles, kv_len)
    shapes, inverse = np.unique(np.stack([tiles, kv_len], axis=1), axis=0, return_inverse=True)
    return _splitkv_unique(slots, shapes[:, 0], shapes[:, 1])[inverse.reshape(-1)]


def _splitkv_unique(slots: float, tiles: np.ndarray, kv_len: np.ndarray) -> np.ndarray:
    """Splits per tile chosen by wave efficiency (FlashAttention's split-KV rule, written out):
    none when the tiles already fill SPLIT_BUSY of the slots; else the fewest splits s (at most
    SPLIT_MAX, the slots and the DECODE_BLOCK-key blocks) whose last wave is filled to within
    SPLIT_EFFICIENCY of the best s, counting only s that change the blocks per split."""
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
