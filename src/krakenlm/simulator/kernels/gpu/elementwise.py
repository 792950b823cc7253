"""Memory-bound elementwise kernels (norms, activations, residual adds, RoPE, KV-cache writes).

Such a kernel streams its operands once: its time is a launch floor plus the bytes it reads
and writes over the bandwidth it reaches,

    streaming = bytes / (bandwidth * memory_efficiency * (cache_speedup if the bytes fit in
                                                               the L2 cache))
    per_row   = ceil(rows / SMs) * (bytes / rows) / row_bandwidth
    time      = floor_s + max(streaming, per_row)

The second term is how row kernels (norms, SiLU-and-mul, rotary) are written: one CTA per row
walking the row's columns, so a few long rows leave the SMs idle and stream at what one CTA
pulls (`row_bandwidth`, at most the SM's L1 load path: params_for): Vidur's H100 SiLU-and-mul
over one token takes 15 us at 28672 columns and 2 us at 3584. A kernel written as a flat
elementwise grid has no such term (`row_kernel` 0, ROW_STRUCTURES, chosen on the fit half).

A working set that fits in the L2 cache (device.global_buffer.capacity_bytes) is served from
it when it was just written (the previous kernel's output) or re-read: the measurements show
it, e.g. H100 streams ~4 TB/s below its 50 MB L2 and ~3.0 TB/s (90 % of HBM3) above.

The constants are fitted on the one purely memory-bound kernel of the measured tables: static
FP8 quantisation (read a 16-bit tensor, write it as 8-bit; aiconfigurator's
`scale_matrix_perf`). Norms and activations do a few more FLOPs per byte, which the vector
units hide; their bytes per element are in krakenlm.simulator.elementwise (TENSORS_READ).
"""

from __future__ import annotations

import numpy as np

from ....hardware.schema import Device
from ..params import Param, l2_over_dram, sm_load_bytes_per_s, with_ceilings

PARAMS = (
    Param("floor_s", "seconds", 2e-6, "launch floor of a small kernel"),
    Param("memory_efficiency", "fraction", 0.85, "fraction of the memory bandwidth reached"),
    Param("cache_speedup", "positive", 1.3, "bandwidth gain when the bytes fit in the L2 cache"),
    Param("row_bandwidth", "positive", 3e10, "bytes/s one CTA streams along its row"),
)



# Structural choice for a measured kernel (lowest fit-half error wins): one CTA per row
# (norms, activations, rotary), or a flat elementwise grid whose rows never limit it (the
# static FP8 quantiser of the kernel tables, whose fit ran the per-row rate to 3e12-1e14 B/s,
# 10-300x what one SM can load, before the ceiling). The flat form fixes row_bandwidth at 0:
# it is not read.
ROW_STRUCTURES = ({}, {"row_kernel": 0.0, "row_bandwidth": 0.0})


def params_for(dev: Device) -> tuple[Param, ...]:
    """PARAMS with `dev`'s ceilings: no CTA pulls more than its SM's L1 load path (before the
    ceiling, H100's residual-add fit ran the per-row rate to 5e118 B/s), and no cache speeds a
    kernel up more than the L2 out-delivers DRAM."""
    return with_ceilings(PARAMS, {"row_bandwidth": sm_load_bytes_per_s(dev),
                                  "cache_speedup": l2_over_dram(dev)})


# The kinds of streaming kernel that get constants of their own where measured (a norm does not
# stream like a residual add), and the graph's streaming ops each kind times.
OPS_OF_KIND = {"norm": ("layernorm", "rmsnorm", "add_layernorm", "add_rmsnorm"),
               "activation": ("gelu", "swiglu"), "rope": ("rope",),
               "residual": ("residual", "embedding", "kv_append", "scale_mask")}


def kind_of(op: str) -> str:
    """The streaming kind of a graph op ("any" when it has none)."""
    for kind, ops in OPS_OF_KIND.items():
        if op in ops:
            return kind
    return "any"


def predict(dev: Device, cols: dict[str, np.ndarray], p: dict[str, float]) -> np.ndarray:
    moved = np.asarray(cols["bytes"], float)
    bandwidth = dev.memory.bandwidth_bytes_per_s * p["memory_efficiency"]
    in_cache = moved <= dev.global_buffer.capacity_bytes
    bandwidth = np.where(in_cache, bandwidth * max(p["cache_speedup"], 1.0), bandwidth)
    streaming = moved / bandwidth
    if "rows" in cols and "row_bandwidth" in p and p.get("row_kernel", 1.0):
        rows = np.maximum(np.asarray(cols["rows"], float), 1.0)
        per_row = np.ceil(rows / dev.core_count) * (moved / rows) / p["row_bandwidth"]
        streaming = np.maximum(streaming, per_row)
    return p["floor_s"] + streaming


def shape_key(cols: dict[str, np.ndarray]) -> list[str]:
    return [f"{r},{c}" for r, c in zip(cols["rows"], cols["cols"])]
