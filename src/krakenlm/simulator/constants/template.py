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

Devices without measurements use the constants of a measured device of the same vendor
(VENDOR_KEYS: same libraries, cuBLAS/NCCL or rocBLAS/RCCL), others the `default` entry (the
A100's constants): stated guesses.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ...errors import KrakenError
from ...fileio import read_user_text
from ...hardware.schema import Device
from ..kernels.template.collectives import IDEAL, Protocol

CALIBRATION_FILE = "template.yaml"


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
        data = dict(data)
        protocols = tuple(Protocol(**p) for p in data.pop("protocols", [])) or IDEAL
        known = {f.name for f in dataclasses.fields(cls)}
        if set(data) - known:
            raise CalibrationError(f"unknown calibration field(s) {sorted(set(data) - known)}")
        return cls(protocols=protocols, **data)


IDENTITY = OpConstants()


# (word in a device name, measured device whose constants it borrows), tried in order.
VENDOR_KEYS = (("AMD", "MI210"), ("NVIDIA", "A100"))


class Calibration:
    """Constants per device key (a substring of the device name, e.g. "A100") and operator."""

    def __init__(self, data: dict[str, Any]):
        self.meta = data.get("meta", {})
        self.devices: dict[str, dict[str, OpConstants]] = {
            key: {op: OpConstants.from_dict(c) for op, c in ops.items()}
            for key, ops in data.get("devices", {}).items()}

    def device_key(self, device: Device) -> str | None:
        name = device.name.lower()
        for key in self.devices:
            if key != "default" and key.lower() in name:
                return key
        for vendor, key in VENDOR_KEYS:
            if vendor.lower() in name and key in self.devices:
                return key
        return "default" if "default" in self.devices else None

    def get(self, device: Device, op: str) -> OpConstants:
        key = self.device_key(device)
        if key is None:
            return IDENTITY
        ops = self.devices[key]
        return ops.get(op) or ops.get(OP_ALIASES.get(op, op)) or IDENTITY

    def to_dict(self) -> dict[str, Any]:
        return {"meta": self.meta,
                "devices": {k: {op: c.to_dict() for op, c in ops.items()}
                            for k, ops in self.devices.items()}}


@functools.lru_cache(maxsize=None)
def default_calibration() -> Calibration:
    text = resources.files("krakenlm.simulator.constants").joinpath(CALIBRATION_FILE).read_text()
    return Calibration(yaml.safe_load(text))


def load_calibration(path: str | Path | None) -> Calibration:
    if path is None:
        return default_calibration()
    try:
        data = yaml.safe_load(read_user_text(path, "calibration file", CalibrationError))
    except OSError as exc:
        raise CalibrationError(f"calibration file {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise CalibrationError(f"calibration file {path} is not valid YAML: "
                               f"{str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise CalibrationError(f"calibration file {path} must hold a mapping with a devices "
                               "section (the format of `krakenlm sim calibrate`'s output)")
    try:
        return Calibration(data)
    except (TypeError, AttributeError, ValueError) as exc:
        raise CalibrationError(f"calibration file {path}: {exc}") from None
