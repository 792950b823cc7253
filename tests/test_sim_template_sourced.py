"""Sourced template constants (simulator/constants/template_sourced.yaml): a device without kernel
measurements of ours gets a measured device's constants with the fields a cited public
measurement gives, e.g. MI300X's memory-bound GEMMs at its measured STREAM bandwidth and its
compute-bound GEMMs at hipBLASLt's measured best."""

import pytest
import yaml

from krakenlm.models import get_preset
from krakenlm.simulator import simulate
from krakenlm.simulator.constants.template import (
    CalibrationError,
    default_calibration,
    load_calibration,
    with_sourced,
)

MI300X_PEAK_BYTES_PER_S = 5.3e12     # datasheet (hardware/presets/mi300x-x8.yaml)
MI300X_STREAM_BYTES_PER_S = 4.11e12  # STREAM Copy on Azure ND MI300X v5 (cited in the YAML)
MI300X_FP8_PEAK_FLOPS = 2614.9e12    # datasheet dense FP8
MI300X_FP8_GEMM_FLOPS = 1159.54e12   # hipBLASLt's best FP8 GEMM on the same machine (cited)


def test_mi300x_is_the_mi210_with_its_measured_hbm_bandwidth_and_gemm_rate():
    cal = default_calibration()
    mi300x, mi210 = cal.devices["MI300X"], cal.devices["MI210"]
    assert set(mi300x) == set(mi210) | {"nccl_all_reduce"}  # its RCCL, from rccl-tests
    assert mi300x["matmul"].memory_efficiency == round(
        MI300X_STREAM_BYTES_PER_S / MI300X_PEAK_BYTES_PER_S, 4) == 0.7755
    assert mi300x["matmul"].compute_efficiency == round(
        MI300X_FP8_GEMM_FLOPS / MI300X_FP8_PEAK_FLOPS, 4) == 0.4434
    assert mi300x["matmul"].protocols == mi210["matmul"].protocols
    for op in set(mi210) - {"matmul", "nccl_all_reduce"}:
        assert mi300x[op] == mi210[op], op


def test_the_mi300x_decode_gemv_streams_its_weights_at_the_measured_bandwidth():
    """Llama-3-70B, TP 8, FP8 weights, batch 1: the decode FFN up/gate GEMM reads its
    2 x 28672 x 8192 / 8 bytes per GPU at 4.11 TB/s (14.3 us) plus the launch; the MI210's
    fitted efficiency (0.357 of 5.3 TB/s) made it 31 us."""
    config = get_preset("llama3-70b")
    result = simulate(config, "mi300x-x8", 8, 1, 128, 2, dtype="fp8", software="vllm-v0")
    assert result.to_json()["kernel_sources"]["gemm"] == \
        "template model (simulate), MI300X constants"
    op = next(o for o in result.breakdown() if o["phase"] == "decode" and o["op"] == "ffn_up")
    weight_bytes = 2 * config.ffn_dim * config.d_model / 8  # FP8: one byte per weight
    streaming_s = op["time_s"] / op["count"] - 5.0e-6      # less the preset's launch overhead
    assert weight_bytes / MI300X_STREAM_BYTES_PER_S <= streaming_s \
        <= 1.15 * weight_bytes / MI300X_STREAM_BYTES_PER_S


def test_a_calibration_file_without_the_sourced_device_gets_it_and_one_with_it_keeps_its_own(
        tmp_path):
    data = default_calibration().to_dict()
    del data["devices"]["MI300X"]
    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_calibration(path).devices["MI300X"]["matmul"].memory_efficiency == 0.7755
    data["devices"]["MI300X"] = {"matmul": {"memory_efficiency": 0.5}}
    path.write_text(yaml.safe_dump(data))
    assert load_calibration(path).devices["MI300X"]["matmul"].memory_efficiency == 0.5


def test_a_sourced_device_whose_base_the_calibration_lacks_is_left_out():
    sourced = {"devices": {"X1": {"base": "MI210", "matmul": {"memory_efficiency": 0.9}}}}
    assert "X1" not in with_sourced({"devices": {"A100": {}}}, sourced)["devices"]
    merged = with_sourced({"devices": {"MI210": {"matmul": {"compute_efficiency": 0.5}}}},
                          sourced)["devices"]["X1"]
    assert merged == {"matmul": {"compute_efficiency": 0.5, "memory_efficiency": 0.9}}


def test_a_malformed_base_operator_is_still_named_by_the_calibration_error(tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text("devices:\n  MI210:\n    matmul: 5\n")
    with pytest.raises(CalibrationError, match="expected a mapping of constants, got 5"):
        load_calibration(path)
