"""The one smooth maximum every kernel model combines its terms with."""

from __future__ import annotations

import numpy as np

TINY_S = 1e-30  # scale floor: two zero times give 0, not 0 / 0


def smooth_max(a, b, p: float) -> np.ndarray:
    """(a^p + b^p)^(1/p), elementwise: the p-norm of two non-negative times.

    p = 1 is their sum, a large p their maximum: two parts of a kernel that overlap well but
    not perfectly (compute and memory traffic, a CTA's latency chain and the bandwidth of its
    wave, a host's issue time and the device's work). Both are scaled by the larger before the
    power, so any p (fits have run it to 1e304) stays finite; an infinite time (a candidate
    kernel that cannot run) gives infinity."""
    scale = np.maximum(np.maximum(a, b), TINY_S)
    finite = np.isfinite(scale)
    if finite.all():
        return scale * (_power(a / scale, p) + _power(b / scale, p)) ** (1.0 / p)
    safe = np.where(finite, scale, 1.0)
    norm = safe * (_power(a / safe, p) + _power(b / safe, p)) ** (1.0 / p)
    return np.where(finite, norm, scale)


def _power(x: np.ndarray, p: float) -> np.ndarray:
    if p == 2.5:  # the GEMM models' fixed exponent: x^2 sqrt(x) is ~3x faster than pow
        return x * x * np.sqrt(x)
    return x ** p
