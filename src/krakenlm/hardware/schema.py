"""The hardware description: a system of devices joined by an interconnect.

Every field carries its unit in its name (`_hz`, `_bytes`, `_s`, `_bytes_per_s`, ...). A YAML
value may be a plain number in that unit, or a string with an explicit unit of the same kind
("2039 GB/s", "1.41 GHz", "40 MiB", "500 ns"); a unit of the wrong kind ("80 GB" for a
bandwidth), an unknown or missing field, or an implausible magnitude (a frequency of 1.41,
i.e. GHz written as Hz) is a `HardwareError` that names the field.

The template (after LLMCompass): a device has `core_count` cores; a core has `lane_count` lanes,
each a systolic array (output stationary) plus a vector unit; a core has a local SRAM; all cores
share a global buffer (L2) in front of off-chip memory. Peak rates per dtype are explicit and
checked against the array/vector geometry so a typo in either is caught.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import KrakenError
from .identity import Identity
from .identity import problem as identity_problem


class HardwareError(KrakenError, ValueError):
    """A hardware description is malformed; the message names the field and the fix."""


DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
TOPOLOGIES = ("ring", "fully_connected", "switch", "torus2d")
MEMORY_TECHNOLOGIES = ("HBM2", "HBM2e", "HBM3", "HBM3e", "DDR4", "DDR5", "LPDDR5", "GDDR6")

# Unit strings accepted per dimension, with their factor to the SI-like base unit of the field.
_UNITS: dict[str, dict[str, float]] = {
    "hz": {"hz": 1, "khz": 1e3, "mhz": 1e6, "ghz": 1e9},
    "bytes": {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
              "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40},
    "s": {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9},
    "bytes_per_s": {"b/s": 1, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12},
    "flops_per_s": {"flop/s": 1, "gflop/s": 1e9, "tflop/s": 1e12, "pflop/s": 1e15,
                    "flops": 1, "gflops": 1e9, "tflops": 1e12, "pflops": 1e15,
                    "tops": 1e12, "pops": 1e15},
    "mm2": {"mm2": 1, "mm^2": 1},
    "nm": {"nm": 1},
    "usd": {"usd": 1, "$": 1},
}
# Plausible magnitudes per dimension: outside them the number is almost surely in another unit.
_RANGES: dict[str, tuple[float, float]] = {
    "hz": (1e7, 1e11), "s": (0.0, 1.0), "bytes_per_s": (1e6, 1e15),
    "flops_per_s": (1e9, 1e18), "bytes": (0.0, 1e15),
}


def _meta(unit: str | None = None, *, integer: bool = False, optional: bool = False,
          positive: bool = True, choices: tuple[str, ...] | None = None, doc: str = "") -> dict:
    return {"unit": unit, "integer": integer, "optional": optional, "positive": positive,
            "choices": choices, "doc": doc}


def _f(unit: str | None = None, default: Any = dataclasses.MISSING, **kw) -> Any:
    meta = _meta(unit, optional=default is not dataclasses.MISSING, **kw)
    if default is dataclasses.MISSING:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Core:
    """One compute core (an SM, a CU, a TPU core): its lanes, systolic arrays, vector units
    and local SRAM, as the template kernel models tile work onto it."""
    lane_count: int = _f(integer=True, doc="lanes per core (A100 SM: 4 tensor-core partitions)")
    systolic_array_height: int = _f(integer=True)
    systolic_array_width: int = _f(integer=True)
    vector_width: int = _f(integer=True, doc="fp32 FMA units per lane")
    local_sram_bytes: float = _f("bytes", doc="shared memory / L1 / LDS per core")
    local_sram_bandwidth_bytes_per_cycle: float = _f(None, doc="bytes per cycle per core")
    register_file_bytes: float = _f("bytes", default=0.0, positive=False)


@dataclass(frozen=True)
class GlobalBuffer:
    """The on-chip buffer shared by all cores (L2, Infinity Cache, TPU CMEM)."""
    capacity_bytes: float = _f("bytes")
    bandwidth_bytes_per_cycle: float = _f(None, doc="aggregate over the device")
    latency_s: float = _f("s", default=0.0, positive=False)


@dataclass(frozen=True)
class Memory:
    """The device's main memory (HBM, GDDR, DRAM): capacity, bandwidth, latency."""
    technology: str = _f(choices=MEMORY_TECHNOLOGIES)
    capacity_bytes: float = _f("bytes")
    bandwidth_bytes_per_s: float = _f("bytes_per_s")
    latency_s: float = _f("s", positive=False)
    stack_count: int = _f(integer=True, default=1, doc="HBM stacks or DRAM channels (area, cost)")
    runtime_visible_bytes: float | None = _f(
        "bytes", default=None,
        doc="the device total the driver reports to the runtime (torch.cuda.mem_get_info, "
            "what vLLM logs as total_gpu_memory): capacity less what ECC and firmware keep; "
            "serving engines take their memory fraction of it (default: capacity_bytes)")
    sustained_read_fraction: float | None = _f(
        None, default=None,
        doc="the highest rate a streaming read kernel measures on this part (a STREAM-style "
            "read or sum benchmark at full occupancy, sourced) over bandwidth_bytes_per_s: how "
            "close to its datasheet rate this memory gets; fitted kernel constants borrowed "
            "from another part of the same die scale by it (simulator/kernels/gpu/borrowed.py)")


