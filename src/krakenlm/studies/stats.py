"""Confidence intervals for small numbers of seeds (Student's t, two-sided 95 %).

Perplexity ratios are compared per seed: runs with the same seed share the data order, so the
seed-wise difference of validation losses (the log of the perplexity ratio) is paired, and its
mean over seeds gets a t interval that is exponentiated back to a ratio.
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


def t_975(dof: int) -> float:
    if dof < 1:
        raise ValueError("a t interval needs at least two samples")
    return _T_975.get(dof, 1.96)


@dataclass(frozen=True)
class Interval:
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
