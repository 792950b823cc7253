"""Vector-unit operators: softmax, layernorm, RMSNorm, GELU, SwiGLU, residual add, RoPE,
embedding lookup, KV-cache append.

One streaming model serves them all. Rows (or, for purely elementwise ops, chunks) are spread
over the cores; read, compute and write are pipelined (the original serialised them), so
    time = max(bytes / achievable bandwidth, vector FLOPs / active vector units) + latency,
where the achievable bandwidth is the device's memory bandwidth (derated by a fitted,
per-operator efficiency) capped by what the *active* cores can pull: a short tensor leaves
cores idle. A row reduction (softmax, norms) keeps its row on chip when the fp32 working copy
is at most `single_pass_row_bytes` (by default a quarter of the local SRAM: room for several
rows in flight to hide latency; calibration fits it per kernel, since libraries differ);
otherwise it streams the row once for the statistics and once more to normalise.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ....hardware.schema import DTYPE_BYTES, Device

# Vector FLOPs per element (exp/tanh/rsqrt counted as ~4 FLOPs, as SFU throughput is ~1/4 FMA).
FLOPS_PER_ELEMENT = {
    "softmax": 8,     # max, subtract, exp, sum, divide
    "layernorm": 8,   # mean, variance, subtract, rsqrt, scale, shift
    "rmsnorm": 6,     # sum of squares, rsqrt, scale
    "gelu": 12,       # tanh approximation: cube, FMAs, tanh, products
    "swiglu": 8,      # silu(gate) = gate * sigmoid(gate), times up
    "residual": 1,
    "rope": 6,        # two multiplies and an add per rotated pair, both halves
    "embedding": 0,
    "kv_append": 0,
    "scale_mask": 2,  # scale and mask of attention scores (unfused attention)
    "add_layernorm": 9,  # residual add fused with the next layernorm
    "add_rmsnorm": 7,    # residual add fused with the next RMSNorm
}
# Tensors of the output's size read and written per op (norm weights are negligible).
TENSORS_READ = {"softmax": 1, "layernorm": 1, "rmsnorm": 1, "gelu": 1, "swiglu": 2,
                "residual": 2, "rope": 1, "embedding": 1, "kv_append": 1, "scale_mask": 1,
                "add_layernorm": 2, "add_rmsnorm": 2}
# Tensors written: one, except a fused add+norm (the new residual stream and the norm's output).
TENSORS_WRITTEN = {"add_layernorm": 2, "add_rmsnorm": 2}
ROW_REDUCTIONS = {"softmax", "layernorm", "rmsnorm", "add_layernorm", "add_rmsnorm"}
ELEMENTWISE_CHUNK = 4096  # elements a core takes at a time in a purely elementwise kernel


@dataclass(frozen=True)
class StreamResult:
    """The streaming model's timing of one vector-unit operator (module docstring): time in seconds
    (max of the memory and vector times, plus latency), FLOPs, off-chip bytes moved, and which
    side bounds it ("memory" or "compute")."""
    time_s: float
    flops: float
    bytes: float
    bound: str


def simulate_stream(dev: Device, op: str, rows: int, cols: int, dtype: str = "fp16",
                    memory_eff: float = 1.0, single_pass_row_bytes: float = 0.0) -> StreamResult:
    """Time of `op` over a rows x cols tensor (cols is the reduced dimension for norms and
    softmax; for the GELU of an FFN, rows = tokens and cols = hidden width)."""
    return _stream(dev, op, int(rows), int(cols), dtype, float(memory_eff),
                   float(single_pass_row_bytes))


@functools.lru_cache(maxsize=65536)
def _stream(dev: Device, op: str, rows: int, cols: int, dtype: str,
            memory_eff: float, single_pass_row_bytes: float) -> StreamResult:
    if op not in FLOPS_PER_ELEMENT:
        raise ValueError(f"unknown streaming op {op!r}")
    b = DTYPE_BYTES[dtype]
    elements = rows * cols
    core = dev.core
    if op in ROW_REDUCTIONS:
        active = min(dev.core_count, rows)
        limit = single_pass_row_bytes or core.local_sram_bytes / 4
        row_fits = cols * 4 <= limit
        read_passes = 1 if row_fits else 2
    else:
        active = min(dev.core_count, -(-elements // ELEMENTWISE_CHUNK))
        read_passes = 1
    moved = elements * b * (TENSORS_READ[op] * read_passes + TENSORS_WRITTEN.get(op, 1))
    per_core_bw = core.local_sram_bandwidth_bytes_per_cycle * dev.frequency_hz
    bandwidth = min(dev.memory.bandwidth_bytes_per_s * memory_eff, active * per_core_bw)
    t_mem = moved / bandwidth
    flops = float(elements * FLOPS_PER_ELEMENT[op])
    per_core_flops = dev.vector_rate("fp32") / dev.core_count  # reductions run in fp32
    t_vec = flops / (active * per_core_flops)
    latency = dev.memory.latency_s + dev.global_buffer.latency_s
    return StreamResult(max(t_mem, t_vec) + latency, flops, float(moved),
                        "memory" if t_mem >= t_vec else "compute")


def roofline_stream(dev: Device, op: str, rows: int, cols: int, dtype: str = "fp16",
                    memory_eff: float = 1.0) -> StreamResult:
    """Every operand read once, the result written once, at peak bandwidth and vector rate."""
    b = DTYPE_BYTES[dtype]
    elements = rows * cols
    moved = float(elements * b * (TENSORS_READ[op] + TENSORS_WRITTEN.get(op, 1)))
    flops = float(elements * FLOPS_PER_ELEMENT[op])
    t_m = moved / (dev.memory.bandwidth_bytes_per_s * memory_eff)
    t_c = flops / dev.vector_rate("fp32")
    return StreamResult(max(t_m, t_c), flops, moved, "memory" if t_m >= t_c else "compute")
