"""Fitted GPU kernel constants per device and framework: the calibration files presets ship with.

One YAML file per device (`krakenlm/simulator/constants/devices/<key>.yaml`, e.g. `H100.yaml`),
written by `krakenlm sim calibrate --source aiconfigurator`:

    meta: {format: 3, device_key: H100, system: h100-80gb-x8, source: ..., command: ...,
           created: ...}            # command and date of the last fit
    frameworks:
      sglang:                       # which serving framework's kernels were measured
        version: 0.5.14
        families:
          gemm:                     # kernel family (kernels/base.py FAMILIES)
            fp8:                    # variant: a dtype, a kind of streaming kernel, any
              form: gemm/sglang-cutlass-fp8           # the registered kernel form
              structure: {tile_table: 3}              # its structural choices, typed
              params: {floor_s: ..., ...}             # the constants that form reads
              harness: {weight_copies: 6, heat_s: ..., heat_gain: ...}   # how the source
                                    # measured (measurements/harness.py), never in a query
              fit: {n_fit: ..., n_held_out: ..., mape_fit_pct: ..., mape_held_out_pct: ...}
      nccl: ...

Files of format 2 (every constant under `params`, the form told by which keys were present)
are converted by `python -m krakenlm.simulator.constants.format2 FILE...`.

A device uses the file its hardware YAML declares (`device.identity.calibration`, read by
hardware/identity.py): a shipped file by its name (`calibration: H100` is devices/H100.yaml) or
a calibration file by its path; a device that declares none has no fitted kernels (the template
models time it). The A100 40GB preset declares the A100 file, measured on the 80GB part (same
die and clocks; its own memory bandwidth is an input of every model).
"""

from __future__ import annotations

import datetime
import functools
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ... import yamlio
from ...errors import KrakenError
from ...fileio import read_user_text, write_text_atomically
from ...hardware import HardwareError, load_system
from ...hardware.identity import calibration_is_file, lookup
from ...hardware.schema import Device, System
from ..kernels import base as kernel_forms
from ..kernels import gpu as _gpu_forms  # noqa: F401  (registers the GPU kernel forms)

FORMAT = 3
SHIPPED_DIR = "devices"


class GpuCalibrationError(KrakenError, ValueError):
    """A GPU calibration file is malformed or missing what is asked of it."""


class FileParams(dict):
    """An entry's parameters as read from a file. A parameter a kernel model asks for and the
    file lacks (an edited or damaged file) is a GpuCalibrationError naming the entry, where a
    plain dict would raise a KeyError deep inside the model."""

    def __init__(self, values: dict[str, float], where: str):
        super().__init__(values)
        self.where = where

    def __missing__(self, name: str) -> float:
        raise GpuCalibrationError(f"{self.where} has no parameter {name!r}; restore the file or "
                                  "re-run `krakenlm sim calibrate` for this device")


@dataclass
class Entry:
    """One fitted kernel: its form (kernels/base.py registry), the form's structure, the
    constants it reads, the measurement harness's chosen and fitted conditions, the fit."""

    form: str
    structure: Any
    params: dict[str, float]
    harness: dict[str, Any] = field(default_factory=dict)
    fit: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def kernel(self) -> kernel_forms.KernelForm:
        return kernel_forms.form(self.form)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "form": self.form,
            "structure": _Flow(kernel_forms.structure_to_dict(self.structure)),
            "params": {k: _stored(v) for k, v in self.params.items()}}
        if self.harness:
            out["harness"] = _Flow({k: v if isinstance(v, (bool, int)) else _stored(v)
                                    for k, v in self.harness.items()})
        out["fit"] = self.fit
        if self.notes:
            out["notes"] = list(self.notes)
        return out


