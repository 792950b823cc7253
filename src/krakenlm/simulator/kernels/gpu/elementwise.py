"""Memory-bound elementwise kernels (norms, activations, residual adds, RoPE, KV-cache writes):
forms `elementwise/row` (one CTA per row) and `elementwise/flat` (a flat grid).

Such a kernel streams its operands once: its time is a launch floor plus the bytes it reads
and writes over the bandwidth it reaches,

    streaming = bytes / (bandwidth * memory_efficiency * (max(cache_speedup, 1) if the bytes
                                                          fit in the L2 cache))
    per_row   = ceil(rows / SMs) * (bytes / rows) / row_bandwidth        (`elementwise/row`)
    time      = floor_s + max(streaming, per_row)

Row kernels (norms, SiLU-and-mul, rotary) run one CTA per row, so a few long rows stream at what
one CTA pulls (`row_bandwidth`, at most the SM's L1 load path); which form a measured kernel
is, the fit chooses. A working set that fits the L2 was just written or is re-read.

The tables' constants are fitted on their one purely memory-bound kernel, static FP8
quantisation (aiconfigurator's `scale_matrix_perf`: read 16-bit, write 8-bit); the vLLM
kernels' kinds (OPS_OF_KIND) on Vidur's layer rows (calibration/layers.py). Bytes per element
of each op are in kernels/template/elementwise.py (TENSORS_READ, TENSORS_WRITTEN).
"""

from __future__ import annotations

import numpy as np

from ....hardware.schema import Device
from ..base import SERVING, Conditions, KernelForm, Setting, register
from ..params import Param, l2_over_dram, sm_load_bytes_per_s, with_ceilings

PARAMS = (
    Param("floor_s", "seconds", 2e-6, "launch floor of a small kernel"),
    Param("memory_efficiency", "fraction", 0.85, "fraction of the memory bandwidth reached"),
    Param("cache_speedup", "positive", 1.3, "bandwidth gain when the bytes fit in the L2 cache"),
)
ROW_BANDWIDTH = Param("row_bandwidth", "positive", 3e10, "bytes/s one CTA streams along its row")


def ceilings(dev: Device) -> dict[str, float]:
    """No CTA pulls more than its SM's L1 load path (without the ceiling a fit runs a per-row
    rate the data do not bind off to any value), and no cache speeds a kernel up more than the
    L2 out-delivers DRAM."""
    return {"row_bandwidth": sm_load_bytes_per_s(dev), "cache_speedup": l2_over_dram(dev)}


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


def streaming_s(dev: Device, moved: np.ndarray, p) -> np.ndarray:
    """The bytes over the bandwidth reached (L2-resident working sets at the cache's gain)."""
    bandwidth = dev.memory.bandwidth_bytes_per_s * p["memory_efficiency"]
    in_cache = moved <= dev.global_buffer.capacity_bytes
    bandwidth = np.where(in_cache, bandwidth * max(p["cache_speedup"], 1.0), bandwidth)
    return moved / bandwidth


class Flat(KernelForm):
    """A flat elementwise grid: launch floor plus streaming (the module docstring)."""

    family = "elementwise"
    name = "elementwise/flat"

    def params(self, setting: Setting, structure, measured=None) -> tuple[Param, ...]:
        return with_ceilings(PARAMS, ceilings(setting.dev))

    def key(self, cols) -> list[str]:
        return [f"{r},{c}" for r, c in zip(cols["rows"], cols["cols"])]

    def predict(self, setting: Setting, cols, constants, structure,
                conditions: Conditions = SERVING) -> np.ndarray:
        """Seconds per row of `cols` (bytes moved; rows)."""
        moved = np.asarray(cols["bytes"], float)
        return constants["floor_s"] + streaming_s(setting.dev, moved, constants)


class Row(Flat):
    """One CTA per row: streaming, or the rows' waves at one CTA's rate if slower."""

    name = "elementwise/row"

    def params(self, setting: Setting, structure, measured=None) -> tuple[Param, ...]:
        return with_ceilings(PARAMS + (ROW_BANDWIDTH,), ceilings(setting.dev))

    def predict(self, setting: Setting, cols, constants, structure,
                conditions: Conditions = SERVING) -> np.ndarray:
        p = constants
        moved = np.asarray(cols["bytes"], float)
        streaming = streaming_s(setting.dev, moved, p)
        if "rows" in cols:
            rows = np.maximum(np.asarray(cols["rows"], float), 1.0)
            per_row = np.ceil(rows / setting.dev.core_count) * (moved / rows) / p["row_bandwidth"]
            streaming = np.maximum(streaming, per_row)
        return p["floor_s"] + streaming


ROW = register(Row())  # tried first: a row kernel, then a flat grid
FLAT = register(Flat())
