"""A device's declared identity, and the one lookup that turns it into what the simulator uses.

The hardware YAML declares it under `device.identity` (every field optional; sources as
comments, like every other field):

    identity:
      vendor: nvidia            # nvidia | amd | google | other
      family: hopper            # an architecture family of the vendor (FAMILIES), or custom
      sm_version: 90            # NVIDIA only, and required there: the compute capability x 10
      calibration: H100         # fitted GPU kernel constants: a file of
                                # krakenlm/simulator/constants/devices/ (H100.yaml), a path to a
                                # calibration file (relative to this YAML), or none
      template_constants: A100  # the template models' constants (template.yaml); default: by vendor

Rules (nothing is inferred from the device's name, peak rates or links):

* A YAML without `identity` (or without a field of it) is vendor `custom`, family `custom`, no
  GPU calibration: it is timed by the template models, which read only its datasheet numbers.
* `lookup(device).kernel_generation` is the generation of NVIDIA kernels whose rules the fitted
  GPU kernel models follow (GEMM tiles, attention forms, NCCL's tuner row, the frameworks'
  all-reduce choice): `blackwell` for sm_version >= 100, `hopper` for 90-99, `ampere` below
  (and for a device that declares no sm_version, which has fitted kernels only as a what-if
  calibration of another GPU).
* `lookup(device).template_constants`: the declared key, else TEMPLATE_CONSTANTS_BY_VENDOR
  (a measured device of the same vendor: same libraries, cuBLAS/NCCL or rocBLAS/RCCL), else
  None (the template file's `default` entry).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Protocol

VENDORS = ("nvidia", "amd", "google", "other", "custom")
UNDECLARED = "custom"  # vendor and family of a device that declares none

# Architecture families per vendor; NVIDIA's with the sm_versions (compute capability x 10)
# their parts have.
NVIDIA_SM = {"volta": range(70, 75), "turing": range(75, 80), "ampere": range(80, 89),
             "ada": range(89, 90), "hopper": range(90, 100), "blackwell": range(100, 130)}
FAMILIES = {"nvidia": tuple(NVIDIA_SM), "amd": ("cdna", "cdna2", "cdna3", "cdna4"),
            "google": ("tpu-v2", "tpu-v3", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e"),
            "other": (), "custom": ()}  # "other": any family name the vendor uses

# The NVIDIA kernel generations the GPU kernel models have rules for, by their lowest sm_version.
KERNEL_GENERATIONS = {"ampere": 80, "hopper": 90, "blackwell": 100}

# Template constants of a device that declares none: a measured device of its vendor.
TEMPLATE_CONSTANTS_BY_VENDOR = {"nvidia": "A100", "amd": "MI210"}

NO_CALIBRATION = ("none",)  # `calibration: none` (or null) declares that there is none


def _declared(doc: str, choices: tuple[str, ...] | None = None, integer: bool = False) -> dict:
    """Field metadata in the form hardware/schema.py's parser reads (all optional)."""
    return {"unit": None, "integer": integer, "optional": True, "positive": True,
            "choices": choices, "doc": doc}


@dataclass(frozen=True)
class Identity:
    """What the device is, as its YAML declares it (`device.identity`)."""

    vendor: str = field(default=UNDECLARED, metadata=_declared(
        "who makes it: nvidia, amd, google or other", VENDORS))
    family: str = field(default=UNDECLARED, metadata=_declared(
        "architecture family, e.g. ampere, ada, hopper, blackwell, cdna3, tpu-v3, or custom"))
    sm_version: int | None = field(default=None, metadata=_declared(
        "NVIDIA compute capability x 10 (80, 89, 90, 100)", integer=True))
    calibration: str | None = field(default=None, metadata=_declared(
        "fitted GPU kernel constants: a name in simulator/constants/devices/, a file, or none"))
    template_constants: str | None = field(default=None, metadata=_declared(
        "the template models' constants (a device key of template.yaml)"))

    @functools.cached_property
    def kinds(self) -> DeviceKinds:
        """What it means for the simulator (`lookup`), worked out once per identity: kernel
        models ask for every GEMM and collective they time."""
        return _kinds(self)


