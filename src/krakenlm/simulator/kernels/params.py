"""Named, typed model parameters and the transforms that keep a fit inside physical ranges."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Param:
    """One fitted constant of a kernel model.

    kind "seconds" and "positive" are fitted in log space (always > 0); "fraction" in logit
    space (strictly between 0 and 1): a fitted efficiency can never exceed the datasheet peak.
    A "positive" or "seconds" constant may also carry a physical ceiling `upper` (a per-SM
    bandwidth no SM's load path reaches, a cache speed-up larger than the cache's bandwidth
    allows). It is then fitted as log(value) = log(upper) - softplus(log(upper) - x): the same
    log scale as an unbounded constant well below the ceiling (so a fit's steps keep their
    size), smoothly approaching the ceiling and never passing it. Without one, a term the data
    do not need can run off to 1e20 and read as a physical claim; with one it stays at the
    ceiling, and `at_bound` lets a report say so.
    """

    name: str
    kind: str  # "seconds" | "fraction" | "positive"
    initial: float
    doc: str
    upper: float | None = None  # physical ceiling of a "positive" or "seconds" constant

    def __post_init__(self) -> None:
        if self.upper is not None and not (self.kind != "fraction" and self.initial < self.upper):
            raise ValueError(f"{self.name}: a ceiling needs a positive kind and initial < upper")

    def to_free(self, value: float) -> float:
        value = float(value)
        if self.kind == "fraction":
            value = min(max(value, 1e-6), 1 - 1e-6)
            return math.log(value / (1 - value))
        if self.upper is not None:
            gap = math.log(self.upper) - math.log(max(min(value, self.upper * (1 - 1e-9)), 1e-300))
            return math.log(self.upper) - _softplus_inverse(gap)
        return math.log(max(value, 1e-15))

    def from_free(self, x: float) -> float:
        if self.kind == "fraction":  # clipped: a simplex step can leave exp()'s range
            return 1.0 / (1.0 + math.exp(-min(max(x, -700.0), 700.0)))
        if self.upper is not None:
            log_upper = math.log(self.upper)
            return math.exp(log_upper - _softplus(log_upper - min(max(x, -700.0), 1e6)))
        return math.exp(min(x, 700.0))

    def at_bound(self, value: float, rel: float = 1e-3) -> bool:
        """True when a fitted value sits at its ceiling (or a fraction at 1): the data asked
        for more than the physics allows, which a report should say."""
        if self.kind == "fraction":
            return value >= 1 - rel
        return self.upper is not None and value >= self.upper * (1 - rel)


# Boost clocks reach ~1.08x the clock behind a datasheet peak: the margin a ceiling derived from
# the datasheet allows.
BOOST_MARGIN = 1.1


def sm_load_bytes_per_s(dev) -> float:
    """The most one SM (so one CTA) can pull from L2/DRAM: its L1 load path,
    core.local_sram_bandwidth_bytes_per_cycle x clock, with the boost margin. The ceiling of
    every per-CTA streaming rate (decode attention, row kernels)."""
    return dev.core.local_sram_bandwidth_bytes_per_cycle * dev.frequency_hz * BOOST_MARGIN


def l2_over_dram(dev) -> float:
    """How much faster the L2 can deliver than DRAM (device bandwidths, with the boost margin):
    the ceiling of every cache speed-up a kernel model fits."""
    return dev.global_buffer_bandwidth_bytes_per_s * BOOST_MARGIN / dev.memory.bandwidth_bytes_per_s


def with_ceilings(params: tuple[Param, ...], ceilings: dict[str, float]) -> tuple[Param, ...]:
    """`params` with the named ones given an upper limit (the others unchanged)."""
    return tuple(replace(q, upper=ceilings[q.name]) if q.name in ceilings else q
                 for q in params)


def _softplus(y: float) -> float:
    return y + math.log1p(math.exp(-y)) if y > 0 else math.log1p(math.exp(y))


def _softplus_inverse(y: float) -> float:
    """The x with softplus(x) = y > 0 (log(exp(y) - 1), computed without overflow)."""
    return y + math.log(-math.expm1(-y)) if y > 0 else float("-inf")


def pack(params: tuple[Param, ...], values: dict[str, float]) -> np.ndarray:
    return np.array([p.to_free(values.get(p.name, p.initial)) for p in params])


def unpack(params: tuple[Param, ...], x: np.ndarray) -> dict[str, float]:
    return {p.name: p.from_free(v) for p, v in zip(params, x)}


def initial(params: tuple[Param, ...]) -> dict[str, float]:
    return {p.name: p.initial for p in params}
