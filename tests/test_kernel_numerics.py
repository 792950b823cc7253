"""The one smooth maximum the kernel models share (simulator/kernels/numerics.py)."""

import numpy as np
import pytest

from krakenlm.simulator.kernels.numerics import smooth_max


def test_smooth_max_is_the_p_norm_between_sum_and_max():
    a, b = np.array([3e-6, 0.0, 2e-6]), np.array([4e-6, 5e-6, 2e-6])
    assert smooth_max(a, b, 1.0) == pytest.approx(a + b)
    assert smooth_max(a, b, 2.0) == pytest.approx(np.hypot(a, b))
    assert smooth_max(a, b, 1e304) == pytest.approx(np.maximum(a, b))  # a fitted exponent
    assert np.all(smooth_max(a, b, 8.0) >= np.maximum(a, b))


def test_zero_and_infinite_times_and_broadcasting():
    assert smooth_max(np.zeros(2), np.zeros(2), 2.5).tolist() == [0.0, 0.0]
    # a candidate kernel that cannot run is infinitely slow, not NaN (a min over candidates)
    assert smooth_max(np.array([np.inf, 1.0]), np.array([2.0, 1.0]), 2.5)[0] == np.inf
    grid = smooth_max(np.ones((3, 4)), np.full((3, 1), 2.0), 3.0)
    assert grid.shape == (3, 4) and grid[0, 0] == pytest.approx((1 + 2 ** 3) ** (1 / 3))


def test_the_gemm_exponent_keeps_the_closed_form_bit_for_bit():
    # p = 2.5 takes x^2 sqrt(x): the GEMM models' former hi (1 + r^2 sqrt(r))^(1/p), exactly
    rng = np.random.default_rng(0)
    a, b = rng.lognormal(-11, 2, 1000), rng.lognormal(-11, 2, 1000)
    hi, r = np.maximum(a, b), np.minimum(a, b) / np.maximum(a, b)
    assert np.array_equal(smooth_max(a, b, 2.5), hi * (1.0 + r * r * np.sqrt(r)) ** (1 / 2.5))
