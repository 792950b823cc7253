"""The test scheduler's list of slow units (tests/conftest.py) names units that exist."""

from pathlib import Path

from conftest import RANK_MODULES, SLOW_UNITS, work_unit_of

ROOT = Path(__file__).resolve().parents[1]


def test_every_slow_unit_is_a_test_module_or_the_ranks_unit():
    for unit in SLOW_UNITS:
        assert unit == "ranks" or (ROOT / unit).is_file(), unit
    assert len(set(SLOW_UNITS)) == len(SLOW_UNITS)


def test_rank_modules_share_one_unit_and_others_are_their_own():
    assert work_unit_of("tests/test_dist_exact.py::test_x[gloo]") == "ranks"
    assert work_unit_of("tests/test_demo.py::test_y") == "ranks"
    assert work_unit_of("tests/test_training.py::test_z") == "tests/test_training.py"
    assert all(any((ROOT / "tests").glob(prefix + "*")) for prefix in RANK_MODULES)
