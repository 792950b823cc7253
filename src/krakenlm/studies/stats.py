"""Confidence intervals for small numbers of seeds (Student's t, two-sided 95 %).

Perplexity ratios are compared per seed: runs with the same seed share the data order, so the
seed-wise difference of validation losses (the log of the perplexity ratio) is paired, and its
mean over seeds gets a t interval that is exponentiated back to a ratio. Runs that share no
seed (or whose pairing one does not want to lean on) get Welch's interval instead: the
difference of the two mean losses, its standard error from each model's own spread, and
Welch-Satterthwaite degrees of freedom (usually not an integer: `t_975` computes those).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# t_{0.975} by degrees of freedom (standard table values); above 30 the normal 1.96 is used.
_T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
          9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
          16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
          23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045,
          30: 2.042}


def t_975(dof: float) -> float:
    """The two-sided 95 % quantile of Student's t: the table for whole degrees of freedom, the
    computed quantile between them (Welch), the normal 1.96 above 30."""
    if dof < 1:
        raise ValueError("a t interval needs at least two samples")
    if dof > 30:
        return 1.96
    if float(dof).is_integer():
        return _T_975[int(dof)]
    return student_t_quantile(0.975, dof)


def student_t_cdf(t: float, dof: float) -> float:
    """P(T <= t) for Student's t with `dof` degrees of freedom (any real dof > 0): 1/2 plus the
    density integrated from 0 to |t| by Simpson's rule (the density is smooth and bounded, so
    2,000 panels are exact to about 1e-10 for the t values intervals use)."""
    if t < 0:
        return 1.0 - student_t_cdf(-t, dof)
    log_norm = (math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2)
                - 0.5 * math.log(dof * math.pi))

    def density(x: float) -> float:
        return math.exp(log_norm - (dof + 1) / 2 * math.log1p(x * x / dof))

    panels = 2000
    h = t / panels
    total = density(0.0) + density(t)
    for i in range(1, panels):
        total += (4 if i % 2 else 2) * density(i * h)
    return 0.5 + total * h / 3


def student_t_quantile(p: float, dof: float) -> float:
    """The t with P(T <= t) = p, for 0.5 < p < 1, by bisection on `student_t_cdf`."""
    if not 0.5 < p < 1:
        raise ValueError(f"quantile level must be between 0.5 and 1, got {p}")
    low, high = 0.0, 1.0
    while student_t_cdf(high, dof) < p:
        low, high = high, 2 * high
    for _ in range(60):
        mid = (low + high) / 2
        if student_t_cdf(mid, dof) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


@dataclass(frozen=True)
class Interval:
    """A mean with its 95 % t interval (mean_interval and the paired ratios; `low`/`high` None with
    a single sample) over `n` samples, in the samples' own units."""
    mean: float
    low: float | None  # None with a single sample: no interval
    high: float | None
    n: int

    def text(self, fmt: str = "{:.3f}") -> str:
        if self.low is None:
            return f"{fmt.format(self.mean)} (1 seed)"
        return (f"{fmt.format(self.mean)} [{fmt.format(self.low)}, {fmt.format(self.high)}]")


def mean_interval(values: list[float]) -> Interval:
    """The mean and its 95 % t interval."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return Interval(mean, None, None, n)
    half = t_975(n - 1) * statistics.stdev(values) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def ratio_interval(log_ratios: list[float]) -> Interval:
    """A ratio from per-seed log ratios: exp of the mean log ratio and of its t interval."""
    inner = mean_interval(log_ratios)
    if inner.low is None:
        return Interval(math.exp(inner.mean), None, None, inner.n)
    return Interval(math.exp(inner.mean), math.exp(inner.low), math.exp(inner.high), inner.n)


def welch_ratio_interval(log_values: list[float], baseline_log_values: list[float]) -> Interval:
    """A ratio from two unpaired samples of log values (validation losses): exp of the
    difference of the means and of its Welch 95 % interval. n is the smaller sample."""
    n_a, n_b = len(log_values), len(baseline_log_values)
    diff = statistics.fmean(log_values) - statistics.fmean(baseline_log_values)
    n = min(n_a, n_b)
    if n < 2:
        return Interval(math.exp(diff), None, None, n)
    var_a = statistics.variance(log_values) / n_a
    var_b = statistics.variance(baseline_log_values) / n_b
    if var_a + var_b == 0:
        return Interval(math.exp(diff), math.exp(diff), math.exp(diff), n)
    dof = (var_a + var_b) ** 2 / (var_a ** 2 / (n_a - 1) + var_b ** 2 / (n_b - 1))
    half = t_975(dof) * math.sqrt(var_a + var_b)
    return Interval(math.exp(diff), math.exp(diff - half), math.exp(diff + half), n)
