"""The fit/held-out split of measured shapes and the error every score is stated in.

Kernel tables are split by shape, not by row: a shape's key (e.g. "m,n,k") is hashed (CRC-32);
even hashes form the fit half, odd ones the held-out half. The same shape therefore falls in the
same half for every framework and device, and re-running a calibration gives the same split.
The end-to-end set is split the same way by each row's setup (calibration/software.mark_split
writes the halves into its CSV, so TTFT, TPOT and end-to-end rows of a setup stay together).
Two small sets declare their halves in the data instead: the Vidur layer rows (`split` column:
every other row of each system and op) and the LLMCompass operator files (even-indexed rows,
measurements/llmcompass.Point.fit_half).
"""

from __future__ import annotations

import zlib

import numpy as np


def fit_half(keys: list[str]) -> np.ndarray:
    """True for rows in the fit half (even CRC-32 of the shape key)."""
    return np.array([zlib.crc32(k.encode()) % 2 == 0 for k in keys], dtype=bool)


def mape(predicted, measured) -> float:
    """Mean absolute percentage error of `predicted` against `measured` (NaN when empty)."""
    p, m = np.asarray(predicted), np.asarray(measured)
    if len(m) == 0:
        return float("nan")
    return float(np.mean(np.abs(p / m - 1.0)) * 100.0)
