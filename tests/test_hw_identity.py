"""Devices are declared: the hardware YAML's `device.identity` decides which kernel rules, GPU
calibration and template constants a device gets; its name, rates and links decide nothing."""

import copy
import dataclasses

import pytest
import yaml

from krakenlm.cli import main
from krakenlm.hardware import load_system, preset_system_names, system_from_dict
from krakenlm.hardware.identity import Identity, lookup
from krakenlm.hardware.schema import system_to_dict
from krakenlm.models import get_preset
from krakenlm.simulator import Simulator, simulate
from krakenlm.simulator.constants import gpu_kernels as store
from krakenlm.simulator.constants.template import default_calibration
from krakenlm.simulator.kernels.gpu import attention, collectives, gemm, gemm_cutlass

# preset: (vendor, family, sm_version, GPU calibration, template constants, kernel generation)
DECLARED = {
    "a100-40gb-x8": ("nvidia", "ampere", 80, "A100", "A100", "ampere"),
    "a100-80gb-x4": ("nvidia", "ampere", 80, "A100", "A100", "ampere"),
    "a100-80gb-x8": ("nvidia", "ampere", 80, "A100", "A100", "ampere"),
    "a100-80gb-pcie-x8": ("nvidia", "ampere", 80, "A100", "A100", "ampere"),
    "h100-80gb-x8": ("nvidia", "hopper", 90, "H100", "A100", "hopper"),
    "h200-x8": ("nvidia", "hopper", 90, "H200", "A100", "hopper"),
    "b200-x8": ("nvidia", "blackwell", 100, "B200", "A100", "blackwell"),
    "gb200-nvl72": ("nvidia", "blackwell", 100, "GB200", "A100", "blackwell"),
    "l40s-x8": ("nvidia", "ada", 89, "L40S", "A100", "ampere"),
    "mi210-x4": ("amd", "cdna2", None, None, "MI210", "ampere"),
    "mi300x-x8": ("amd", "cdna3", None, None, "MI300X", "ampere"),
    "tpuv3-x8": ("google", "tpu-v3", None, None, "default", "ampere"),
}


def test_every_preset_declares_its_identity():
    assert set(DECLARED) == set(preset_system_names())
    for name, (vendor, family, sm, calibration, template, generation) in DECLARED.items():
        device = load_system(name).device
        ident, kinds = device.identity, lookup(device)
        assert (ident.vendor, ident.family, ident.sm_version) == (vendor, family, sm), name
        assert kinds.calibration == calibration, name
        assert kinds.kernel_generation == generation, name
        assert default_calibration().device_key(device) == template, name
        cal = store.for_device(device)
        assert (cal.device_key if cal else None) == calibration, name


def _with_identity(name: str, **identity) -> dict:
    data = system_to_dict(load_system(name))
    data["device"]["identity"] = identity
    return data


def test_a_yaml_without_identity_is_a_custom_device_timed_by_the_template_models():
    data = system_to_dict(load_system("h100-80gb-x8"))
    del data["device"]["identity"]
    device = system_from_dict(data).device
    assert device.identity == Identity(vendor="custom", family="custom")
    assert lookup(device).calibration is None
    assert store.for_device(device) is None
    assert default_calibration().device_key(device) == "default"


@pytest.mark.parametrize("identity, message", [
    ({"vendor": "intel"}, "field device.identity.vendor: 'intel' is not one of"),
    ({"vendor": "nvidia", "family": "hopper"}, "sm_version is required for an NVIDIA device"),
    ({"vendor": "nvidia", "family": "hopper", "sm_version": 80},
     "sm_version 80 is not a hopper part (90..99)"),
    ({"vendor": "nvidia", "family": "cdna3", "sm_version": 90},
     "family 'cdna3' is not a nvidia architecture family"),
    ({"vendor": "amd", "family": "cdna3", "sm_version": 90}, "amd devices have none"),
    ({"vendor": "nvidia", "family": "hopper", "sm_version": 9.0},
     "sm_version is the compute capability x 10 (90 for 9.0), got 9"),
    ({"vendor": "nvidia", "family": "hopper", "sm_version": "ninety"},
     "field device.identity.sm_version: expected a number"),
    ({"family": "hopper"}, "declare the vendor"),
    ({"vendor": "nvidia", "sm_version": 90, "calibration": 100},
     "field device.identity.calibration: expected text"),
    ({"vendor": "nvidia", "sm_version": 90, "codename": "GH100"},
     "unknown field(s) device.identity.codename"),
])
def test_a_malformed_identity_is_a_one_line_error(identity, message, tmp_path, capsys):
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(_with_identity("h100-80gb-x8", **identity)))
    with pytest.raises(SystemExit) as exc:
        main(["sim", "run", "--system", str(path), "--model", "llama2-7b", "--prompt", "8",
              "--gen", "2"])
    err = capsys.readouterr().err.splitlines()
    assert exc.value.code == 2 and len(err) == 1 and err[0].startswith("error: ")
    assert message in err[0]


