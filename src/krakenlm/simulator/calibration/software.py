"""Fit a software profile's host constants on the fit half of the public end-to-end set.

What the kernel tables cannot say is what the host adds: the time to issue a kernel outside a
CUDA graph, and the per-step work of the serving loop (scheduling, input preparation,
sampling, output processing), with its part that is repeated for every sequence of the batch
(fitted only when the fit rows vary the batch: 4 or more rows with batch > 1, else it cannot
be told from the per-step part). These few constants are fitted per (profile, system), since the
host CPU belongs to the system (a DGX-A100's and a DGX-H100's differ), on the rows of
`validation_data/model_measurements.csv` whose `split` is `fit` (the even CRC-32 of the
setup; see `mark_split`) and scored on the `held_out` rows. The kernels stay as calibrated:
each fit row is simulated once and re-timed for candidate host constants
(`Result.retimed`), so a fit takes seconds.

The fitted values are written into the profile's YAML (`host.systems.<system>`), with the
command, the rows used and the fit/held-out errors in the profile's `fits` section.
"""

from __future__ import annotations

import csv
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...errors import KrakenError
from ...fileio import write_csv_atomically, write_text_atomically
from ...models import PRESETS
from ..constants.gpu_kernels import today
from ..constants.software import Host, SoftwareProfile, load_software
from ..kernels.params import Param, pack, unpack
from ..measurements.models import ModelRow, data_path, load_rows, row_software
from ..measurements.split import fit_half, mape
from .fit import minimise

HOST_PARAMS = {
    "per_kernel_s": Param("per_kernel_s", "seconds", 1e-5, "host time per kernel outside a graph"),
    "prefill_step_s": Param("prefill_step_s", "seconds", 1e-3, "host work per prefill step"),
    "decode_step_s": Param("decode_step_s", "seconds", 1e-3, "host work per decode step"),
    "per_sequence_s": Param("per_sequence_s", "seconds", 1e-4,
                            "host work per sequence in a step (scheduling, input preparation, "
                            "sampling, output processing of that sequence)"),
}
# Fitted as the excess over 1 (scale = 1 + excess): the kernel models are the floor, a source's
# prefill is never taken to run faster than the kernel tables.
PREFILL_SCALE = Param("prefill_gpu_time_scale", "positive", 0.1,
                      "prefill GPU time over the kernel models, minus 1 (see software.Host)")
MIN_ROWS = 4
MIN_PROMPT_LENGTHS = 3


class SoftwareFitError(KrakenError, ValueError):
    """The host constants of a profile cannot be fitted (no rows, too few rows)."""


def mark_split(path: str | Path | None = None) -> int:
    """Set every row's `split` to fit / held_out by the CRC-32 of its setup (so TTFT, TPOT and
    end-to-end rows of one setup land in the same half); returns the number of fit rows."""
    path = Path(path) if path else data_path("model_measurements.csv")
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        fields, rows = reader.fieldnames, list(reader)
    n_fit = 0
    for r in rows:
        row = load_row(r)
        r["split"] = "fit" if fit_half([row.setup])[0] else "held_out"
        n_fit += r["split"] == "fit"
    write_csv_atomically(path, fields, rows)
    return n_fit


def load_row(r: dict[str, str]) -> ModelRow:
    from ..measurements.models import HF_TO_PRESET
    return ModelRow(r["source"], r["model"] or HF_TO_PRESET.get(r["hf_model"], ""), r["system"],
                    int(r["tp"]), r["framework"], r["framework_version"], r["dtype"],
                    int(r["batch"]), int(r["prompt_tokens"]), int(r["output_tokens"]),
                    r["metric"], float(r["value_ms"]) * 1e-3, r.get("split", "held_out"),
                    r.get("notes", ""))


@dataclass
class HostFit:
    """One fit of a software profile's host constants for one system (module docstring): the profile
    and system, the fitted constants by name (HOST_PARAMS in seconds; prefill_gpu_time_scale, a
    factor on the prefill's GPU time) and which were fitted, the fit and held-out row counts, and
    the end-to-end MAPE in percent on the fit rows, on the held-out rows, and on the held-out
    rows with the profile's constants before the fit."""
    profile: str
    system: str
    host: dict[str, float]
    fitted: list[str]
    n_fit: int
    n_held_out: int
    mape_fit: float
    mape_held_out: float
    mape_held_out_before: float

    def summary(self) -> dict[str, Any]:
        return {"n_fit": self.n_fit, "n_held_out": self.n_held_out,
                "mape_fit_pct": round(self.mape_fit, 2),
                "mape_held_out_pct": round(self.mape_held_out, 2),
                "mape_held_out_before_pct": round(self.mape_held_out_before, 2)}