@dataclass(frozen=True)
class PeakRates:
    """Peak dense rates per dtype (FLOP/s or OP/s); None where the device lacks the dtype."""
    fp32: float | None = _f("flops_per_s", default=None)
    tf32: float | None = _f("flops_per_s", default=None)
    bf16: float | None = _f("flops_per_s", default=None)
    fp16: float | None = _f("flops_per_s", default=None)
    fp8: float | None = _f("flops_per_s", default=None)
    int8: float | None = _f("flops_per_s", default=None)

    def get(self, dtype: str) -> float | None:
        return getattr(self, dtype)


@dataclass(frozen=True)
class Device:
    """One accelerator: cores, buffers, memory, peak rates and what identifies it for the
    calibrated kernel models (`identity`)."""
    name: str = _f()
    frequency_hz: float = _f("hz")
    core_count: int = _f(integer=True)
    core: Core = _f()
    global_buffer: GlobalBuffer = _f()
    memory: Memory = _f()
    matrix_flops_per_s: PeakRates = _f(doc="systolic arrays / tensor cores")
    vector_flops_per_s: PeakRates = _f(doc="vector units (CUDA cores, SIMDs)")
    launch_overhead_s: float = _f("s", positive=False, doc="per-kernel launch cost on the device")
    process_node_nm: float = _f("nm")
    die_area_mm2: float | None = _f("mm2", default=None, doc="published die area, for comparison")
    price_usd: float | None = _f("usd", default=None, doc="street price, for comparison only")
    host_link_bandwidth_bytes_per_s: float | None = _f(
        "bytes_per_s", default=None, doc="host<->device link (PCIe) per direction: KV swap "
        "to host memory; absent: swap preemption cannot be simulated")
    identity: Identity = _f(default=Identity(), doc="vendor, family, sm_version, calibration "
                            "(hardware/identity.py); absent: a custom device, template models")

    # -------------------------------------------------------------------------------- derived
    @property
    def array_macs_per_cycle(self) -> int:
        c = self.core
        return self.core_count * c.lane_count * c.systolic_array_height * c.systolic_array_width

    def matrix_rate(self, dtype: str) -> float:
        rate = self.matrix_flops_per_s.get(dtype)
        if rate is None:
            raise HardwareError(f"device {self.name!r} has no matrix rate for dtype {dtype!r} "
                                f"(field device.matrix_flops_per_s.{dtype}); pick another --dtype")
        return rate

    def vector_rate(self, dtype: str) -> float:
        rate = self.vector_flops_per_s.get(dtype)
        if rate is None:  # fall back on fp32 vector math (16-bit data is widened for reductions)
            rate = self.vector_flops_per_s.fp32
        return rate

    @property
    def global_buffer_bandwidth_bytes_per_s(self) -> float:
        return self.global_buffer.bandwidth_bytes_per_cycle * self.frequency_hz


@dataclass(frozen=True)
class InterNode:
    """The scale-out network between nodes (InfiniBand or RoCE NICs), per device: what one
    device sends to a device of another node (a prefill instance's KV cache to a decode
    instance, a pipeline stage's activations), timed like the node's links."""
    bandwidth_bytes_per_s: float = _f("bytes_per_s", doc="per device, per direction: the NIC "
                                      "bandwidth serving one device (400 Gb/s NIC = 50e9)")
    latency_s: float = _f("s", positive=False, doc="one-way, device to device across nodes "
                          "(RDMA stack, NIC, a switch)")
    nics_per_node: int | None = _f(integer=True, default=None, doc="compute-fabric NICs per "
                                   "node (documentation; the bandwidth is per device)")
    technology: str | None = _f(default=None, doc="e.g. 'ConnectX-7 NDR InfiniBand 400 Gb/s'")


