"""benchmarks/sim_mi300x_rccl_fit.py: the MI300X's RCCL all-reduce protocols in
simulator/constants/template_sourced.yaml are what the script fits on Azure's rccl-tests curve."""

import pytest
from benchmark_module import load_benchmark

from krakenlm.hardware import load_system
from krakenlm.simulator.constants.template import default_calibration


def test_the_shipped_rccl_protocols_are_the_fit_of_the_cited_curve():
    fit = load_benchmark("sim_mi300x_rccl_fit")
    assert fit.measured_s(1024, 0.04) == pytest.approx(44.8e-6)  # 1 KB at 0.04 GB/s bus bw
    protocols, fit_mape, held_mape = fit.fit_protocols()
    assert fit_mape < 12 and held_mape < 15
    shipped = default_calibration().find(load_system("mi300x-x8").device, "nccl_all_reduce")
    assert len(shipped.protocols) == len(protocols)
    for got, want in zip(shipped.protocols, protocols):
        assert got.latency_s == pytest.approx(want.latency_s, rel=2e-3)
        assert got.efficiency == pytest.approx(want.efficiency, rel=2e-3)
