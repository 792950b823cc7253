"""The shipped GPU calibrations: a query reads only its own device's file, and a name that is
not shipped is one error naming the shipped ones."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from krakenlm.hardware import load_system
from krakenlm.simulator.constants import gpu_kernels


def _with_calibration(device, name):
    identity = dataclasses.replace(device.identity, calibration=name)
    return dataclasses.replace(device, identity=identity)


def test_a_device_reads_only_its_own_calibration_file(monkeypatch):
    read = []
    real = gpu_kernels.load_file
    monkeypatch.setattr(gpu_kernels, "load_file", lambda p: read.append(Path(p).name) or real(p))
    gpu_kernels.shipped_named.cache_clear()
    try:
        cal = gpu_kernels.for_device(load_system("a100-80gb-x8").device)
        assert Path(cal.path).name == "A100.yaml"
        assert read == ["A100.yaml"]
    finally:
        gpu_kernels.shipped_named.cache_clear()


def test_every_shipped_calibration_is_listed_by_name():
    names = gpu_kernels.shipped_names()
    assert {"A100", "H100", "H200"} <= set(names)
    assert [Path(c.path).stem for c in gpu_kernels.shipped()] == names


def test_a_calibration_name_not_shipped_names_the_shipped_ones():
    device = _with_calibration(load_system("a100-80gb-x8").device, "X999")
    with pytest.raises(gpu_kernels.GpuCalibrationError,
                       match=r"declares calibration 'X999', which is not a shipped GPU "
                             r"calibration \(A100, B200, GB200, H100, H200, L40S\)"):
        gpu_kernels.for_device(device)
