"""Leave-one-source-out validation of the whole-model predictions: the refits without each
source and their scores (here, beside the fits they repeat, since validation sits beside
calibration and cannot import it).

The fit/held-out split of the public end-to-end set (validation/models.py) holds out setups of
the same sources, engines and sweeps the constants were fitted on. Here each source is scored by
constants fitted without it: for every whole-model source S, everything fitted on whole-model
data (the host constants and the prefill GPU-time scale of each (software profile, system):
calibration/software.py) is refitted on the rows of every other source, and S's rows are
predicted with those constants. Sources that copy one another's measurements form one lineage
(`measurements.models.SOURCE_LINEAGE`): S's fold leaves its whole lineage out, and the interval
coverage and the between-source variance count a lineage once. A (profile, system) that no other source measured (fewer than
`MIN_ROWS` rows) falls back to the profile's sourced constants: what a user of a stack nobody
measured gets. Constants the shipped profile does not fit for a system stay as shipped.

Not refitted (structural choices, stated in measurements/harness.py and models.py): Splitwise's
sequential prefill of a batch and its engine (`vllm-eager`). The kernel constants come from the
operator tables, never from whole-model data, so they do not move between folds.

Cost: every row is simulated once (the simulations do not depend on the host constants); a fold
only re-times them (`Result.retimed`) while it fits.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...console import table_of
from ...fileio import write_csv_atomically
from ...hardware import load_system
from ...models import PRESETS
from ..constants.software import SAME_HOST, Host, load_software
from ..measurements.models import ModelRow, lineage, load_rows, row_software, stats
from ..uncertainty import (
    BATCH_BANDS,
    LEVEL,
    RESIDUAL_FIELDS,
    Bands,
    Case,
    batch_band,
    between_source_variance,
    device_class,
    phase_of,
)
from .software import MIN_ROWS, fit_host_rows, predict_host, simulate_rows

SLICES = ("source", "tp", "batch_band", "device", "phase")
# the prediction each error column of a scored row is of
PREDICTED = {"error_pct": "predicted_s", "shipped_error_pct": "shipped_predicted_s"}


@functools.cache
def system_device(system: str) -> str:
    """The device class of a system preset ("a100-80gb-x8" -> "A100")."""
    return device_class(load_system(system).device.name)


def host_system(system: str) -> str:
    """The system whose host constants a row's system uses (profiles fit them per host)."""
    return SAME_HOST.get(system, system)


@dataclass
class Fold:
    """What was refitted to score one left-out source."""
    source: str
    n_rows: int
    constants: list[dict[str, Any]] = field(default_factory=list)  # per (profile, system)