@dataclass(frozen=True)
class Interconnect:
    """How the system's devices are linked within a node (topology, links, their
    bandwidth and latency), and the network between nodes."""
    device_count: int = _f(integer=True)
    topology: str = _f(choices=TOPOLOGIES)
    links_per_device: int = _f(integer=True, doc="links leaving each device")
    link_bandwidth_bytes_per_s: float = _f("bytes_per_s", doc="per link, per direction")
    link_latency_s: float = _f("s", positive=False)
    torus_shape: tuple[int, ...] | None = _f(default=None, doc="torus2d only: devices per axis")
    in_switch_reduction: bool = _f(default=False, doc="switch only: NVLS-style reduction in switch")
    phy_area_mm2_per_link: float | None = _f("mm2", default=None)
    inter_node: InterNode | None = _f(default=None, doc="the network between nodes; absent: "
                                      "serving uses --network-gbps or its default, and says so")


@dataclass(frozen=True)
class System:
    """A node of identical devices and their interconnect: what `--system` names."""
    name: str = _f()
    description: str = _f()
    device: Device = _f()
    interconnect: Interconnect = _f()

    @property
    def device_count(self) -> int:
        return self.interconnect.device_count


# -------------------------------------------------------------------------------- parsing
_NUM_UNIT = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z/$^0-9]*)\s*$")


