"""`krakenlm sim calibrate --source vidur`: streaming kernels per kind, from real model layers.

The kernel tables measure one purely memory-bound kernel (FP8 quantisation) and it streams at
~90 % of HBM bandwidth. The norm, activation, rotary and residual kernels of real serving
stacks do not: Vidur's per-operator profiles of Llama-2-70B layers (MLSys 2024; vLLM-derived
sarathi-serve kernels, validation_data/layer_measurements.csv) show vLLM's RMSNorm at ~1.1
TB/s on an H100 with a 6 us floor, SiLU-and-mul at ~1.9 TB/s, rotary at ~1.5 TB/s; vLLM's
own kernel benchmark (vllm-project/vllm#11241, H100) has its RMSNorm at ~0.7 TB/s. So each
kind gets its own constants of an elementwise form (kernels/gpu/elementwise.py), fitted on the rows
of `layer_measurements.csv` in the fit half of measurements/split.py (the CRC-32 of the layer's
setup, `split_key`) and scored on the held-out ones; GEMM and all-reduce rows only validate. They are stored under the `vllm`
framework of the device (families `elementwise`, variants `norm`, `activation`, `rope`,
`residual`): the profiles whose kernels are vLLM's use them; the others keep the constants
fitted on their own quantisation kernel.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from ...hardware import load_system
from ...models import PRESETS
from ..constants.gpu_kernels import DeviceCalibration, Entry
from ..kernels.base import Setting
from ..kernels.template.elementwise import TENSORS_READ, TENSORS_WRITTEN
from ..measurements.kernel_tables import Dataset
from ..measurements.layers import op_spec
from ..measurements.models import data_path
from .fit import FitResult, fit_dataset

SOURCE = "vidur"  # the measured layers' harness: CUDA kernel times, nothing to take away
# Vidur op -> the variant (kind of streaming kernel, gpu/elementwise.OPS_OF_KIND) it calibrates
KINDS = {"rmsnorm": "norm", "mlp_act": "activation", "rope": "rope", "residual_add": "residual"}


def split_key(row: dict[str, str]) -> str:
    """The measured layer's setup, which split.fit_half hashes: every op of one layer (and the
    same layer on every system) falls in the same half."""
    return f"{row['model']},{row['tp']},{row['tokens']}"


def streamed_bytes(op: str, rows: int, cols: int, bytes_per_value: int = 2) -> float:
    return rows * cols * bytes_per_value * (TENSORS_READ[op] + TENSORS_WRITTEN.get(op, 1))


def layer_systems(path: str | Path | None = None) -> list[str]:
    """The systems the layer measurements have streaming-kernel rows for (what `calibrate_layers`
    can fit)."""
    path = Path(path) if path else data_path("layer_measurements.csv")
    with open(path, newline="") as fh:
        return sorted({r["system"] for r in csv.DictReader(fh)
                       if r["op"] in KINDS and r["model"] in PRESETS})


def calibrate_layers(system_name: str, cal: DeviceCalibration,
                     path: str | Path | None = None) -> list[tuple[str, FitResult]]:
    """Fit each streaming kind of `system_name` and store it in `cal` (framework vllm)."""
    path = Path(path) if path else data_path("layer_measurements.csv")
    system = load_system(system_name)
    version = cal.frameworks.get("vllm", {}).get("version", "")
    with open(path, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["system"] == system_name and r["op"] in KINDS]
    out = []
    for vidur_op, kind in KINDS.items():
        sel = [r for r in rows if r["op"] == vidur_op and r["model"] in PRESETS]
        if not sel:
            continue
        moved, n_rows, lat, keys = [], [], [], []
        for r in sel:
            spec = op_spec(vidur_op, PRESETS[r["model"]], int(r["tp"]), int(r["tokens"]))
            op, rows_, cols_ = spec.args
            moved.append(streamed_bytes(op, rows_, cols_))
            n_rows.append(rows_)
            lat.append(float(r["value_ms"]) * 1e-3)
            keys.append(split_key(r))
        cols = {"bytes": np.array(moved), "rows": np.array(n_rows)}
        dataset = Dataset(SOURCE, Setting(system, "vllm", kind), "elementwise", cols,
                          np.array(lat), keys)
        result = fit_dataset(dataset, f"{system_name}, Vidur layers")
        cal.put("vllm", version, "elementwise", kind,
                Entry(result.form, result.structure, result.params, result.harness,
                      result.summary(),
                      [f"fitted on the fit half of Vidur's Llama-2-70B {vidur_op} rows in "
                       "validation_data/layer_measurements.csv (MLSys 2024, MIT)"]))
        out.append((kind, result))
    return out
