"""The a100-80gb-pcie-x8 preset: eight A100 80GB PCIe cards without NVLink bridges.

Known values (NVIDIA A100 datasheet, "A100 80GB PCIe" column): the SXM4 part's GA100 die, 108
SMs, 1410 MHz and peak rates (BF16/FP16 312 TFLOPS dense, TF32 156, FP32 19.5), 80 GB HBM2e at
1,935 GB/s (SXM4: 2,039), PCIe Gen4 x16 (32 GB/s per direction). Its GEMM, attention and
elementwise kernels borrow the A100 calibration (fitted on the SXM4 part) at its own datasheet
bandwidth (no sustained read fraction is sourced for it); its collectives do not: they were
fitted on twelve NVLink3 links, and this box has one PCIe link per GPU (kernels/gpu/borrowed.py
`same_links`), so the template model times them, as on l40s-x8.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from krakenlm.hardware import load_system
from krakenlm.hardware.identity import lookup
from krakenlm.hardware.schema import system_from_dict, system_to_dict
from krakenlm.models import get_preset
from krakenlm.simulator import Simulator
from krakenlm.simulator.constants import gpu_kernels as store
from krakenlm.simulator.constants.software import load_software
from krakenlm.simulator.kernels.gpu.borrowed import kernel_system, same_links
from krakenlm.simulator.timing import OpTimer

PCIE, SXM = load_system("a100-80gb-pcie-x8"), load_system("a100-80gb-x8")


def test_the_preset_loads_with_the_datasheet_values():
    d, ic = PCIE.device, PCIE.interconnect
    assert PCIE.name == "a100-80gb-pcie-x8" and d.name == "NVIDIA A100 80GB PCIe"
    assert d.memory.bandwidth_bytes_per_s == pytest.approx(1.935e12, rel=1e-12)
    assert d.memory.capacity_bytes == 80 * 2**30
    assert d.memory.sustained_read_fraction is None  # none sourced for the PCIe part
    assert d.price_usd is None  # none sourced
    assert d.host_link_bandwidth_bytes_per_s == pytest.approx(32e9)
    # the SXM4 part's die: cores, clocks, caches and peak rates are the same
    for name in ("frequency_hz", "core_count", "core", "global_buffer", "matrix_flops_per_s",
                 "vector_flops_per_s", "process_node_nm", "die_area_mm2"):
        assert getattr(d, name) == getattr(SXM.device, name), name
    assert d.matrix_flops_per_s.bf16 == pytest.approx(312e12)
    # a PCIe-only box, as l40s-x8 models one: one Gen4 x16 link per card through the host
    l40s = load_system("l40s-x8").interconnect
    assert (ic.device_count, ic.topology, ic.links_per_device) == (8, "switch", 1)
    assert ic.link_bandwidth_bytes_per_s == l40s.link_bandwidth_bytes_per_s == 25e9
    assert ic.link_latency_s == l40s.link_latency_s and ic.in_switch_reduction is False


def test_it_declares_the_a100_calibration_and_template_constants():
    kinds = lookup(PCIE.device)
    assert kinds.architecture == ("nvidia", "ampere", 80)
    assert (kinds.calibration, kinds.template_constants) == ("A100", "A100")
    cal = store.for_device(PCIE.device)
    assert cal.device_key == "A100" and cal.meta["system"] == "a100-80gb-x8"


def test_its_kernels_borrow_the_a100_fits_at_its_own_bandwidth():
    """Without a sustained read fraction the fitted forms see the part's datasheet bandwidth:
    a TP-1 decode (no collective) equals the SXM4 preset's with the PCIe bandwidth written in
    and the SXM4 fraction dropped, and is slower than the SXM4 part's."""
    fitted_on = store.for_device(PCIE.device).fitted_on()
    assert kernel_system(PCIE, fitted_on) is PCIE
    config = get_preset("llama3-8b")
    pcie = Simulator(PCIE, "vllm", dtype="bf16").run(config, 1, 2, 512, 8)
    assert "on A100" in pcie.kernel_sources["gemm"]
    data = system_to_dict(SXM)
    data["device"]["memory"]["bandwidth_bytes_per_s"] = 1.935e12
    del data["device"]["memory"]["sustained_read_fraction"]
    same_memory = Simulator(system_from_dict(data), "vllm", dtype="bf16").run(config, 1, 2, 512, 8)
    assert pcie.tpot_s == pytest.approx(same_memory.tpot_s, rel=1e-12)
    assert Simulator(SXM, "vllm", dtype="bf16").run(config, 1, 2, 512, 8).tpot_s < pcie.tpot_s


