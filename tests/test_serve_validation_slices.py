"""benchmarks/serve_validation_slices.py: per-slice medians of one source's validation scores."""

import json

import numpy as np
import pytest
from benchmark_module import load_benchmark


@pytest.fixture(scope="module")
def sl():
    return load_benchmark("serve_validation_slices")


def _scores(tmp_path):
    runs = [{"source": "s", "system": gpu, "tp": tp, "model": "m", "requests": 10,
             "rate_per_s": None, "scores": {"ttft_mean": {"bias": b}}}
            for gpu, tp, b in (("a", 1, -0.5), ("a", 2, -0.1), ("b", 1, 0.3))]
    path = tmp_path / "v.json"
    path.write_text(json.dumps({"runs": runs}))
    return path


def test_each_slice_is_the_median_of_its_runs(sl, tmp_path):
    path = _scores(tmp_path)
    table = sl.slices(json.loads(path.read_text())["runs"])
    assert table["GPU a"]["ttft_mean"] == [-0.5, -0.1]
    assert table["TP 1"]["ttft_mean"] == [-0.5, 0.3]
    assert table["10 prompts at once"]["ttft_mean"] == [-0.5, -0.1, 0.3]
    runs = json.loads(path.read_text())["runs"]
    runs[0]["max_concurrency"] = 4
    assert sl.slices(runs)["4 in flight"]["ttft_mean"] == [-0.5]
    assert np.median(np.abs(table["all"]["ttft_mean"])) == pytest.approx(0.3)


def test_an_unknown_source_is_one_error_line(sl, tmp_path, capsys):
    assert sl.main(["--source", "nope", "--scores", str(_scores(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no run of source 'nope'") and err.count("\n") == 1


def test_a_missing_scores_file_is_one_error_line(sl, tmp_path, capsys):
    assert sl.main(["--scores", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read the scores") and err.count("\n") == 1
