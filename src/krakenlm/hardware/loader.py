"""Load systems from the YAML presets shipped in the package, or from a user's YAML file."""

from __future__ import annotations

import dataclasses
import functools
from importlib import resources
from typing import Any

import yaml

from .. import yamlio
from ..fileio import read_shipped_or_user_text
from .identity import calibration_beside
from .schema import HardwareError, System, system_from_dict

_PRESET_PACKAGE = "krakenlm.hardware.presets"


def _preset_files() -> dict[str, Any]:
    root = resources.files(_PRESET_PACKAGE)
    return {p.name[:-5]: p for p in root.iterdir() if p.name.endswith(".yaml")}


def preset_system_names() -> list[str]:
    return sorted(_preset_files())


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yamlio.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise HardwareError(f"hardware file {source} is not valid YAML{where}: {problem}") from None


@functools.lru_cache(maxsize=64)
def load_system(name_or_path: str) -> System:
    """A preset name (`a100-80gb-x4`) or a path to a YAML file in the same schema."""
    presets = _preset_files()
    text, source = read_shipped_or_user_text(
        name_or_path, presets, what="preset", file_what="hardware file", error=HardwareError,
        unknown=lambda names: f"unknown system {name_or_path!r}: not a preset ({names}) nor a "
                              "YAML file; run `krakenlm sim systems` to list the presets")
    data = _parse_yaml(text, source)
    if name_or_path not in presets:
        data = calibration_beside(data, name_or_path)
    try:
        return system_from_dict(data)
    except HardwareError as exc:
        raise HardwareError(f"{source}: {exc}") from None


def replace_path(system: System, changes: dict[str, Any]) -> System:
    """A copy of `system` with dotted fields changed, e.g. {"device.core_count": 64}.

    Used by design-space sweeps; the copy is not re-validated against datasheet peaks since a
    swept design has none (callers rescale the peak rates they change).
    """
    def apply(obj: Any, parts: list[str], value: Any) -> Any:
        if len(parts) == 1:
            if not hasattr(obj, parts[0]):
                raise HardwareError(f"no field {parts[0]!r} in {type(obj).__name__}")
            return dataclasses.replace(obj, **{parts[0]: value})
        child = getattr(obj, parts[0])
        return dataclasses.replace(obj, **{parts[0]: apply(child, parts[1:], value)})

    for dotted, value in changes.items():
        system = apply(system, dotted.split("."), value)
    return system
