"""Fused attention on a GPU: prefill ("context") and decode ("generation") kernel models.

Two models with a handful of physical constants each, fitted per device, framework and dtype on
measured kernels (aiconfigurator-core's tables, see sources/aiconfigurator.py) like gemm.py.
Peak tensor rate, memory and L2 bandwidth, L2 capacity and SM count come from the hardware
description; nothing here is specific to one GPU.

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
    time      = floor_s + (compute^p + memory^p)^(1/p)       (p = overlap_exponent)
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

Which kernel runs is structural, not fitted: the tile shape (`block_m`, `kv_tile`), the GQA
packing (`pack_gqa` 0/1/2) and whether the benchmark's tensors stay in L2 (`warm_l2`) are
variants read from the libraries' sources (CONTEXT_MENUS, per framework); the calibration fits
each and keeps the one with the lower fit-half error. What the tables chose, by device:

* A100: TensorRT-LLM 64-row fmha_v2 tiles, packed; vLLM FA2's split-KV kernel (64 x 128 at
  head_dim 128, GQA swapped into the rows only for single-token queries); SGLang FA3's sm8x
  path (128 x 64, packed). Held-out: vLLM 10.6 -> 5.3 %, TRT-LLM 6.1 -> 5.3, SGLang 7.2 -> 6.4.
* H100/H200: TensorRT-LLM's warp-specialised fmha_v2 (128 rows, 256/128/64 keys by head_dim,
  unpacked: 8.5 -> 7.5 % on H100); vLLM and SGLang FA3 at 128 x 128, packed.
* B200/GB200: the 128-row forms, unpacked: TensorRT-LLM's kernels, which SGLang (trtllm_mha)
  also runs there (its 256/128/64-key menu: SGLang 12.4 -> 7.7 % on B200); vLLM-FlashInfer
  the 128 x 128 form (14.0 -> 7.9 %, its cache write and decode-kernel rows out).
* L40S: the same menus as A100, with `warm_l2`: the collectors replay the op on the same
  tensors, and on this 96 MB-L2, 0.86 TB/s-GDDR6 card a footprint (Q, O, K, V and the cache
  copy) that fits the L2 streams at the L2's bandwidth: TensorRT-LLM and SGLang take ~10x
  longer per token once a batch exceeds ~4k tokens of 32 x 128-dim heads (fit half: 140 us at
  4096 tokens, 557 us at 8192 for TRT-LLM at isl 32). No other device's fit chose `warm_l2`.

vLLM times its KV-cache write with the attention: `reshape_and_cache_flash` launches one CTA per
token with min(kv_heads x head_dim, 512) threads, latency-bound, so with few KV heads the write,
not the attention, sets the time of short prompts (A100 fit half, batch x heads = 512 at isl
256: 4 heads 488 us, 16 heads 236 us for the same FLOPs and bytes; SGLang and TensorRT-LLM
show no such dependence). `cache_write_thread_s` (VLLM_CONTEXT_PARAMS) is that CTA's latency
per resident thread; a model graph that writes the cache in an op of its own passes
`cache_write=False`.

Rows that are another kernel are left out of the fits (`context_supported`): sliding windows,
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
FlashDecoding / split-KV: a CTA handles one (sequence, KV head) -- all `group = heads /
kv_heads` query heads of a GQA group share one read of K and V -- and, when there are fewer
such pairs than SMs, a slice of the sequence (`splits`, at least DECODE_CHUNK keys each):

    splits    = clip(floor(SMs / (batch * kv_heads)), 1, ceil(kv_len / DECODE_CHUNK))
    items     = batch * kv_heads * splits
    chunk     = ceil(ceil(kv_len / splits) / DECODE_BLOCK) * DECODE_BLOCK   (keys per CTA)
    item      = (mha_item_s if group == 1 else item_s)
                + chunk * head_dim * 2 * kv_bytes / sm_bandwidth
    exec      = ceil(items / SMs) * item + items * group * head_s / SMs
    kv        = batch * kv_heads * kv_len * head_dim * 2 * kv_bytes
    bandwidth = HBM bandwidth * memory_efficiency * (1 + l2_gain if kv <= L2 capacity else 1)
    time      = floor_s + (exec^p + (kv / bandwidth)^p)^(1/p)

`exec` is the latency-bound side: each CTA pays a fixed setup/epilogue and streams its chunk at
the rate one CTA sustains (`sm_bandwidth`), which is the achieved-bandwidth ramp of small reads
(few CTAs cannot saturate HBM); the per-query-head work (`head_s`: Q load, softmax rows, O
store) is SM time that runs in parallel warps of a lone CTA, so it counts as throughput
(items * group / SMs), not as latency. MHA gets its own CTA latency because frameworks switch
kernels there (TensorRT-LLM: masked-MHA for MHA, XQA for GQA; ~1 us vs ~4.5 us of SM time per
CTA). The L2 term is a property of the measurement, not of serving:
the benchmark re-runs the same kernel on the same cache, so a KV cache smaller than the L2
(50 MB on H100) is partly read from L2 (H100 SGLang: 33.5 MB in 6.6 us above the floor, ~5 TB/s,
against ~3.1 TB/s for the bytes beyond the L2 capacity). `l2_gain` >= 0 keeps that bandwidth
at or above the HBM one. In a real decode step the other layers evict the cache; a simulator
of a full model should call `predict_generation(..., warm_l2=False)`.

TensorRT-LLM's decode kernels (XQA for GQA, masked MHA for MHA) follow discrete rules the
smooth form above cannot (its fit left H100 15 % held-out, every regime off by 10-30 %). The
tables show them: (1) MHA and GQA rows differ already at 2 cached tokens (separate launch
floors); (2) multi-block mode, when taken, adds a fixed ~4-5 us (the extra reduction pass: an
H100 single-head batch takes 11 us at 256 tokens, 15 us at 512, then stays at 16 us up to 32k
tokens); (3) a GQA CTA's time at short caches grows with head_dim and doubles past 16 query
heads per KV head (one 16-row Q tile per pass). `predict_generation` uses this form when the
parameters hold `mha_floor_s` (TRTLLM_GENERATION_PARAMS):

    blocks    = max(min(floor(kv_len / MULTIBLOCK_MIN_TOKENS), floor(MULTIBLOCK_WAVES * SMs
                    / (batch * kv_heads))), 1)           (blocks per sequence, discrete)
    items     = batch * kv_heads * blocks,  chunk as above with `blocks` for `splits`
    item      = MHA:  mha_item_s + chunk * head_dim * 2 * kv_bytes / mha_sm_bandwidth
                GQA:  item_s + ceil(group / q_tile_rows) * head_dim * row_tile_s
                      + chunk * head_dim * 2 * kv_bytes / sm_bandwidth
    floor     = (mha_floor_s if MHA else floor_s) + (blocks > 1) * (mha_multiblock_s | multiblock_s)
    time      = floor + (exec^p + (kv / bandwidth)^p)^(1/p)   (exec, kv, bandwidth as above)

MULTIBLOCK_MIN_TOKENS and MULTIBLOCK_WAVES are structural (not fitted): of 256/512/1024 tokens
and 1/2/4/8 waves, 256 and 4 gave the lowest fit-half error on H100 (the held-out half was not
consulted). The query-tile rows `q_tile_rows` (8 or 16) are a structural choice.

That rule is a smooth stand-in for TensorRT-LLM's own launch decisions, which its source states
(trtllm_decode.py has them with their sources): GQA runs XQA only when batch x KV heads x
max(1, kv_len // 128) x 4 >= SMs and masked MHA (one CTA per *query* head) otherwise; XQA
splits a sequence into kv_len // 128 blocks capped at round(sqrt(8 blocks)) and cut back past
8 waves; masked MHA grows its block to 1024 threads and splits only to fill the SMs once; the
Hopper FP8-KV XQA kernel (QGMMA) pads the query heads to 8 rows, not 16, and applies RoPE
itself unless the rotary dimension exceeds the head. `decode_kernels` in TRTLLM_VARIANTS
chooses per device and KV dtype (lowest fit-half error): 0 the discrete rule above (with
q_tile_rows 8 or 16), 1 the dispatch with the HMMA XQA kernel, 2 with the QGMMA kernel. The
fit half picks 1 on A100, H100, H200 and L40S (16-bit cache), 2 on H100 and H200 with an FP8
cache, 0 on B200/GB200 (TensorRT-LLM runs its trtllm-gen kernels there, not XQA). The QGMMA
forms are offered on sm90 only (supportConfigQGMMA). Both XQA forms add the multi-block merge
of the last CTA, one L2 round trip per block (`merge_s`, 0.09-0.33 us), and the QGMMA form the
lower residency of its large tiles (`qgmma_residency`, chosen on the H100 and H200 fit halves;
trtllm_decode.py has both). Held-out MAPE, TensorRT-LLM: A100 9.9 -> 7.0 -> 6.3 %, H100
10.4 -> 6.0 -> 5.6 % (FP8 KV 14.7 -> 7.8 -> 6.6 %), H200 11.4 -> 6.1 -> 5.5 % (FP8 15.1 ->
8.4 -> 7.0 %), L40S 9.4 -> 6.0 -> 5.9 % (the middle figure without the merge and residency).

vLLM and SGLang decode with FlashAttention's split-KV kernels, whose split count is a heuristic
on wave efficiency rather than `floor(SMs / pairs)`: `predict_generation` uses this form when
the parameters hold `split_ctas_per_sm` (SPLITKV_GENERATION_PARAMS, frameworks in
SPLITKV_FRAMEWORKS):

    tiles     = batch * kv_heads * ceil(group / SPLIT_Q_ROWS)
    slots     = SMs * split_ctas_per_sm                  (CTAs resident at once)
    splits    = 1 if tiles >= SPLIT_BUSY * slots, else the fewest s <= min(slots, blocks,
                SPLIT_MAX) whose last wave tiles * s / slots is filled within SPLIT_EFFICIENCY
                of the best s, counting only s that change the blocks per split (`splitkv_count`)
    floor     = floor_s + (splits > 1) * multiblock_s    (the combine kernel of the partials)
    exec      = ceil(items / slots) * item + items * group * head_s / SMs

with item, kv and bandwidth as in the smooth form; `split_ctas_per_sm` (1 or 2) and
`split_mha` (whether MHA rows are split at all) are structural choices fitted in turn
(SPLITKV_VARIANTS, lowest fit-half error wins). Generation attention held-out MAPE on A100:
vLLM 16.9 -> 12.3 %, SGLang 9.6 -> 7.3 % (docs/results-simulator.md has every device).

vLLM 0.14 on A100 runs FlashAttention-2 (vllm_flash_attn, kernel_source "vllm_flash_attn"),
whose varlen decode (flash_api.cpp, mha_varlen_fwd) is the fifth variant, `fa2_swap`: 2 CTAs
per SM in the heuristic, MHA never split, and for GQA the query heads swapped into the rows of
one tile (seqlenq_ngroups_swapped): q is reshaped (batch, kv_heads, group) -> (batch x group,
kv_heads), a copy unless the batch or the KV heads are 1, and the output back, so those rows
pay two small kernels more (`swap_copy_s`). The tables show it as a step of ~6 us between
batch 1 and 2 at every cache length, absent when kv_heads = 1 (A100 vLLM: 12.5 -> 18.7 us at
2 cached tokens with 32/8 heads; 12.3 -> 12.4 us with 8/1). Held-out MAPE 12.3 -> 6.4 %.

On Hopper (sm90), vLLM and SGLang run FlashAttention-3, whose decode is a persistent, paged,
PackGQA kernel with a per-sequence split count (varlen scheduler metadata) under a per-launch
bound: vLLM's CUDA-graph cap of 32 splits up to batch 512, or FA3's own heuristic; its form is
fa3_decode.py, offered as further structural variants on sm90 devices only (FA3_VARIANTS,
`generation_variants_for(framework, dev, kv_dtype)`), chosen on the fit half like the others.
With an FP8 cache it wins on the fit half (vLLM: the graph cap; SGLang H100: upstream's rule,
H200: vllm-flash-attn's), held-out MAPE vLLM H100 10.67 -> 7.41, H200 11.06 -> 7.69 %, SGLang
H100 7.93 -> 6.49, H200 8.34 -> 6.88 %. With a 16-bit cache it wins for vLLM (the graph cap;
H100 7.19 -> 6.29, H200 7.73 -> 6.22 %) but not for SGLang (fit half 7.56 vs 6.88 on H100, 8.15
vs 7.85 on H200): SGLang's 16-bit entries keep the split-KV form.

Every vLLM and SGLang entry is fitted within its device's ceilings (`generation_ceilings`).
Refitting the entries that had run past them cost at most 0.1 point of held-out MAPE, except
GB200 SGLang bf16 (11.16 -> 11.63 %): its l2_gain of 34,500 had switched the bandwidth side of
the smooth maximum off for L2-resident caches. H200 SGLang FP8 improved (6.88 -> 6.75 %): its
unbounded fit had stopped in a worse basin. A constant at its ceiling says the term does not
bind in the data: l2_gain on H200 vLLM, B200 and GB200, and sm_bandwidth on L40S vLLM and H100
SGLang FP8. serial_gain is the exception. It sits at its ceiling on both SGLang FP8 entries,
because their head_dim-256 rows want a slower key loop than serialising the softmax allows.
With an FP8 cache the fit half may also choose the MMA-bound key loop (`fa3_mma`,
fa3_decode.py). It takes it on H100 SGLang (the MMAs reach 63 % of the FP8 peak on the padded
tile). H200 SGLang is a tie (fit half 6.83 vs 6.82 %), so the gather-bound form stays, and so
does vLLM's, whose per-CTA gather (1.9e10 B/s) is slower than the MMAs.

Anomalies found in the tables (see `plausible_context`, `plausible_generation`,
`context_supported`, `generation_supported`)
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
  measure something else); `plausible_generation` rejects them. No other table has a row above
  the bandwidth once L2-resident footprints are compared with the L2 bandwidth and sliding
  windows with their window.
* Kernel switches that are not this model: head_dim > 256 (FA3's limit; vLLM runs an FA4 port,
  SGLang a Triton kernel at 0.05-0.36 of peak); TensorRT-LLM decode with groups > 32 (XQA's
  limit: it falls back to a kernel that reads K/V once per query head, 15x slower); SGLang decode
  at head_dim 192 (a ~7 us extra pass: 16-18 us where head_dim 128 and 256 take 9-11 us).
  These rows are left out of the fits by the `*_supported` masks.
"""