@dataclass
class DeviceCalibration:
    """Every fitted family of one device, per framework."""

    device_key: str
    meta: dict[str, Any] = field(default_factory=dict)
    # framework -> {"version": str, "families": {family: {variant: Entry}}}
    frameworks: dict[str, dict[str, Any]] = field(default_factory=dict)
    path: str = ""

    def entry(self, framework: str, family: str, variant: str) -> Entry | None:
        fams = self.frameworks.get(framework, {}).get("families", {})
        return fams.get(family, {}).get(variant)

    def fitted_on(self) -> System | None:
        """The system this calibration records it was fitted on (`meta.system`); None where
        it names none or that system cannot be loaded."""
        if not self.meta.get("system"):
            return None
        try:
            return load_system(str(self.meta["system"]))
        except HardwareError:
            return None

    def variants(self, framework: str, family: str) -> dict[str, Entry]:
        return self.frameworks.get(framework, {}).get("families", {}).get(family, {})

    def put(self, framework: str, version: str, family: str, variant: str, entry: Entry) -> None:
        fw = self.frameworks.setdefault(framework, {"version": version, "families": {}})
        fw["version"] = version
        fw["families"].setdefault(family, {})[variant] = entry

    def to_dict(self) -> dict[str, Any]:
        return {"meta": {"format": FORMAT, "device_key": self.device_key, **self.meta},
                "frameworks": {
                    fw: {"version": info.get("version", ""),
                         "families": {fam: {v: e.to_dict() for v, e in variants.items()}
                                      for fam, variants in info.get("families", {}).items()}}
                    for fw, info in self.frameworks.items()}}

    @classmethod
    def from_dict(cls, data: Any, source: str) -> "DeviceCalibration":
        if not isinstance(data, dict) or not isinstance(data.get("meta"), dict):
            raise GpuCalibrationError(f"{source}: not a GPU calibration file (no meta section)")
        meta = dict(data["meta"])
        if meta.get("format") == 2:
            raise GpuCalibrationError(
                f"{source}: calibration format 2, this krakenlm reads format {FORMAT}; convert it "
                f"with `python -m krakenlm.simulator.constants.format2 {source}` (the same "
                "constants) or re-run `krakenlm sim calibrate`")
        if meta.get("format") != FORMAT:
            raise GpuCalibrationError(f"{source}: calibration format {meta.get('format')!r}, "
                                      f"this krakenlm reads format {FORMAT}; re-run "
                                      "`krakenlm sim calibrate`")
        key = meta.pop("device_key", None)
        meta.pop("format", None)
        if not key:
            raise GpuCalibrationError(f"{source}: meta.device_key is missing")
        cal = cls(str(key), meta, path=source)
        for fw, info in _mapping(data.get("frameworks"), source, "frameworks").items():
            if not isinstance(info, dict):
                raise GpuCalibrationError(f"{source}: frameworks.{fw} is not a mapping")
            families = _mapping(info.get("families"), source, f"frameworks.{fw}.families")
            for fam, variants in families.items():
                where = f"frameworks.{fw}.families.{fam}"
                for variant, e in _mapping(variants, source, where).items():
                    cal.put(fw, str(info.get("version", "")), fam, str(variant),
                            _entry(e, fam, f"{source}: {where}.{variant}"))
        return cal


def _entry(e: Any, family: str, where: str) -> Entry:
    """An entry read from a file, checked: a registered form of `family`, its structure's
    fields and types, finite constants."""
    if not isinstance(e, dict):
        raise GpuCalibrationError(f"{where} is not a mapping")
    try:
        form = kernel_forms.form(str(e.get("form")))
    except KeyError as exc:
        raise GpuCalibrationError(f"{where}: {exc.args[0]}") from None
    if form.family != family:
        raise GpuCalibrationError(f"{where}: form {form.name!r} times {form.family}, not "
                                  f"{family}")
    try:
        structure = kernel_forms.structure_from_dict(form.Structure, e.get("structure"), where)
    except ValueError as exc:
        raise GpuCalibrationError(str(exc)) from None
    try:
        params = {k: float(v) for k, v in e["params"].items()}
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        params = None
    if params is None or not all(map(math.isfinite, params.values())):
        raise GpuCalibrationError(f"{where} needs a params mapping of finite numbers")
    harness = e.get("harness") or {}
    if not isinstance(harness, dict) or not all(
            isinstance(v, bool) or (isinstance(v, (int, float)) and math.isfinite(v))
            for v in harness.values()):
        raise GpuCalibrationError(f"{where}: harness must map names to numbers or booleans")
    fit, notes = e.get("fit") or {}, e.get("notes") or []
    if not isinstance(fit, dict) or not isinstance(notes, list):
        raise GpuCalibrationError(f"{where}: fit must be a mapping and notes a list")
    return Entry(form.name, structure, FileParams(params, where), dict(harness), dict(fit),
                 list(notes))