def _to_number(value: Any, unit: str | None, where: str) -> float:
    if isinstance(value, bool):
        raise HardwareError(f"field {where}: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an integer beyond the float range: "must be finite"
            return math.inf
    if isinstance(value, str):
        match = _NUM_UNIT.match(value)
        if match:
            number, suffix = float(match.group(1)), match.group(2).lower()
            if not suffix:
                return number
            if unit == "bytes_per_s" and re.fullmatch(r"[kKmMgGtT]b/s", match.group(2)):
                raise HardwareError(
                    f"field {where}: {value!r} is in bits per second (a lowercase b) but this "
                    f"field is in bytes; write {number / 8:g} {match.group(2)[0].upper()}B/s")
            if unit is not None and suffix in _UNITS.get(unit, {}):
                return number * _UNITS[unit][suffix]
            for other, table in _UNITS.items():
                if suffix in table and other != unit:
                    raise HardwareError(
                        f"field {where}: {value!r} is in {other.replace('_', ' ')} but this field "
                        f"is in {unit or 'plain numbers'}; write a number in {unit} "
                        f"(e.g. units {', '.join(list(_UNITS.get(unit, {'': 0}))[:4])})")
            raise HardwareError(f"field {where}: unknown unit {match.group(2)!r} in {value!r}; "
                                f"write a number in {unit}")
    raise HardwareError(f"field {where}: expected a number{f' in {unit}' if unit else ''}, "
                        f"got {value!r}")


def _parse(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise HardwareError(f"field {where or 'top level'}: expected a mapping, got "
                            f"{type(data).__name__}")
    names = [k for k in data if not isinstance(k, str)]
    if names:
        raise HardwareError(f"field {where or 'top level'}: {names[0]!r} is not a field name; "
                            "field names are text (check the indentation)")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        hints = []
        for name in unknown:
            stem = re.split(r"_(?:g|m|k|t)?(?:b|hz|bytes|s|flops)", name)[0]
            close = [f for f in fields if f.startswith(stem)]
            hints.append(f"{where + '.' if where else ''}{name}" +
                         (f" (did you mean {close[0]!r}? units go in the field name)" if close else ""))
        raise HardwareError(f"unknown field(s) {', '.join(hints)}; known fields of "
                            f"{where or 'the system'}: {', '.join(fields)}")
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        path = f"{where}.{name}" if where else name
        meta = f.metadata
        if name not in data:
            if meta.get("optional"):
                continue
            raise HardwareError(f"missing field {path}" + (f" ({meta['doc']})" if meta.get("doc") else "")
                                + (f"; give it in {meta['unit']}" if meta.get("unit") else ""))
        value = data[name]
        ftype = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        sub = {"Core": Core, "GlobalBuffer": GlobalBuffer, "Memory": Memory,
               "PeakRates": PeakRates, "Device": Device, "Interconnect": Interconnect,
               "Identity": Identity, "InterNode": InterNode}.get(ftype.removesuffix(" | None"))
        if sub is not None and not (value is None and f.default is None):
            kwargs[name] = _parse(sub, value, path)
        elif value is None and meta.get("optional"):
            kwargs[name] = None
        elif ftype in ("str", "str | None"):
            if not isinstance(value, str):
                raise HardwareError(f"field {path}: expected text, got {value!r}")
            if meta.get("choices") and value not in meta["choices"]:
                raise HardwareError(f"field {path}: {value!r} is not one of {meta['choices']}")
            kwargs[name] = value
        elif ftype == "bool":
            if not isinstance(value, bool):
                raise HardwareError(f"field {path}: expected true or false, got {value!r}")
            kwargs[name] = value
        elif ftype.startswith("tuple"):
            if not (isinstance(value, list) and all(isinstance(v, int) and v > 0 for v in value)):
                raise HardwareError(f"field {path}: expected a list of positive integers, got {value!r}")
            kwargs[name] = tuple(value)
        else:
            number = _to_number(value, meta.get("unit"), path)
            if not math.isfinite(number):
                raise HardwareError(f"field {path}: must be finite, got {value!r}")
            if meta.get("integer"):
                if number != int(number):
                    raise HardwareError(f"field {path}: must be a whole number, got {value!r}")
                number = int(number)
            if meta.get("positive", True) and number <= 0:
                raise HardwareError(f"field {path}: must be positive, got {value!r}")
            if number < 0:
                raise HardwareError(f"field {path}: must not be negative, got {value!r}")
            low, high = _RANGES.get(meta.get("unit") or "", (-math.inf, math.inf))
            if number and not (low <= number <= high):
                raise HardwareError(f"field {path}: {number:g} is implausible for a value in "
                                    f"{meta['unit']} (expected {low:g}..{high:g}); is it in "
                                    f"another unit?")
            kwargs[name] = number
    parsed = cls(**kwargs)
    if cls is Identity and (why := identity_problem(parsed)) is not None:
        raise HardwareError(f"field {where}: {why}")
    return parsed


def _check_consistency(system: System) -> None:
    """Cross-field checks: the geometry must reproduce the datasheet peak rates."""
    dev, ic = system.device, system.interconnect
    array_rate = 2 * dev.array_macs_per_cycle * dev.frequency_hz
    half = dev.matrix_flops_per_s.fp16 or dev.matrix_flops_per_s.bf16
    if half is None:
        raise HardwareError("field device.matrix_flops_per_s: give fp16 or bf16 (the rate the "
                            "systolic arrays are sized for)")
    if abs(array_rate / half - 1) > 0.03:
        raise HardwareError(
            f"field device.matrix_flops_per_s.fp16: {half:.4g} FLOP/s disagrees with the array "
            f"geometry (core_count x lane_count x height x width x 2 x frequency_hz = "
            f"{array_rate:.4g}); fix one of them")
    vec = 2 * dev.core_count * dev.core.lane_count * dev.core.vector_width * dev.frequency_hz
    fp32 = dev.vector_flops_per_s.fp32
    if fp32 is None or abs(vec / fp32 - 1) > 0.03:
        raise HardwareError(
            f"field device.vector_flops_per_s.fp32: {fp32} FLOP/s disagrees with core_count x "
            f"lane_count x vector_width x 2 x frequency_hz = {vec:.4g}; fix one of them")
    if ic.device_count < 1:
        raise HardwareError("field interconnect.device_count: must be at least 1")
    if ic.topology == "torus2d":
        shape = ic.torus_shape
        if not shape or len(shape) != 2 or shape[0] * shape[1] != ic.device_count:
            raise HardwareError("field interconnect.torus_shape: torus2d needs two sizes whose "
                                f"product is device_count {ic.device_count}, got {shape}")
    if ic.topology == "fully_connected" and ic.links_per_device < ic.device_count - 1:
        raise HardwareError(
            f"field interconnect.links_per_device: {ic.links_per_device} links cannot connect "
            f"each of {ic.device_count} devices to every other; use topology ring or switch")
    visible = dev.memory.runtime_visible_bytes
    if visible is not None and visible > 1.1 * dev.memory.capacity_bytes:
        raise HardwareError(
            f"field device.memory.runtime_visible_bytes: {visible:.4g} bytes exceeds "
            f"capacity_bytes {dev.memory.capacity_bytes:.4g} by more than 10 %; check the units")
    sustained = dev.memory.sustained_read_fraction
    if sustained is not None and not 0 < sustained <= 1:
        raise HardwareError(
            f"field device.memory.sustained_read_fraction: {sustained} is not in (0, 1]; it is "
            f"a measured read rate over bandwidth_bytes_per_s, which a measurement cannot beat")
    if dev.global_buffer.capacity_bytes >= dev.memory.capacity_bytes:
        raise HardwareError("field device.global_buffer.capacity_bytes: larger than off-chip "
                            "memory; check the units")


def system_from_dict(data: Any) -> System:
    system = _parse(System, data, "")
    _check_consistency(system)
    return system


def system_to_dict(system: System) -> dict[str, Any]:
    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if v is not None}
        if isinstance(value, tuple):
            return list(value)
        return value
    return clean(dataclasses.asdict(system))
