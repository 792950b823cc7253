"""FlashAttention-3's decode on Hopper (sm90) as vLLM and SGLang call it: varlen, paged, split
(form `generation/fa3`, offered for vLLM and SGLang on sm90 devices only).

The form follows the launch decisions of FlashAttention's hopper/ code as vLLM's fork
(vllm-project/flash-attention) and upstream (Dao-AILab) state them -- flash_api.cpp
(mha_fwd, mha_fwd_get_scheduler_metadata, get_num_splits, get_pack_gqa), heuristics.h
(num_splits_heuristic), flash_prepare_scheduler.cu (prepare_varlen_num_blocks), tile_size.h
(tile_size_fwd_sm90) -- and how the two frameworks call it (vLLM
v1/attention/backends/flash_attn.py; SGLang flashattention_backend.py), timed with the split-KV
constants of attention.py plus four of its own. Structure: the split cap (`graph_splits`), the
version of FA3's split heuristic (`rule`), whether the key loop is bound by its MMAs
(`mma_bound`, FP8 caches only).

Tile (tile_size_fwd_sm90; a decode's paged cache is read without TMA, `get_pagedkv_tma`): the
query heads of a GQA group are packed into the rows of one tile (PackGQA, always on for a paged
non-TMA cache), so a CTA serves one (sequence, KV head, split) with `block_m` rows and streams
`block_n`-key tiles:

    16-bit: head_dim 64: 192 x 160;  128: 64 x 128 (one MMA warpgroup while the packed group
            fits 64 rows, use_one_mma_wg), else 128 x 128;  192: 128 x 96;  256: 128 x 80
    FP8:    head_dim 64: 192 x 160;  128: 128 x 160;  192: 128 x 160;  256: 128 x 128 without
            intra-warpgroup overlap ("PagedKV uses more registers so we disabled
            IntraWGOverlap"): its softmax and MMAs serialise (`serial_gain`)

Splits: `num_splits` is fixed once per launch as an upper bound, then each sequence gets its own
count in prepare_varlen_num_blocks (the scheduler metadata vLLM computes ahead of the step):

    static  = graph_splits, batch <= 512 (vLLM passes flash_attn_max_num_splits_for_cuda_graph
              = 32 whenever the step fits its full CUDA graphs, max_cudagraph_capture_size)
              otherwise num_splits_heuristic(kv_heads x m_blocks, SMs, n_blocks), batch 1 for a
              varlen launch; `rule` "vllm-flash-attn" (within 0.95 of the best wave efficiency,
              x0.85 below 4 blocks per split, none up to 8 blocks with >= 32 tiles) or
              "upstream" (0.85, none up to 4 blocks); no split above batch 992
    dynamic = clip(ceil(n_blocks / ceil(batch m_blocks n_blocks x 1.1 x kv_heads / SMs)),
                   1, static)                       (aims at ~SMs / 1.1 CTAs in all)

With static > 1 the Split kernel runs even where a sequence gets one split: fp32 partials
(`split_item_s` per CTA) and a combine kernel (`multiblock_s`, `combine_row_s` per row). The
kernel is persistent (one CTA per SM takes tiles from a semaphore):

    items  = batch x kv_heads x m_blocks x dynamic;  chunk = ceil(n_blocks / dynamic) block_n
    item   = item_s + chunk head_dim 2 kv_bytes / sm_bandwidth (x (1 + serial_gain): FP8 at
             head_dim > 192) + [split kernel] split_item_s
             [mma_bound] chunk max(head_dim 2 kv_bytes / sm_bandwidth, mma_key) in place of the
             stream, mma_key = 4 block_m head_dim / (tensor peak per SM x mma_efficiency)
             (x (1 + serial_gain): FP8 at head_dim > 192)
    exec   = ceil(items / SMs) item + items group head_s / SMs
             + [split] batch heads dynamic combine_row_s / SMs + batch seq_s
    time   = floor_s + [split] multiblock_s + smooth_max(exec, kv / bandwidth; p = overlap_exponent)

A producer warpgroup gathers the paged K and V tiles (cp.async; with FP8 it also transposes V)
while the MMA warpgroups compute all block_m rows of the tile, of which only `group` are real
query heads: either side can bind. `seq_s` is the varlen tile scheduler's walk over the
per-sequence block counts (31 sequences per warp step), which grows with the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....hardware.schema import DTYPE_BYTES
from ..base import SERVING, Conditions, Setting, one_of, register
from ..numerics import smooth_max
from ..params import Param
from .attention import (
    GENERATION_PARAMS,
    MULTIBLOCK,
    SPLITKV_FRAMEWORKS,
    GenerationForm,
    decode_columns,
    kv_bandwidth,
    sm90,
)

SPLIT_MAX = 128  # num_splits_heuristic's max_splits in get_num_splits
ONE_PREPARE_CTA_BATCH = 992  # PREPARE_VARLEN_MAX_BATCHES_1CTA: larger batches never split
DYNAMIC_MARGIN = 1.1  # prepare_varlen_num_blocks: "10% margin" on blocks per SM
GRAPH_SPLITS_BATCH = 512  # vLLM: max_cudagraph_capture_size default, min(2 max_num_seqs, 512)
ONE_WG_ROWS = 64  # use_one_mma_wg: head_dim 128 with a packed group of at most 64 rows


def tile(head_dim, group, fp8: bool) -> tuple[np.ndarray, np.ndarray]:
    """(block_m, block_n) of tile_size_fwd_sm90 for a decode launch (paged cache, no TMA)."""
    d = np.asarray(head_dim, float)
    if fp8:
        bn = np.where(d <= 64, 160.0, np.where(d <= 96, 128.0, np.where(d <= 192, 160.0, 128.0)))
        bm = np.where(d <= 96, 192.0, 128.0)
        return bm, bn
    one_wg = (d == 128) & (np.asarray(group, float) <= ONE_WG_ROWS)
    bn = np.where(d <= 64, 160.0, np.where(d <= 96, 128.0, np.where(
        d <= 128, 128.0, np.where(d <= 192, 96.0, 80.0))))
    bm = np.where(d <= 96, 192.0, np.where(one_wg, 64.0, 128.0))
    return bm, bn


RULES = ("vllm-flash-attn", "upstream")  # versions of num_splits_heuristic (heuristics.h)
PARAMS = tuple(q for q in GENERATION_PARAMS if q.name != "mha_item_s") + (
    MULTIBLOCK,
    Param("split_item_s", "seconds", 3e-7,
          "extra time of a CTA of FA3's kernel compiled with Split: fp32 partial output and "
          "log-sum-exp to the accumulation buffers, the per-sequence split count read"),
    Param("combine_row_s", "seconds", 3e-8,
          "SM time per (sequence, query head, split) row of FA3's combine kernel: read the fp32 "
          "partials, rescale by their log-sum-exp, write the output"),
    Param("seq_s", "seconds", 1e-8,
          "time per sequence of FA3's varlen tile scheduler: a persistent CTA walks the "
          "per-sequence block counts to find its tile's sequence"),
)
SERIAL = Param("serial_gain", "positive", 0.5,
               "extra per-key CTA time of FA3's FP8 kernel at head_dim > 192 with a paged cache, "
               "compiled without intra-warpgroup overlap of softmax and MMAs (FP8 caches only): a "
               "fraction of the gather time, or with mma_bound of the MMA time (the softmax's "
               "share)")
MMA = Param("mma_efficiency", "fraction", 0.7,
            "fraction of the tensor-core peak one FA3 decode CTA's QK^T and PV MMAs reach on its "
            "block_m query rows, padding included (mma_bound only)")
# vLLM's CUDA-graph split cap (32 up to batch 512), or FA3's own heuristic in either version;
# SGLang launches without a cap
SPLIT_CHOICES = {"vllm": ((32, "vllm-flash-attn"), (0, "vllm-flash-attn"), (0, "upstream")),
                 "sglang": ((0, "vllm-flash-attn"), (0, "upstream"))}


def _heuristic_one(tiles: float, sms: int, n_blocks: float, rule: str) -> float:
    """num_splits_heuristic (heuristics.h) for one launch, in the version `rule` (RULES)."""
    if tiles >= 0.8 * sms or n_blocks <= 4:
        return 1.0  # the long-KV-head-beyond-L2 branch needs >= 2 SMs of query blocks: not decode
    vllm = rule == "vllm-flash-attn"
    if vllm and n_blocks <= 8 and tiles >= 32:
        return 1.0
    s = np.arange(1, int(min(SPLIT_MAX, sms, n_blocks)) + 1, dtype=float)
    waves = tiles * s / sms
    eff = waves / np.ceil(waves)
    if vllm:
        eff = np.where(np.floor(n_blocks / s) < 4, eff * 0.85, eff)
    return float(s[np.argmax(eff >= (0.95 if vllm else 0.85) * eff.max())])


def heuristic_splits(tiles, sms: int, n_blocks, rule: str) -> np.ndarray:
    """num_splits_heuristic per row, evaluated once per distinct (tiles, n_blocks)."""
    t, n = np.broadcast_arrays(np.asarray(tiles, float), np.asarray(n_blocks, float))
    keys, inverse = np.unique(np.stack([t.ravel(), n.ravel()], axis=1), axis=0,
                              return_inverse=True)
    values = np.array([_heuristic_one(a, sms, b, rule) for a, b in keys])
    return values[inverse.reshape(-1)].reshape(t.shape)


def splits(sms: int, batch, kv_heads, head_dim, group, kv_len, fp8: bool, graph_splits: int,
           rule: str) -> dict[str, np.ndarray]:
    """The launch's static split bound, each sequence's dynamic count and the tile counts."""
    b = np.asarray(batch, float)
    kvh = np.asarray(kv_heads, float)
    bm, bn = tile(head_dim, group, fp8)
    n_blocks = np.ceil(np.asarray(kv_len, float) / bn)
    m_blocks = np.ceil(np.asarray(group, float) / bm)
    static = heuristic_splits(kvh * m_blocks, sms, n_blocks, rule)  # batch taken as 1 (varlen)
    if graph_splits > 0:
        static = np.where(b <= GRAPH_SPLITS_BATCH, graph_splits, static)
    static = np.where(b > ONE_PREPARE_CTA_BATCH, 1.0, static)
    per_sm = np.ceil(b * m_blocks * n_blocks * DYNAMIC_MARGIN * kvh / sms)
    dynamic = np.clip(np.ceil(n_blocks / per_sm), 1.0, static)
    return {"static": static, "dynamic": dynamic, "block_m": bm, "block_n": bn,
            "n_blocks": n_blocks, "m_blocks": m_blocks}


@dataclass(frozen=True)
class Fa3Structure:
    """The structural choices of the FA3 decode form (module docstring): the split cap vLLM passes
    for steps its CUDA graphs cover, up to GRAPH_SPLITS_BATCH sequences (0: FA3's own heuristic),
    which version of num_splits_heuristic runs (RULES), and whether the key loop is bound by its
    MMAs rather than the gather (FP8 caches)."""
    graph_splits: int = 0  # the launch's split cap up to GRAPH_SPLITS_BATCH (0: the heuristic)
    rule: str = "vllm-flash-attn"  # which num_splits_heuristic (RULES)
    mma_bound: bool = False  # the key loop is the larger of the gather and the MMAs (FP8)

    def __post_init__(self) -> None:
        one_of("rule", self.rule, RULES)
        if self.graph_splits < 0:
            raise ValueError(f"graph_splits must be 0 or more, not {self.graph_splits}")


class Fa3Decode(GenerationForm):
    """FlashAttention-3's split decode on Hopper (the module docstring)."""

    name = "generation/fa3"
    Structure = Fa3Structure
    frameworks = SPLITKV_FRAMEWORKS

    def offered(self, setting: Setting) -> bool:
        return setting.framework in self.frameworks and sm90(setting.dev)

    def structures(self, setting: Setting, measured=None) -> tuple:
        plain = tuple(Fa3Structure(g, r) for g, r in SPLIT_CHOICES[setting.framework])
        if setting.variant != "fp8":
            return plain
        return plain + tuple(Fa3Structure(g, r, True) for g, r in SPLIT_CHOICES[setting.framework])

    def params(self, setting: Setting, structure: Fa3Structure,
               measured=None) -> tuple[Param, ...]:
        fp8 = setting.variant == "fp8"
        return self.bounded(setting, PARAMS + ((SERIAL,) if fp8 else ()) + (
            (MMA,) if structure.mma_bound else ()))

    def predict(self, setting: Setting, cols, constants, structure: Fa3Structure,
                conditions: Conditions = SERVING) -> np.ndarray:
        """Seconds per row (batch, heads, kv_heads, head_dim, kv_len). FA3 runs Q, K and V in
        the cache's dtype (the variant): its MMAs at that dtype's tensor peak."""
        dev = setting.dev
        b, h, kvh, d, kv_len = decode_columns(cols)
        fp8 = setting.variant == "fp8"
        kv_bytes = DTYPE_BYTES[setting.variant]
        bandwidth = kv_bandwidth(dev, b * kvh * kv_len * d * 2 * kv_bytes, constants, conditions)
        mma_flops_per_sm_s = dev.matrix_flops_per_s.get("fp8" if fp8 else "bf16") / dev.core_count
        return time(dev.core_count, b, h, kvh, d, kv_len, kv_bytes, fp8, constants, structure,
                    bandwidth, mma_flops_per_sm_s)


def time(sms: int, b, h, kvh, d, kv_len, kv_bytes: float, fp8: bool, p, structure: Fa3Structure,
         bandwidth, mma_flops_per_sm_s: float) -> np.ndarray:
    """Seconds per row (the module docstring's formula); `bandwidth` is the KV cache's (HBM, or
    warm L2 under a benchmark's replays), `mma_flops_per_sm_s` one SM's tensor peak in the
    kernel's dtype (read by `mma_bound` only)."""
    group = h / kvh
    s = splits(sms, b, kvh, d, group, kv_len, fp8, structure.graph_splits, structure.rule)
    split = s["static"] > 1
    dyn = s["dynamic"]
    items = b * kvh * s["m_blocks"] * dyn
    chunk = np.ceil(s["n_blocks"] / dyn) * s["block_n"]
    stream = chunk * d * 2 * kv_bytes / p["sm_bandwidth"]
    if structure.mma_bound:  # the larger of the gather and the MMAs on the padded tile
        mma = chunk * 4 * s["block_m"] * d / (mma_flops_per_sm_s * p["mma_efficiency"])
        if fp8:  # no intra-warpgroup overlap at head_dim 256: the softmax adds to the MMAs
            mma = np.where(d > 192, mma * (1.0 + p["serial_gain"]), mma)
        stream = np.maximum(stream, mma)
    elif fp8:  # no intra-warpgroup overlap in the FP8 paged kernel at head_dim 256
        stream = np.where(d > 192, stream * (1.0 + p["serial_gain"]), stream)
    item = p["item_s"] + stream + np.where(split, p["split_item_s"], 0.0)
    exec_s = (np.ceil(items / sms) * item + items * group * p["head_s"] / sms
              + np.where(split, b * h * dyn * p["combine_row_s"] / sms, 0.0)
              + b * p["seq_s"])
    kv = b * kvh * kv_len * d * 2 * kv_bytes
    floor = p["floor_s"] + np.where(split, p["multiblock_s"], 0.0)
    return floor + smooth_max(exec_s, kv / bandwidth, p["overlap_exponent"])


FA3_DECODE = register(Fa3Decode())