def _mapping(value: Any, source: str, where: str) -> dict:
    """A section that maps names to sections (empty when absent)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise GpuCalibrationError(f"{source}: {where} is not a mapping")
    return value


class _Flow(dict):
    """A short mapping written on one line (a structure, a harness)."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Flow, lambda dumper, data: dumper.represent_mapping(
    "tag:yaml.org,2002:map", data, flow_style=True))


def _stored(value: float) -> float:
    """6 significant digits, except integers (message sizes in bytes such as a custom
    all-reduce's hand-off), which are kept exact: 4 MiB rounded to 4194300 would move a
    4 MiB message to the other side of its threshold."""
    value = float(value)
    return value if value.is_integer() else float(f"{value:.6g}")


def load_file(path: str | Path) -> DeviceCalibration:
    path = Path(path)
    try:
        data = yamlio.safe_load(read_user_text(path, "calibration file", GpuCalibrationError))
    except OSError as exc:
        raise GpuCalibrationError(f"cannot read calibration file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise GpuCalibrationError(f"calibration file {path} is not valid YAML: "
                                  f"{str(exc).splitlines()[0]}") from None
    return DeviceCalibration.from_dict(data, str(path))


def shipped_dir() -> Path:
    return Path(str(resources.files("krakenlm.simulator.constants").joinpath(SHIPPED_DIR)))


def shipped_names() -> list[str]:
    """The shipped calibrations' names (their files' stems), without reading the files."""
    root = shipped_dir()
    return sorted(p.stem for p in root.glob("*.yaml")) if root.is_dir() else []


@functools.lru_cache(maxsize=None)
def shipped_named(name: str) -> DeviceCalibration | None:
    """One shipped calibration, read once per process; None when none has that name. A query
    reads only its own device's file (parsing all six took a cold `sim run` ~1.3 s)."""
    path = shipped_dir() / f"{name}.yaml"
    return load_file(path) if name in shipped_names() else None


def shipped() -> tuple[DeviceCalibration, ...]:
    return tuple(shipped_named(name) for name in shipped_names())


def for_device(device: Device) -> DeviceCalibration | None:
    """The calibration `device` declares: a shipped file by name, a calibration file by path;
    None when it declares none."""
    name = lookup(device).calibration
    if name is None:
        return None
    if calibration_is_file(name):
        path = Path(name)
        try:
            stat = path.stat()
        except OSError as exc:
            raise GpuCalibrationError(f"device {device.name!r} declares calibration {name}, "
                                      f"which cannot be read: {exc.strerror}; fix the path in "
                                      "device.identity.calibration") from None
        return _load_cached(str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    cal = shipped_named(name)
    if cal is not None:
        return cal
    names = ", ".join(shipped_names())
    raise GpuCalibrationError(f"device {device.name!r} declares calibration {name!r}, which is "
                              f"not a shipped GPU calibration ({names}); name one of them, give "
                              "the path of a calibration file, or write `calibration: none` to "
                              "time it with the template models")


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int, size: int) -> DeviceCalibration:
    """A calibration file, read again when it changed (a study simulates one device often)."""
    return load_file(path)


def save(cal: DeviceCalibration, path: str | Path) -> Path:
    """Write atomically (fileio.write_text_atomically)."""
    header = ("# Fitted GPU kernel constants; generated by `krakenlm sim calibrate`, do not edit.\n"
              "# Kernel forms: krakenlm/simulator/kernels/gpu/*.py. Format: "
              "constants/gpu_kernels.py.\n")
    text = header + yaml.dump(cal.to_dict(), Dumper=_Dumper, sort_keys=False, width=100)
    return write_text_atomically(path, text)


def today() -> str:
    return datetime.date.today().isoformat()