from __future__ import annotations

import numpy as np

from ....hardware.schema import DTYPE_BYTES, Device
from ..numerics import smooth_max
from ..params import BOOST_MARGIN, Param, l2_over_dram, sm_load_bytes_per_s, with_ceilings
from . import fa3_decode, trtllm_decode
from . import prefill_tiles as tiles
from .gemm import hopper_class
from .gemm_cutlass import blackwell_class

BLOCK_M = tiles.BLOCK_M  # default query rows per prefill CTA (menus: prefill_tiles.py)
BLOCK_N = tiles.BLOCK_N  # default keys per step of a prefill CTA's inner loop
DECODE_CHUNK = 256  # fewest keys a split-KV decode CTA is given
DECODE_BLOCK = 128  # keys per step of a decode CTA (a CTA streams whole blocks)
PLAUSIBLE_MARGIN = BOOST_MARGIN  # boost clocks reach ~1.08x the datasheet peaks

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
CONTEXT_VARIANTS = ({"pack_gqa": 0.0}, {"pack_gqa": 1.0})  # the 128 x 128 form, any kernel
# vLLM times its KV-cache write with the attention (see VLLM_CONTEXT_PARAMS)
VLLM_CONTEXT_PARAMS = CONTEXT_PARAMS + (
    Param("cache_write_thread_s", "seconds", 2e-9,
          "SM time per thread of vLLM's KV-cache write, one CTA of min(kv_heads x head_dim, "
          "512) threads per token (the CTA's latency over the threads an SM holds at once)"),
)
# Tile menus tried per framework (prefill_tiles.py has their sources); the fit half picks one.
# Each list keeps the 128 x 128 forms, so no entry can lose to the form it replaces.
_SQUARE = tuple({"pack_gqa": p, "block_m": 128.0, "kv_tile": 0.0} for p in (0.0, 1.0))
# fmha_v2: 64-row Q steps on Ampere/Ada, 128 (two warpgroups) on Hopper; 256/128/64 keys
_FMHA_V2 = tuple({"pack_gqa": p, "block_m": m, "kv_tile": 16384.0}
                 for m in (64.0, 128.0) for p in (0.0, 1.0))
