"""TensorRT-LLM's decode attention: its XQA / masked-MHA dispatch (`generation/trtllm-xqa`) and
a discrete stand-in for it (`generation/trtllm-discrete`).

Discrete form (`generation/trtllm-discrete`; what fits the Blackwell tables, where TensorRT-LLM
runs its trtllm-gen kernels instead of XQA: xqaDispatcher.cpp, mUseTllmGen = isSM100Family()):

    blocks    = max(min(floor(kv_len / MULTIBLOCK_MIN_TOKENS), floor(MULTIBLOCK_WAVES * SMs
                    / (batch * kv_heads))), 1)           (blocks per sequence, discrete)
    items     = batch * kv_heads * blocks,  chunk as in attention.py with `blocks` for splits
    item      = MHA:  mha_item_s + chunk * head_dim * 2 * kv_bytes / mha_sm_bandwidth
                GQA:  item_s + ceil(group / q_tile_rows) * head_dim * row_tile_s
                      + chunk * head_dim * 2 * kv_bytes / sm_bandwidth
    floor     = (mha_floor_s if MHA else floor_s) + (blocks > 1) * (mha_multiblock_s | multiblock_s)
    time      = floor + smooth_max(exec, kv / bandwidth; p = overlap_exponent)
                (exec, kv, bandwidth as in attention.py)

The structure is the query-tile rows `q_tile_rows` (8 or 16).

Dispatch form (`generation/trtllm-xqa`): TensorRT-LLM's launch decisions, read in
cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/ (decoderXQAImplJIT.cpp,
decoderXQAImplCommon.h, decoderXQAConstants.h, decoderXQAImplJIT/kernelUtils.cpp,
decoderMaskedMultiheadAttentionLaunch.h) and cpp/kernels/xqa/ (mha.h, mha.cu, mha_sm90.cu):
  * MHA (group == 1): masked MHA ("MMHA"); XQA is not used for vanilla MHA at beam 1.
  * GQA: XQA when `batch * kv_heads * max(1, kv_len // XQA_MIN_HISTORY) * XQA_ENABLE_FACTOR
    >= SMs` (mayHavePerfGain), MMHA otherwise; the QGMMA form uses XQA for every GQA row.
  * XQA kernel (structure `kernel`): "hmma" (mha.cu; 16-row query tiles, warpTile.y =
    roundUp(group, 16); RoPE and the cache append in a preprocessing launch, part of
    `floor_s`) or "qgmma" (mha_sm90.cu, Hopper FP8-KV only, supportConfigQGMMA; ctaNbQHeads =
    roundUp(group, 8); RoPE in the kernel when appliesRoPEInXqaKernel, else `rope_s`).

XQA: one CTA per (sequence, KV head, block); blocks per sequence (computeMultiBlockCount):
    mb = kv_len // XQA_MIN_HISTORY;  mb = min(mb, round(sqrt(8 mb)));  mb = max(mb, 1)
    waves = batch * kv_heads * mb / SMs;  if waves > XQA_TARGET_WAVES: mb = floor(mb * 8 / waves)
    mb = max(min(mb, XQA_MAX_SUB_SEQ // batch), 1)
  each block streams ceil(kv_len / mb) tokens in XQA_TILE_TOKENS steps:
    cta = item_s + tiles_q * d_pad * (row_tile_s + chunk * token_tile_s)
          + chunk * d_pad * 2 * kv_bytes / sm_bandwidth          (tiles_q = ceil(group / rows))
    time = floor_s + (mb > 1) (multiblock_s + mb merge_s) + [rope_s] + waves(cta, slots)
           + items * group * head_s / SMs

`merge_s`: with mb > 1 the last CTA of a sequence merges the mb partial outputs itself, one
block after another (mha_sm90.cu, the `isLastCta` loop): a serial chain after the waves.

Structure `large_tile_residency`: mha_sm90.cu's launch bound gives 3 resident CTAs per SM
while ctaNbQHeads x headElems <= 128 x 16 and 2 beyond (SMs x 2/3 slots for large tiles).

MMHA: one CTA per (sequence, query head, tile): a GQA group reads its K/V once per query head.
Block size by occupancy (mmha_launch_kernel_ex, `mmha_threads`); tiles per sequence
(multi_block_grid_setup): min(ceil(SMs / (batch heads)), ceil((kv_len + 1) / keys_per_loop)),
keys_per_loop = 1024 / (d_pad / 8) * 8. A CTA whose chunk reaches one K-loop iteration
(threads / (d_pad / 8) keys) pays `mha_loop_s` once:
    cta  = mha_item_s + [mha_loop_s] + chunk * d_pad * 2 * kv_bytes / mha_sm_bandwidth
    time = mha_floor_s + (tiles > 1) mha_multiblock_s + waves(cta)

Head sizes are padded to 64/128/256 inside both kernels (XQA headElems, MMHA dh_max): `d_pad`
times the CTA, the valid `head_dim` the HBM bytes.

waves(cta): CTAs run in waves of `slots` (SMs x resident CTAs); each wave, the partial last one
with its own bytes, takes the smooth maximum (p = overlap_exponent) of one CTA's latency and the
wave's bytes at the HBM (or warm L2) bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....hardware.schema import DTYPE_BYTES
from ..base import SERVING, Conditions, Setting, one_of, register
from ..numerics import smooth_max
from ..params import Param
from .attention import (
    DECODE_BLOCK,
    GENERATION_PARAMS,
    GenerationForm,
    decode_columns,
    generation_ceilings,
    kv_bandwidth,
    sm90,
)

# The constants of both forms: the smooth form's (attention.GENERATION_PARAMS) plus these
DISCRETE_PARAMS = GENERATION_PARAMS + (
    Param("mha_floor_s", "seconds", 7e-6, "fixed cost of the op when group == 1 (masked MHA)"),
    Param("multiblock_s", "seconds", 2e-6,
          "extra fixed cost of a GQA launch split into several blocks per sequence (reduction)"),
    Param("mha_multiblock_s", "seconds", 2e-6,
          "extra fixed cost of an MHA launch split into several blocks per sequence"),
    Param("mha_sm_bandwidth", "positive", 6e10, "bytes/s one MHA CTA streams from memory"),
    Param("row_tile_s", "seconds", 1e-8,
          "GQA CTA time per head_dim element per Q_TILE_ROWS-row tile of query heads"),
)
XQA_PARAMS = DISCRETE_PARAMS + (
    Param("token_tile_s", "seconds", 1e-11,
          "XQA CTA time per cached token, head_dim element and query-row tile: the QK^T and PV "
          "MMAs and the softmax of one tile row"),
    Param("mha_loop_s", "seconds", 1e-6,
          "masked-MHA CTA cost of entering its unrolled K loop (chunk >= keys one iteration "
          "covers)"),
    Param("merge_s", "seconds", 2e-7,
          "XQA multi-block merge, per block of a sequence: the last CTA to finish walks the "
          "blocks' partial outputs and row sums one after another (a few loads in flight), so "
          "the merge is a serial chain of one L2 round trip per block"),
)
ROPE = Param("rope_s", "seconds", 2e-6,
             "the separate RoPE/KV-append launch the Hopper QGMMA XQA kernel needs when the "
             "rotary dimension exceeds the head (otherwise applied inside the kernel)")
MULTIBLOCK_MIN_TOKENS = 256  # fewest cached tokens per block before a sequence is split
MULTIBLOCK_WAVES = 4  # blocks per sequence are capped at this many waves of CTAs over the SMs
XQA_MIN_HISTORY = 128  # kMinHistoryTokensPerBlock (decoderXQAConstants.h)
XQA_ENABLE_FACTOR = 4.0  # kEnableMinBlockFactor: XQA only with >= SMs / 4 CTAs
XQA_TARGET_WAVES = 8  # kTargetWaveFactor: blocks are cut back beyond 8 waves
XQA_MAX_SUB_SEQ = 6000  # getXqaMaxNumSubSeq: workspace for sub-sequences
XQA_TILE_TOKENS = 64  # tokens a CTA loads per step (warpTile.x / gemm0CtaTileNbTokens)
MMHA_MIN_THREADS = 256  # THDS_PER_BLOCK of the masked-MHA launch
MMHA_MAX_THREADS = 1024
MMHA_BLOCKS_PER_SM = 4  # 256-thread MMHA blocks resident per SM (the launcher's occupancy)
HMMA_Q_ROWS = 16  # XQA mha.cu: query rows per MMA tile
QGMMA_Q_ROWS = 8  # XQA mha_sm90.cu: query heads padded to multiples of 8 (swapped A/B)
QGMMA_SMALL_TILE_ELEMS = 128 * 16  # mha_sm90.cu launch bound: 3 CTAs/SM up to this rows x head
QGMMA_LARGE_TILE_SLOTS = 2.0 / 3.0  # ... 2 beyond it: a large-tile CTA holds 3/2 of the SM


def padded_head_dim(d) -> np.ndarray:
    """The head size the kernels tile (XQA headElems, MMHA dh_max): 64, 128 or 256."""
    d = np.asarray(d, float)
    return np.where(d <= 64, 64.0, np.where(d <= 128, 128.0, 256.0))


def xqa_blocks(sms: int, batch, kv_heads, kv_len) -> np.ndarray:
    """XQA blocks per sequence and KV head (computeMultiBlockCount)."""
    mb = np.floor(np.asarray(kv_len, float) / XQA_MIN_HISTORY)
    mb = np.maximum(np.minimum(mb, np.round(np.sqrt(mb * 8.0))), 1.0)
    waves = np.asarray(batch, float) * np.asarray(kv_heads, float) * mb / sms
    mb = np.where(waves > XQA_TARGET_WAVES, np.floor(mb * XQA_TARGET_WAVES / waves), mb)
    mb = np.maximum(mb, 1.0)
    return np.maximum(np.minimum(mb, np.floor(XQA_MAX_SUB_SEQ / np.asarray(batch, float))), 1.0)


def xqa_worth_it(sms: int, batch, kv_heads, kv_len) -> np.ndarray:
    """mayHavePerfGain: enough XQA CTAs (counting one per 128 cached tokens) for SMs / 4."""
    blocks = np.maximum(1.0, np.floor(np.asarray(kv_len, float) / XQA_MIN_HISTORY))
    return (np.asarray(batch, float) * np.asarray(kv_heads, float) * blocks * XQA_ENABLE_FACTOR
            >= sms)


def mmha_threads(sms: int, ctas) -> np.ndarray:
    """Threads per masked-MHA block (mmha_launch_kernel_ex): 256 when the CTAs fill
    MMHA_BLOCKS_PER_SM waves, else 256 x min(ceil(MMHA_BLOCKS_PER_SM SMs / CTAs), 4) rounded
    down to 256/512/1024."""
    ctas = np.asarray(ctas, float)
    factor = np.minimum(np.ceil(MMHA_BLOCKS_PER_SM * sms / ctas),
                        MMHA_MAX_THREADS / MMHA_MIN_THREADS)
    t = MMHA_MIN_THREADS * factor
    t = np.where(t >= 1024, 1024.0, np.where(t >= 512, 512.0, 256.0))
    return np.where(ctas >= MMHA_BLOCKS_PER_SM * sms, float(MMHA_MIN_THREADS), t)


def mmha_tiles(sms: int, batch, heads, kv_len, d_pad) -> np.ndarray:
    """Masked-MHA blocks per (sequence, head): multi-block mode fills the SMs once, at most one
    unrolled K loop of a 1024-thread block per tile."""
    keys_per_loop = MMHA_MAX_THREADS / (np.asarray(d_pad, float) / 8.0) * 8.0
    by_sms = np.ceil(sms / (np.asarray(batch, float) * np.asarray(heads, float)))
    by_len = np.ceil((np.asarray(kv_len, float) + 1.0) / keys_per_loop)
    return np.maximum(np.minimum(by_sms, by_len), 1.0)


def waves_time(items, slots, cta_s, cta_bytes, bandwidth, q: float) -> np.ndarray:
    """Full waves of `slots` CTAs, then the partial last one; each the smooth maximum of one
    CTA's latency and the wave's bytes at `bandwidth`."""
    full = np.floor(items / slots)
    tail = items - full * slots
    t_full = smooth_max(cta_s, slots * cta_bytes / bandwidth, q)
    t_tail = np.where(tail > 0, smooth_max(cta_s, tail * cta_bytes / bandwidth, q), 0.0)
    return full * t_full + t_tail


def multiblock_count(sms: int, batch, kv_heads, kv_len) -> np.ndarray:
    """Blocks per sequence of the discrete form: one per MULTIBLOCK_MIN_TOKENS cached tokens,
    at most MULTIBLOCK_WAVES waves of CTAs over the SMs, at least one."""
    pairs = np.asarray(batch, float) * np.asarray(kv_heads, float)
    by_tokens = np.floor(np.asarray(kv_len, float) / MULTIBLOCK_MIN_TOKENS)
    return np.maximum(np.minimum(by_tokens, np.floor(MULTIBLOCK_WAVES * sms / pairs)), 1.0)


class _TrtllmForm(GenerationForm):
    frameworks = ("trtllm",)

    def starts(self, setting: Setting, structure) -> tuple[dict[str, float], ...]:
        """The bandwidth-like constants at half their device ceilings, besides the initial
        values: from those alone the bounded fit can stop in a worse basin (the per-CTA
        bandwidths near their ceilings, the per-CTA times compensating)."""
        ceilings = generation_ceilings(setting.dev)
        return ({name: 0.5 * ceilings[name] for name in ("sm_bandwidth", "mha_sm_bandwidth",
                                                          "l2_gain")},)


@dataclass(frozen=True)
class DiscreteStructure:
    """The structural choice of the discrete TensorRT-LLM decode form (module docstring): the query
    heads of a GQA group one tile serves (8 or 16 rows)."""
    q_tile_rows: int = 16  # query heads of a GQA group one pass serves (8 or 16)

    def __post_init__(self) -> None:
        one_of("q_tile_rows", self.q_tile_rows, (8, 16))


class TrtllmDiscrete(_TrtllmForm):
    """The discrete stand-in for TensorRT-LLM's decode (the module docstring)."""

    name = "generation/trtllm-discrete"
    Structure = DiscreteStructure

    def structures(self, setting: Setting, measured=None) -> tuple:
        return (DiscreteStructure(8), DiscreteStructure(16))

    def params(self, setting: Setting, structure, measured=None) -> tuple[Param, ...]:
        return self.bounded(setting, DISCRETE_PARAMS)

    def predict(self, setting: Setting, cols, constants, structure: DiscreteStructure,
                conditions: Conditions = SERVING) -> np.ndarray:
        dev, p = setting.dev, constants
        b, h, kvh, d, L = decode_columns(cols)
        nbytes = DTYPE_BYTES[setting.variant]
        sms = dev.core_count
        group = h / kvh
        mha = group == 1
        splits = multiblock_count(sms, b, kvh, L)
        items = b * kvh * splits
        chunk = np.ceil(np.ceil(L / splits) / DECODE_BLOCK) * DECODE_BLOCK
        stream_s = chunk * d * 2 * nbytes
        item = np.where(mha, p["mha_item_s"] + stream_s / p["mha_sm_bandwidth"],
                        p["item_s"] + np.ceil(group / structure.q_tile_rows) * d
                        * p["row_tile_s"] + stream_s / p["sm_bandwidth"])
        floor_s = (np.where(mha, p["mha_floor_s"], p["floor_s"])
                   + np.where(splits > 1, np.where(mha, p["mha_multiblock_s"],
                                                   p["multiblock_s"]), 0.0))
        exec_s = np.ceil(items / sms) * item + items * group * p["head_s"] / sms
        kv = b * kvh * L * d * 2 * nbytes
        bandwidth = kv_bandwidth(dev, kv, p, conditions)
        return floor_s + smooth_max(exec_s, kv / bandwidth, p["overlap_exponent"])


