"""Area and cost model: the GA100 fit, node scaling, yield, and the sweep."""


import pytest
from measured_data import MEASURED

from krakenlm.cli import main
from krakenlm.design.sweep import Workload, design, sweep
from krakenlm.hardware import area, load_system, replace_path
from krakenlm.hardware.cost import dies_per_wafer, murphy_yield, system_cost

DIE_AREA = MEASURED / "die_area.csv"
needs_data = pytest.mark.skipif(not DIE_AREA.is_file(), reason=f"{DIE_AREA} is absent (set KRAKENLM_MEASURED_DIR)")


@needs_data
def test_shipped_constants_are_the_ga100_fit():
    shots = area.read_die_shots(DIE_AREA)
    fitted = area.fit_ga100(shots["GA100"], load_system("a100-80gb-x4"))
    for name, value in fitted.items():
        assert getattr(area, name) == pytest.approx(value, rel=1e-3), name
    modelled = area.die_area(load_system("a100-80gb-x4"))
    for block, mm2 in shots["GA100"].items():
        assert modelled.blocks[block] == pytest.approx(mm2, abs=0.1)


@needs_data
def test_held_out_die_total_within_a_quarter():
    # MI210's Aldebaran die is never fitted on; the model is coarse, but not off by a lot
    shots = area.read_die_shots(DIE_AREA)
    total = sum(shots["Aldebaran"].values())
    modelled = area.die_area(load_system("mi210-x4")).total_mm2
    assert abs(modelled / total - 1) < 0.25


def test_smaller_node_means_smaller_logic_and_same_phy():
    a100 = load_system("a100-80gb-x4")
    shrunk = replace_path(a100, {"device.process_node_nm": 5})
    big, small = area.die_area(a100).blocks, area.die_area(shrunk).blocks
    assert small["cores"] < big["cores"] and small["memory PHY"] == big["memory PHY"]


def test_yield_and_dies_per_wafer():
    assert murphy_yield(100, 0.0) == 1.0
    assert murphy_yield(800, 0.1) < murphy_yield(400, 0.1) < 1.0
    # 300 mm wafer, 100 mm^2 dies: 706.9 - 66.6 = 640 gross dies
    assert dies_per_wafer(100) == 640


def test_cost_grows_with_memory_and_devices():
    c4 = system_cost(load_system("a100-80gb-x4"))
    c8 = system_cost(load_system("a100-80gb-x8"))
    c40 = system_cost(load_system("a100-40gb-x8"))
    assert c4.device_usd == pytest.approx(c8.device_usd)
    assert c8.system_usd > 1.9 * c4.system_usd
    assert c40.memory_usd < c8.memory_usd


def test_memory_is_priced_per_binary_gigabyte():
    # presets give "80 GB" HBM2e as 80 GiB (85899345920 bytes) and DRAM is priced per GiB, so
    # the A100 80GB pays 80 x $10 exactly ($859 under the old capacity / 1e9 formula); the
    # 40 GB part pays half, the MI300X's 192 GiB of HBM3 192 x $15
    assert system_cost(load_system("a100-80gb-x8")).memory_usd == 80 * 10.0
    assert system_cost(load_system("a100-40gb-x8")).memory_usd == 40 * 10.0
    assert system_cost(load_system("mi300x-x8")).memory_usd == 192 * 15.0


def test_design_rescales_peaks_and_memory():
    base = load_system("a100-80gb-x8")
    d = design(base, 54, "DDR5-16", 20)
    assert d.device.matrix_flops_per_s.fp16 == pytest.approx(base.device.matrix_flops_per_s.fp16 / 2)
    assert d.device.memory.technology == "DDR5"
    assert d.device.memory.bandwidth_bytes_per_s == pytest.approx(16 * 38.4e9)


def test_sweep_reports_perf_per_dollar_against_the_base():
    result = sweep("a100-80gb-x8", Workload("gpt3-13b", 8, 4, 256, 4), cores=(54, 108),
                   memories=("HBM2e-5", "DDR5-16"), global_buffers_mib=(40,)).to_json()
    assert result["configurations"] == 4
    same = [r for r in result["designs"] if r["cores"] == 108 and r["memory"] == "HBM2e"][0]
    assert same["perf_per_usd_vs_base"] == pytest.approx(1.0, rel=0.02)
    ddr = [r for r in result["designs"] if r["cores"] == 108 and r["memory"] == "DDR5"][0]
    assert ddr["tpot_s"] > same["tpot_s"]  # a quarter of the bandwidth: slower decode


def test_cost_cli(capsys):
    import json
    with pytest.raises(SystemExit) as exc:
        main(["sim", "cost", "--system", "h100-80gb-x8", "--json"])
    assert exc.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert {"area_mm2", "yield", "device_usd", "system_usd"} <= set(out)
    assert 0 < out["yield"] < 1
