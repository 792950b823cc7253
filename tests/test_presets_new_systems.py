"""The Blackwell and Ada presets: they load, reproduce their datasheet figures, and declare the
GPU calibration they use.

Known values (per GPU, dense, i.e. the datasheets' 2:4-sparse tensor figures halved):
* B200 on HGX B200 (NVIDIA Blackwell datasheet; aiconfigurator-core systems/b200_sxm.yaml):
  BF16 2.25 PFLOPS, FP8 4.5 PFLOPS, 180 GB HBM3e (180 GiB, as aiconfigurator reads it), 7.7 TB/s,
  NVLink 5 = 18 links x 50 GB/s per direction (1.8 TB/s bidirectional).
* GB200 in a GB200 NVL72 (NVL72 specifications; aiconfigurator-core systems/gb200.yaml): BF16
  360 PFLOPS sparse / 72 / 2 = 2.5 PFLOPS, 13.4 TB / 72 = 186 GB (read as GiB), 576 TB/s / 72 =
  8 TB/s, 72 GPUs in one NVLink domain.
* L40S (NVIDIA L40S datasheet): BF16 362.05 TFLOPS (733 sparse), FP8 733 TFLOPS, 48 GB GDDR6
  (read as GiB), 864 GB/s, PCIe Gen4 only.
"""

import pytest

from krakenlm.hardware import load_system, preset_system_names
from krakenlm.hardware.identity import lookup
from krakenlm.simulator.constants.template import default_calibration

GiB = 2**30

KNOWN = {
    # name: (bf16 dense FLOP/s, fp8 dense FLOP/s, memory bytes, memory B/s, declared calibration,
    #        devices, links, link B/s per direction, in-switch reduction, memory technology)
    "b200-x8": (2.25e15, 4.5e15, 180 * GiB, 7.7e12, "B200", 8, 18, 50e9, True, "HBM3e"),
    "gb200-nvl72": (2.5e15, 5.0e15, 186 * GiB, 8.0e12, "GB200", 72, 18, 50e9, True, "HBM3e"),
    "l40s-x8": (362.05e12, 733e12, 48 * GiB, 864e9, "L40S", 8, 1, 25e9, False, "GDDR6"),
}


def test_new_presets_are_listed():
    assert set(KNOWN) <= set(preset_system_names())


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_preset_matches_its_datasheet(name):
    bf16, fp8, mem, bw, _, n, links, link_bw, sharp, tech = KNOWN[name]
    s = load_system(name)
    d = s.device
    assert s.name == name
    assert d.matrix_flops_per_s.bf16 == pytest.approx(bf16, rel=1e-9)
    assert d.matrix_flops_per_s.fp16 == pytest.approx(bf16, rel=1e-9)
    assert d.matrix_flops_per_s.fp8 == pytest.approx(fp8, rel=1e-9)
    assert d.memory.capacity_bytes == pytest.approx(mem, rel=1e-9)
    assert d.memory.bandwidth_bytes_per_s == pytest.approx(bw, rel=1e-9)
    assert d.memory.technology == tech
    ic = s.interconnect
    assert (ic.device_count, ic.topology, ic.links_per_device) == (n, "switch", links)
    assert ic.link_bandwidth_bytes_per_s == pytest.approx(link_bw, rel=1e-9)
    assert ic.in_switch_reduction is sharp
    # The frequency is the one the dense peak implies: the geometry reproduces it to < 0.1 %.
    assert 2 * d.array_macs_per_cycle * d.frequency_hz == pytest.approx(bf16, rel=1e-3)


def test_nvlink5_is_1_8_tb_s_bidirectional_per_gpu():
    for name in ("b200-x8", "gb200-nvl72"):
        ic = load_system(name).interconnect
        assert 2 * ic.links_per_device * ic.link_bandwidth_bytes_per_s == pytest.approx(1.8e12)


def test_blackwell_sm_count_and_l2():
    for name in ("b200-x8", "gb200-nvl72"):
        d = load_system(name).device
        assert d.core_count == 148
        assert d.global_buffer.capacity_bytes == 126 * 2**20
    d = load_system("l40s-x8").device
    assert d.core_count == 142
    assert d.global_buffer.capacity_bytes == 98304 * 2**10


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_device_declares_its_calibration(name):
    key = KNOWN[name][4]
    device = load_system(name).device
    assert lookup(device).calibration == key
    # Until these devices have measurements they borrow the A100's constants (same vendor).
    assert default_calibration().device_key(device) is not None