def _metric(row: ModelRow, ttft: float, tpot: float) -> float:
    if row.metric == "ttft":
        return ttft
    if row.metric == "tpot":
        return tpot
    return ttft + (max(2, row.output) - 1) * tpot


def fit_host(profile_name: str, system: str, rows: list[ModelRow] | None = None,
             progress: Callable[[str], None] | None = None) -> HostFit:
    """Fit the host constants of `profile_name` on `system` from the fit rows; score the rest."""
    profile = load_software(profile_name)
    rows = load_rows() if rows is None else rows
    mine = [r for r in rows if not r.anomalous and r.system == system and r.model in PRESETS
            and row_software(r) == profile_name]
    fit_rows = [r for r in mine if r.split == "fit"]
    held_rows = [r for r in mine if r.split != "fit"]
    if len(fit_rows) < MIN_ROWS:
        raise SoftwareFitError(
            f"{len(fit_rows)} fit rows for software {profile_name} on {system} (need at least "
            f"{MIN_ROWS}); the end-to-end set has {len(mine)} rows for it; mark rows with "
            "`krakenlm sim fit-software --mark-split` or add measurements")
    results = simulate_rows(mine, profile, progress)
    host, fitted = fit_host_rows(profile, fit_rows, results)
    return HostFit(profile_name, system, {n: getattr(host, n) for n in fitted}, fitted,
                   len(fit_rows), len(held_rows), host_mape(fit_rows, host, results),
                   host_mape(held_rows, host, results), host_mape(held_rows, profile.host, results))


def simulate_rows(rows: list[ModelRow], profile: SoftwareProfile,
                  progress: Callable[[str], None] | None = None,
                  results: dict[ModelRow, Any] | None = None) -> dict[ModelRow, Any]:
    """The simulations each row needs (`harness.row_results`), keyed by row; rows already in
    `results` are not simulated again. They do not depend on the host constants: a fit re-times
    them (`Result.retimed`)."""
    from ..measurements.harness import row_results

    results = {} if results is None else results
    for i, r in enumerate(rows):
        if progress:
            progress(f"simulating {i + 1}/{len(rows)}")
        if r not in results:
            results[r] = row_results(r, PRESETS[r.model], profile)
    return results


def predict_host(rows: list[ModelRow], host: Host, results: dict[ModelRow, Any]) -> np.ndarray:
    """Each row's metric (s) under host constants `host`, from its cached simulations."""
    from ..measurements.harness import combine, row_host

    out = []
    for r in rows:
        main, single = results[r]
        h = row_host(r, host)
        ttft, tpot = combine(r, main.retimed(h),
                             single.retimed(h) if single is not None else (0.0, 0.0))
        out.append(_metric(r, ttft, tpot))
    return np.array(out)


def host_mape(rows: list[ModelRow], host: Host, results: dict[ModelRow, Any]) -> float:
    if not rows:
        return float("nan")
    return mape(predict_host(rows, host, results), np.array([r.measured_s for r in rows]))


def fitted_names(profile: SoftwareProfile, fit_rows: list[ModelRow]) -> list[str]:
    """The host constants `fit_rows` can tell apart (see the module docstring)."""
    metrics = {r.metric for r in fit_rows}
    fitted = []
    if profile.graphs.prefill is False or profile.graphs.decode is False:
        fitted.append("per_kernel_s")
    if metrics & {"ttft", "e2e"}:
        fitted.append("prefill_step_s")
    if metrics & {"tpot", "e2e"}:
        fitted.append("decode_step_s")
    # the per-sequence part is only identifiable from steps of different batch sizes
    if sum(r.batch > 1 for r in fit_rows) >= MIN_ROWS:
        fitted.append("per_sequence_s")
    # a prefill time that grows with the prompt is only told from the per-step part by
    # prefills of several prompt lengths
    prefill_rows = [r for r in fit_rows if r.metric in ("ttft", "e2e")]
    if (len(prefill_rows) >= MIN_ROWS
            and len({r.prompt for r in prefill_rows}) >= MIN_PROMPT_LENGTHS):
        fitted.append(PREFILL_SCALE.name)
    return fitted


