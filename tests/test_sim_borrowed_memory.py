"""Fitted kernel constants borrowed by another part of the same die (kernels/gpu/borrowed.py):
the A100 40GB times its memory traffic at its datasheet bandwidth scaled by the two parts'
sustained read fractions; the fitted part itself, and parts without the fraction, keep the
datasheet bandwidth."""

from __future__ import annotations

import dataclasses

import pytest

from krakenlm.hardware import HardwareError, load_system
from krakenlm.hardware.schema import system_from_dict, system_to_dict
from krakenlm.models import get_preset
from krakenlm.simulator import Simulator
from krakenlm.simulator.kernels.gpu.borrowed import kernel_system, memory_equivalent_bandwidth

A100_40, A100_80 = load_system("a100-40gb-x8"), load_system("a100-80gb-x8")


def test_the_40gb_part_reads_at_its_sustained_fraction_of_the_80gb_fit():
    assert A100_40.device.memory.sustained_read_fraction == 0.958
    assert A100_80.device.memory.sustained_read_fraction == 0.883
    assert memory_equivalent_bandwidth(A100_40, A100_80) == pytest.approx(
        1.555e12 * 0.958 / 0.883, rel=1e-12)
    seen = kernel_system(A100_40, A100_80)
    assert seen.device.memory.bandwidth_bytes_per_s == pytest.approx(1.6870e12, rel=1e-4)
    # everything but the bandwidth is the part's own
    assert dataclasses.replace(seen.device.memory, bandwidth_bytes_per_s=1.555e12) \
        == A100_40.device.memory
    assert seen.device.core_count == A100_40.device.core_count


def test_the_fitted_part_and_parts_without_a_fraction_are_unchanged():
    assert kernel_system(A100_80, A100_80) is A100_80
    four = load_system("a100-80gb-x4")  # the fitted part on a smaller board
    assert kernel_system(four, A100_80) is four
    h200, h100 = load_system("h200-x8"), load_system("h100-80gb-x8")
    assert h200.device.memory.sustained_read_fraction is None
    assert kernel_system(h200, h100) is h200
    assert kernel_system(A100_40, None) is A100_40


def test_a_design_sweep_of_the_bandwidth_still_scales_the_borrowed_rate():
    memory = dataclasses.replace(A100_40.device.memory, bandwidth_bytes_per_s=3.11e12)
    swept = dataclasses.replace(A100_40, device=dataclasses.replace(A100_40.device,
                                                                    memory=memory))
    assert memory_equivalent_bandwidth(swept, A100_80) == pytest.approx(
        2 * memory_equivalent_bandwidth(A100_40, A100_80), rel=1e-12)


def test_the_simulator_times_the_40gb_decode_at_the_equivalent_bandwidth():
    """A memory-bound decode step on the 40GB part equals the same step on a copy of it whose
    datasheet bandwidth is the equivalent one and whose fraction is dropped (no rescaling)."""
    config = get_preset("llama3-8b")
    step = Simulator("a100-40gb-x8", "vllm", dtype="bf16").run(
        config, 1, 2, 512, 8).tpot_s
    data = system_to_dict(A100_40)
    data["device"]["memory"]["bandwidth_bytes_per_s"] = memory_equivalent_bandwidth(A100_40,
                                                                                     A100_80)
    del data["device"]["memory"]["sustained_read_fraction"]
    rescaled = system_from_dict(data)
    assert Simulator(rescaled, "vllm", dtype="bf16").run(config, 1, 2, 512, 8).tpot_s \
        == pytest.approx(step, rel=1e-12)
    plain = Simulator(A100_80, "vllm", dtype="bf16").run(config, 1, 2, 512, 8).tpot_s
    assert plain < step  # the 80GB part still reads faster


def test_a_fraction_above_one_is_refused():
    data = system_to_dict(A100_80)
    data["device"]["memory"]["sustained_read_fraction"] = 88.3
    with pytest.raises(HardwareError, match=r"sustained_read_fraction: 88.3 is not in \(0, 1\]"):
        system_from_dict(data)
