"""Validation against the real measurements in ../shared/data/measured (never copied here)."""

import dataclasses
import json

import pytest
from measured_data import MEASURED

from krakenlm.cli import main
from krakenlm.hardware import load_system
from krakenlm.simulator.calibration.template import fit_group
from krakenlm.simulator.constants.template import default_calibration
from krakenlm.simulator.measurements.llmcompass import load_measured
from krakenlm.simulator.measurements.split import fit_half
from krakenlm.simulator.validation.template import validate

needs_data = pytest.mark.skipif(not MEASURED.is_dir(),
                                reason=f"measured data folder {MEASURED} is absent "
                                "(set KRAKENLM_MEASURED_DIR)")


@pytest.fixture(scope="module")
def report():
    return validate(MEASURED, default_calibration())


@needs_data
def test_operator_error_goals_on_all_and_held_out_points(report):
    # Issue goals: below 5 % on A100 and below 7 % overall, on the held-out half too.
    # Thresholds are what the shipped calibration achieves (3.5 / 4.6 / 5.0 %), with a margin.
    a100 = report.per_device["A100"]
    assert a100["all"] < 4.0 and a100["held_out"] < 5.0
    assert report.overall["all"] < 5.0 and report.overall["held_out"] < 5.5
    assert {o["op"] for o in report.ops} == {"matmul", "softmax", "layernorm", "gelu", "allreduce"}


@needs_data
def test_gpt3_layer_sums(report):
    prefill = report.layer["A100"]["prefill"]
    decode = report.layer["A100"]["decode"]
    assert abs(prefill["sum_error_pct"]) < 5.0
    assert abs(decode["sum_error_pct"]) < 5.0
    # the measured "QKV" line is three separate GEMMs, each the size of the output projection
    qkv = next(o for o in decode["ops"] if o["op"] == "qkv")
    assert abs(qkv["error_pct"]) < 10.0


@needs_data
def test_fit_never_sees_the_held_out_half():
    data = load_measured(MEASURED)
    system = load_system("a100-80gb-x4")
    gelu = [p for p in data.points if p.device == "A100" and p.op == "gelu"]
    fit_points = [p for p in gelu if p.fit_half]
    # Corrupt every held-out point: a fit on the fit half must not move.
    corrupted = [p if p.fit_half else dataclasses.replace(p, measured_s=p.measured_s * 3)
                 for p in gelu]
    a = fit_group(system.device, system, [p for p in corrupted if p.fit_half])
    b = fit_group(system.device, system, fit_points)
    assert a == b
    # the half is split.py's (CRC-32 of the shape), not the row's parity
    assert [p.fit_half for p in gelu] == list(fit_half([p.key for p in gelu]))
    assert 0 < len(fit_points) < len(gelu)


@needs_data
def test_validate_cli_json_csv_plot(tmp_path, capsys):
    csv_path, png = tmp_path / "v.csv", tmp_path / "v.png"
    with pytest.raises(SystemExit) as exc:
        main(["sim", "validate", "--measured", str(MEASURED), "--level", "layers", "--json",
              "--csv", str(csv_path), "--plot", str(png)])
    assert exc.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"llmcompass", "layers", "skipped"}
    llmcompass = out["llmcompass"]
    assert set(llmcompass) >= {"ops", "overall_mape", "layer"}
    assert {"device", "op", "n", "mape"} <= set(llmcompass["ops"][0])
    assert llmcompass["overall_mape"] < 5.0
    assert csv_path.read_text().count("\n") > 200
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_missing_measurement_directory_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["sim", "validate", "--measured", str(tmp_path / "nope")])
    assert exc.value.code == 2
    assert "does not exist" in capsys.readouterr().err


def test_unmeasured_devices_borrow_their_vendors_constants():
    c = default_calibration()
    assert c.device_key(load_system("h100-80gb-x8").device) == "A100"
    # MI300X declares its own key: the MI210's constants with sourced fields (template_sourced.yaml)
    assert c.device_key(load_system("mi300x-x8").device) == "MI300X"
    assert c.device_key(load_system("tpuv3-x8").device) == "default"