# TensorRT-LLM's FMHA as vLLM (through FlashInfer) and SGLang (trtllm_mha) call it on Blackwell
_TRTLLM_BLACKWELL = tuple(v for v in _FMHA_V2 if v["block_m"] == 128.0)
# FA2's split-KV kernel (vLLM's paged cache, Ampere and Ada): 64 rows, 256/128/64 keys, GQA
# swapped into the rows only for single-token queries
_FA2_SPLIT = ({"pack_gqa": 2.0, "block_m": 64.0, "kv_tile": 16384.0},)
# FA3's sm8x path (SGLang on Ampere): 128 x 64 at head_dim 128, PackGQA (forced below sm90)
_FA3_SM8X = ({"pack_gqa": 1.0, "block_m": 128.0, "kv_tile": 8192.0},)
CONTEXT_MENUS: dict[str, tuple[dict[str, float], ...]] = {
    "trtllm": _SQUARE + _FMHA_V2,
    "vllm": _SQUARE + _FA2_SPLIT + _TRTLLM_BLACKWELL,  # FA3 on Hopper: the 128 x 128 form
    "sglang": _SQUARE + _FA3_SM8X + _TRTLLM_BLACKWELL,
}


# Backends a framework runs for some context rows besides its prefill kernel: SGLang's Triton
# fallback (head_dim 64/192 on L40S, 192/256 on B200), vLLM-FlashInfer's decode kernel for
# single-token queries (B200). Their rows are left out when the prefill kernel is measured too.
CONTEXT_OTHER_KERNELS = ("triton", "decode")


