"""Template constants: per device and operator, the efficiencies, harness terms and collective
protocols the LLMCompass template models read (`template.yaml` beside this module, written by
`krakenlm sim calibrate --source llmcompass`; calibration/template.py fits them).

* `compute_efficiency`, `memory_efficiency` (<= 1) derate the device's peak matrix rate and
  memory bandwidth for an operator: the tile model is an ideal schedule, real kernels are not.
* `harness_overhead_s` and `measurement_floor_s` describe the LLMCompass *measurement*, not the
  device (measurements/harness.py applies them when comparing with that set); a simulated model
  pays the device's `launch_overhead_s` (hardware YAML) per kernel instead.
* `protocols` (all-reduce): (latency, efficiency) pairs of the collective library's protocols
  (NCCL LL / LL128 / Simple); the collective takes the fastest per message size.

`template_sourced.yaml` adds devices without kernel measurements of ours: a measured device's
constants (`base`) with the fields a cited public measurement gives replaced (e.g. MI300X's
matmul memory efficiency from its measured STREAM bandwidth); merged into every calibration
that lacks the key (`with_sourced`).

A device uses the constants its hardware YAML declares (`device.identity.template_constants`),
else those of a measured device of its vendor (hardware/identity.TEMPLATE_CONSTANTS_BY_VENDOR:
same libraries, cuBLAS/NCCL or rocBLAS/RCCL), else the `default` entry (the A100's constants):
stated guesses. A key the file lacks falls back to `default` too.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ... import yamlio
from ...errors import KrakenError
from ...fileio import read_user_text
from ...hardware.identity import lookup
from ...hardware.schema import Device
from ..kernels.template.collectives import IDEAL, Protocol

CALIBRATION_FILE = "template.yaml"
SOURCED_FILE = "template_sourced.yaml"

# Operators without measurements borrow the constants of the closest measured one.
OP_ALIASES = {"rmsnorm": "layernorm", "add_layernorm": "layernorm", "add_rmsnorm": "layernorm",
              "swiglu": "gelu", "residual": "gelu", "rope": "gelu",
              "embedding": "gelu", "kv_append": "gelu", "scale_mask": "gelu",
              "reduce_scatter": "allreduce", "all_gather": "allreduce", "all_reduce": "allreduce",
              "attention": "matmul"}


class CalibrationError(KrakenError, ValueError):
    """The calibration file is malformed."""


@dataclass(frozen=True)
class OpConstants:
    """One device's template constants for one operator (module docstring; template.yaml, fitted by
    calibration/template.py): the fractions (<= 1) of the peak matrix rate and memory bandwidth
    it reaches, the LLMCompass harness's overhead and measurement floor (seconds; used only when
    comparing with that set), the row bytes a row reduction reads in one pass (0: the hardware
    default), and the all-reduce's protocols (latency, efficiency; NCCL LL / LL128 / Simple)."""
    compute_efficiency: float = 1.0
    memory_efficiency: float = 1.0
    harness_overhead_s: float = 0.0
    measurement_floor_s: float = 0.0
    single_pass_row_bytes: float = 0.0  # row reductions: 0 means the hardware default
    protocols: tuple[Protocol, ...] = IDEAL

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["protocols"] = [dataclasses.asdict(p) for p in self.protocols]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "OpConstants":
        if not isinstance(data, dict):
            raise CalibrationError(f"expected a mapping of constants, got {data!r:.60}")
        data = dict(data)
        raw_protocols = data.pop("protocols", None) or []
        if not isinstance(raw_protocols, list) or not all(
                isinstance(p, dict) and set(p) <= {"latency_s", "efficiency"}
                for p in raw_protocols):
            raise CalibrationError("protocols: expected a list of {latency_s, efficiency}, got "
                                   f"{raw_protocols!r:.60}")
        protocols = tuple(Protocol(**{k: _constant(f"protocols.{k}", v) for k, v in p.items()})
                          for p in raw_protocols) or IDEAL
        known = {f.name for f in dataclasses.fields(cls)}
        if set(data) - known:
            raise CalibrationError("unknown calibration field(s) "
                                   f"{sorted(str(k) for k in set(data) - known)}")
        return cls(protocols=protocols, **{k: _constant(k, v) for k, v in data.items()})


