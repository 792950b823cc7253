"""Attention: fused (FlashAttention style) prefill and decode, and the unfused kernel sequence.

Fused prefill (FlashAttention-2 schedule): a work item is one block of Br queries of one head;
it streams the K and V blocks (Bc keys each) it needs -- about half of them under a causal
mask -- and per block runs S = Q K^T and O += P V on the lanes' systolic arrays (closed form)
and the online softmax on the vector units (these two do not overlap within an item). Items run
in waves over the cores. Off-chip traffic: Q and O once; K and V once per head when the heads in
flight keep theirs in the global buffer, else once per query block. A small mapper picks (Br,
Bc) among the candidates that fit the local SRAM.

Fused decode (FlashDecoding): each new token reads the whole K and V cache of its sequence; the
cache is split over the cores along the sequence so that even batch 1 uses the whole device,
partial results are combined in a second tiny pass. Grouped-query attention reads each KV head
once for the whole group of query heads (this is where GQA saves its bandwidth), and the group's
queries form the M dimension of the systolic tile.

Unfused (what eager PyTorch and the measured layer do): Q K^T as a batched matmul that writes
the full score matrix, scale+mask, softmax, and A V as another batched matmul; GQA's K and V are
expanded to every query head first, so it saves nothing here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ....hardware.schema import DTYPE_BYTES, Device
from .elementwise import FLOPS_PER_ELEMENT
from .matmul import systolic_cycles, systolic_cycles_of_one


@dataclass(frozen=True)
class AttentionResult:
    """The template model's timing of one attention kernel (module docstring): time in seconds,
    FLOPs, off-chip bytes moved, and whether the memory or the compute side bounds it ("memory"
    or "compute")."""
    time_s: float
    flops: float
    bytes: float
    bound: str


def _ceil(a, b):
    return -(-a // b)


@functools.lru_cache(maxsize=8192)
def flash_prefill(dev: Device, batch: int, heads: int, kv_heads: int, q_len: int, kv_len: int,
                  head_dim: int, causal: bool = True, dtype: str = "fp16",
                  compute_eff: float = 1.0, memory_eff: float = 1.0) -> AttentionResult:
    b = DTYPE_BYTES[dtype]
    core, freq = dev.core, dev.frequency_hz
    half = dev.matrix_flops_per_s.fp16 or dev.matrix_flops_per_s.bf16
    # a cache dtype the device has no matrix rate for (an FP8 KV cache before Hopper) is
    # dequantised to 16 bits for the math: one byte a value read, the 16-bit rate
    speed = (dev.matrix_flops_per_s.get(dtype) or half) / half * compute_eff
    mem_bw = dev.memory.bandwidth_bytes_per_s * memory_eff

    Br = np.array([64, 128, 64, 128, 128, 256])
    Bc = np.array([32, 32, 64, 64, 128, 64])
    sram = (Br * head_dim + 2 * 2 * Bc * head_dim) * b + Br * Bc * 4
    ok = sram <= core.local_sram_bytes
    if not ok.any():
        ok = sram == sram.min()
    Br, Bc = Br[ok], Bc[ok]
    Br = np.minimum(Br, q_len)
    q_blocks = _ceil(q_len, Br)
    kv_blocks_full = _ceil(kv_len, Bc)
    # Under a causal mask query block i sees keys up to its end: on average about half of them
    # (plus the diagonal block) when the prompt is the whole sequence.
    if causal:
        offset = kv_len - q_len  # keys before the first query (a prefix cache)
        seen = np.minimum(offset + (np.arange(1, q_blocks.max() + 1)[None, :] * Br[:, None]), kv_len)
        mask = np.arange(1, q_blocks.max() + 1)[None, :] <= q_blocks[:, None]
        kv_blocks = (_ceil(seen, Bc[:, None]) * mask).sum(axis=1) / q_blocks
    else:
        kv_blocks = kv_blocks_full.astype(float)
    lanes = core.lane_count
    # The query block is split over the lanes along its rows.
    rows = _ceil(Br, lanes)
    mm = (systolic_cycles(rows, Bc, head_dim, core.systolic_array_height, core.systolic_array_width)
          + systolic_cycles(rows, head_dim, Bc, core.systolic_array_height,
                            core.systolic_array_width)) / speed
    per_core_vec = dev.vector_rate("fp32") / dev.core_count / freq  # FLOPs per cycle
    softmax = Br * Bc * FLOPS_PER_ELEMENT["softmax"] / per_core_vec
    items = batch * heads * q_blocks
    active = np.minimum(items, dev.core_count)
    load_bw = np.minimum(core.local_sram_bandwidth_bytes_per_cycle,
                         dev.global_buffer.bandwidth_bytes_per_cycle / active)
    load = 2 * Bc * head_dim * b / load_bw + dev.global_buffer.latency_s * freq
    per_block = np.maximum(mm + softmax, load)
    item_cycles = Br * head_dim * b / load_bw + kv_blocks * per_block + \
        Br * head_dim * b / (mem_bw / freq / active)
    core_s = _ceil(items, dev.core_count) * item_cycles / freq

    kv_bytes = batch * kv_heads * kv_len * head_dim * b * 2
    heads_in_flight = np.maximum(1, active // q_blocks)
    kv_resident = heads_in_flight * kv_len * head_dim * b * 2 <= dev.global_buffer.capacity_bytes / 2
    kv_reads = np.where(kv_resident, 1, q_blocks)
    traffic = 2 * batch * heads * q_len * head_dim * b + kv_bytes * kv_reads
    mem_s = traffic / mem_bw
    total = np.maximum(core_s, mem_s) + dev.memory.latency_s
    i = int(np.argmin(total))
    kv_eff = kv_blocks[i] * Bc[i] if causal else kv_len
    flops = 4.0 * batch * heads * q_len * min(kv_eff, kv_len) * head_dim
    return AttentionResult(float(total[i]), flops, float(traffic[i]),
                           "compute" if core_s[i] >= mem_s[i] else "memory")


@functools.lru_cache(maxsize=65536)
def flash_decode(dev: Device, batch: int, heads: int, kv_heads: int, kv_len: int, head_dim: int,
                 dtype: str = "fp16", compute_eff: float = 1.0,
                 memory_eff: float = 1.0) -> AttentionResult:
    b = DTYPE_BYTES[dtype]
    core, freq = dev.core, dev.frequency_hz
    group = heads // kv_heads
    kv_bytes = float(batch * kv_heads * kv_len * head_dim * b * 2)
    moved = kv_bytes + 2.0 * batch * heads * head_dim * b
    # Split the sequence so every core has work; a split shorter than 256 keys is not worth it.
    splits = max(1, min(_ceil(dev.core_count, batch * kv_heads), _ceil(kv_len, 256)))
    items = batch * kv_heads * splits
    active = min(items, dev.core_count)
    per_core_bw = core.local_sram_bandwidth_bytes_per_cycle * freq
    bandwidth = min(dev.memory.bandwidth_bytes_per_s * memory_eff, active * per_core_bw)
    t_mem = moved / bandwidth
    half = dev.matrix_flops_per_s.fp16 or dev.matrix_flops_per_s.bf16
    # a cache dtype the device has no matrix rate for (an FP8 KV cache before Hopper) is
    # dequantised to 16 bits for the math: one byte a value read, the 16-bit rate
    speed = (dev.matrix_flops_per_s.get(dtype) or half) / half * compute_eff
    keys = _ceil(kv_len, splits)
    h, w = core.systolic_array_height, core.systolic_array_width
    # q K^T (group x hd) @ (hd x keys) and p V (group x keys) @ (keys x hd), over the lanes
    mm = float(systolic_cycles_of_one(group, keys, head_dim, h, w)
               + systolic_cycles_of_one(group, head_dim, keys, h, w)) / speed / core.lane_count
    vec = group * keys * FLOPS_PER_ELEMENT["softmax"] / (dev.vector_rate("fp32") / dev.core_count / freq)
    t_core = _ceil(items, dev.core_count) * (mm + vec) / freq
    t = max(t_mem, t_core) + dev.memory.latency_s + dev.global_buffer.latency_s
    if splits > 1:  # combine the partial outputs: one more small pass
        t += dev.memory.latency_s
    flops = 4.0 * batch * heads * kv_len * head_dim
    return AttentionResult(t, flops, moved, "memory" if t_mem >= t_core else "compute")


def unfused_ops(batch: int, heads: int, q_len: int, kv_len: int, head_dim: int) -> list[tuple]:
    """The kernels of eager attention, as (name, model, args) for the op graph."""
    bh = batch * heads
    return [("attn_qk", "matmul", (q_len, kv_len, head_dim, bh)),
            ("attn_scale_mask", "stream", ("scale_mask", bh * q_len, kv_len)),
            ("attn_softmax", "stream", ("softmax", bh * q_len, kv_len)),
            ("attn_av", "matmul", (q_len, head_dim, kv_len, bh))]