def context_params_for(framework: str) -> tuple[Param, ...]:
    """The context-attention constants fitted for `framework` (vLLM adds its KV-cache write)."""
    return VLLM_CONTEXT_PARAMS if framework == "vllm" else CONTEXT_PARAMS


def context_variants_for(framework: str) -> tuple[dict[str, float], ...]:
    """Structural choices (tile menu, GQA packing, L2) tried for `framework`'s context kernel."""
    return tuple({**v, "warm_l2": w} for v in CONTEXT_MENUS.get(framework, CONTEXT_VARIANTS)
                 for w in (0.0, 1.0))


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


# TensorRT-LLM's discrete form (see the module docstring): same constants plus these
TRTLLM_GENERATION_PARAMS = GENERATION_PARAMS + (
    Param("mha_floor_s", "seconds", 7e-6, "fixed cost of the op when group == 1 (masked MHA)"),
    Param("multiblock_s", "seconds", 2e-6,
          "extra fixed cost of a GQA launch split into several blocks per sequence (reduction)"),
    Param("mha_multiblock_s", "seconds", 2e-6,
          "extra fixed cost of an MHA launch split into several blocks per sequence"),
    Param("mha_sm_bandwidth", "positive", 6e10, "bytes/s one MHA CTA streams from memory"),
    Param("row_tile_s", "seconds", 1e-8,
          "GQA CTA time per head_dim element per Q_TILE_ROWS-row tile of query heads"),
    # used by the XQA/MMHA dispatch forms only (decode_kernels >= 1, trtllm_decode.py)
    Param("token_tile_s", "seconds", 1e-11,
          "XQA CTA time per cached token, head_dim element and query-row tile: the QK^T and PV "
          "MMAs and the softmax of one tile row"),
    Param("mha_loop_s", "seconds", 1e-6,
          "masked-MHA CTA cost of entering its unrolled K loop (chunk >= keys one iteration "
          "covers)"),
    Param("rope_s", "seconds", 2e-6,
          "the separate RoPE/KV-append launch the Hopper QGMMA XQA kernel needs when the rotary "
          "dimension exceeds the head (otherwise applied inside the kernel)"),
    Param("merge_s", "seconds", 2e-7,
          "XQA multi-block merge, per block of a sequence: the last CTA to finish walks the "
          "blocks' partial outputs and row sums one after another (a few loads in flight), so "
          "the merge is a serial chain of one L2 round trip per block"),
)
MULTIBLOCK_MIN_TOKENS = 256  # fewest cached tokens per block before a sequence is split
MULTIBLOCK_WAVES = 4  # blocks per sequence are capped at this many waves of CTAs over the SMs
Q_TILE_ROWS = 16  # query heads of a GQA group one XQA pass serves (default of `q_tile_rows`)
# structural choice for TensorRT-LLM (lowest fit-half error wins): `decode_kernels` 0 is the
# smooth-rule discrete form above (one block per 256 tokens; what fits the Blackwell tables,
# where TensorRT-LLM runs its trtllm-gen kernels instead of XQA: xqaDispatcher.cpp,
# mUseTllmGen = isSM100Family()), with the query-tile rows 8 or 16; 1 and 2 are TensorRT-LLM's
# own XQA / masked-MHA dispatch (trtllm_decode.py) with the HMMA XQA kernel (Ampere, Ada,
# Hopper with a 16-bit cache) or the Hopper QGMMA kernel (FP8 cache)
# hmma and the discrete form do not use every constant: those are fixed (and stored) at 0
_UNUSED_BY_DISCRETE = {"token_tile_s": 0.0, "mha_loop_s": 0.0, "rope_s": 0.0, "merge_s": 0.0}
# QGMMA (2) with and without the residency rule of its large tiles (trtllm_decode.py,
# QGMMA_SMALL_TILE_ELEMS): chosen on the fit half like the rest
TRTLLM_VARIANTS = ({"decode_kernels": 0.0, "q_tile_rows": 8.0, **_UNUSED_BY_DISCRETE},
                   {"decode_kernels": 0.0, "q_tile_rows": 16.0, **_UNUSED_BY_DISCRETE},
                   {"decode_kernels": 1.0, "rope_s": 0.0},
                   {"decode_kernels": 2.0, "qgmma_residency": 0.0},
                   {"decode_kernels": 2.0, "qgmma_residency": 1.0})


