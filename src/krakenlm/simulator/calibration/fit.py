"""Fitting a kernel model's few constants on half of the measured shapes, scoring on the rest,
and the one minimiser every calibration uses (`minimise`: kernel forms here, the template
constants in template.py, a software profile's host constants in software.py).

The split is measurements/split.py's (the CRC-32 of a shape's key; a table may declare its
own fit rows). The objective is split.mape over the fit half (a subsample of at most
`max_fit_rows` of it, drawn with a fixed seed, to keep a calibration to seconds); the held-out
half is scored once, at the end, with every row.

Several starting points (a model whose objective has several basins, gemm.FIT_STARTS) are
screened first: a short Nelder-Mead from each on a seeded sample of at most `SCREEN_ROWS` fit
rows, and only the `POLISH` best are minimised on the whole fit sample. Screening uses the fit
half only, like everything else here.

A dataset (measurements/kernel_tables.py) is fitted with every registered kernel form offered
for it (kernels/base.py), every structure of each, under every measurement condition its
source's harness may have had (measurements/harness.py), in that order; the lowest fit-half
error wins (`fit_dataset`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ...errors import KrakenError
from ..kernels.base import Measured
from ..kernels.params import Param, pack, unpack
from ..measurements import harness
from ..measurements.split import fit_half, mape

if TYPE_CHECKING:
    from ..measurements.kernel_tables import Dataset

MIN_POINTS_PER_PARAM = 4


SCREEN_ROWS = 1000  # fit rows a start is screened on


SCREEN_ITERS = 1500  # Nelder-Mead iterations of a screening run


POLISH = 2  # screened starts minimised on the whole fit sample


class FitError(KrakenError, ValueError):
    """A fit cannot be made (too few points, no finite prediction)."""


@dataclass
class FitResult:
    """One fit of a kernel model (module docstring): the fitted constants by name (in their Params'
    units), the fit-half and held-out row counts, and the MAPE in percent (split.mape) on each
    half; notes on the fit; with fit_dataset, the winning kernel form, its structure and the
    measurement conditions of its harness."""
    params: dict[str, float]
    n_fit: int
    n_held_out: int
    mape_fit: float
    mape_held_out: float
    notes: list[str] = field(default_factory=list)
    form: str = ""  # with fit_dataset: the winning kernel form, its structure, its harness
    structure: Any = None
    harness: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {"n_fit": self.n_fit, "n_held_out": self.n_held_out,
                "mape_fit_pct": round(self.mape_fit, 2),
                "mape_held_out_pct": round(self.mape_held_out, 2)}


def _subset(cols: dict[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
    return {k: np.asarray(v)[idx] for k, v in cols.items()}


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.5,
                iters: int = 600, tol: float = 1e-9) -> np.ndarray:
    """Plain Nelder-Mead (reflection, expansion, contraction, shrink) for a few parameters."""
    n = len(x0)
    simplex = [np.array(x0, dtype=float)]
    for i in range(n):
        x = np.array(x0, dtype=float)
        x[i] += step
        simplex.append(x)
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        reflected = centroid + (centroid - worst)
        fr = f(reflected)
        if fr < values[0]:
            expanded = centroid + 2 * (centroid - worst)
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (worst - centroid)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best + 0.5 * (x - best) for x in simplex]
                values = [f(x) for x in simplex]
    return simplex[int(np.argmin(values))]


def _minimise(f: Callable[[np.ndarray], float], x0: np.ndarray) -> tuple[np.ndarray, float]:
    try:
        from scipy.optimize import minimize
    except ImportError:  # the calibrate extra brings scipy; fall back on the plain simplex
        x = nelder_mead(f, x0, step=0.5, iters=3000)
        return x, f(x)
    best_x, best_f = np.asarray(x0, float), f(np.asarray(x0, float))
    for _ in range(4):  # restarts shake Nelder-Mead out of the kinks of min() and max()
        r = minimize(f, best_x, method="Nelder-Mead",
                     options={"maxiter": 4000, "xatol": 1e-6, "fatol": 1e-7, "adaptive": True})
        if r.fun >= best_f - 1e-9:
            break
        best_x, best_f = r.x, float(r.fun)
    return best_x, best_f


def _screen(objective: Callable[[np.ndarray], float], candidates: list[np.ndarray],
            keep: int) -> list[np.ndarray]:
    """The `keep` candidates whose short Nelder-Mead run ends lowest."""
    try:
        from scipy.optimize import minimize
    except ImportError:
        def run(x0):
            x = nelder_mead(objective, x0, step=0.5, iters=SCREEN_ITERS // 3)
            return objective(x), x
    else:
        def run(x0):
            r = minimize(objective, x0, method="Nelder-Mead",
                         options={"maxiter": SCREEN_ITERS, "adaptive": True, "xatol": 1e-4,
                                  "fatol": 1e-5})
            return float(r.fun), r.x
    scored = sorted((run(x0) for x0 in candidates), key=lambda t: t[0])
    return [x for _, x in scored[:keep]]


def minimise(objective: Callable[[np.ndarray], float], starts: list[np.ndarray],
             screen: Callable[[np.ndarray], float] | None = None) -> tuple[np.ndarray, float]:
    """The one fitter of every calibration (kernel forms, template constants, host constants):
    Nelder-Mead from each start, restarted from where it stopped while that lowers the
    objective; with more than POLISH starts, a short run of `screen` (default: the objective
    itself) from each picks the POLISH to minimise fully. Returns the lowest (x, objective)."""
    candidates = [np.asarray(x0, float) for x0 in starts]
    if len(candidates) > POLISH:
        candidates = _screen(screen or objective, candidates, POLISH)
    best_x, best_f = candidates[0], math.inf
    for x0 in candidates:
        x, fx = _minimise(objective, x0)
        if fx < best_f:
            best_x, best_f = x, fx
    return best_x, best_f


def fit_model(name: str, predict: Callable[[dict[str, np.ndarray], dict[str, float]], np.ndarray],
              params: tuple[Param, ...], cols: dict[str, np.ndarray], measured_s: np.ndarray,
              keys: list[str], *, max_fit_rows: int = 4000, starts: list[dict] | None = None,
              seed: int = 0) -> FitResult:
    """Fit `params` of `predict(cols, values) -> seconds` on the fit half of the rows (the
    CRC-32 of `keys`, split.fit_half)."""
    measured_s = np.asarray(measured_s, float)
    fit_mask = fit_half(keys)
    fit_idx, held_idx = np.flatnonzero(fit_mask), np.flatnonzero(~fit_mask)
    need = MIN_POINTS_PER_PARAM * len(params)
    if len(fit_idx) < need:
        raise FitError(f"{name}: {len(fit_idx)} measured shapes in the fit half (of "
                       f"{len(measured_s)}); fitting {len(params)} constants needs at least "
                       f"{need}; add measurements or calibrate another framework/dtype")
    notes = []
    if len(fit_idx) > max_fit_rows:
        rng = np.random.default_rng(seed)
        fit_idx = np.sort(rng.choice(fit_idx, max_fit_rows, replace=False))
        notes.append(f"fitted on a seeded sample of {max_fit_rows} of the "
                     f"{int(fit_mask.sum())} fit-half shapes")
    fit_cols, fit_meas = _subset(cols, fit_idx), measured_s[fit_idx]

    def objective(x: np.ndarray) -> float:
        pred = predict(fit_cols, unpack(params, x))
        value = mape(pred, fit_meas)
        return value if math.isfinite(value) else 1e9

    candidates = [pack(params, s) for s in (starts or [{}])]
    rng = np.random.default_rng(seed + 1)
    sub = np.sort(rng.choice(len(fit_idx), min(len(fit_idx), SCREEN_ROWS), replace=False)) \
        if len(candidates) > POLISH else None

    def screen_objective(x: np.ndarray) -> float:
        sub_cols, sub_meas = _subset(fit_cols, sub), fit_meas[sub]
        value = mape(predict(sub_cols, unpack(params, x)), sub_meas)
        return value if math.isfinite(value) else 1e9

    best_x, best_f = minimise(objective, candidates, screen_objective)
    if not math.isfinite(best_f) or best_f >= 1e9:
        raise FitError(f"{name}: the model gives no finite prediction on the fit half")
    values = unpack(params, best_x)
    all_fit = mape(predict(_subset(cols, np.flatnonzero(fit_mask)), values), measured_s[fit_mask])
    held = mape(predict(_subset(cols, held_idx), values), measured_s[held_idx]) \
        if len(held_idx) else float("nan")
    return FitResult(values, int(fit_mask.sum()), len(held_idx), all_fit, held, notes)


def fit_dataset(ds: "Dataset", system_name: str) -> FitResult:
    """Fit every (form, structure, harness condition) of `ds` in turn; the lowest fit-half
    error wins. Its kernel constants are `params`, the harness's choice and fitted constants
    `harness`."""
    fit_mask = fit_half(ds.keys)
    measured = Measured(ds.cols, ds.latency_s, fit_mask)
    extra = harness.params(ds.source, ds.family, ds.framework)
    names = {q.name for q in extra}
    best: FitResult | None = None
    for form in ds.forms():
        for structure in form.structures(ds.setting, measured):
            starts = form.starts(ds.setting, structure)
            params = form.params(ds.setting, structure, measured) + extra
            for choice in harness.choices(ds.source, ds.family, ds.framework):
                def predict(c, values, form=form, structure=structure, choice=choice):
                    kernel = {k: v for k, v in values.items() if k not in names}
                    stored = {**choice, **{k: values[k] for k in names}}
                    return form.predict(ds.setting, c, kernel, structure,
                                        harness.conditions(ds.source, ds.family, stored))

                r = fit_model(f"{ds.family} {ds.variant} ({ds.framework}, {system_name})",
                              predict, params, ds.cols, ds.latency_s, ds.keys,
                              starts=[{}, *starts] if starts else None)
                if best is None or r.mape_fit < best.mape_fit:
                    r.form, r.structure = form.name, structure
                    r.harness = {**choice, **{k: r.params.pop(k) for k in names}}
                    r.notes = form.notes(ds.setting, structure, measured) + r.notes
                    best = r
    if best is None:
        raise FitError(f"{ds.family} {ds.variant} ({ds.framework}, {system_name}): no kernel "
                       "form is offered for it")
    return best
