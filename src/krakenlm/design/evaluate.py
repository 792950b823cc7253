"""`evaluate(design, objective) -> row`: the one function grid, search and the runners share.

A row has the design's knobs, its key (design_key), feasibility and the reason when rejected,
die area, yield, $ per device and system, the deployment chosen (arch, tp, replicas, batch),
the latencies, the score (`perf`, in `perf_unit`), `perf_per_kusd` and, when the evaluator
knows a baseline, `perf_per_usd_vs_base`.

Timing is the template (tile) model for every design and for the baseline (the base system
evaluated with no knobs, through the same code): measured-kernel GPU calibrations describe a
real NVIDIA part and do not follow a change of cores or memory, so comparing a calibrated
A100 with template designs would mix two models.
"""

from __future__ import annotations

import math
from typing import Any

from ..hardware import load_system
from ..hardware.cost import system_cost
from ..hardware.schema import System
from ..models import get_preset
from ..simulator.graph import SimulationError
from ..simulator.memory import memory_use
from ..simulator.run import Simulator, arch_variant
from .build import build_system, infeasible_reason
from .knobs import DesignSpaceError, check_design, design_key
from .objectives import Objective

TIMING_MODE = "tile"
ROW_FIELDS = ("key", "feasible", "reason", "arch", "tp", "replicas", "batch", "ttft_s", "tpot_s",
              "e2e_s", "perf", "perf_unit", "perf_per_kusd", "perf_per_usd_vs_base",
              "die_area_mm2", "yield", "device_usd", "system_usd", "memory_technology",
              "memory_capacity_gb", "memory_bandwidth_gb_per_s", "peak_fp16_tflops",
              "devices")
# Fields that hold text whatever they look like: a key is a hex digest and may be all digits
# ("9555029436799798") or read as a number in exponent notation ("2923e78196840413").
TEXT_FIELDS = ("key", "reason", "arch", "perf_unit", "memory_technology")


def _tp_candidates(devices: int, fixed: int | None) -> list[int]:
    if fixed is not None:
        return [fixed]
    out, tp = [], 1
    while tp <= devices:
        if devices % tp == 0:
            out.append(tp)
        tp *= 2
    return out