# FlashAttention's split-KV form (vLLM, SGLang; see the module docstring): smooth constants plus
SPLITKV_GENERATION_PARAMS = GENERATION_PARAMS + (
    Param("multiblock_s", "seconds", 4e-6,
          "extra fixed cost of a launch split along the cache (combine kernel of the partials)"),
    Param("swap_copy_s", "seconds", 3e-6,
          "FlashAttention-2's GQA decode: the two copy kernels that transpose the query heads "
          "into rows and the output back (fa2_swap variant only)"),
    # FlashAttention-3's decode on Hopper (fa3 variants only, fa3_decode.py)
    Param("split_item_s", "seconds", 3e-7,
          "extra time of a CTA of FA3's kernel compiled with Split: fp32 partial output and "
          "log-sum-exp to the accumulation buffers, the per-sequence split count read"),
    Param("combine_row_s", "seconds", 3e-8,
          "SM time per (sequence, query head, split) row of FA3's combine kernel: read the fp32 "
          "partials, rescale by their log-sum-exp, write the output"),
    Param("seq_s", "seconds", 1e-8,
          "time per sequence of FA3's varlen tile scheduler: a persistent CTA walks the "
          "per-sequence block counts to find its tile's sequence"),
    Param("serial_gain", "positive", 0.5,
          "extra per-key CTA time of FA3's FP8 kernel at head_dim > 192 with a paged cache, "
          "compiled without intra-warpgroup overlap of softmax and MMAs (FP8 tables only): a "
          "fraction of the gather time, or with fa3_mma of the MMA time (the softmax's share)"),
    Param("mma_efficiency", "fraction", 0.7,
          "fraction of the tensor-core peak one FA3 decode CTA's QK^T and PV MMAs reach on its "
          "block_m query rows, padding included (fa3_mma variants only)"),
)
_FA3_ONLY = {"split_item_s": 0.0, "combine_row_s": 0.0, "seq_s": 0.0, "serial_gain": 0.0,
             "mma_efficiency": 1.0}
# structural choices tried in turn (lowest fit-half error wins): CTAs resident per SM that the
# split heuristic counts as slots, and whether MHA (group 1) decode is split at all; the last is
# FlashAttention-2's varlen decode as its source states it (flash_api.cpp, mha_varlen_fwd): the
# split heuristic counts 2 CTAs per SM ("128 threads per block"), only the GQA path with the
# query heads swapped into rows (seqlenq_ngroups_swapped) is split, and that swap reshapes q and
# the output, which copies unless the batch or the KV heads are 1 (FA3 packs GQA in the kernel)
SPLITKV_VARIANTS = tuple({"split_ctas_per_sm": c, "split_mha": m, "swap_copy_s": 0.0,
                          **_FA3_ONLY} for c in (1.0, 2.0) for m in (0.0, 1.0)) + (
    {"split_ctas_per_sm": 2.0, "split_mha": 0.0, "fa2_swap": 1.0, **_FA3_ONLY},)
# FlashAttention-3 on sm90 (fa3_decode.py): vLLM's CUDA-graph split cap (32 up to batch 512) or
# FA3's own heuristic, in vllm-flash-attn's (1) or upstream's (2) version; one kernel for MHA and
# GQA, no query-head copies. split_ctas_per_sm / split_mha are not used by this form.
_FA3_FIXED = {"split_ctas_per_sm": 1.0, "split_mha": 1.0, "mha_item_s": 0.0, "swap_copy_s": 0.0}
# With an FP8 cache each of these is also offered with the CTA's key loop bound by its MMAs on
# the padded query tile (fa3_mma, fa3_decode.py): the fit half shows single-wave FP8 rows costing
# the same per key on H100 and H200 (SM-bound, not HBM-bound), 5.2 / 5.7 / 15.9 ns per key at
# head_dim 64 / 128 / 256 (SGLang H200), which tracks 4 block_m head_dim FLOP per key (3.3 / 4.4
# / 8.7 ns at the FP8 peak), not the bytes per key (1 : 2 : 4) a gather rate gives
_NO_MMA = {"fa3_mma": 0.0, "mma_efficiency": 1.0}
FA3_VARIANTS: dict[str, tuple[dict[str, float], ...]] = {
    "vllm": tuple({"fa3": 1.0, "fa3_graph_splits": g, "fa3_rule": r, **_FA3_FIXED, **_NO_MMA}
                  for g, r in ((32.0, 1.0), (0.0, 1.0), (0.0, 2.0))),
    "sglang": tuple({"fa3": 1.0, "fa3_graph_splits": 0.0, "fa3_rule": r, **_FA3_FIXED, **_NO_MMA}
                    for r in (1.0, 2.0)),
}
SPLIT_MAX = 128  # most splits the heuristic considers
SPLIT_BUSY = 0.8  # tiles >= this fraction of the slots: no split
SPLIT_EFFICIENCY = 0.85  # fewest splits whose wave efficiency is within this of the best
SPLIT_Q_ROWS = 64  # query rows of one split-KV tile (the query heads of a group are its rows)


# Frameworks whose calibration fits the split-KV form (FlashAttention's decode kernels)
SPLITKV_FRAMEWORKS: tuple[str, ...] = ("vllm", "sglang")


