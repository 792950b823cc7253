"""Fitted constants: per device and operator efficiencies, overheads and collective protocols.

What is fitted, and why these constants:
* `compute_efficiency`, `memory_efficiency` (<= 1) derate the device's peak matrix rate and
  memory bandwidth for an operator: the tile model is an ideal schedule, real kernels are not.
* `harness_overhead_s` and `measurement_floor_s` describe the *measurement*, not the device:
  the measured set times each op with host `time.time()` around a PyTorch call, so a
  measurement is max(floor, overhead + kernel): the floor is Python dispatch that the GPU
  overlaps, the overhead what it does not. They are used to compare with measurements only; a
  simulated model pays the device's `launch_overhead_s` (hardware YAML) per kernel instead, as a
  served model (CUDA graphs, a C++ runtime) does.
* `protocols` (all-reduce): (latency, efficiency) pairs of the collective library's protocols
  (NCCL LL / LL128 / Simple); the collective takes the fastest per message size.

How: `fit_calibration` fits each (device, operator) group by Nelder-Mead on the mean absolute
percentage error of the *fit half* only (even-indexed rows of each file, see measured.py); the
odd rows and the whole-layer files are never seen by the fit. `krakenlm sim calibrate` writes
the result to `calibration.yaml` beside this module, with the command and the split recorded.
Devices without measurements use the constants of a measured device of the same vendor
(VENDOR_KEYS: same libraries, cuBLAS/NCCL or rocBLAS/RCCL), others the `default` entry (the
A100's constants): stated guesses.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

from .. import yamlio
from ..errors import KrakenError
from ..fileio import read_user_text
from ..hardware.schema import Device, System
from .collectives import IDEAL, Protocol, collective_time
from .elementwise import simulate_stream
from .matmul import simulate_matmul
from .measured import MeasuredSet, Point

CALIBRATION_FILE = "calibration.yaml"
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
    text = resources.files("krakenlm.simulator").joinpath(CALIBRATION_FILE).read_text()
    return Calibration(yaml.safe_load(text))



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
        return Calibration(data)
    except (TypeError, AttributeError, ValueError) as exc:
        raise CalibrationError(f"calibration file {path}: {exc}") from None


# ------------------------------------------------------------------------------ predictions
def kernel_time(dev: Device, system: System | None, point: Point, c: OpConstants) -> float:
    """The device time of a measured operator under constants `c` (no harness terms)."""
    if point.op == "matmul":
        M, N, K = point.shape
        return simulate_matmul(dev, M, N, K, dtype="fp16", compute_eff=c.compute_efficiency,
                               memory_eff=c.memory_efficiency).time_s
    if point.op in ("softmax", "layernorm"):
        rows, cols = point.shape
        return simulate_stream(dev, point.op, rows, cols, "fp16", c.memory_efficiency,
                               c.single_pass_row_bytes).time_s
    if point.op == "gelu":
        (n,) = point.shape
        return simulate_stream(dev, "gelu", 1, n, "fp16", c.memory_efficiency).time_s
    if point.op == "allreduce":
        size, n = point.shape
        if system is None:
            raise CalibrationError("an all-reduce prediction needs a system")
        return collective_time("all_reduce", system.interconnect, float(size), n, c.protocols)[0]
    raise ValueError(f"no model for measured op {point.op!r}")


def harnessed(kernel_s: float, c: OpConstants) -> float:
    """What the measurement harness reports for a kernel of `kernel_s` seconds."""
    return max(c.measurement_floor_s, c.harness_overhead_s + kernel_s)


def predict_point(dev: Device, system: System | None, point: Point, c: OpConstants) -> float:
    return harnessed(kernel_time(dev, system, point, c), c)


# ---------------------------------------------------------------------------------- fitting
def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.5,
                iters: int = 600, tol: float = 1e-9) -> np.ndarray:
    """Plain Nelder-Mead (reflection, expansion, contraction, shrink) for a few parameters."""
    n = len(x0)
    simplex = [np.array(x0, dtype=float)]
    for i in range(n):
        x = np.array(x0, dtype=float)
        x[i] += step
        simplex.append(x)
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        reflected = centroid + (centroid - worst)
        fr = f(reflected)
        if fr < values[0]:
            expanded = centroid + 2 * (centroid - worst)
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (worst - centroid)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best + 0.5 * (x - best) for x in simplex]
                values = [f(x) for x in simplex]
    return simplex[int(np.argmin(values))]


# Parameter vectors per operator kind: (decode(x) -> OpConstants, initial x).
def _decode_matmul(x: np.ndarray) -> OpConstants:
    return OpConstants(compute_efficiency=_sigmoid(x[0]), memory_efficiency=_sigmoid(x[1]),
                       harness_overhead_s=math.exp(x[2]), measurement_floor_s=math.exp(x[3]))


def _decode_stream(x: np.ndarray) -> OpConstants:
    return OpConstants(memory_efficiency=_sigmoid(x[0]), harness_overhead_s=math.exp(x[1]),
                       measurement_floor_s=math.exp(x[2]))


def _decode_rows(x: np.ndarray) -> OpConstants:
    return dataclasses.replace(_decode_stream(x), single_pass_row_bytes=math.exp(x[3]))


def _decode_allreduce(x: np.ndarray) -> OpConstants:
    protocols = tuple(sorted((Protocol(math.exp(x[i]), _sigmoid(x[i + 1]))
                              for i in range(0, len(x) - 2, 2)), key=lambda p: p.latency_s))
    return OpConstants(protocols=protocols, harness_overhead_s=math.exp(x[-2]),
                       measurement_floor_s=math.exp(x[-1]))


def _starts(op: str, floor: float) -> list[list[float]]:
    """Starting points: the floor is near the smallest measurement, the overhead below it;
    several starts because max() and min() make the objective kinked."""
    starts = []
    for over in (0.3, 0.7):
        lo, lf = math.log(over * floor), math.log(floor)
        if op == "matmul":
            starts.append([_logit(0.9), _logit(0.8), lo, lf])
        elif op in ("softmax", "layernorm"):
            starts += [[_logit(0.7), lo, lf, math.log(rb)] for rb in (16e3, 64e3, 256e3)]
        elif op == "gelu":
            starts.append([_logit(0.7), lo, lf])
        elif op == "allreduce":
            # LL-like, LL128-like and Simple-like protocols: rising latency, rising efficiency.
            starts.append([math.log(2e-6), _logit(0.1), math.log(8e-6), _logit(0.5),
                           math.log(30e-6), _logit(0.8), lo, lf])
    return starts


_DECODERS = {"matmul": _decode_matmul, "softmax": _decode_rows, "layernorm": _decode_rows,
             "gelu": _decode_stream, "allreduce": _decode_allreduce}


def mape(pred: list[float], meas: list[float]) -> float:
    p, m = np.asarray(pred), np.asarray(meas)
    return float(np.mean(np.abs(p / m - 1.0)) * 100.0) if len(m) else float("nan")


def fit_group(dev: Device, system: System | None, points: list[Point]) -> OpConstants:
    """Fit one (device, operator) group on the given points (the caller passes the fit half)."""
    op = points[0].op
    decode = _DECODERS[op]
    meas = [p.measured_s for p in points]

    def objective(x: np.ndarray) -> float:
        c = decode(x)
        return mape([predict_point(dev, system, p, c) for p in points], meas)

    best_x, best_f = None, math.inf
    for x0 in _starts(op, min(meas)):
        x = np.array(x0, dtype=float)
        for step in (1.0, 0.3):  # a restart shakes Nelder-Mead out of a kink
            x = nelder_mead(objective, x, step=step)
        fx = objective(x)
        if fx < best_f:
            best_x, best_f = x, fx
    return decode(best_x)


def fit_calibration(measured: MeasuredSet, systems: dict[str, System],
                    command: str = "") -> Calibration:
    """Fit every (device, operator) group of `measured` on its fit half."""
    groups: dict[tuple[str, str], list[Point]] = {}
    for p in measured.points:
        if p.device in systems and p.fit_half:
            groups.setdefault((p.device, p.op), []).append(p)
    devices: dict[str, dict[str, Any]] = {}
    for (device, op), pts in sorted(groups.items()):
        system = systems[device]
        devices.setdefault(device, {})[op] = fit_group(system.device, system, pts).to_dict()
    if "A100" in devices:
        devices["default"] = devices["A100"]
    meta = {"command": command,
            "fit_half": "even-indexed rows (0, 2, 4, ...) of every operator file; odd rows and "
                        "the transformer layer files are held out",
            "systems": {d: s.name for d, s in systems.items()},
            "default": "devices without measurements use a measured device of the same vendor "
                       f"({dict(VENDOR_KEYS)}), others the A100's constants (a guess)"}
    return Calibration({"meta": meta, "devices": devices})


def save_calibration(calibration: Calibration, path: str | Path) -> None:
    header = ("# Fitted simulator constants; generated by `krakenlm sim calibrate`, do not edit.\n"
              "# See krakenlm/simulator/calibration.py for what each constant means.\n")
    Path(path).write_text(header + yaml.safe_dump(calibration.to_dict(), sort_keys=False))