def test_collective_constants_apply_only_over_the_links_they_were_fitted_on():
    assert not same_links(PCIE, SXM)
    # the A100 parts on NVLink3 keep the fits: the 40GB board, and the 4-GPU board whose
    # links go straight to the peers (another topology, the same twelve links)
    for name in ("a100-80gb-x8", "a100-40gb-x8", "a100-80gb-x4"):
        assert same_links(load_system(name), SXM), name
    assert same_links(PCIE, None)  # a calibration naming no system: nothing to compare
    # the rule reads the links, not the name: the SXM4 box with slower links loses the fits
    slower = dataclasses.replace(SXM, interconnect=dataclasses.replace(
        SXM.interconnect, link_bandwidth_bytes_per_s=20e9))
    assert not same_links(slower, SXM)


def _all_reduce_s(timer: OpTimer, size_bytes: float, n: int) -> float:
    return float(timer._collective("all_reduce", np.array([size_bytes]), np.array([n]))[0])


@pytest.mark.parametrize("software", ["vllm", "vllm-v0", "trtllm", "sglang"])
def test_a_collective_on_it_is_the_template_models_not_the_sxm_fit(software):
    profile = load_software(software)
    gpu = store.for_device(PCIE.device)
    timer = OpTimer(PCIE, profile, "simulate", "bf16", None, gpu)
    template = OpTimer(PCIE, profile, "simulate", "bf16", None, None)  # no fitted kernels
    sxm = OpTimer(SXM, profile, "simulate", "bf16", None, gpu)
    assert not timer.fitted_collectives and sxm.fitted_collectives
    for size, n in ((16e3, 2), (1e6, 4), (8e6, 8), (64e6, 8)):
        t = _all_reduce_s(timer, size, n)
        assert t == _all_reduce_s(template, size, n)
        assert t > 2 * _all_reduce_s(sxm, size, n)  # one PCIe link against twelve NVLinks
    assert timer.sources["all_reduce"].startswith("template model (simulate), A100 constants")
    assert "fitted on a100-80gb-x8's links (12 x 25 GB/s), this system has 1 x 25 GB/s" \
        in timer.sources["all_reduce"]


def test_a_tp8_query_times_its_all_reduces_with_the_template_model():
    r = Simulator(PCIE, "vllm", dtype="bf16").run(get_preset("llama3-70b"), 8, 16, 512, 8)
    assert r.kernel_sources["all_reduce"].startswith("template model")
    assert "on A100" in r.kernel_sources["gemm"]


def test_the_template_all_reduce_does_not_depend_on_the_custom_kernel_choice():
    """Why vLLM's PCIe rule (custom all-reduce off for more than two GPUs without NVLink) is
    not modelled: on this box the template model times the custom kernel and NCCL alike (the
    A100 template constants name no `nccl_all_reduce`), so the rule would change no time."""
    custom, nccl = load_software("vllm"), load_software("vllm-eager")
    assert custom.uses_custom_all_reduce(1e6) and not nccl.uses_custom_all_reduce(1e6)
    gpu = store.for_device(PCIE.device)
    a = OpTimer(PCIE, custom, "simulate", "bf16", None, gpu)
    b = OpTimer(PCIE, nccl, "simulate", "bf16", None, gpu)
    for size, n in ((1e6, 4), (4e6, 8)):
        assert _all_reduce_s(a, size, n) == _all_reduce_s(b, size, n)