def problem(identity: Identity) -> str | None:
    """Why the declared fields contradict each other (a message naming the field), or None."""
    vendor, family, sm = identity.vendor, identity.family, identity.sm_version
    if vendor == UNDECLARED and (family != UNDECLARED or sm is not None):
        return "declare the vendor (nvidia, amd, google or other) beside family and sm_version"
    if family != UNDECLARED and vendor != "other" and family not in FAMILIES[vendor]:
        known = ", ".join(FAMILIES[vendor] + (UNDECLARED,))
        return f"family {family!r} is not a {vendor} architecture family; use one of {known}"
    if vendor == "nvidia" and sm is None:
        return ("sm_version is required for an NVIDIA device: its compute capability x 10 "
                "(e.g. 80 Ampere, 89 Ada, 90 Hopper, 100 Blackwell)")
    if sm is not None and not 10 <= sm < 1000:
        return f"sm_version is the compute capability x 10 (90 for 9.0), got {sm}"
    if vendor != "nvidia" and sm is not None:
        return f"sm_version is an NVIDIA compute capability; {vendor} devices have none"
    if family in NVIDIA_SM and sm not in NVIDIA_SM[family]:
        span = NVIDIA_SM[family]
        return (f"sm_version {sm} is not a {family} part ({span.start}..{span.stop - 1}); "
                "fix the family or the sm_version")
    for name in ("calibration", "template_constants"):
        value = getattr(identity, name)
        if value is not None and not value.strip():
            return f"{name} is empty; name one or leave the field out"
    return None


def calibration_is_file(value: str) -> bool:
    """A declared calibration that names a file (a path) rather than a shipped device."""
    return value.endswith((".yaml", ".yml")) or "/" in value or "\\" in value


def calibration_beside(data: Any, yaml_path: str) -> Any:
    """A hardware YAML's data with a relative `device.identity.calibration` file made relative
    to the YAML's folder, so that it is found from any working directory."""
    try:
        value = data["device"]["identity"]["calibration"]
    except (TypeError, KeyError):
        return data
    if not isinstance(value, str) or not calibration_is_file(value) or \
            PurePath(value).is_absolute():
        return data
    identity = {**data["device"]["identity"], "calibration": str(PurePath(yaml_path).parent / value)}
    return {**data, "device": {**data["device"], "identity": identity}}


@dataclass(frozen=True)
class DeviceKinds:
    """What the simulator reads about a device's identity, every field from its declaration."""

    architecture: tuple[str, str, int | None]  # (vendor, family, sm_version) as declared
    kernel_generation: str  # a key of KERNEL_GENERATIONS: the kernel rules its models follow
    calibration: str | None  # a shipped calibration's name or a file path; None: template models
    template_constants: str | None  # a key of the template constants; None: their default


class _Declares(Protocol):
    identity: Identity


def lookup(device: _Declares) -> DeviceKinds:
    """The one place a device's identity is read (module docstring: the rules)."""
    return device.identity.kinds


def _kinds(identity: Identity) -> DeviceKinds:
    generation = "ampere"
    for name, lowest in KERNEL_GENERATIONS.items():  # ascending sm_version
        if (identity.sm_version or 0) >= lowest:
            generation = name
    calibration = identity.calibration
    if calibration is not None and calibration.lower() in NO_CALIBRATION:
        calibration = None
    return DeviceKinds((identity.vendor, identity.family, identity.sm_version), generation,
                       calibration, identity.template_constants
                       or TEMPLATE_CONSTANTS_BY_VENDOR.get(identity.vendor))


def compute_capability(kernel_generation: str) -> str:
    """CUDA's "major.minor" of a kernel generation's first parts ("9.0" for hopper), "" for
    a generation the models have no rules for."""
    sm = KERNEL_GENERATIONS.get(kernel_generation)
    return "" if sm is None else f"{sm // 10}.{sm % 10}"
