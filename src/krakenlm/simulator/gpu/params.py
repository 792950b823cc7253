"""Named, typed model parameters and the transforms that keep a fit inside physical ranges."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Param:
    """One fitted constant of a kernel model.

    kind "seconds" and "positive" are fitted in log space (always > 0); "fraction" in logit
    space (strictly between 0 and 1): a fitted efficiency can never exceed the datasheet peak.
    """

    name: str
    kind: str  # "seconds" | "fraction" | "positive"
    initial: float
    doc: str

    def to_free(self, value: float) -> float:
        value = float(value)
        if self.kind == "fraction":
            value = min(max(value, 1e-6), 1 - 1e-6)
            return math.log(value / (1 - value))
        return math.log(max(value, 1e-15))

    def from_free(self, x: float) -> float:
        if self.kind == "fraction":  # clipped: a simplex step can leave exp()'s range
            return 1.0 / (1.0 + math.exp(-min(max(x, -700.0), 700.0)))
        return math.exp(min(x, 700.0))


def pack(params: tuple[Param, ...], values: dict[str, float]) -> np.ndarray:
    return np.array([p.to_free(values.get(p.name, p.initial)) for p in params])


def unpack(params: tuple[Param, ...], x: np.ndarray) -> dict[str, float]:
    return {p.name: p.from_free(v) for p, v in zip(params, x)}


def initial(params: tuple[Param, ...]) -> dict[str, float]:
    return {p.name: p.initial for p in params}
