"""The Kraken/GPT perplexity ratio against model size, and where its trend would cross a target.

Each size is its own comparison (`study compare`, same tokens per parameter) whose summary.json
gives a paired ratio with its 95 % t interval over seeds. The trend is a weighted least-squares
line of the log ratio against log10(parameters), each size weighted by the inverse square of the
standard error its interval implies. Its uncertainty is propagated by simulation: every size's
log ratio is redrawn from its own t distribution (mean, standard error, seeds - 1 degrees of
freedom), the line refitted, and the size where it crosses the target recorded; a draw whose
gap does not shrink with size never crosses. Three sizes and three seeds leave wide intervals:
the report gives them as they are.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import KrakenError
from .stats import t_975


@dataclass(frozen=True)
class SizePoint:
    """One model size of the trend (module docstring): its label, the baseline's parameter count,
    the Kraken/GPT perplexity ratio paired by seed (mean over seeds) with its 95 % t interval
    (None with one seed), and the number of seeds. `log_se` is the standard error of the mean log
    ratio the interval implies."""
    label: str
    params: int  # of the baseline model
    ratio: float  # paired perplexity ratio, mean over seeds
    low: float | None  # its 95 % interval (None with one seed)
    high: float | None
    seeds: int

    @property
    def log_se(self) -> float | None:
        """The standard error of the mean log ratio implied by the interval."""
        if self.low is None or self.seeds < 2:
            return None
        return (math.log(self.high) - math.log(self.low)) / (2 * t_975(self.seeds - 1))


def point_from_summary(path: Path, model: str, label: str) -> SizePoint:
    """A size's point from a `study compare` summary.json: `model`'s paired ratio to the
    summary's baseline and the baseline's parameter count."""
    try:
        summary = json.loads(Path(path).read_text())
        baseline = summary["baseline"]
        ratio = summary["models"][model]["ratio_to_baseline"]
        params = next(r["params"] for r in summary["runs"] if r["preset"] == baseline)
    except (OSError, ValueError, KeyError, StopIteration) as exc:
        raise KrakenError(f"{path} is not a comparison summary with {model} against its "
                          f"baseline ({type(exc).__name__}: {exc})") from None
    if ratio is None:
        raise KrakenError(f"{path}: {model} has no ratio to the baseline (is it the baseline?)")
    return SizePoint(label, params, ratio["mean"], ratio["low"], ratio["high"], ratio["n"])


def fit_log_ratio(points: list[SizePoint], log_ratios: list[float] | None = None
                  ) -> tuple[float, float]:
    """(intercept, slope) of log ratio = a + b * log10(params), weighted by 1/se^2 (equal
    weights when a point has no interval)."""
    if len(points) < 2:
        raise KrakenError("a trend needs at least two sizes")
    ys = log_ratios if log_ratios is not None else [math.log(p.ratio) for p in points]
    xs = [math.log10(p.params) for p in points]
    ses = [p.log_se for p in points]
    ws = [1.0 / se ** 2 if se else 1.0 for se in ses] if all(ses) else [1.0] * len(points)
    total = sum(ws)
    x_mean = sum(w * x for w, x in zip(ws, xs)) / total
    y_mean = sum(w * y for w, y in zip(ws, ys)) / total
    sxx = sum(w * (x - x_mean) ** 2 for w, x in zip(ws, xs))
    sxy = sum(w * (x - x_mean) * (y - y_mean) for w, x, y in zip(ws, xs, ys))
    slope = sxy / sxx
    return y_mean - slope * x_mean, slope


def crossing_params(intercept: float, slope: float, target_ratio: float) -> float:
    """The parameter count where the fitted ratio falls to `target_ratio`; inf when the fitted
    gap does not shrink with size (slope >= 0) while above the target."""
    if slope >= 0:
        return math.inf
    decades = (math.log(target_ratio) - intercept) / slope
    return 10 ** decades if decades < 300 else math.inf  # a nearly flat line: beyond any size


def extrapolate(points: list[SizePoint], target_ratio: float = 1.02, draws: int = 20000,
                seed: int = 0, band_params: list[float] = ()) -> dict:
    """The fitted trend, the size where it reaches `target_ratio`, and that size's 95 %
    interval from `draws` simulated refits (module docstring); with `band_params`, the fitted
    ratio's 2.5/50/97.5 percentiles at those sizes (None where the interval is unbounded)."""
    import numpy as np

    intercept, slope = fit_log_ratio(points)
    rng = np.random.default_rng(seed)
    crossings = []
    slopes = []
    lines = []
    for _ in range(draws):
        ys = [math.log(p.ratio) + (p.log_se or 0.0) * float(rng.standard_t(max(p.seeds - 1, 1)))
              for p in points]
        a, b = fit_log_ratio(points, ys)
        slopes.append(b)
        lines.append((a, b))
        crossings.append(crossing_params(a, b, target_ratio))
    finite = np.array([c for c in crossings if math.isfinite(c)])
    never = 1 - len(finite) / draws
    lo, hi = np.percentile(np.array(crossings, dtype=float), [2.5, 97.5], method="inverted_cdf")
    band = []
    for n in band_params:
        fitted = [math.exp(a + b * math.log10(n)) for a, b in lines]
        band.append({"params": n, "ratio": math.exp(intercept + slope * math.log10(n)),
                     "low": float(np.percentile(fitted, 2.5)),
                     "high": float(np.percentile(fitted, 97.5))})
    return {"target_ratio": target_ratio, "intercept": intercept,
            "slope_per_decade": slope,
            "slope_interval": [float(v) for v in np.percentile(slopes, [2.5, 97.5])],
            "crossing_params": _finite_or_none(crossing_params(intercept, slope, target_ratio)),
            "crossing_interval": [_finite_or_none(float(lo)), _finite_or_none(float(hi))],
            "never_fraction": never, "draws": draws, "band": band}


def _finite_or_none(value: float) -> float | None:
    """JSON has no infinity: an unbounded end (the gap never closes) is None."""
    return value if math.isfinite(value) else None
