"""Layer-level validation: the operators of real model layers, timed on real GPUs.

`layer_measurements.csv` holds public per-operator GPU times of Llama-2-70B layers (Vidur,
MLSys 2024: one rank's shard of a TP = 1/2/4/8 layer, 1 to 4096 tokens, A100 and H100, CUDA
kernel time per operator) and NCCL all-reduces of the layer's activations. Each op becomes the
operator spec the simulator's graph uses for it (graph.py) and is timed exactly as a model run
times it (timing.py), under the software profile whose kernels the measurement used (Vidur's
sarathi-serve layers call cuBLAS through torch and vLLM's norm / activation / rotary kernels:
profile `vllm-v0`). Errors are reported per op and per device, and for the sum of the four GEMMs
of a layer, which is what decides prefill time.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...hardware import load_system
from ...models import PRESETS
from ..constants import gpu_kernels as gpu_store
from ..constants.software import load_software
from ..constants.template import default_calibration
from ..measurements.layers import op_spec
from ..measurements.models import data_path, stats
from ..timing import OpTimer

SOFTWARE = {"pytorch": "vllm-v0", "vllm": "vllm-v0", "trtllm": "trtllm"}
GEMM_OPS = ("qkv_proj", "o_proj", "mlp_up_proj", "mlp_down_proj")


@dataclass
class LayerReport:
    """The layer-level validation (module docstring): a row per measured operator (measured and
    predicted seconds, signed error in percent), a row per (source, system, TP, tokens) for the
    sum of a layer's four GEMMs, and what was skipped; `by()` gives the error statistics per
    group."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    gemm_sums: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def by(self, keys: tuple[str, ...], rows: list[dict] | None = None) -> list[dict[str, Any]]:
        out: dict[tuple, list[dict]] = {}
        for r in self.rows if rows is None else rows:
            out.setdefault(tuple(r[k] for k in keys), []).append(r)
        return [{**dict(zip(keys, k)), **stats(v)} for k, v in sorted(out.items())]

    def to_json(self) -> dict[str, Any]:
        return {"overall": stats(self.rows), "by_system_op": self.by(("system", "op")),
                "gemm_layer_sums": self.by(("system", "tp"), self.gemm_sums),
                "rows": self.rows, "skipped": self.skipped}


def validate_layers(path: str | Path | None = None, mode: str = "simulate") -> LayerReport:
    path = Path(path) if path else data_path("layer_measurements.csv")
    report = LayerReport()
    timers: dict[tuple[str, str], OpTimer] = {}
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        cfg = PRESETS.get(r["model"])
        software = SOFTWARE.get(r["framework"])
        if cfg is None or software is None:
            report.skipped.append(f"{r['source']} {r['model']} {r['framework']}")
            continue
        tp, tokens = int(r["tp"]), int(r["tokens"])
        spec = op_spec(r["op"], cfg, tp, tokens)
        if spec is None:
            report.skipped.append(f"{r['source']} op {r['op']}")
            continue
        key = (r["system"], software)
        if key not in timers:
            system = load_system(r["system"])
            timers[key] = OpTimer(system, load_software(software), mode, "fp16",
                                  default_calibration(), gpu_store.for_device(system.device))
        predicted = timers[key](spec).time_s
        measured = float(r["value_ms"]) * 1e-3
        report.rows.append({"source": r["source"], "model": r["model"], "system": r["system"],
                            "tp": tp, "op": r["op"], "tokens": tokens, "measured_s": measured,
                            "predicted_s": predicted,
                            "error_pct": (predicted / measured - 1) * 100})
    sums: dict[tuple, dict[str, float]] = {}
    for r in report.rows:
        if r["op"] in GEMM_OPS:
            s = sums.setdefault((r["source"], r["system"], r["tp"], r["tokens"]),
                                {"measured_s": 0.0, "predicted_s": 0.0, "n": 0})
            s["measured_s"] += r["measured_s"]
            s["predicted_s"] += r["predicted_s"]
            s["n"] += 1
    for (source, system, tp, tokens), s in sorted(sums.items()):
        if s["n"] == len(GEMM_OPS):
            report.gemm_sums.append({"source": source, "system": system, "tp": tp,
                                     "tokens": tokens, "op": "4 GEMMs of a layer",
                                     "measured_s": s["measured_s"], "predicted_s": s["predicted_s"],
                                     "error_pct": (s["predicted_s"] / s["measured_s"] - 1) * 100})
    return report
