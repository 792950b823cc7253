"""Operator-level validation against NVIDIA's measured kernel tables (aiconfigurator-core).

For every shipped GPU calibration file and every (framework, family, variant) it holds, the
same rows `sim calibrate` used (measurements/kernel_tables.datasets: the same filters) are
predicted with the entry's kernel form, structure and constants under the harness conditions
the tables were measured with (measurements/harness.py, with the entry's `harness:`), and the
error is reported on the fit half and on the held-out half separately (the half is the CRC-32
of the shape, split.fit_half). Needs the optional extra
`krakenlm[calibrate]`; without it this level is skipped with the command that installs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..constants import gpu_kernels as gpu_store
from ..measurements import aiconfigurator as aic
from ..measurements import harness
from ..measurements.kernel_tables import datasets as _table_datasets
from ..measurements.kernel_tables import with_nccl
from ..measurements.split import fit_half, mape

PLOT_POINTS_PER_GROUP = 300  # predicted-vs-measured points kept per group for the plot


@dataclass
class KernelReport:
    """The operator-level validation against the measured kernel tables (module docstring): a group
    per (device, framework, version, family, variant) with its row count and its MAPE in percent
    on the fit and held-out halves (and the median signed held-out error), a sample of points for
    plots and CSV, and what was skipped."""
    groups: list[dict[str, Any]] = field(default_factory=list)
    points: list[dict[str, Any]] = field(default_factory=list)  # a sample, for plots and CSV
    skipped: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"groups": self.groups, "skipped": self.skipped}


def _system_for(cal: gpu_store.DeviceCalibration) -> str | None:
    system = cal.meta.get("system")
    return system if system in aic.SYSTEMS else None


def validate_kernels(calibrations: list[gpu_store.DeviceCalibration] | None = None,
                     root: str | None = None,
                     progress: Callable[[str], None] | None = None) -> KernelReport:
    report = KernelReport()
    try:
        aic.tables_root(root)
    except aic.CalibrationSourceError as exc:
        report.skipped.append(f"operators (kernel tables): {exc}")
        return report
    cals = list(gpu_store.shipped()) if calibrations is None else calibrations
    if not cals:
        report.skipped.append("operators (kernel tables): no GPU calibration files")
    rng = np.random.default_rng(0)
    for cal in cals:
        system = _system_for(cal)
        if system is None:
            report.skipped.append(f"{cal.path}: its system {cal.meta.get('system')!r} has no tables")
            continue
        frameworks = [fw for fw in cal.frameworks if fw != "nccl"]
        if progress:
            progress(f"{cal.device_key}: reading tables")
        _, sets = _table_datasets(system, frameworks or None, root)
        nccl_entry = cal.entry("nccl", "nccl", "any")
        if nccl_entry is not None:
            sets = with_nccl(sets, nccl_entry.params, nccl_entry.structure)
        for ds in sets:
            entry = cal.entry(ds.framework, ds.family, ds.variant)
            if entry is None:
                continue
            predicted = entry.kernel.predict(ds.setting, ds.cols, entry.params, entry.structure,
                                             harness.conditions(ds.source, ds.family,
                                                                entry.harness))
            half = fit_half(ds.keys)
            err = predicted / ds.latency_s - 1
            group = {"device": cal.device_key, "system": system, "framework": ds.framework,
                     "version": ds.version, "family": ds.family, "variant": ds.variant,
                     "n": len(err), "mape_fit_pct": mape(predicted[half], ds.latency_s[half]),
                     "mape_held_out_pct": mape(predicted[~half], ds.latency_s[~half]),
                     "median_signed_held_out_pct": float(np.median(err[~half]) * 100)
                     if (~half).any() else float("nan")}
            report.groups.append(group)
            keep = rng.choice(len(err), min(PLOT_POINTS_PER_GROUP, len(err)), replace=False)
            for i in keep:
                report.points.append({"device": cal.device_key, "framework": ds.framework,
                                      "family": ds.family, "variant": ds.variant,
                                      "half": "fit" if half[i] else "held_out",
                                      "measured_s": float(ds.latency_s[i]),
                                      "predicted_s": float(predicted[i])})
    return report


def summary(report: KernelReport, family: str | None = None) -> dict[str, dict[str, float]]:
    """Held-out MAPE per device (and family), weighted by rows."""
    out: dict[str, dict[str, float]] = {}
    for g in report.groups:
        if family and g["family"] != family:
            continue
        s = out.setdefault(g["device"], {"n": 0, "abs": 0.0})
        half_n = g["n"] / 2
        s["n"] += g["n"]
        s["abs"] += g["mape_held_out_pct"] * half_n
    return {d: {"n": s["n"], "mape_held_out_pct": s["abs"] / (s["n"] / 2)} for d, s in out.items()}