def test_an_unknown_calibration_name_is_a_clear_error():
    system = system_from_dict(_with_identity("h100-80gb-x8", vendor="nvidia", sm_version=90,
                                             calibration="H100-PCIE"))
    with pytest.raises(store.GpuCalibrationError,
                       match="declares calibration 'H100-PCIE', which is not a shipped GPU "
                             r"calibration \(A100, B200, GB200, H100, H200, L40S\)"):
        Simulator(system)


def test_kernel_rules_follow_the_declared_sm_version_not_the_rates_or_links():
    h100 = load_system("h100-80gb-x8")
    assert gemm.hopper_class(h100.device) and attention.sm90(h100.device)
    assert not gemm_cutlass.blackwell_class(h100.device)
    # an H100 declared as an Ampere part: its 4096 flop per SM and clock decide nothing
    as_ampere = dataclasses.replace(h100.device, identity=dataclasses.replace(
        h100.device.identity, family="ampere", sm_version=80))
    assert not gemm.hopper_class(as_ampere) and not attention.sm90(as_ampere)
    # NVLink 5 link speed on a Hopper board does not make it Blackwell; no NVLink SHARP does
    # not make it Ampere: NCCL's tuner row is the device's (NVLS stays a property of the fabric)
    fast_links = dataclasses.replace(h100.interconnect, link_bandwidth_bytes_per_s=50e9,
                                     in_switch_reduction=False)
    pcie_like = dataclasses.replace(h100, interconnect=fast_links)
    assert collectives.nccl_arch(pcie_like) == "hopper"
    assert not collectives.nvls_available(pcie_like)
    b200 = load_system("b200-x8")
    assert gemm_cutlass.blackwell_class(b200.device) and not attention.sm90(b200.device)
    assert collectives.nccl_arch(b200) == "blackwell"


def test_a_renamed_copy_of_a_preset_gets_no_other_gpus_kernels(tmp_path):
    """The issue's case: the H100 preset renamed to a PCIe part without in-switch reduction.
    Without its identity it is timed by the template models (and says so); whatever its name."""
    data = system_to_dict(load_system("h100-80gb-x8"))
    data["name"] = "h100-pcie-x8"
    data["device"]["name"] = "NVIDIA H100 PCIe 80GB"
    data["interconnect"]["in_switch_reduction"] = False
    del data["device"]["identity"]
    r = simulate(get_preset("llama2-7b"), system_from_dict(data), 1, 1, 64, 2)
    assert r.kernel_calibration is None
    assert all(how.startswith("template model") for how in r.kernel_sources.values())
    # declaring the H100's constants is a choice the YAML states, and it is taken
    data["device"]["identity"] = {"vendor": "nvidia", "family": "hopper", "sm_version": 90,
                                  "calibration": "H100"}
    r = simulate(get_preset("llama2-7b"), system_from_dict(data), 1, 1, 64, 2)
    assert r.kernel_calibration == "H100" and r.to_json()["kernel_calibration"] == "H100"


def test_the_result_names_the_calibration_that_timed_it():
    config = get_preset("llama2-7b")
    assert simulate(config, "a100-40gb-x8", 1, 1, 64, 2).kernel_calibration == "A100"
    assert simulate(config, "h100-80gb-x8", 1, 1, 64, 2, mode="tile").kernel_calibration is None
    assert simulate(config, "mi300x-x8", 1, 1, 64, 2).kernel_calibration is None
    what_if = store.load_file(store.shipped_dir() / "H100.yaml")
    assert simulate(config, "mi300x-x8", 1, 1, 64, 2,
                    gpu_calibration=what_if).kernel_calibration == "H100"


def test_a_relative_calibration_path_is_read_beside_the_yaml(tmp_path, monkeypatch):
    folder = tmp_path / "gpus"
    folder.mkdir()
    cal = store.load_file(store.shipped_dir() / "H100.yaml")
    store.save(cal, folder / "my-h100.yaml")
    data = _with_identity("h100-80gb-x8", vendor="nvidia", family="hopper", sm_version=90,
                          calibration="my-h100.yaml")
    (folder / "gpu.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path)  # elsewhere than the YAML
    device = load_system(str(folder / "gpu.yaml")).device
    assert store.for_device(device).device_key == "H100"
    missing = copy.deepcopy(data)
    missing["device"]["identity"]["calibration"] = "nope.yaml"
    (folder / "missing.yaml").write_text(yaml.safe_dump(missing))
    with pytest.raises(store.GpuCalibrationError, match="nope.yaml, which cannot be read"):
        store.for_device(load_system(str(folder / "missing.yaml")).device)


def test_a_declared_calibration_of_another_part_is_a_what_if_warning(capsys):
    capsys.readouterr()
    ada = system_from_dict(_with_identity("l40s-x8", vendor="nvidia", family="ada",
                                          sm_version=89, calibration="H100"))
    assert Simulator(ada).timer.gpu.device_key == "H100"
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "holds fits measured on H100, not on l40s-x8's NVIDIA L40S" in err[0]
    # the same part under another name (an H100 board of the user's): declared, no warning
    same = system_from_dict(_with_identity("h100-80gb-x8", vendor="nvidia", family="hopper",
                                           sm_version=90, calibration="H100"))
    Simulator(same)
    Simulator("a100-40gb-x8")  # the 80GB part's constants: the same GA100
    assert capsys.readouterr().err == ""
