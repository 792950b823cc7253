"""Fitting the template constants (constants/template.py) on the LLMCompass measurement set.

`fit_calibration` fits each (device, operator) group with the calibration's one minimiser
(fit.minimise) on the mean absolute percentage error of the *fit half* only (even-indexed rows of each file, see
measurements/llmcompass.py); the odd rows and the whole-layer files are never seen by the fit.
A prediction of a measured point is the template model's kernel time under the set's harness
(measurements/harness.py: max(floor, overhead + kernel)).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ...hardware.identity import TEMPLATE_CONSTANTS_BY_VENDOR
from ...hardware.schema import Device, System
from ..constants.gpu_kernels import today
from ..constants.template import Calibration, OpConstants
from ..kernels.template.collectives import Protocol, collective_time
from ..measurements.harness import predict_point
from ..measurements.llmcompass import MeasuredSet, Point
from ..measurements.split import mape
from .fit import minimise


# ---------------------------------------------------------------------------------- fitting
def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


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


def fit_group(dev: Device, system: System | None, points: list[Point]) -> OpConstants:
    """Fit one (device, operator) group on the given points (the caller passes the fit half)."""
    op = points[0].op
    decode = _DECODERS[op]
    meas = [p.measured_s for p in points]

    def objective(x: np.ndarray) -> float:
        c = decode(x)
        return mape([predict_point(dev, system, p, c) for p in points], meas)

    best_x, _ = minimise(objective, [np.array(x0) for x0 in _starts(op, min(meas))])
    c = decode(best_x)
    return used_protocols(system, points, c) if op == "allreduce" else c


def used_protocols(system: System | None, points: list[Point], c: OpConstants) -> OpConstants:
    """`c` without the protocols that time none of `points` (the fastest protocol times a
    size): the data say nothing about such a protocol, so its fitted constants are not kept
    (a latency that only had to be large enough to lose)."""
    if system is None:
        return c
    ic = system.interconnect

    def fastest(p: Point) -> int:
        size, n = p.shape
        times = [collective_time("all_reduce", ic, float(size), n, (q,))[0] for q in c.protocols]
        return int(np.argmin(times))

    used = sorted({fastest(p) for p in points})
    return dataclasses.replace(c, protocols=tuple(c.protocols[i] for i in used))


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
    meta = {"command": command, "created": today(),
            "fit_half": "even CRC-32 of each operator point's shape (measurements/split.py); "
                        "odd ones and the transformer layer files are held out",
            "systems": {d: s.name for d, s in systems.items()},
            "default": "devices without measurements use a measured device of the same vendor "
                       f"({TEMPLATE_CONSTANTS_BY_VENDOR}), others the A100's constants (a guess)"}
    return Calibration({"meta": meta, "devices": devices})


def save_calibration(calibration: Calibration, path: str | Path) -> None:
    header = ("# Fitted simulator constants; generated by `krakenlm sim calibrate`, do not edit.\n"
              "# See krakenlm/simulator/constants/template.py for what each constant means.\n")
    Path(path).write_text(header + yaml.safe_dump(calibration.to_dict(), sort_keys=False))