@dataclass
class LosoReport:
    """The leave-one-source-out validation (module docstring): a scored row per measured setup
    (predicted with constants fitted without its source, `error_pct`, and with the shipped
    constants, `shipped_error_pct`; signed, in percent), what each fold refitted, the sources or
    rows that could not be scored, and the coverage of the 80 % intervals per slice."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    folds: list[Fold] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def by(self, keys: tuple[str, ...], error: str = "error_pct") -> list[dict[str, Any]]:
        """MAPE and mean signed error (%) of the scored rows per value of `keys`."""
        out: dict[tuple, list[dict]] = {}
        for r in self.rows:
            out.setdefault(tuple(r[k] for k in keys), []).append(r)
        return [{**dict(zip(keys, k)), **stats(v, PREDICTED[error], error)}
                for k, v in sorted(out.items(), key=_order)]

    def overall(self, error: str = "error_pct") -> dict[str, float]:
        return stats(self.rows, PREDICTED[error], error)

    coverage: dict[str, Any] | None = None  # coverage(self), filled by loso_report()

    def to_json(self) -> dict[str, Any]:
        out = {"overall": self.overall(), "shipped_overall": self.overall("shipped_error_pct"),
               "slices": {k: self.by((k,)) for k in SLICES},
               "folds": [f.__dict__ for f in self.folds], "rows": self.rows,
               "skipped": self.skipped}
        if self.coverage is not None:
            out["coverage"] = self.coverage
        return out

    def to_table(self) -> list[Any]:
        """Per source, then per slice: the left-out and shipped errors and the coverage of the
        80 % intervals; then what each fold refitted."""
        cov = self.coverage or coverage(self)
        out: list[Any] = []
        for key in SLICES:
            name = key.replace("_", " ")
            t = table_of(f"Models, leave-one-source-out: per {name} (each source scored by "
                         "constants fitted without it; MAPE %, signed %)",
                         (name, "n", "MAPE", "mean signed", "shipped MAPE", "shipped signed",
                          "80 % interval covers"), left=(name,))
            shipped = {g[key]: g for g in self.by((key,), "shipped_error_pct")}
            covered = {g[key]: g for g in cov[key]}
            for g in self.by((key,)):
                s, c = shipped[g[key]], covered.get(g[key], {"coverage_pct": math.nan})
                t.add_row(str(g[key]), str(g["n"]), f"{g['mape_pct']:.1f}",
                          f"{g['mean_signed_pct']:+.1f}", f"{s['mape_pct']:.1f}",
                          f"{s['mean_signed_pct']:+.1f}", f"{c['coverage_pct']:.0f} %")
            o, s = self.overall(), self.overall("shipped_error_pct")
            t.add_row("all", str(o["n"]), f"{o['mape_pct']:.1f}", f"{o['mean_signed_pct']:+.1f}",
                      f"{s['mape_pct']:.1f}", f"{s['mean_signed_pct']:+.1f}",
                      f"{cov['overall']['coverage_pct']:.0f} %", style="bold")
            out.append(t)
        for fold in self.folds:
            for c in fold.constants:
                what = c["constants"] if isinstance(c["constants"], str) else \
                    "refitted on " + ", ".join(c["sources_fitted"])
                out.append(f"{fold.source} left out: {c['software']} on {c['system']}: {what}")
        return out


def _order(item: tuple[tuple, Any]) -> tuple:
    return tuple((0, v, "") if isinstance(v, (int, float))
                 else (0, BATCH_BANDS.index(v), "") if v in BATCH_BANDS else (1, 0, str(v))
                 for v in item[0])


def usable_rows(rows: list[ModelRow], skipped: list[str]) -> list[ModelRow]:
    """Rows a fold can fit or score: not flagged anomalous, a model preset, a software profile."""
    out = []
    for r in rows:
        if r.anomalous:
            continue
        if row_software(r) is None:
            skipped.append(f"{r.source} {r.framework}: no software profile")
        elif r.model not in PRESETS:
            skipped.append(f"{r.source} {r.model or '?'}: no model preset")
        else:
            out.append(r)
    return out


def loso_report(rows: list[ModelRow] | None = None, console=None) -> LosoReport:
    """`validate_loso` with its interval coverage, as `sim validate --loso` shows it; `console`
    (a rich Console on stderr) shows which fold runs."""
    if console is None:
        report = validate_loso(rows)
    else:
        with console.status("models: leave-one-source-out refits...") as status:
            report = validate_loso(rows, progress=lambda m: status.update(f"models: {m}..."))
    report.coverage = coverage(report)
    return report


def validate_loso(rows: list[ModelRow] | None = None,
                  progress: Callable[[str], None] | None = None) -> LosoReport:
    """Score every whole-model source with the whole-model constants refitted without it."""
    report = LosoReport()
    rows = usable_rows(load_rows() if rows is None else rows, report.skipped)
    by_software: dict[str, list[ModelRow]] = {}
    for r in rows:
        by_software.setdefault(row_software(r), []).append(r)
    results: dict[ModelRow, Any] = {}
    for name, mine in by_software.items():
        simulate_rows(mine, load_software(name), progress, results)
    for source in sorted({r.source for r in rows}):
        if progress:
            progress(f"fold: {source} left out")
        scored = [r for r in rows if r.source == source]
        fold = Fold(source, len(scored))
        for name, system in sorted({(row_software(r), host_system(r.system)) for r in scored}):
            profile = load_software(name)
            shipped = profile.host_for(system)
            group = [r for r in scored if row_software(r) == name
                     and host_system(r.system) == system]
            host, record = _fold_host(profile, system, source, by_software[name], results)
            fold.constants.append(record)
            loso = predict_host(group, host, results)
            ship = predict_host(group, shipped, results)
            for r, p, s in zip(group, loso, ship):
                report.rows.append(_row(r, name, float(p), float(s)))
        report.folds.append(fold)
    return report


def _fold_host(profile, system: str, source: str, mine: list[ModelRow],
               results: dict[ModelRow, Any]) -> tuple[Host, dict[str, Any]]:
    """The host constants of `profile` on `system` without `source`, and what was done."""
    record: dict[str, Any] = {"software": profile.name, "system": system}
    if system not in profile.host_systems:
        record["constants"] = "sourced (the shipped profile fits none on this system)"
        return profile.host_for(system), record
    train = [r for r in mine if lineage(r.source) != lineage(source)
             and host_system(r.system) == system]
    record["n_fit"] = len(train)
    record["sources_fitted"] = sorted({r.source for r in train})
    if len(train) < MIN_ROWS:
        record["constants"] = (f"sourced defaults ({len(train)} rows of other sources, "
                               f"need {MIN_ROWS} to fit)")
        return profile.host, record
    host, fitted = fit_host_rows(profile, train, results)
    record["constants"] = {n: getattr(host, n) for n in fitted}
    return host, record


def _row(r: ModelRow, software: str, predicted: float, shipped: float) -> dict[str, Any]:
    def err(p: float) -> float:
        return (p / r.measured_s - 1) * 100 if r.measured_s else math.nan

    return {"source": r.source, "model": r.model, "system": r.system,
            "device": system_device(r.system), "tp": r.tp, "software": software,
            "batch": r.batch, "batch_band": batch_band(r.batch), "prompt": r.prompt,
            "output": r.output, "metric": r.metric, "phase": phase_of(r.metric),
            "measured_s": r.measured_s, "predicted_s": predicted, "error_pct": err(predicted),
            "shipped_predicted_s": shipped, "shipped_error_pct": err(shipped)}


def _case(r: dict[str, Any]) -> Case:
    return Case(r["device"], r["tp"], r["batch"], r["prompt"], r["phase"])


def _log_ratio(r: dict[str, Any]) -> float:
    return math.log(r["measured_s"] / r["predicted_s"])


def coverage(report: LosoReport, level: float = LEVEL) -> dict[str, Any]:
    """How often the nominal `level` interval covers an unseen source's measurement: each
    source's rows get the interval built from the residuals of the other sources only (the
    query's rule, `uncertainty.Bands`), and are counted inside or outside it."""
    inside: list[dict[str, Any]] = []
    for source in sorted({r["source"] for r in report.rows}):
        bands = Bands.from_residuals((_case(r), _log_ratio(r), lineage(r["source"]))
                                     for r in report.rows
                                     if lineage(r["source"]) != lineage(source))
        for r in (r for r in report.rows if r["source"] == source):
            band = bands.band(_case(r))
            if band is None:
                continue
            hit = band.low * r["predicted_s"] <= r["measured_s"] <= band.high * r["predicted_s"]
            inside.append({**{k: r[k] for k in SLICES}, "inside": hit,
                           "extrapolated": bool(band.extrapolation),
                           "width_pct": (band.high - band.low) * 100})

    def share(rows: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(rows)
        return {"n": n, "coverage_pct": 100 * sum(r["inside"] for r in rows) / n if n else math.nan,
                "median_width_pct": float(np.median([r["width_pct"] for r in rows])) if n
                else math.nan}

    out: dict[str, Any] = {"level": level, "overall": share(inside),
                           "validated_cases": share([r for r in inside if not r["extrapolated"]]),
                           "extrapolated_cases": share([r for r in inside if r["extrapolated"]])}
    for key in SLICES:
        groups: dict[Any, list] = {}
        for r in inside:
            groups.setdefault(r[key], []).append(r)
        out[key] = [{key: k, **share(v)} for k, v in sorted(groups.items(), key=lambda kv: _order(((kv[0],), None)))]
    # one vote per source: the overall share is mostly the largest source's
    out["mean_over_sources_pct"] = float(np.mean([g["coverage_pct"] for g in out["source"]])) \
        if out["source"] else math.nan
    tau2, k = between_source_variance((_log_ratio(r), lineage(r["source"]))
                                      for r in report.rows)
    out["between_source_sd"] = math.sqrt(tau2)
    out["sources"] = k
    return out


def write_residuals(report: LosoReport, path) -> None:
    """The residual table the query's intervals read (`uncertainty.RESIDUAL_FIELDS`); its
    source column is the row's lineage (`measurements.models.lineage`), the unit the intervals
    count as one independent draw."""
    rows = [{**{k: r[k] for k in RESIDUAL_FIELDS if k in r}, "source": lineage(r["source"]),
             "log_ratio": f"{_log_ratio(r):.5f}"} for r in report.rows]
    write_csv_atomically(path, list(RESIDUAL_FIELDS), rows)
