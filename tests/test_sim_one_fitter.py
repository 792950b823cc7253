"""One fitter for every calibration, and a calibration file that records its last fit (command
and date), never a constant the data did not decide."""

import datetime
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from krakenlm.hardware import load_system
from krakenlm.simulator.calibration import fit, software, template
from krakenlm.simulator.constants.software import load_software
from krakenlm.simulator.constants.template import OpConstants, default_calibration
from krakenlm.simulator.kernels.template.collectives import Protocol
from krakenlm.simulator.measurements.llmcompass import MeasuredSet, Point

TODAY = datetime.date.today().isoformat()


def test_the_minimiser_finds_a_minimum_from_screened_starts():
    def bowl(x):
        return float(np.sum((x - np.array([1.0, -2.0])) ** 2))

    x, fx = fit.minimise(bowl, [np.zeros(2), np.ones(2) * 5, np.ones(2) * -5])
    assert np.allclose(x, [1.0, -2.0], atol=1e-3) and fx < 1e-6


def test_a_template_allreduce_fit_keeps_only_protocols_that_time_a_measured_size():
    system = load_system("a100-80gb-x4")
    # a protocol whose latency only had to be large enough to lose: it times no size
    lost = Protocol(2.5e13, 5e-6)
    c = OpConstants(protocols=(Protocol(2e-6, 0.12), Protocol(8e-6, 0.85), lost))
    points = [Point("A100", "allreduce", (size, 4), 1e-4, "allreduce.csv", i)
              for i, size in enumerate((2 ** 10, 2 ** 16, 2 ** 22, 2 ** 28))]
    kept = template.used_protocols(system, points, c).protocols
    assert lost not in kept and len(kept) == 2


def test_shipped_template_constants_have_no_protocol_the_data_never_chose():
    cal = default_calibration()
    for device, ops in cal.to_dict()["devices"].items():
        for p in ops.get("allreduce", {}).get("protocols", []):
            assert p["latency_s"] < 1e-3, device


def test_a_template_fit_records_the_command_and_date_of_its_last_fit():
    system = load_system("a100-80gb-x4")
    dev = system.device
    # a GELU table made from known constants: the fit must land on them
    truth = OpConstants(memory_efficiency=0.8, harness_overhead_s=2e-5, measurement_floor_s=3e-5)
    points = []
    for i, n in enumerate(2 ** np.arange(14, 30)):
        p = Point("A100", "gelu", (int(n),), 0.0, "gelu.csv", 2 * i)
        points.append(Point("A100", "gelu", p.shape,
                            template.predict_point(dev, system, p, truth), "gelu.csv", 2 * i))
    cal = template.fit_calibration(MeasuredSet(points), {"A100": system}, command="krakenlm x")
    assert cal.meta["command"] == "krakenlm x" and cal.meta["created"] == TODAY
    got = cal.to_dict()["devices"]["A100"]["gelu"]
    assert got["memory_efficiency"] == pytest.approx(0.8, rel=0.02)


def test_a_software_fit_records_the_command_and_date_of_its_last_fit(tmp_path):
    path = tmp_path / "vllm-eager.yaml"
    shutil.copy(Path(software.__file__).parents[1] / "constants" / "software_profiles" /
                "vllm-eager.yaml", path)
    host = software.HostFit("vllm-eager", "a100-80gb-x8", {"per_kernel_s": 2e-5},
                            ["per_kernel_s"], 6, 6, 5.0, 6.0, 7.0)
    software.write_host(path, host, "krakenlm sim fit-software x")
    fits = yaml.safe_load(path.read_text())["fits"]["a100-80gb-x8"]
    assert fits["command"] == "krakenlm sim fit-software x" and fits["created"] == TODAY
    assert load_software(str(path)).host_systems["a100-80gb-x8"].per_kernel_s == 2e-5
