"""studies/stats.py: Student's t for any degrees of freedom and Welch's unpaired interval."""

from __future__ import annotations

import math

import pytest

from krakenlm.studies.stats import student_t_cdf, student_t_quantile, t_975, welch_ratio_interval


def test_welch_interval_by_hand_with_whole_degrees_of_freedom():
    # means 2 and 1, variances 1 and 1, n 3 and 3: se^2 = 1/3 + 1/3, Welch dof = 4, t = 2.776
    iv = welch_ratio_interval([1.0, 2.0, 3.0], [0.0, 1.0, 2.0])
    half = 2.776 * math.sqrt(2 / 3)
    assert iv.mean == pytest.approx(math.e)
    assert iv.low == pytest.approx(math.exp(1 - half)) and iv.high == pytest.approx(math.exp(1 + half))
    assert iv.n == 3


def test_welch_interval_with_unequal_spreads_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    a, b = [5.1, 5.3, 5.2, 5.45], [5.0, 4.95, 5.12]
    iv = welch_ratio_interval(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert math.log(iv.low) == pytest.approx(ref.low, rel=1e-9)
    assert math.log(iv.high) == pytest.approx(ref.high, rel=1e-9)


def test_welch_interval_needs_two_runs_a_side():
    one = welch_ratio_interval([5.2], [5.0, 5.1])
    assert one.low is None and one.mean == pytest.approx(math.exp(5.2 - 5.05))
    same = welch_ratio_interval([5.2, 5.2], [5.0, 5.0])
    assert same.low == same.high == pytest.approx(math.exp(0.2))


@pytest.mark.parametrize("dof,quantile", [(1, 12.706204736), (2.5, 3.574654842),
                                          (3.7, 2.867520707), (12.4, 2.171043118)])
def test_t_quantile_between_table_rows(dof, quantile):
    # references: scipy.stats.t.ppf(0.975, dof)
    assert student_t_quantile(0.975, dof) == pytest.approx(quantile, rel=1e-6)
    assert student_t_cdf(-quantile, dof) == pytest.approx(0.025, abs=1e-9)
    if not float(dof).is_integer():
        assert t_975(dof) == pytest.approx(quantile, rel=1e-6)