def generation_params_for(framework: str, dev: Device | None = None) -> tuple[Param, ...]:
    """The generation-attention constants fitted for `framework`: TensorRT-LLM's discrete XQA
    form, FlashAttention's split-KV heuristic for vLLM and SGLang. With a device, the
    bandwidth-like constants carry that device's physical ceilings (generation_ceilings)."""
    if framework == "trtllm":
        params = TRTLLM_GENERATION_PARAMS
    elif framework in SPLITKV_FRAMEWORKS:
        params = SPLITKV_GENERATION_PARAMS
    else:
        params = GENERATION_PARAMS
    if dev is None:
        return params
    return with_ceilings(params, generation_ceilings(dev))


# Serialising a kernel's softmax with its MMAs (FA3's FP8 build at head_dim > 192) at most adds
# the softmax's time to the MMAs': the key loop gets at most this much slower.
SERIAL_GAIN_CEILING = 1.0


def generation_ceilings(dev: Device) -> dict[str, float]:
    """Upper limits no fit may pass, from the device's description: a decode CTA cannot stream
    faster than its SM's L1 load path (local_sram_bandwidth_bytes_per_cycle x clock, with the
    boost margin), and an L2-resident KV cache cannot be read faster than the L2 delivers
    (1 + l2_gain <= L2 / DRAM bandwidth, with the margin). Without them the fits ran the
    per-CTA bandwidth to 1e19-1e156 B/s and l2_gain to 1e6 where a term did not bind, which
    reads as a claim about the GPU."""
    sm_load = sm_load_bytes_per_s(dev)
    return {"sm_bandwidth": sm_load, "mha_sm_bandwidth": sm_load,
            "l2_gain": max(l2_over_dram(dev) - 1.0, 0.1), "serial_gain": SERIAL_GAIN_CEILING}


def generation_starts(framework: str, dev: Device | None = None) -> tuple[dict[str, float], ...]:
    """Extra starting points of TensorRT-LLM's generation fit (screened on the fit half with the
    initial values, fit.py): the bandwidth-like constants at half their device ceilings. From
    the initial values alone the bounded fit stopped in a worse basin on GB200 bf16 (fit half
    6.12 %, where the unbounded constants of the previous fit, l2_gain clipped to its ceiling,
    score 5.79 %): the per-CTA bandwidths settled near their ceilings, the per-CTA times
    compensating. vLLM's and SGLang's fits keep their single start."""
    if framework != "trtllm" or dev is None:
        return ()
    ceilings = generation_ceilings(dev)
    return ({name: 0.5 * ceilings[name] for name in ("sm_bandwidth", "mha_sm_bandwidth",
                                                      "l2_gain")},)


def generation_variants_for(framework: str, dev: Device | None = None,
                            kv_dtype: str = "bf16") -> tuple[dict[str, float], ...]:
    """Structural choices of `framework`'s generation form (fitted in turn, see calibrate.py):
    with an sm90 `dev`, vLLM's and SGLang's FlashAttention-3 forms too (fa3_decode.py; FA3's
    Hopper kernels run nowhere else); `serial_gain` is fixed at 0 for a 16-bit cache.
    TensorRT-LLM's QGMMA XQA forms are offered on sm90 only, where the kernel runs (without the
    restriction the L40S FP8 fit half chose it, an sm90 kernel on Ada)."""
    if framework == "trtllm":  # the QGMMA kernel is sm90-only (supportConfigQGMMA: SM == 90)
        if dev is None or sm90(dev):
            return TRTLLM_VARIANTS
        return tuple(v for v in TRTLLM_VARIANTS if v["decode_kernels"] < 1.5)
    if framework not in SPLITKV_FRAMEWORKS:
        return ({},)
    if dev is None or not sm90(dev):
        return SPLITKV_VARIANTS
    fa3 = FA3_VARIANTS.get(framework, ())
    if kv_dtype != "fp8":
        fa3 = tuple({**v, "serial_gain": 0.0} for v in fa3)
    else:  # the MMA-bound key loop (fa3_mma), next to the gather-bound one
        fa3 = fa3 + tuple({k: x for k, x in v.items() if k != "mma_efficiency"} | {"fa3_mma": 1.0}
                          for v in fa3)
    return SPLITKV_VARIANTS + fa3


def sm90(dev: Device) -> bool:
    """Hopper: the Hopper-class tensor-core rate per SM and clock, below Blackwell's."""
    return hopper_class(dev) and not blackwell_class(dev)


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


def multiblock_count(sms: int, batch, kv_heads, kv_len) -> np.ndarray:
    """Blocks per sequence of TensorRT-LLM's decode kernels: one per MULTIBLOCK_MIN_TOKENS
    cached tokens, at most MULTIBLOCK_WAVES waves of CTAs over the SMs, at least one."""
    pairs = np.asarray(batch, float) * np.asarray(kv_heads, float)
    by_tokens = np.floor(np.asarray(kv_len, float) / MULTIBLOCK_MIN_TOKENS)
    return np.maximum(np.minimum(by_tokens, np.floor(MULTIBLOCK_WAVES * sms / pairs)), 1.0)


def _col(cols: dict, name: str) -> np.ndarray:
    return np.atleast_1d(np.asarray(cols[name], dtype=float))


def _kv_len(cols: dict) -> np.ndarray:
    if "kv_len" in cols:
        return _col(cols, "kv_len")
    return _col(cols, "isl") + (_col(cols, "step") if "step" in cols else 0.0)