class Evaluator:
    """Scores designs derived from one base system on one objective (keeps the base, the
    model configs and the baseline between calls; a worker process holds one). The baseline
    is the base with the knobs of `reference` (none by default; e.g. {"tp": 8} compares every
    design with the base at a fixed deployment)."""

    def __init__(self, base: System | str, objective: Objective, *, with_baseline: bool = True,
                 reference: dict[str, Any] | None = None):
        self.base = load_system(base) if isinstance(base, str) else base
        self.objective = objective
        self.config = get_preset(objective.model)
        self._configs: dict[tuple[str, int], Any] = {}
        self.baseline: dict[str, Any] | None = None
        if with_baseline:
            self.baseline = self.evaluate(reference or {})
            if not self.baseline["feasible"]:
                raise DesignSpaceError(f"the base system {self.base.name} cannot run the "
                                       f"objective ({objective.describe()}): "
                                       f"{self.baseline['reason']}; pick another base or workload")
            self.baseline["perf_per_usd_vs_base"] = 1.0

    # ------------------------------------------------------------------------------ helpers
    def _model(self, arch: str, tp: int):
        key = (arch, tp)
        if key not in self._configs:
            # the graph builder rejects a tp that does not split the heads (SimulationError)
            self._configs[key] = arch_variant(self.config, arch, tp)
        return self._configs[key]

    def _max_batch(self, sim: Simulator, cfg, tp: int) -> int:
        """The largest batch one replica's memory holds (memory use is linear in the batch)."""
        o = self.objective
        fused = sim.options.attention_path(cfg.head_dim) == "fused"

        def use(b: int):
            return memory_use(cfg, sim.system, tp, b, o.prompt_tokens, o.gen_tokens, sim.dtype,
                              fused, sim.precision)
        one, two = use(1), use(2)
        per_seq = two.total_bytes - one.total_bytes
        fixed = one.total_bytes - per_seq
        room = one.capacity_bytes - fixed
        return max(0, min(o.max_batch, int(room // per_seq)))

    def _latency(self, r) -> float:
        return {"ttft": r.ttft_s, "tpot": r.tpot_s, "e2e": r.e2e_s}[self.objective.metric]

    def _run(self, sim: Simulator, cfg, tp: int, batch: int):
        o = self.objective
        return sim.run(cfg, tp, batch, o.prompt_tokens, o.gen_tokens, check_memory=False)

    def _deploy(self, sim: Simulator, cfg, tp: int, replicas: int) -> tuple[dict | None, str]:
        """Best deployment at this tp: (result fields, "") or (None, reason)."""
        o = self.objective
        if o.kind == "latency":
            if self._max_batch(sim, cfg, tp) < o.batch:
                return None, f"batch {o.batch} does not fit in memory at tp {tp}"
            r = self._run(sim, cfg, tp, o.batch)
            lat = self._latency(r)
            if o.slo_s is not None and lat > o.slo_s:
                return None, f"{o.metric} {lat:.3g} s misses the SLO {o.slo_s:g} s at tp {tp}"
            return {"batch": o.batch, "r": r, "perf": 1.0 / lat}, ""
        hi = self._max_batch(sim, cfg, tp)
        if hi < 1:
            return None, f"the weights do not fit in memory at tp {tp}"
        r = self._run(sim, cfg, tp, hi)
        if o.slo_s is not None and self._latency(r) > o.slo_s:
            r1 = self._run(sim, cfg, tp, 1)
            if self._latency(r1) > o.slo_s:
                return None, (f"{o.metric} {self._latency(r1):.3g} s at batch 1 misses the SLO "
                              f"{o.slo_s:g} s at tp {tp}")
            lo, hi_bad, best = 1, hi, r1  # latency grows with the batch: bisect
            while hi_bad - lo > 1:
                mid = (lo + hi_bad) // 2
                rm = self._run(sim, cfg, tp, mid)
                if self._latency(rm) <= o.slo_s:
                    lo, best = mid, rm
                else:
                    hi_bad = mid
            hi, r = lo, best
        return {"batch": hi, "r": r,
                "perf": replicas * hi * o.gen_tokens / r.e2e_s}, ""

    # ------------------------------------------------------------------------------ the API
    def evaluate(self, design: dict[str, Any]) -> dict[str, Any]:
        design = check_design(design)
        o = self.objective
        row: dict[str, Any] = {k: None for k in ROW_FIELDS}
        row.update({f"knob_{k}": v for k, v in design.items()})
        row["key"] = design_key(design)
        system = build_system(self.base, design)
        cost = system_cost(system)
        dev = system.device
        row.update({"die_area_mm2": cost.area.total_mm2, "yield": cost.yield_fraction, "device_usd": cost.device_usd,
                    "system_usd": cost.system_usd, "memory_technology": dev.memory.technology,
                    "memory_capacity_gb": dev.memory.capacity_bytes / 1e9,
                    "memory_bandwidth_gb_per_s": dev.memory.bandwidth_bytes_per_s / 1e9,
                    "peak_fp16_tflops": (dev.matrix_flops_per_s.fp16 or 0) / 1e12,
                    "devices": system.device_count, "perf_unit": o.perf_unit})
        arch = design.get("arch", o.arch)
        row["arch"] = arch
        reason = infeasible_reason(system, design)
        if reason:
            return _reject(row, reason)
        tps = _tp_candidates(system.device_count, design.get("tp"))
        if not tps or tps[0] > system.device_count:
            return _reject(row, f"tp {design.get('tp')} exceeds the {system.device_count} devices")
        sim = Simulator(system, mode=TIMING_MODE)
        best, reasons = None, []
        for tp in tps:
            if system.device_count % tp:
                reasons.append(f"tp {tp} does not divide {system.device_count} devices")
                continue
            try:
                cfg = self._model(arch, tp)
                got, why = self._deploy(sim, cfg, tp, system.device_count // tp)
            except SimulationError as exc:
                got, why = None, str(exc).split(";")[0]
            if got is None:
                reasons.append(why)
                continue
            got["tp"] = tp
            if best is None or got["perf"] > best["perf"]:
                best = got
        if best is None:
            return _reject(row, "; ".join(dict.fromkeys(reasons)))
        r = best["r"]
        row.update(feasible=True, reason="", tp=best["tp"],
                   replicas=system.device_count // best["tp"], batch=best["batch"],
                   ttft_s=r.ttft_s, tpot_s=r.tpot_s, e2e_s=r.e2e_s, perf=best["perf"],
                   perf_per_kusd=best["perf"] / (cost.system_usd / 1e3))
        if self.baseline is not None and self.baseline.get("perf_per_kusd"):
            row["perf_per_usd_vs_base"] = row["perf_per_kusd"] / self.baseline["perf_per_kusd"]
        return row


def _reject(row: dict[str, Any], reason: str) -> dict[str, Any]:
    row.update(feasible=False, reason=reason)
    return row


def evaluate(design: dict[str, Any], objective: Objective,
             base: System | str = "a100-80gb-x8") -> dict[str, Any]:
    """Score one design (a dict of knobs) on one objective against the base system."""
    return Evaluator(base, objective).evaluate(design)


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
