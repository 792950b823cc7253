"""Hardware schema: presets load, and malformed descriptions fail naming the field."""

import copy

import pytest
import yaml

from krakenlm.hardware import HardwareError, load_system, preset_system_names, system_from_dict
from krakenlm.hardware.schema import system_to_dict


@pytest.fixture()
def a100_dict():
    return system_to_dict(load_system("a100-80gb-x4"))


def test_every_preset_loads_and_matches_its_geometry():
    names = preset_system_names()
    assert {"a100-80gb-x4", "mi210-x4"} <= set(names)
    for name in names:
        s = load_system(name)
        assert s.name == name
        d = s.device
        # The consistency check guarantees this; recomputing it here pins the meaning of fields.
        geometry = 2 * d.array_macs_per_cycle * d.frequency_hz
        assert abs(geometry / (d.matrix_flops_per_s.fp16 or d.matrix_flops_per_s.bf16) - 1) < 0.03


def test_every_preset_number_has_a_source_comment():
    from importlib import resources
    root = resources.files("krakenlm.hardware.presets")
    for path in root.iterdir():
        if not path.name.endswith(".yaml"):
            continue
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if not stripped or stripped.startswith("#") or stripped.endswith(":"):
                continue
            key, _, value = stripped.partition(":")
            if key in ("name", "description", "technology", "topology") or "[" in value.split("#")[0]:
                continue
            assert "#" in line, f"{path.name}: value without a source comment: {line!r}"


def test_round_trip(a100_dict):
    assert system_from_dict(a100_dict) == load_system("a100-80gb-x4")


def test_unit_strings_are_converted(a100_dict):
    d = copy.deepcopy(a100_dict)
    d["device"]["memory"]["bandwidth_bytes_per_s"] = "2039 GB/s"
    d["device"]["frequency_hz"] = "1410 MHz"
    s = system_from_dict(d)
    assert s.device.memory.bandwidth_bytes_per_s == pytest.approx(2.039e12)
    assert s.device.frequency_hz == pytest.approx(1.41e9)


REMOVE = object()  # a field left out of the description


@pytest.mark.parametrize("field, value, message", [
    pytest.param("memory.bandwidth_bytes_per_s", "80 GB", r"device\.memory\.bandwidth_bytes_per_s",
                 id="wrong_unit_names_the_field"),
    pytest.param("frequency_hz", 1.41, r"device\.frequency_hz.*implausible",
                 id="frequency_in_ghz_written_as_hz_is_caught"),
    pytest.param("memory.latency_s", REMOVE, r"missing field device\.memory\.latency_s",
                 id="missing_field_is_named"),
    pytest.param("core_count", 54, r"matrix_flops_per_s\.fp16",
                 id="geometry_disagreeing_with_peak_is_an_error"),
])
def test_bad_device_field_is_named(a100_dict, field, value, message):
    """`field` (a dotted path below `device`) set to `value`, or removed, fails naming it."""
    d = copy.deepcopy(a100_dict)
    *parents, name = field.split(".")
    section = d["device"]
    for parent in parents:
        section = section[parent]
    if value is REMOVE:
        del section[name]
    else:
        section[name] = value
    with pytest.raises(HardwareError, match=message):
        system_from_dict(d)


def test_unit_in_wrong_field_name_is_reported(a100_dict):
    d = copy.deepcopy(a100_dict)
    d["device"]["memory"]["bandwidth_gb_per_s"] = d["device"]["memory"].pop("bandwidth_bytes_per_s")
    with pytest.raises(HardwareError, match=r"device\.memory\.bandwidth_gb_per_s.*bandwidth_bytes_per_s"):
        system_from_dict(d)


def test_malformed_yaml_file_names_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ndevice: [unclosed\n")
    with pytest.raises(HardwareError, match=r"not valid YAML at line"):
        load_system(str(bad))


def test_yaml_file_with_bad_field_names_file_and_field(tmp_path, a100_dict):
    d = copy.deepcopy(a100_dict)
    d["interconnect"]["topology"] = "hypercube"
    path = tmp_path / "sys.yaml"
    path.write_text(yaml.safe_dump(d))
    with pytest.raises(HardwareError, match=r"sys\.yaml.*interconnect\.topology"):
        load_system(str(path))


def test_unknown_system():
    with pytest.raises(HardwareError, match="unknown system 'nope'.*sim systems"):
        load_system("nope")


def test_host_link_is_optional_and_validated(a100_dict):
    assert system_from_dict(a100_dict).device.host_link_bandwidth_bytes_per_s == 32e9
    a100_dict["device"].pop("host_link_bandwidth_bytes_per_s")
    assert system_from_dict(a100_dict).device.host_link_bandwidth_bytes_per_s is None
    a100_dict["device"]["host_link_bandwidth_bytes_per_s"] = "64 GB/s"
    assert system_from_dict(a100_dict).device.host_link_bandwidth_bytes_per_s == 64e9
    a100_dict["device"]["host_link_bandwidth_bytes_per_s"] = 32
    with pytest.raises(HardwareError, match=r"device\.host_link_bandwidth_bytes_per_s.*implausible"):
        system_from_dict(a100_dict)