def fit_host_rows(profile: SoftwareProfile, fit_rows: list[ModelRow],
                  results: dict[ModelRow, Any]) -> tuple[Host, list[str]]:
    """The host constants (and the names of those fitted) that minimise the MAPE of
    `fit_rows`, starting from the profile's sourced constants (not an earlier fit: a refit then
    gives the same answer however often it is run). `results`: `simulate_rows(fit_rows)`."""
    fitted = fitted_names(profile, fit_rows)
    params = tuple(HOST_PARAMS.get(n, PREFILL_SCALE) for n in fitted)
    host0 = profile.host

    def host_of(x: np.ndarray) -> Host:
        values = unpack(params, x)
        if PREFILL_SCALE.name in values:
            values[PREFILL_SCALE.name] += 1.0
        return dataclasses.replace(host0, **values)

    x0 = pack(params, {n: max(getattr(host0, n), HOST_PARAMS[n].initial) if n in HOST_PARAMS
                       else PREFILL_SCALE.initial for n in fitted})
    # a simplex collapses along the flat valleys of per-kernel vs per-step time: the minimiser
    # restarts it from where it stopped while that helps
    best_x, _ = minimise(lambda x: host_mape(fit_rows, host_of(x), results),
                         [x0, x0 - 1.0, x0 + 1.0])
    return host_of(best_x), fitted


def _yaml_number(value: float) -> str:
    """`value` to 4 significant digits as YAML reads a number back: 2e-05 is a string to a YAML
    1.1 reader (PyYAML), 2.0e-05 a float."""
    text = f"{value:.4g}"
    mantissa, e, exponent = text.partition("e")
    return f"{mantissa}.0e{exponent}" if e and "." not in mantissa else text


def write_host(profile_path: str | Path, fit: HostFit, command: str) -> Path:
    """Write the fitted host constants into the profile YAML (host.systems.<system>) and the
    fit's provenance into `fits`, keeping every comment of the file."""
    import yaml

    path = Path(profile_path)
    text = path.read_text()
    data = yaml.safe_load(text)
    host = data.setdefault("host", {})
    systems = host.setdefault("systems", {})
    systems[fit.system] = {k: float(f"{v:.4g}") for k, v in fit.host.items()}
    fits = data.setdefault("fits", {})
    fits[fit.system] = {"command": command, "created": today(),
                        "data": "validation_data/model_measurements.csv (rows with split=fit)",
                        **fit.summary()}
    # Re-emit only the two generated blocks; the hand-written part (with its comments) stays.
    head = re.split(r"\n(?=host:\n)", text, maxsplit=1)
    if len(head) != 2:
        raise SoftwareFitError(f"{path}: no top-level 'host:' block to update")
    before, rest = head
    after_lines = rest.split("\n")
    end = next((i for i, line in enumerate(after_lines[1:], 1)
                if line and not line.startswith(" ") and not line.startswith("#")), len(after_lines))
    host_block = after_lines[:end]
    tail = "\n".join(after_lines[end:])
    host_block = [ln for ln in host_block if not ln.startswith("  systems:")
                  and not ln.startswith("    ")]
    host_block.append("  systems:                     # fitted: krakenlm sim fit-software (see fits)")
    for sysname, values in sorted(systems.items()):
        host_block.append(f"    {sysname}: {{{', '.join(f'{k}: {_yaml_number(v)}' for k, v in values.items())}}}")
    tail = re.sub(r"\nfits:\n(?:  .*\n?)*", "\n", "\n" + tail).lstrip("\n")
    fits_text = yaml.safe_dump({"fits": fits}, sort_keys=True, width=100)
    new = before + "\n" + "\n".join(host_block) + "\n" + tail.rstrip("\n") + "\n" + fits_text
    # never leave a profile that does not parse
    return write_text_atomically(path, new, check=lambda tmp: yaml.safe_load(tmp.read_text()))
