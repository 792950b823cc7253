"""Whole-model validation: every public end-to-end measurement (measurements/models.py) simulated
with its software profile under its source's harness (measurements/harness.py) and compared.
Rows the data's curator flagged `ANOMALY` are reported apart and left out of the error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from ...models import PRESETS
from ..constants.software import SoftwareProfile, load_software
from ..measurements.harness import simulate_row
from ..measurements.models import ModelRow, half_of, load_rows, row_software, stats


@dataclass
class ModelReport:
    """The whole-model validation (module docstring): a row per public end-to-end measurement
    (measured and predicted seconds, error, fit or held-out half, anomalous) and what was
    skipped; error statistics leave the anomalous rows out."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def groups(self, keys: tuple[str, ...], half: str | None = None) -> list[dict[str, Any]]:
        out: dict[tuple, list[dict]] = {}
        for r in self.rows:
            if r["anomalous"] or (half and r["half"] != half):
                continue
            out.setdefault(tuple(r[k] for k in keys), []).append(r)
        return [{**dict(zip(keys, k)), **stats(v)} for k, v in sorted(out.items())]

    def overall(self, half: str | None = None) -> dict[str, float]:
        return stats([r for r in self.rows if not r["anomalous"]
                      and (half is None or r["half"] == half)])

    def to_json(self) -> dict[str, Any]:
        return {"overall": self.overall(), "held_out": self.overall("held_out"),
                "fit": self.overall("fit"),
                "by_source_system_metric": self.groups(("source", "system", "metric")),
                "rows": self.rows, "skipped": self.skipped}


def validate_models(rows: list[ModelRow] | None = None,
                    software_override: Callable[[str], SoftwareProfile] | None = None,
                    progress: Callable[[int, int], None] | None = None,
                    **simulate_kwargs: Any) -> ModelReport:
    """Every row simulated with its software profile (or `software_override(name)`);
    `simulate_kwargs` go to `simulate` (e.g. mode="tile" for the template models)."""
    rows = load_rows() if rows is None else rows
    report = ModelReport()
    for i, row in enumerate(rows):
        if progress:
            progress(i, len(rows))
        name = row_software(row)
        if name is None:
            report.skipped.append(f"{row.source} {row.framework}: no software profile")
            continue
        if row.model not in PRESETS:
            report.skipped.append(f"{row.source} {row.model or '?'}: no model preset")
            continue
        profile = software_override(name) if software_override else load_software(name)
        predicted = simulate_row(row, PRESETS[row.model], profile, **simulate_kwargs)
        report.rows.append({
            "source": row.source, "model": row.model, "system": row.system, "tp": row.tp,
            "software": profile.name, "framework": row.framework, "dtype": row.dtype,
            "batch": row.batch, "prompt": row.prompt, "output": row.output,
            "metric": row.metric, "measured_s": row.measured_s, "predicted_s": predicted,
            "error_pct": (predicted / row.measured_s - 1) * 100 if row.measured_s else math.nan,
            "anomalous": row.anomalous, "half": half_of(row)})
    return report
