"""`serving.packing.packed_array` gives the array `np.fromiter` gives, byte for byte."""

import struct

import numpy as np
import pytest

from krakenlm.serving.packing import CHUNK, packed_array


@pytest.mark.parametrize("n", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 7])
def test_packed_array_is_fromiter(n):
    rng = np.random.default_rng(n)
    ints = rng.integers(-2**62, 2**62, n).tolist()
    floats = (rng.standard_normal(n) * 10.0 ** rng.integers(-300, 300, n)).tolist()
    floats += [float("nan"), -0.0, float("inf"), 5e-324]
    for values, dtype in ((ints, np.int64), (ints, np.intp), (floats, np.float64)):
        got, expected = packed_array(values, dtype), np.fromiter(values, dtype, len(values))
        assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes()
        got[:1] = 0  # writable, as fromiter's


def test_packed_array_rejects_what_does_not_fit():
    """An int outside int64 is struct's error (where `fromiter` raises OverflowError), not a
    silently wrapped value."""
    with pytest.raises(struct.error):
        packed_array([2**63], np.int64)
    with pytest.raises(struct.error):
        packed_array([0] * CHUNK + [-2**63 - 1], np.int64)
