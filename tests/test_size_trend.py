"""studies/size_trend.py: the ratio-against-size fit and where it crosses a target."""

from __future__ import annotations

import json
import math

import pytest

from krakenlm.errors import KrakenError
from krakenlm.studies.size_trend import (
    SizePoint,
    crossing_params,
    extrapolate,
    fit_log_ratio,
    point_from_summary,
)


def _points(ratios, half_width=0.01):
    # ratio = 1.2 * (N / 1e6) ** slope: log ratio linear in log10 N
    sizes = [1e6, 2e6, 4e6]
    return [SizePoint(f"s{i}", int(n), r, r * math.exp(-half_width), r * math.exp(half_width), 3)
            for i, (n, r) in enumerate(zip(sizes, ratios))]


def test_a_shrinking_gap_crosses_the_target_where_the_line_says():
    slope = -0.05  # log ratio per decade
    ratios = [1.2 * math.exp(slope * math.log10(n / 1e6)) for n in (1e6, 2e6, 4e6)]
    points = _points(ratios)
    a, b = fit_log_ratio(points)
    assert b == pytest.approx(slope) and a == pytest.approx(math.log(1.2) - slope * 6)
    expected = 1e6 * 10 ** ((math.log(1.02) - math.log(1.2)) / slope)
    assert crossing_params(a, b, 1.02) == pytest.approx(expected)
    trend = extrapolate(points, draws=2000, band_params=[1e6, 1e9])
    assert trend["crossing_params"] == pytest.approx(expected)
    low, high = trend["crossing_interval"]
    assert low < expected < high and trend["never_fraction"] < 0.05
    assert trend["band"][0]["low"] < trend["band"][0]["ratio"] < trend["band"][0]["high"]


def test_a_gap_that_does_not_shrink_never_crosses():
    points = _points([1.15, 1.16, 1.17])
    a, b = fit_log_ratio(points)
    assert b > 0 and crossing_params(a, b, 1.02) == math.inf
    trend = extrapolate(points, draws=500)
    assert trend["crossing_params"] is None and trend["never_fraction"] > 0.9
    assert trend["crossing_interval"][1] is None  # unbounded above: JSON null, not Infinity
    json.dumps(trend, allow_nan=False)


def test_the_standard_error_comes_back_from_the_interval():
    p = SizePoint("x", 10, 1.1, 1.1 * math.exp(-4.303 * 0.02), 1.1 * math.exp(4.303 * 0.02), 3)
    assert p.log_se == pytest.approx(0.02, rel=1e-3)
    assert SizePoint("y", 10, 1.1, None, None, 1).log_se is None


def test_point_from_summary_reads_a_comparison_and_names_what_is_missing(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({
        "baseline": "gpt-a", "runs": [{"preset": "gpt-a", "params": 123}],
        "models": {"gpt-a": {"ratio_to_baseline": None},
                   "k": {"ratio_to_baseline": {"mean": 1.1, "low": 1.0, "high": 1.2, "n": 3}}}}))
    point = point_from_summary(path, "k", "small")
    assert (point.params, point.ratio, point.seeds) == (123, 1.1, 3)
    with pytest.raises(KrakenError, match="has no ratio"):
        point_from_summary(path, "gpt-a", "small")
    with pytest.raises(KrakenError, match="not a comparison summary with nope"):
        point_from_summary(path, "nope", "small")
    with pytest.raises(KrakenError, match="at least two sizes"):
        fit_log_ratio([point])