def _constant(name: str, value: Any) -> float:
    """A fitted constant: a finite number >= 0, and an efficiency at most 1 and above 0."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    try:
        ok = ok and math.isfinite(value) and value >= 0
    except OverflowError:  # an integer beyond the float range
        ok = False
    if ok and name.endswith("efficiency"):
        ok = 0 < value <= 1
    if not ok:
        what = "a number in (0, 1]" if name.endswith("efficiency") else "a finite number >= 0"
        raise CalibrationError(f"{name}: expected {what}, got {value!r:.60}")
    return float(value)


IDENTITY = OpConstants()



class Calibration:
    """Constants per device key (e.g. "A100", "default") and operator."""

    def __init__(self, data: dict[str, Any]):
        self.meta = data.get("meta", {})
        self.devices: dict[str, dict[str, OpConstants]] = {
            key: {op: OpConstants.from_dict(c) for op, c in ops.items()}
            for key, ops in data.get("devices", {}).items()}

    def device_key(self, device: Device) -> str | None:
        """The key the device's identity names (hardware/identity.lookup) when this file has
        it, else `default`, else None (the ideal constants)."""
        key = lookup(device).template_constants
        if key in self.devices:
            return key
        return "default" if "default" in self.devices else None

    def get(self, device: Device, op: str) -> OpConstants:
        key = self.device_key(device)
        if key is None:
            return IDENTITY
        ops = self.devices[key]
        return ops.get(op) or ops.get(OP_ALIASES.get(op, op)) or IDENTITY

    def find(self, device: Device, op: str) -> OpConstants | None:
        """The device's constants for `op` when its key names them (no alias, no default)."""
        key = self.device_key(device)
        return None if key is None else self.devices[key].get(op)

    def to_dict(self) -> dict[str, Any]:
        return {"meta": self.meta,
                "devices": {k: {op: c.to_dict() for op, c in ops.items()}
                            for k, ops in self.devices.items()}}


def _package_yaml(name: str) -> Any:
    return yamlio.safe_load(resources.files("krakenlm.simulator.constants").joinpath(name)
                            .read_text())


def with_sourced(data: dict[str, Any], sourced: dict[str, Any] | None = None) -> dict[str, Any]:
    """`data` (a calibration's mapping) with the sourced devices it lacks: each is its `base`
    device's operators with the sourced fields replaced. A base the calibration lacks leaves the
    device out (it then falls back to `default`, as any unknown key does)."""
    sourced = _package_yaml(SOURCED_FILE) if sourced is None else sourced
    devices = dict(data.get("devices", {}))
    for key, entry in (sourced.get("devices") or {}).items():
        base = devices.get(entry.get("base"))
        if key in devices or not isinstance(base, dict):
            continue
        ops = dict(base)  # a malformed base operator stays as it is: Calibration names it
        for op, fields in entry.items():
            if op != "base" and isinstance(ops.get(op, {}), dict):
                ops[op] = {**ops.get(op, {}), **fields}
        devices[key] = ops
    return {**data, "devices": devices}


@functools.lru_cache(maxsize=None)
def default_calibration() -> Calibration:
    return Calibration(with_sourced(_package_yaml(CALIBRATION_FILE)))


def load_calibration(path: str | Path | None) -> Calibration:
    if path is None:
        return default_calibration()
    try:
        data = yamlio.safe_load(read_user_text(path, "calibration file", CalibrationError))
    except OSError as exc:
        raise CalibrationError(f"calibration file {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise CalibrationError(f"calibration file {path} is not valid YAML: "
                               f"{str(exc).splitlines()[0]}") from None
    devices = data.get("devices") if isinstance(data, dict) else None
    if not isinstance(devices, dict) or not all(isinstance(key, str) and isinstance(ops, dict)
                                                for key, ops in devices.items()):
        raise CalibrationError(f"calibration file {path} must hold a mapping with a devices "
                               "section, each device mapping its operators to their constants "
                               "(the format of `krakenlm sim calibrate`'s output)")
    try:
        return Calibration(with_sourced(data))
    except (TypeError, AttributeError, ValueError) as exc:
        raise CalibrationError(f"calibration file {path}: {exc}") from None
