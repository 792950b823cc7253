"""One split rule and one MAPE (measurements/split.py) for every measured set and every score."""

import zlib

import pytest
from benchmark_module import load_benchmark

from krakenlm.simulator.calibration import layers as layer_fit
from krakenlm.simulator.calibration.loso import LosoReport
from krakenlm.simulator.constants import gpu_kernels as store
from krakenlm.simulator.measurements import models
from krakenlm.simulator.measurements.llmcompass import Point
from krakenlm.simulator.measurements.split import fit_half


def crc_even(key: str) -> bool:
    return zlib.crc32(key.encode()) % 2 == 0


def test_llmcompass_points_take_their_half_from_split_py_not_their_row():
    shapes = [(m, 4096, 4096) for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)]
    # every row even: the old rule (even rows fit) would put all of them in the fit half
    points = [Point("A100", "matmul", s, 1e-3, "matmul_A100.csv", 2 * i)
              for i, s in enumerate(shapes)]
    expected = [crc_even(",".join(map(str, s))) for s in shapes]
    assert not all(expected) and any(expected)
    assert [p.fit_half for p in points] == expected
    # the same shape is in the same half whichever file or row it stands in
    assert Point("MI210", "matmul", shapes[0], 1.0, "x.csv", 7).fit_half == expected[0]


def test_vidur_layer_fits_take_their_half_from_split_py(monkeypatch):
    seen = []

    def capture(dataset, name):
        seen.append(dataset)
        raise StopIteration

    monkeypatch.setattr(layer_fit, "fit_dataset", capture)
    cal = store.for_device(layer_fit.load_system("h100-80gb-x8").device)
    with pytest.raises(StopIteration):
        layer_fit.calibrate_layers("h100-80gb-x8", cal)
    (ds,) = seen
    declared = getattr(ds, "split", None)  # the data's own halves, which the fit once used
    used = fit_half(ds.keys) if declared is None else declared
    import csv
    with open(models.data_path("layer_measurements.csv"), newline="") as fh:
        rows = [r for r in csv.DictReader(fh)
                if r["system"] == "h100-80gb-x8" and r["op"] == "rmsnorm"]
    assert len(rows) == len(ds.keys) == 32
    assert list(used) == [crc_even(f"{r['model']},{r['tp']},{r['tokens']}") for r in rows]


ROWS = [{"measured_s": 1.0, "predicted_s": 1.5, "error_pct": 50.0,
         "shipped_predicted_s": 0.5, "shipped_error_pct": -50.0},
        {"measured_s": 2.0, "predicted_s": 1.0, "error_pct": -50.0,
         "shipped_predicted_s": 3.0, "shipped_error_pct": 50.0}]


def test_every_model_level_score_is_split_mape(monkeypatch):
    calls = []

    def one_mape(predicted, measured):
        calls.append((list(predicted), list(measured)))
        return 42.0

    monkeypatch.setattr(models, "mape", one_mape)
    assert models.stats(ROWS)["mape_pct"] == 42.0
    assert LosoReport(rows=ROWS).overall("shipped_error_pct")["mape_pct"] == 42.0
    fidelity = load_benchmark("sim_fidelity")
    assert fidelity._mape(ROWS)["mape_pct"] == 42.0
    assert calls == [([1.5, 1.0], [1.0, 2.0]), ([0.5, 3.0], [1.0, 2.0]),
                     ([1.5, 1.0], [1.0, 2.0])]


def test_model_stats_keep_their_meaning():
    s = models.stats(ROWS)
    assert s == {"n": 2, "mape_pct": pytest.approx(50.0), "mean_signed_pct": 0.0, "too_fast": 1}
    assert models.stats([])["n"] == 0