# ---------------------------------------------------------------------------------- context
def predict_context(dev: Device, cols: dict, p: dict, dtype: str = "bf16", *,
                    cache_write: bool = True) -> np.ndarray:
    """Seconds per row of `cols` (batch, isl, heads, kv_heads, head_dim); causal, no window.

    `dtype` is the kernel's compute dtype (see `context_kernel_dtype`); `p` holds
    CONTEXT_PARAMS (VLLM_CONTEXT_PARAMS for vLLM) and optionally the structural choices
    `pack_gqa` (0, 1 or 2; default 0), `block_m` (default 128), `kv_tile` (default 0: 128-key
    blocks) and `warm_l2` (default 0), see prefill_tiles.py. `cache_write=False` leaves out
    vLLM's KV-cache write kernel, for a caller that times that write as an op of its own.
    """
    b, s, h, kvh, d = (_col(cols, k) for k in ("batch", "isl", "heads", "kv_heads", "head_dim"))
    nbytes = DTYPE_BYTES[dtype]
    sms = dev.core_count
    per_sm = dev.matrix_rate(dtype) / sms
    bm = p.get("block_m", tiles.BLOCK_M)
    bn = tiles.block_n(d, p.get("kv_tile", 0.0))
    g = tiles.query_group(s, h, kvh, p.get("pack_gqa", 0.0))
    n_tiles, mean_blocks, max_blocks = tiles.causal_tiles(s, g, bm, bn)
    items = b * (h / g) * n_tiles
    t_block = bm * bn * (4 * d / (per_sm * p["mma_efficiency"]) + p["softmax_s"])
    compute = np.maximum(np.ceil(items / sms) * (p["item_s"] + mean_blocks * t_block),
                         p["item_s"] + max_blocks * t_block)
    bandwidth = dev.memory.bandwidth_bytes_per_s
    if p.get("warm_l2", 0.0) > 0.5:  # the benchmark replays the op on the same tensors
        footprint = b * s * d * nbytes * (2 * h + 4 * kvh)  # Q, O, K, V and their cache copy
        bandwidth = np.where(footprint <= dev.global_buffer.capacity_bytes,
                             dev.global_buffer_bandwidth_bytes_per_s, bandwidth)
    memory = b * s * d * nbytes * (2 * h + 2 * kvh * p["kv_passes"]) / (
        bandwidth * p["memory_efficiency"])
    time = p["floor_s"] + smooth_max(compute, memory, p["overlap_exponent"])
    if cache_write and "cache_write_thread_s" in p:  # vLLM: its own kernel, one CTA per token
        time = time + b * s * tiles.cache_write_threads(kvh, d) * p["cache_write_thread_s"] / sms
    return time


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


def plausible_context(dev: Device, cols: dict, latency_s, dtype: str = "bf16") -> np.ndarray:
    """False for rows whose implied FLOP rate exceeds the tensor peak of `dtype` by the margin."""
    rate = context_flops(cols) / np.atleast_1d(np.asarray(latency_s, float))
    return rate <= PLAUSIBLE_MARGIN * dev.matrix_rate(dtype)


def context_supported(dev: Device, framework: str, cols: dict, dtype: str = "bf16") -> np.ndarray:
    """Rows this model describes: no sliding window, head_dim <= 256, FlashAttention-class
    kernels (not SGLang's Triton fallback, nor its padded head_dim 192; module docstring)."""
    window = np.asarray(cols["window"]) if "window" in cols else 0
    head_dim = np.asarray(cols["head_dim"])
    ok = (window == 0) & (head_dim <= 256)
    if "kernel" in cols:  # one kernel per fit: fallbacks go when the main kernel is measured
        other = np.array([any(w in str(k).lower() for w in CONTEXT_OTHER_KERNELS)
                          for k in np.atleast_1d(cols["kernel"])])
        if not other.all():
            ok = ok & ~other
    if framework == "sglang":  # FA3 at head_dim 192 adds a fixed ~7 us pass, as in decode
        ok = ok & ~((head_dim == 192) & np.isin(np.atleast_1d(cols.get("kernel", "fa3")),
                                                ("fa3", "flash_attention")))
    return ok


