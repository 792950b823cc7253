"""Error bars of a prediction, from the leave-one-source-out residuals of comparable cases.

The table `constants/model_residuals.csv` holds one row per scored public end-to-end
measurement: ln(measured / predicted) when the whole-model constants were fitted without that
measurement's source (calibration/loso.py writes it). Errors are correlated within a source (an
engine, a harness, a board brings one bias to all its rows), so the residuals of comparable cases
understate the error on a source nobody measured. The interval therefore treats a residual as a
source effect plus a within-source term (a one-way random-effects model):

    ln(measured / predicted) = mu_group + b_source + e,   b ~ N(0, tau^2),  e ~ N(0, sigma_group^2)

tau^2, the between-source variance, is estimated per level of comparison (below), from the
sources' mean residuals in each group of that level around the group's centre, pooled over the
level's groups, less the part the cells' own row noise explains (the method of moments): a
source's bias is not one number (its H100 decode and its A100 prefill differ), so the spread a
new source brings to a device-TP-batch-phase group is that of source effects within such groups,
which the sources' overall means average away. The group's centre mu is the mean of its sources'
means and sigma^2 the pooled within-source variance of its rows.

At the levels that include the device, tau^2 is pooled over the groups of the query's device class
only, when that class has at least `MIN_CLASS_SOURCES` sources in groups of two or more: source
effects differ by device (one engine build on one accelerator can be off by a factor its peers on
another device never show), and a source disagreeing on one device says nothing about how far a
new source on another device will be. A class with fewer sources takes the level's tau^2, pooled
over every class (a variance from two sources has one degree of freedom and is 0 whenever they
agree), and the levels without the device keep the pooled value, so a query that no group of its
own device answers still carries every device's disagreement.

A new source's residual then has variance tau^2 (1 + 1/k_group) + sigma^2 (its own effect, and
the uncertainty of a centre estimated from k_group sources), and the nominal 80 % interval is
its prediction times exp(mu +- t sd), with t the Student quantile on (sources - 1) degrees of
freedom because tau^2 itself comes from a handful of sources (a class's tau^2: the class's
sources). The group is the most specific one with at least `MIN_CASES` rows from at least
`MIN_SOURCES` sources, tried in the order of `LEVELS`: same device class, TP, batch band and
phase; then device, TP and phase; device and phase; phase; everything. The centre keeps its sign, so a systematic bias moves the interval
off the prediction rather than widening it symmetrically.

A query outside every validated case (a device class, a TP on that device, a batch or prompt
longer than any measured one on that device) still gets the interval of its group, with a
message saying what it extrapolates beyond: the interval is then not validated.

The bands of the shipped table are stored beside it (`BANDS_FILE`, written by
`write_shipped_bands` whenever the table is installed) with the table's checksum, so a query
reads them instead of working them out again; a table they were not computed from is worked out
as before (`shipped_bands`).

This module reads only the table; it imports no calibration or validation code.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

RESIDUALS_PACKAGE = "krakenlm.simulator.constants"
RESIDUALS_FILE = "model_residuals.csv"
BANDS_FILE = "model_residual_bands.json"  # `Bands.to_stored` of the table, beside it
RESIDUAL_FIELDS = ("source", "model", "system", "device", "tp", "batch", "prompt", "output",
                   "phase", "log_ratio")
LEVEL = 0.8
MIN_CASES = 10
MIN_SOURCES = 2
# a device class's own between-source variance needs this many sources (two degrees of freedom);
# with fewer its groups take their level's, pooled over every class
MIN_CLASS_SOURCES = 3
LEVELS = (("device", "tp", "batch_band", "phase"), ("device", "tp", "phase"),
          ("device", "phase"), ("phase",), ())
PHASES = {"ttft": "prefill", "tpot": "decode", "e2e": "e2e"}


def phase_of(metric: str) -> str:
    """The phase a measured metric times: TTFT -> prefill, TPOT -> decode, end-to-end -> e2e."""
    return PHASES[metric]


BATCH_BANDS = ("1", "2-8", "9-32", "33+")


def batch_band(batch: int) -> str:
    """The batch band a batch falls in (1, 2-8, 9-32, 33+)."""
    if batch <= 1:
        return "1"
    if batch <= 8:
        return "2-8"
    if batch <= 32:
        return "9-32"
    return "33+"


@functools.lru_cache(maxsize=64)
def device_class(device_name: str) -> str:
    """The GPU/accelerator model in a device name: "NVIDIA A100 80GB SXM4" -> "A100",
    "AMD Instinct MI300X" -> "MI300X" (the first word holding letters and digits that is not a
    memory size)."""
    for word in device_name.split():
        if re.fullmatch(r"[A-Za-z]*\d+[A-Za-z]*", word) and re.search(r"[A-Za-z]", word) \
                and not re.fullmatch(r"\d+(GB|TB)", word, re.IGNORECASE):
            return word.upper()
    return device_name


WHERE_FIELDS = ("device", "tp", "batch_band", "phase")  # what a level may compare


@dataclass(frozen=True)
class Case:
    """Where a prediction or a scored measurement sits, for choosing comparable residuals (module
    docstring): device class (e.g. "A100"), TP, batch, prompt tokens and phase (prefill, decode
    or e2e: the metric's, phase_of)."""
    device: str
    tp: int
    batch: int
    prompt: int
    phase: str

    def where(self) -> tuple:
        """The values of `WHERE_FIELDS`: device, TP, batch band, phase."""
        return (self.device, self.tp, batch_band(self.batch), self.phase)

    def key(self, level: tuple[str, ...]) -> tuple:
        where = self.where()
        return tuple(where[WHERE_FIELDS.index(k)] for k in level)


@dataclass(frozen=True)
class Band:
    """A multiplicative interval: the truth lies in [low x prediction, high x prediction]."""
    low: float
    high: float
    n: int
    basis: str                 # the comparable group, e.g. "A100 TP 8 batch 9-32 decode"
    extrapolation: str = ""    # what the query lies beyond, "" when it is a validated case

    def to_json(self) -> dict[str, Any]:
        return {"low_factor": self.low, "high_factor": self.high, "cases": self.n,
                "basis": self.basis, "extrapolation": self.extrapolation or None}


@dataclass
class Bands:
    """Residual quantiles per comparable group, and the validated envelope per device."""
    groups: dict[tuple, tuple[float, float, int]] = field(default_factory=dict)
    tps: dict[str, set[int]] = field(default_factory=dict)
    max_batch: dict[str, int] = field(default_factory=dict)
    max_prompt: dict[str, int] = field(default_factory=dict)

    between_source_var: float = 0.0   # tau^2 of ln(measured / predicted), sources' overall means
    source_count: int = 0
    # tau^2 of each level of comparison: source effects within that level's groups
    level_var: dict[tuple[str, ...], float] = field(default_factory=dict)
    # (level, device class) -> (tau^2, sources) of a level that includes the device: source
    # effects within that class's groups only, and how many sources they rest on
    class_var: dict[tuple, tuple[float, int]] = field(default_factory=dict)
    # (device, tp, batch band, phase) -> the most specific group's (low, high, n, basis) or
    # None: what `band` finds for a case regardless of its prompt, worked out once per group
    _groups_of: dict[tuple, tuple | None] = field(default_factory=dict, init=False, repr=False,
                                                  compare=False)

    @classmethod
    def from_residuals(cls, rows: Iterable[tuple[Case, float, str]],
                       level: float = LEVEL) -> Bands:
        """Bands from (case, ln(measured / predicted), source) rows (the model in the module
        docstring). A group counts when it has `MIN_CASES` rows from at least `MIN_SOURCES`
        sources."""
        rows = list(rows)
        bands = cls()
        bands.between_source_var, bands.source_count = between_source_variance(
            (r, source) for _, r, source in rows)
        t = student_t_quantile(1 - (1 - level) / 2, max(1, bands.source_count - 1))
        wheres = [case.where() for case, _, _ in rows]  # worked out once, not per level
        for lv in LEVELS:
            fields = [WHERE_FIELDS.index(name) for name in lv]
            members: dict[tuple, dict[str, list[float]]] = {}
            for where, (_, r, source) in zip(wheres, rows):
                key = (lv, tuple([where[i] for i in fields]))
                members.setdefault(key, {}).setdefault(source, []).append(r)
            tau2 = pooled_source_variance(members.values())
            bands.level_var[lv] = bands.between_source_var if tau2 is None else tau2
            by_class = class_source_variances(members) if "device" in lv else {}
            bands.class_var.update({(lv, d): v for d, v in by_class.items()})
            for k, by_source in members.items():
                n = sum(len(v) for v in by_source.values())
                if n < MIN_CASES or len(by_source) < MIN_SOURCES:
                    continue
                tau2_k, t_k = bands.level_var[lv], t
                if by_class and k[1][0] in by_class:   # a device level's keys start with it
                    tau2_k, class_sources = by_class[k[1][0]]
                    t_k = student_t_quantile(1 - (1 - level) / 2, max(1, class_sources - 1))
                centre = float(np.mean([_mean(tuple(v)) for v in by_source.values()]))
                within = sum(float(np.sum((np.asarray(v) - _mean(tuple(v))) ** 2))
                             for v in by_source.values()) / max(1, n - len(by_source))
                sd = math.sqrt(tau2_k * (1 + 1 / len(by_source)) + within)
                bands.groups[k] = (centre - t_k * sd, centre + t_k * sd, n)
        for case, _, _ in rows:
            bands.tps.setdefault(case.device, set()).add(case.tp)
            bands.max_batch[case.device] = max(bands.max_batch.get(case.device, 0), case.batch)
            bands.max_prompt[case.device] = max(bands.max_prompt.get(case.device, 0),
                                                case.prompt)
        return bands

    def to_stored(self) -> dict[str, Any]:
        """Every field as JSON values (tuples and sets as lists; floats round-trip exactly)."""
        return {
            "between_source_var": self.between_source_var, "source_count": self.source_count,
            "level_var": [[list(lv), var] for lv, var in self.level_var.items()],
            "class_var": [[list(lv), device, var, sources]
                          for (lv, device), (var, sources) in self.class_var.items()],
            "groups": [[list(lv), list(key), low, high, n]
                       for (lv, key), (low, high, n) in self.groups.items()],
            "tps": {device: sorted(tps) for device, tps in self.tps.items()},
            "max_batch": self.max_batch, "max_prompt": self.max_prompt}

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> Bands:
        """The `Bands` that `to_stored` wrote `data` from."""
        return cls(
            groups={(tuple(lv), tuple(key)): (low, high, n)
                    for lv, key, low, high, n in data["groups"]},
            tps={device: set(tps) for device, tps in data["tps"].items()},
            max_batch=dict(data["max_batch"]), max_prompt=dict(data["max_prompt"]),
            between_source_var=data["between_source_var"], source_count=data["source_count"],
            level_var={tuple(lv): var for lv, var in data["level_var"]},
            class_var={(tuple(lv), device): (var, sources)
                       for lv, device, var, sources in data["class_var"]})

    def band(self, case: Case) -> Band | None:
        """The interval of the most specific comparable group (None: no residuals at all).
        The group depends only on the case's device, TP, batch band and phase: it is looked up
        once per such combination (a warm session asks for every query), the extrapolation
        per case."""
        where = case.where()
        if where not in self._groups_of:
            self._groups_of[where] = self._group(case)
        found = self._groups_of[where]
        if found is None:
            return None
        low, high, n, basis = found
        return Band(low, high, n, basis, self.extrapolation(case))

    def _group(self, case: Case) -> tuple[float, float, int, str] | None:
        for lv in LEVELS:
            hit = self.groups.get((lv, case.key(lv)))
            if hit is not None:
                basis = " ".join(_describe(k, v) for k, v in zip(lv, case.key(lv))) or "all cases"
                return math.exp(hit[0]), math.exp(hit[1]), hit[2], basis
        return None

    def extrapolation(self, case: Case) -> str:
        """What `case` lies beyond in the validated cases ("" when inside them)."""
        d = case.device
        if d not in self.tps:
            return (f"no validated case on {d} (validated: {', '.join(sorted(self.tps))}); "
                    "the interval is another device's")
        beyond = []
        if case.tp not in self.tps[d]:
            beyond.append(f"TP {case.tp} (validated on {d}: TP "
                          f"{', '.join(map(str, sorted(self.tps[d])))})")
        if case.batch > self.max_batch[d]:
            beyond.append(f"batch {case.batch} (largest validated on {d}: {self.max_batch[d]})")
        if case.prompt > self.max_prompt[d]:
            beyond.append(f"prompt {case.prompt} (longest validated on {d}: "
                          f"{self.max_prompt[d]})")
        return "; ".join(beyond)


def between_source_variance(rows: Iterable[tuple[float, str]]) -> tuple[float, int]:
    """(tau^2, number of sources) from (residual, source) rows: the variance of the sources'
    mean residuals less the mean variance those means owe to their own rows' scatter (the
    method-of-moments estimate of a one-way random-effects model), floored at 0."""
    by_source: dict[str, list[float]] = {}
    for r, source in rows:
        by_source.setdefault(source, []).append(r)
    k = len(by_source)
    if k < 2:
        return 0.0, k
    means = np.array([np.mean(v) for v in by_source.values()])
    noise = np.mean([np.var(v, ddof=1) / len(v) if len(v) > 1 else 0.0
                     for v in by_source.values()])
    return max(0.0, float(np.var(means, ddof=1) - noise)), k


def class_source_variances(members: dict[tuple, dict[str, list[float]]]
                           ) -> dict[str, tuple[float, int]]:
    """(tau^2, sources) per device class of a level whose key starts with the device: the
    source effects pooled over that class's groups only (`pooled_source_variance`), and the
    number of sources in its groups of two or more sources. A class without such a group has
    no entry (its groups cannot answer a query anyway)."""
    by_class: dict[str, list[dict[str, list[float]]]] = {}
    for (_, key), by_source in members.items():
        by_class.setdefault(key[0], []).append(by_source)
    out = {}
    for device, groups in by_class.items():
        tau2 = pooled_source_variance(groups)
        sources = len({s for g in groups if len(g) >= 2 for s in g})
        if tau2 is not None and sources >= MIN_CLASS_SOURCES:
            out[device] = (tau2, sources)
    return out


def pooled_source_variance(groups: Iterable[dict[str, list[float]]]) -> float | None:
    """tau^2 of source effects within groups: each group's source means around their mean,
    pooled over the groups with two or more sources (sum of squares over its degrees of
    freedom), less the mean variance the cells' means owe to their own rows' scatter; floored
    at 0. None when no group has two sources."""
    squares, dof, noise = 0.0, 0, []
    for by_source in groups:
        if len(by_source) < 2:
            continue
        means = np.array([_mean(tuple(v)) for v in by_source.values()])
        squares += float(np.sum((means - means.mean()) ** 2))
        dof += len(means) - 1
        noise += [_mean_noise(tuple(v)) for v in by_source.values()]
    if not dof:
        return None
    return max(0.0, squares / dof - float(np.mean(noise)))


# A cell's (one source's rows in one group) mean and the variance of that mean: asked for again
# by the level's pooled variance, its device classes' and the group's centre and spread, so
# worked out once per distinct cell (the same numpy calls on the same values: the same numbers).
@functools.lru_cache(maxsize=4096)
def _mean(values: tuple[float, ...]) -> float:
    return np.mean(values)


@functools.lru_cache(maxsize=4096)
def _mean_noise(values: tuple[float, ...]) -> float:
    """The variance a cell's mean owes to its rows' scatter: var(ddof=1) / n (0 for one row)."""
    return np.var(values, ddof=1) / len(values) if len(values) > 1 else 0.0


@functools.lru_cache(maxsize=64)
def student_t_quantile(p: float, df: int) -> float:
    """The `p` quantile (0.5 <= p < 1) of Student's t with `df` degrees of freedom: Newton's
    method on its distribution function (integrated with Simpson's rule), started at 0; the
    function is concave there, so every step stays below the root and converges to it. Written
    out because scipy would cost a cold query more than its whole simulation."""
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def pdf(x: float) -> float:
        return scale * (1 + x * x / df) ** (-(df + 1) / 2)

    def cdf(x: float, steps: int = 128) -> float:
        h = x / steps
        total = sum((1 if i in (0, steps) else 4 if i % 2 else 2) * pdf(i * h)
                    for i in range(steps + 1))
        return 0.5 + total * h / 3

    x = 0.0
    for _ in range(60):
        step = (p - cdf(x)) / pdf(x)
        x += step
        if step < 1e-12:
            break
    return x


def _describe(key: str, value: Any) -> str:
    return {"tp": f"TP {value}", "batch_band": f"batch {value}"}.get(key, str(value))


def residuals_path() -> Path:
    return Path(str(resources.files(RESIDUALS_PACKAGE).joinpath(RESIDUALS_FILE)))


def read_residuals(path: str | Path | None = None) -> list[tuple[Case, float, str]]:
    """(case, ln(measured / predicted), source) of every row of the residual table."""
    out = []
    with open(path or residuals_path(), newline="") as fh:
        rows = csv.reader(fh)  # by column position: a dict per row (DictReader) took 3x longer
        column = {name: i for i, name in enumerate(next(rows, []))}
        if not column:
            return out
        device, tp, batch, prompt, phase, log_ratio, source = (column[name] for name in (
            "device", "tp", "batch", "prompt", "phase", "log_ratio", "source"))
        for r in rows:
            if r:  # a blank line is no row
                out.append((Case(r[device], int(r[tp]), int(r[batch]), int(r[prompt]),
                                 r[phase]), float(r[log_ratio]), r[source]))
    return out


def bands_path() -> Path:
    return Path(str(resources.files(RESIDUALS_PACKAGE).joinpath(BANDS_FILE)))


@functools.lru_cache(maxsize=1)
def shipped_bands() -> Bands | None:
    """The bands of the shipped residual table (None when the package has none): the stored
    ones (`BANDS_FILE`) when they were computed from this table at `LEVEL` (its CRC-32 and
    length match), else `Bands.from_residuals` of the table."""
    path = residuals_path()
    if not path.is_file():
        return None
    stored = stored_bands(path.read_bytes())
    if stored is not None:
        return stored
    return Bands.from_residuals(read_residuals(path))


def stored_bands(table: bytes, path: str | Path | None = None) -> Bands | None:
    """The bands stored at `path` (default `bands_path()`) if they were computed from the
    residual table `table` (its bytes) at `LEVEL`, else None (no file, or another table)."""
    path = Path(path or bands_path())
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("residuals") != _table_id(table) or data.get("level") != LEVEL:
        return None
    return Bands.from_stored(data["bands"])


def write_shipped_bands(residuals: str | Path | None = None, out: str | Path | None = None
                        ) -> Path:
    """Work out the bands of the residual table `residuals` (default: the shipped one) and
    store them at `out` (default `bands_path()`) with the table's checksum, for
    `shipped_bands`; run whenever the table is installed (benchmarks/sim_loso.py
    --install-residuals)."""
    from ..fileio import write_text_atomically

    residuals = Path(residuals or residuals_path())
    bands = Bands.from_residuals(read_residuals(residuals))
    stored = {"about": f"Bands.to_stored() of {RESIDUALS_FILE} at the level below, written by "
                       "krakenlm.simulator.uncertainty.write_shipped_bands",
              "residuals": _table_id(residuals.read_bytes()), "level": LEVEL,
              "bands": bands.to_stored()}
    return write_text_atomically(out or bands_path(), _json_rows(stored) + "\n")


def _table_id(table: bytes) -> dict[str, int]:
    """What identifies a residual table's contents: its length and CRC-32 (zlib)."""
    return {"bytes": len(table), "crc32": zlib.crc32(table)}


def _json_rows(value: Any, indent: str = "") -> str:
    """JSON with every mapping entry and list item on its own line down to lists of scalars
    and lists (a stored group or variance: one line each)."""
    inner = indent + " "
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k)}: {_json_rows(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        return "[\n" + ",\n".join(inner + json.dumps(v) for v in value) + f"\n{indent}]"
    return json.dumps(value)


def prediction_interval(device_name: str, tp: int, batch: int, prompt: int,
                        times_s: dict[str, float]) -> dict[str, Any] | None:
    """The nominal 80 % interval of each predicted time (`times_s`: ttft_s, tpot_s, e2e_s),
    with the group it comes from and any extrapolation; None without a residual table."""
    bands = shipped_bands()
    if bands is None:
        return None
    device = device_class(device_name)
    out: dict[str, Any] = {"level": LEVEL}
    notes = set()
    for name, phase in (("ttft_s", "prefill"), ("tpot_s", "decode"), ("e2e_s", "e2e")):
        band = bands.band(Case(device, tp, batch, prompt, phase))
        if band is None:
            continue
        t = times_s[name]
        out[name] = [t * band.low, t * band.high]
        out[name.replace("_s", "_basis")] = f"{band.basis} ({band.n} cases)"
        if band.extrapolation:
            notes.add(band.extrapolation)
    out["extrapolation"] = "; ".join(sorted(notes)) or None
    return out
