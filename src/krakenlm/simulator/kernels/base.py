"""The kernel-model interface: one protocol for every fitted kernel form, and their registry.

A *family* is what an operator needs timed (a GEMM, context or generation attention, a
streaming elementwise kernel, an NCCL collective, a framework's own all-reduce). A *form* is one
way a library runs it (cuBLAS's tile heuristic, vLLM's CUTLASS dispatch, TensorRT-LLM's XQA
kernels, FlashAttention-3's split decode, ...), with a few fitted constants and some discrete
structural choices read from the library's source (a tile table, a split rule). Every form
implements KernelForm and is registered by its name; a calibration entry names the form, its
structure and its constants, so a query, a fit and a validation all reach the model the same
way:

    form = registry.form(entry.form)
    seconds = form.predict(setting, cols, entry.params, entry.structure, conditions)

`cols` are column arrays (a scalar query is arrays of length 1). `conditions` say how the kernel
runs: SERVING (a layer of a served model) unless a measurement harness ran it otherwise
(measurements/harness.py knows each source's collector); a query never passes anything else.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ...hardware.schema import Device, System
from .params import Param

FAMILIES = ("gemm", "elementwise", "context_attention", "generation_attention", "nccl",
            "custom_all_reduce")


# ----------------------------------------------------------------------------- conditions
@dataclass(frozen=True)
class BurstHeat:
    """The die heating during a benchmark's back-to-back burst of one shape: a power-limited
    time t becomes t (1 + gain (1 - exp(-t / time_constant_s)))."""

    time_constant_s: float
    gain: float


@dataclass(frozen=True)
class Conditions:
    """How a kernel runs. The defaults (SERVING) are a layer of a served model; a benchmark
    harness (measurements/harness.py) sets what its collector does."""

    weight_copies: int = 0  # a GEMM benchmark cycles through this many copies of the weights
    warm_replay: bool = False  # the op is replayed on the same tensors: L2-resident ones stay hot
    burst_heat: BurstHeat | None = None  # back-to-back bursts heat the die (fitted per source)
    eager: bool = False  # rows marked graph False are the collector's eager calls (host, clone)


SERVING = Conditions()


# -------------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class Setting:
    """Where a form runs: the system (its device and fabric), the serving framework whose
    kernel it is (and that framework's version, which some launch rules depend on), the variant
    (a dtype, a kind of streaming kernel), and for a framework's all-reduce the NCCL model it
    hands large messages to (None: its own kernels time every message)."""

    system: System
    framework: str
    variant: str
    version: str = ""
    nccl: Callable[[dict], np.ndarray] | None = field(default=None, compare=False)

    @property
    def dev(self) -> Device:
        return self.system.device


@dataclass(frozen=True)
class Measured:
    """A measured table a form is fitted on: its columns, times, and which rows are the fit
    half (the only ones a structure read off the data may look at)."""

    cols: dict[str, np.ndarray]
    latency_s: np.ndarray
    fit: np.ndarray


# ------------------------------------------------------------------------------ structures
@dataclass(frozen=True)
class NoStructure:
    """The structure of a form without structural choices."""


def structure_to_dict(structure: Any) -> dict[str, Any]:
    """The stored form of a structure: its fields as ints, bools, strings or {int: number}."""
    out = {}
    for f in dataclasses.fields(structure):
        value = getattr(structure, f.name)
        out[f.name] = {int(k): _number(v) for k, v in value} if isinstance(value, tuple) else value
    return out


def structure_from_dict(cls: type, data: Any, where: str) -> Any:
    """The `cls` instance `data` (a stored structure) describes; ValueError naming the field
    that is unknown, missing or of the wrong type."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: structure must be a mapping")
    hints = _field_types(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{where}: structure has no field {unknown[0]!r} (fields: "
                         f"{', '.join(sorted(names)) or 'none'})")
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING:
                raise ValueError(f"{where}: structure needs {f.name!r}")
            continue
        values[f.name] = _typed(hints[f.name], data[f.name], f"{where}: structure {f.name}")
    try:
        return cls(**values)
    except ValueError as exc:  # a choice the form does not have
        raise ValueError(f"{where}: structure {exc}") from None


@functools.lru_cache(maxsize=None)
def _field_types(cls: type) -> dict[str, Any]:
    """`typing.get_type_hints` of a structure class, evaluated once per class (a calibration
    file names the same few structures in many entries)."""
    return typing.get_type_hints(cls)


def one_of(name: str, value: Any, choices: tuple) -> None:
    """ValueError unless `value` is one of a structure field's `choices`."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}, not {value!r}")


def _typed(kind: Any, value: Any, where: str) -> Any:
    if kind is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{where} must be true or false, not {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where} must be an integer, not {value!r}")
        return value
    if kind is str:
        if not isinstance(value, str):
            raise ValueError(f"{where} must be a string, not {value!r}")
        return value
    # tuple[tuple[int, float], ...]: stored as a mapping {int: number}
    if not isinstance(value, Mapping) or not all(
            isinstance(k, int) and isinstance(v, (int, float)) and not isinstance(v, bool)
            for k, v in value.items()):
        raise ValueError(f"{where} must map integers to numbers, not {value!r}")
    return tuple(sorted((int(k), float(v)) for k, v in value.items()))


def _number(v: float) -> float | int:
    return int(v) if float(v).is_integer() else float(v)


# ----------------------------------------------------------------------------------- forms
class KernelForm:
    """One way a library runs a kernel family: its constants, structures and model.

    A subclass sets `family`, `name` (stored in calibration entries, e.g. "generation/fa3") and
    `Structure` (a frozen dataclass of ints, bools and strings, or NoStructure), and implements
    `key` and `predict`; the other methods have defaults a form overrides where it differs.
    Forms of one family share `supported`, `plausible` and `key` (a dataset's rows must be the
    same for every candidate form it is fitted with)."""

    family: ClassVar[str]
    name: ClassVar[str]
    Structure: ClassVar[type] = NoStructure

    def offered(self, setting: Setting) -> bool:
        """Whether a calibration tries this form for `setting` (the devices, frameworks and
        variants whose kernel it is)."""
        return True

    def structures(self, setting: Setting, measured: Measured | None = None) -> tuple:
        """The structural choices a calibration fits in turn (the lowest fit-half error wins)."""
        return (self.Structure(),)

    def params(self, setting: Setting, structure: Any,
               measured: Measured | None = None) -> tuple[Param, ...]:
        """The constants this form reads under `structure`, with `setting`'s physical ceilings
        (some forms fit fewer when `measured` shows a term no row reaches)."""
        raise NotImplementedError

    def starts(self, setting: Setting, structure: Any) -> tuple[dict[str, float], ...]:
        """Starting points of a fit besides the constants' initial values."""
        return ()

    def notes(self, setting: Setting, structure: Any, measured: Measured) -> list[str]:
        """What a calibration should record about how `structure` was chosen."""
        return []

    def supported(self, setting: Setting, cols: dict) -> np.ndarray:
        """Rows this family's models describe (others are another kernel: left out of fits)."""
        return np.ones(_rows(cols), bool)

    def unsupported_note(self, setting: Setting) -> str:
        return "not this kernel"

    def plausible(self, setting: Setting, cols: dict, latency_s: np.ndarray) -> np.ndarray:
        """Rows whose measured time the device's peaks allow (others are artefacts)."""
        return np.ones(_rows(cols), bool)

    def implausible_note(self, setting: Setting) -> str:
        return "faster than the device allows"

    def key(self, cols: dict) -> list[str]:
        """Shape key per row for the fit/held-out split (the same shape, the same half)."""
        raise NotImplementedError

    def predict(self, setting: Setting, cols: dict, constants: Mapping[str, float],
                structure: Any, conditions: Conditions = SERVING) -> np.ndarray:
        """Seconds per row of `cols` (column arrays)."""
        raise NotImplementedError


def _rows(cols: dict) -> int:
    return len(np.atleast_1d(next(iter(cols.values()))))


# -------------------------------------------------------------------------------- registry
# The GPU forms register themselves when krakenlm.simulator.kernels.gpu is imported (the
# calibration store, constants/gpu_kernels.py, imports it: every reader of entries has them).
_FORMS: dict[str, KernelForm] = {}


def register(form: KernelForm) -> KernelForm:
    """Add `form` (its family's candidates keep the order of registration)."""
    if form.family not in FAMILIES:
        raise ValueError(f"{form.name}: unknown family {form.family!r}; known: "
                         f"{', '.join(FAMILIES)}")
    if form.name in _FORMS and _FORMS[form.name] is not form:
        raise ValueError(f"a kernel form named {form.name!r} is already registered")
    _FORMS[form.name] = form
    return form


def unregister(name: str) -> None:
    _FORMS.pop(name, None)


def form(name: str) -> KernelForm:
    """The registered form called `name`; KeyError naming the known ones."""
    try:
        return _FORMS[name]
    except KeyError:
        raise KeyError(f"no kernel form {name!r}; known: {', '.join(sorted(_FORMS))}") from None


def forms(family: str) -> tuple[KernelForm, ...]:
    """Every registered form of `family`, in order of registration."""
    return tuple(f for f in _FORMS.values() if f.family == family)