# ------------------------------------------------------------------------------- generation
def predict_generation(dev: Device, cols: dict, p: dict, kv_dtype: str = "bf16", *,
                       warm_l2: bool = True) -> np.ndarray:
    """Seconds per row of `cols` (batch, heads, kv_heads, head_dim, kv_len or isl + step).

    `warm_l2=True` reproduces the benchmark (a KV cache that fits the L2 is read from it);
    False models a decode step inside a full model, where the cache always comes from HBM.
    """
    b, h, kvh, d = (_col(cols, k) for k in ("batch", "heads", "kv_heads", "head_dim"))
    L = _kv_len(cols)
    nbytes = DTYPE_BYTES[kv_dtype]
    sms = dev.core_count
    if p.get("decode_kernels", 0.0) > 0.5:  # TensorRT-LLM's XQA / masked-MHA dispatch
        rope = _col(cols, "rope_dim") if "rope_dim" in cols else None
        return trtllm_decode.predict(sms, dev.memory.bandwidth_bytes_per_s,
                                     dev.global_buffer.capacity_bytes, b, h, kvh, d, L, nbytes,
                                     p, warm_l2, rope)
    if p.get("fa3", 0.0) > 0.5:  # FlashAttention-3 on Hopper, as vLLM / SGLang launch it
        hbm = dev.memory.bandwidth_bytes_per_s * p["memory_efficiency"]
        kv = b * kvh * L * d * 2 * nbytes
        bandwidth = np.where((kv <= dev.global_buffer.capacity_bytes) & warm_l2,
                             hbm * (1 + p["l2_gain"]), hbm)
        # FA3 runs Q, K and V in the cache's dtype: its MMAs at that dtype's tensor peak
        mma_flops_per_sm_s = dev.matrix_flops_per_s.get("fp8" if kv_dtype == "fp8" else "bf16") / sms
        return fa3_decode.predict(sms, b, h, kvh, d, L, nbytes, kv_dtype == "fp8", p,
                                  bandwidth, smooth_max, mma_flops_per_sm_s)
    group = h / kvh
    pairs = b * kvh
    mha = group == 1
    discrete = "mha_floor_s" in p  # TensorRT-LLM's form (TRTLLM_GENERATION_PARAMS)
    splitkv = "split_ctas_per_sm" in p  # FlashAttention's rule (SPLITKV_GENERATION_PARAMS)
    if discrete:
        splits = multiblock_count(sms, b, kvh, L)
    elif splitkv:
        splits = splitkv_count(sms * p["split_ctas_per_sm"], pairs * np.ceil(group / SPLIT_Q_ROWS), L)
        if p["split_mha"] < 0.5:
            splits = np.where(mha, 1.0, splits)
    else:
        splits = np.clip(np.floor(sms / pairs), 1, np.ceil(L / DECODE_CHUNK))
    items = pairs * splits
    chunk = np.ceil(np.ceil(L / splits) / DECODE_BLOCK) * DECODE_BLOCK
    stream_s = chunk * d * 2 * nbytes
    if discrete:
        item = np.where(mha, p["mha_item_s"] + stream_s / p["mha_sm_bandwidth"],
                        p["item_s"] + np.ceil(group / p.get("q_tile_rows", Q_TILE_ROWS)) * d
                        * p["row_tile_s"]
                        + stream_s / p["sm_bandwidth"])
        floor_s = (np.where(mha, p["mha_floor_s"], p["floor_s"])
                   + np.where(splits > 1, np.where(mha, p["mha_multiblock_s"],
                                                   p["multiblock_s"]), 0.0))
    else:
        item = np.where(mha, p["mha_item_s"], p["item_s"]) + stream_s / p["sm_bandwidth"]
        floor_s = p["floor_s"] + (np.where(splits > 1, p["multiblock_s"], 0.0) if splitkv else 0.0)
    slots = sms * p["split_ctas_per_sm"] if splitkv else sms  # CTAs that run at once
    exec_s = np.ceil(items / slots) * item + items * group * p["head_s"] / sms
    kv = b * kvh * L * d * 2 * nbytes
    hbm = dev.memory.bandwidth_bytes_per_s * p["memory_efficiency"]
    if warm_l2:
        bandwidth = np.where(kv <= dev.global_buffer.capacity_bytes, hbm * (1 + p["l2_gain"]),
                             hbm)
    else:
        bandwidth = hbm
    t = floor_s + smooth_max(exec_s, kv / bandwidth, p["overlap_exponent"])
    if splitkv and p.get("fa2_swap", 0.0) > 0.5:  # q and the output transposed by copies
        t = t + np.where((group > 1) & (b >= 2) & (kvh >= 2), p["swap_copy_s"], 0.0)
    return t


def generation_bytes(cols: dict, kv_dtype: str = "bf16") -> np.ndarray:
    """K and V bytes one decode step must read (within a sliding window if present)."""
    b, kvh, d = (_col(cols, k) for k in ("batch", "kv_heads", "head_dim"))
    L = _kv_len(cols)
    if "window" in cols:
        w = _col(cols, "window")
        L = np.where((w > 0) & (w < L), w, L)
    if "kv_dtype" in cols:
        nbytes = np.array([DTYPE_BYTES[str(x)] for x in np.atleast_1d(cols["kv_dtype"])], float)
    else:
        nbytes = DTYPE_BYTES[kv_dtype]
    return b * kvh * L * d * 2 * nbytes


def plausible_generation(dev: Device, cols: dict, latency_s,
                         kv_dtype: str = "bf16") -> np.ndarray:
    """False for rows reading K/V faster than the memory they must come from allows.

    A KV cache that fits the L2 is compared with the L2 bandwidth (the benchmark re-reads a
    warm cache), a larger one with the HBM bandwidth, both with PLAUSIBLE_MARGIN.
    """
    kv = generation_bytes(cols, kv_dtype)
    bandwidth = np.where(kv <= dev.global_buffer.capacity_bytes,
                         dev.global_buffer_bandwidth_bytes_per_s, dev.memory.bandwidth_bytes_per_s)
    return kv / np.atleast_1d(np.asarray(latency_s, float)) <= PLAUSIBLE_MARGIN * bandwidth


def generation_supported(dev: Device, framework: str, cols: dict) -> np.ndarray:
    """Rows this model describes (see the module docstring for the kernel switches left out)."""
    head_dim = np.asarray(cols["head_dim"])
    ok = head_dim <= 256
    if "window" in cols:
        ok = ok & (np.asarray(cols["window"]) == 0)
    if framework == "trtllm":  # XQA serves groups <= 32; larger ones fall back to MMHA
        ok = ok & (np.asarray(cols["heads"]) // np.asarray(cols["kv_heads"]) <= 32)
    if framework == "sglang":  # head_dim 192 is padded by an extra pass
        ok = ok & (head_dim != 192)
    return ok


# ------------------------------------------------------------------------------------- keys
CONTEXT_KEY = ("batch", "isl", "heads", "kv_heads", "head_dim", "window")
GENERATION_KEY = ("batch", "isl", "step", "kv_len", "heads", "kv_heads", "head_dim", "window")


def _key(cols: dict, names: tuple[str, ...]) -> list[str]:
    present = [np.atleast_1d(np.asarray(cols[n])) for n in names if n in cols]
    return [",".join(str(v) for v in row) for row in zip(*present)]


def context_key(cols: dict) -> list[str]:
    """Shape key for the fit/held-out split (dtype left out: a shape is in the same half for
    every dtype, framework and device)."""
    return _key(cols, CONTEXT_KEY)


def generation_key(cols: dict) -> list[str]:
    return _key(cols, GENERATION_KEY)
