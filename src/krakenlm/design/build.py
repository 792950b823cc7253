"""A design's System (the base with its knobs applied) and its physical feasibility.

Peak rates are recomputed from the new geometry (cores x lanes x array^2 x 2 x frequency for
the matrix units, cores x lanes x vector width x 2 x frequency for the vector units), each
dtype keeping its ratio to the base's 16-bit (or fp32 vector) peak. The device is renamed so
that it can never match a measured GPU calibration: a hypothetical design is timed by the
template (LLMCompass-style tile) model, and so is the baseline it is compared with.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..hardware.area import RETICLE_LIMIT_MM2, die_area
from ..hardware.schema import Core, Memory, PeakRates, System
from .knobs import KNOBS, MEMORY_TECHNOLOGIES, check_design

GIB = 2**30
# Memory PHYs may use three of the four die edges; the fourth carries PCIe and links. A
# technology outside MEMORY_TECHNOLOGIES (a base's own) is given this PHY edge per unit, mm.
MEMORY_EDGES = 3
OTHER_PHY_EDGE_MM = 3.0


def _scaled(rates: PeakRates, factor: float, fp32_factor: float | None = None) -> PeakRates:
    out = {}
    for f in dataclasses.fields(PeakRates):
        v = getattr(rates, f.name)
        scale = fp32_factor if (f.name == "fp32" and fp32_factor is not None) else factor
        out[f.name] = None if v is None else v * scale
    return PeakRates(**out)


def design_name(base: System, design: dict[str, Any]) -> str:
    knobs = ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in sorted(design.items()))
    return f"{base.name}:{knobs or 'base'}"


def build_system(base: System, design: dict[str, Any]) -> System:
    """The base system with the design's hardware knobs applied (arch and tp are workload
    knobs and are ignored here)."""
    d = check_design(design)
    dev, core, ic = base.device, base.device.core, base.interconnect
    side = d.get("systolic_array")
    new_core = dataclasses.replace(
        core, lane_count=d.get("lanes", core.lane_count),
        systolic_array_height=side or core.systolic_array_height,
        systolic_array_width=side or core.systolic_array_width,
        vector_width=d.get("vector_width", core.vector_width),
        local_sram_bytes=d["local_sram_kib"] * 1024 if "local_sram_kib" in d
        else core.local_sram_bytes)
    freq = d["frequency_ghz"] * 1e9 if "frequency_ghz" in d else dev.frequency_hz
    cores = d.get("cores", dev.core_count)

    def macs(c: Core, n: int) -> float:
        return n * c.lane_count * c.systolic_array_height * c.systolic_array_width

    def vec(c: Core, n: int) -> float:
        return n * c.lane_count * c.vector_width
    matrix_factor = macs(new_core, cores) * freq / (macs(core, dev.core_count) * dev.frequency_hz)
    vector_factor = vec(new_core, cores) * freq / (vec(core, dev.core_count) * dev.frequency_hz)
    # the base's fp32 "matrix" rate is its vector units' (A100: no fp32 tensor-core path)
    fp32_matrix_is_vector = dev.matrix_flops_per_s.fp32 == dev.vector_flops_per_s.fp32
    memory = dev.memory
    if {"memory", "memory_units", "memory_gib_per_unit", "memory_bandwidth_gb_per_s"} & set(d):
        tech = MEMORY_TECHNOLOGIES[d.get("memory", memory.technology if memory.technology
                                         in MEMORY_TECHNOLOGIES else "HBM2e")]
        units = d.get("memory_units", memory.stack_count)
        gib = d.get("memory_gib_per_unit", tech.gib)
        if {"memory", "memory_units", "memory_gib_per_unit"} & set(d):
            memory = Memory(technology=tech.name, capacity_bytes=units * gib * GIB,
                            bandwidth_bytes_per_s=units * tech.bandwidth_bytes_per_s,
                            latency_s=tech.latency_s, stack_count=units)
        if "memory_bandwidth_gb_per_s" in d:
            memory = dataclasses.replace(memory,
                                         bandwidth_bytes_per_s=d["memory_bandwidth_gb_per_s"] * 1e9)
    new_dev = dataclasses.replace(
        dev, name=f"design from {dev.name.split(' ')[-1]} ({design_name(base, d)})",
        frequency_hz=freq, core_count=cores, core=new_core,
        matrix_flops_per_s=_scaled(dev.matrix_flops_per_s, matrix_factor,
                                   vector_factor if fp32_matrix_is_vector else None),
        vector_flops_per_s=_scaled(dev.vector_flops_per_s, vector_factor),
        global_buffer=dataclasses.replace(
            dev.global_buffer, capacity_bytes=d["global_buffer_mib"] * 2**20
            if "global_buffer_mib" in d else dev.global_buffer.capacity_bytes),
        memory=memory, die_area_mm2=None, price_usd=None)
    new_ic = dataclasses.replace(
        ic, device_count=d.get("devices", ic.device_count),
        topology=d.get("topology", ic.topology),
        links_per_device=d.get("links_per_device", ic.links_per_device),
        link_bandwidth_bytes_per_s=d["link_gb_per_s"] * 1e9 if "link_gb_per_s" in d
        else ic.link_bandwidth_bytes_per_s,
        link_latency_s=d["link_latency_us"] * 1e-6 if "link_latency_us" in d
        else ic.link_latency_s, torus_shape=None if "topology" in d else ic.torus_shape)
    return dataclasses.replace(base, name=design_name(base, d), device=new_dev,
                               interconnect=new_ic)


def infeasible_reason(system: System, design: dict[str, Any]) -> str | None:
    """Why a design cannot be built (area over the reticle, memory PHYs that do not fit on
    the die's edge, a capacity outside the technology's parts, an impossible topology), or
    None."""
    dev, ic = system.device, system.interconnect
    tech = dev.memory.technology
    known = MEMORY_TECHNOLOGIES.get(tech)
    if "memory_gib_per_unit" in design and known is not None:
        lo, hi = known.gib_range
        gib = dev.memory.capacity_bytes / dev.memory.stack_count / GIB
        if not lo <= gib <= hi:
            return (f"{tech} parts hold {lo:g}-{hi:g} GiB per unit, the design asks "
                    f"{gib:g} GiB")
    area = die_area(system).total_mm2
    if area > RETICLE_LIMIT_MM2:
        return f"die area {area:,.0f} mm^2 exceeds the reticle limit {RETICLE_LIMIT_MM2:g} mm^2"
    edge_mm = MEMORY_EDGES * math.sqrt(area)
    need_mm = dev.memory.stack_count * (known.phy_edge_mm if known else OTHER_PHY_EDGE_MM)
    if need_mm > edge_mm:
        return (f"{dev.memory.stack_count} {tech} PHYs need {need_mm:.0f} mm of die edge, a "
                f"{area:,.0f} mm^2 die has {edge_mm:.0f} mm on {MEMORY_EDGES} sides")
    if dev.global_buffer.capacity_bytes >= dev.memory.capacity_bytes:
        return "global buffer larger than off-chip memory"
    if ic.topology == "fully_connected" and ic.links_per_device < ic.device_count - 1:
        return (f"fully_connected needs {ic.device_count - 1} links per device, the design has "
                f"{ic.links_per_device}")
    return None


def knob_docs() -> list[tuple[str, str, str]]:
    rows = []
    for k in KNOBS.values():
        rng = ", ".join(k.choices) if k.kind == "choice" else f"{k.low:g}..{k.high:g}"
        rows.append((k.name, rng, k.doc))
    return rows
