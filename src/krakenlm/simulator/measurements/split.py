"""The fit/held-out split of measured shapes and the error every score is stated in.

Every measured set is split by one rule: a row's key is hashed (CRC-32); even hashes form the
fit half, odd ones the held-out half. The key names what was measured, not where, so the same
shape falls in the same half for every framework and device, and re-running a calibration gives
the same split:
- kernel tables and the LLMCompass operator files: the shape ("m,n,k"; a form's `key`,
  measurements/llmcompass.Point.key);
- the Vidur layer rows: the layer's setup ("model,tp,tokens", calibration/layers.split_key), so
  every operator of one measured layer lands in the same half;
- the end-to-end set: each row's setup (calibration/software.mark_split writes the halves into
  its CSV, so TTFT, TPOT and end-to-end rows of a setup stay together).
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