@dataclass(frozen=True)
class XqaStructure:
    """The structural choices of the XQA dispatch form (module docstring): which XQA kernel runs
    ("hmma": mha.cu; "qgmma": mha_sm90.cu, Hopper FP8 KV) and, for qgmma, whether large query
    tiles keep 2 resident CTAs per SM instead of 3."""
    kernel: str = "hmma"  # the XQA kernel: "hmma" (mha.cu) or "qgmma" (mha_sm90.cu, sm90)
    large_tile_residency: bool = False  # qgmma: 2 resident CTAs of large tiles, not 3

    def __post_init__(self) -> None:
        one_of("kernel", self.kernel, ("hmma", "qgmma"))


class TrtllmXqa(_TrtllmForm):
    """TensorRT-LLM's XQA / masked-MHA dispatch (the module docstring)."""

    name = "generation/trtllm-xqa"
    Structure = XqaStructure

    def structures(self, setting: Setting, measured=None) -> tuple:
        hmma = (XqaStructure("hmma"),)
        if not sm90(setting.dev):  # the QGMMA kernel is sm90-only (supportConfigQGMMA)
            return hmma
        return hmma + (XqaStructure("qgmma", False), XqaStructure("qgmma", True))

    def params(self, setting: Setting, structure: XqaStructure,
               measured=None) -> tuple[Param, ...]:
        rope = (ROPE,) if structure.kernel == "qgmma" else ()
        return self.bounded(setting, XQA_PARAMS[:-1] + rope + XQA_PARAMS[-1:])

    def predict(self, setting: Setting, cols, constants, structure: XqaStructure,
                conditions: Conditions = SERVING) -> np.ndarray:
        """Seconds per row (batch, heads, kv_heads, head_dim, kv_len; optionally rope_dim,
        the rotary dimension, None: the whole head)."""
        dev, p = setting.dev, constants
        b, h, kvh, d, kv_len = decode_columns(cols)
        kv_bytes = DTYPE_BYTES[setting.variant]
        sms = dev.core_count
        qgmma = structure.kernel == "qgmma"
        group = h / kvh
        dp = padded_head_dim(d)
        xqa = (group > 1) & (qgmma | xqa_worth_it(sms, b, kvh, kv_len))
        footprint = b * kvh * kv_len * d * 2 * kv_bytes
        bandwidth = kv_bandwidth(dev, footprint, p, conditions)
        q = p["overlap_exponent"]

        blocks = xqa_blocks(sms, b, kvh, kv_len)
        x_items = b * kvh * blocks
        x_chunk = np.ceil(np.ceil(kv_len / blocks) / XQA_TILE_TOKENS) * XQA_TILE_TOKENS
        q_tiles = np.ceil(group / (QGMMA_Q_ROWS if qgmma else HMMA_Q_ROWS))
        x_slots = sms * np.where(qgmma & (q_tiles * QGMMA_Q_ROWS * dp > QGMMA_SMALL_TILE_ELEMS)
                                 & structure.large_tile_residency, QGMMA_LARGE_TILE_SLOTS, 1.0)
        x_cta = (p["item_s"] + q_tiles * dp * (p["row_tile_s"] + x_chunk * p["token_tile_s"])
                 + x_chunk * dp * 2 * kv_bytes / p["sm_bandwidth"])
        merge = np.where(blocks > 1, p["multiblock_s"] + blocks * p["merge_s"], 0.0)
        x_time = p["floor_s"] + merge
        if qgmma:  # in-kernel RoPE needs rotary_dim <= head_size
            rope = _col_or_zero(cols, "rope_dim", dp)
            x_time = x_time + np.where(rope > d, p["rope_s"], 0.0)
        x_time = (x_time
                  + waves_time(x_items, x_slots, x_cta, x_chunk * d * 2 * kv_bytes, bandwidth, q)
                  + x_items * group * p["head_s"] / sms)

        tiles = mmha_tiles(sms, b, h, kv_len, dp)
        m_chunk = np.ceil(kv_len / tiles)
        threads = mmha_threads(sms, b * h)
        first_loop = m_chunk >= threads / (dp / 8.0)
        m_cta = (p["mha_item_s"] + np.where(first_loop, p["mha_loop_s"], 0.0)
                 + m_chunk * dp * 2 * kv_bytes / p["mha_sm_bandwidth"])
        m_time = (p["mha_floor_s"] + np.where(tiles > 1, p["mha_multiblock_s"], 0.0)
                  + waves_time(b * h * tiles, sms * MMHA_MAX_THREADS / threads, m_cta,
                               m_chunk * d * 2 * kv_bytes, bandwidth, q))
        return np.where(xqa, x_time, m_time)


def _col_or_zero(cols, name: str, like: np.ndarray) -> np.ndarray:
    if name not in cols:
        return np.zeros_like(like)
    return np.atleast_1d(np.asarray(cols[name], float))


TRTLLM_DISCRETE = register(TrtllmDiscrete())
TRTLLM_XQA = register(TrtllmXqa())
