"""What `krakenlm sim systems` and `sim cost` show, as reports: the hardware presets (devices,
topology, peak rates, memory) and a system's die area, yield and cost (hardware.cost)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..console import table_of
from .cost import CostBreakdown, system_cost
from .loader import load_system, preset_system_names
from .schema import System


@dataclass
class PresetsReport:
    """The table `krakenlm sim systems` prints: a row per shipped system preset with its
    per-device figures (dense 16-bit FLOP/s, memory bytes and bytes/s, links and link bytes/s per
    direction, inter-node bytes/s per direction or None)."""
    rows: list[dict[str, Any]]  # per preset, per device

    def to_json(self) -> list[dict[str, Any]]:
        return self.rows

    def to_table(self) -> list[Any]:
        table = table_of("krakenlm hardware presets (per device)",
                         ("name", "device", "n", "topology", "16-bit TFLOP/s", "memory GiB",
                          "mem TB/s", "links x GB/s/dir", "network Gb/s/dir"),
                         left=("name", "device", "topology"))
        for r in self.rows:
            table.add_row(r["name"], r["device"], str(r["devices"]), r["topology"],
                          f"{r['fp16_flops_per_s'] / 1e12:,.0f}",
                          f"{r['memory_bytes'] / 2**30:,.0f}",
                          f"{r['memory_bandwidth_bytes_per_s'] / 1e12:.2f}",
                          f"{r['links_per_device']} x {r['link_bandwidth_bytes_per_s'] / 1e9:g}",
                          "-" if r["inter_node_bandwidth_bytes_per_s"] is None
                          else f"{r['inter_node_bandwidth_bytes_per_s'] * 8 / 1e9:g}")
        return [table]


def presets_report() -> PresetsReport:
    """Every shipped system preset."""
    rows = []
    for name in preset_system_names():
        s = load_system(name)
        d, ic = s.device, s.interconnect
        rows.append({"name": name, "device": d.name, "devices": ic.device_count,
                     "topology": ic.topology,
                     "fp16_flops_per_s": d.matrix_flops_per_s.fp16 or d.matrix_flops_per_s.bf16,
                     "memory_bytes": d.memory.capacity_bytes,
                     "memory_bandwidth_bytes_per_s": d.memory.bandwidth_bytes_per_s,
                     "link_bandwidth_bytes_per_s": ic.link_bandwidth_bytes_per_s,
                     "links_per_device": ic.links_per_device,
                     # the network between nodes per device and direction (None: not described)
                     "inter_node_bandwidth_bytes_per_s": ic.inter_node and
                     ic.inter_node.bandwidth_bytes_per_s,
                     "description": s.description})
    return PresetsReport(rows)


@dataclass
class CostReport:
    """What `krakenlm sim cost` prints for one system: the die area per block, dies per wafer,
    yield and the die, device and system prices of its CostBreakdown (template estimates, with
    the published die area and street price next to them when the preset has them)."""
    system: System
    cost: CostBreakdown

    def to_json(self) -> dict[str, Any]:
        return {"system": self.system.name, **self.cost.to_dict()}

    def to_table(self) -> list[Any]:
        s, c = self.system, self.cost
        table = table_of(f"{s.device.name}: die area per block at {s.device.process_node_nm:g} nm",
                         ("block", "mm^2"), left=("block",))
        for block, area in c.area.blocks.items():
            table.add_row(block, f"{area:,.1f}")
        table.add_row("total", f"{c.area.total_mm2:,.1f}", style="bold")
        if s.device.die_area_mm2:
            table.add_row("published die area", f"{s.device.die_area_mm2:,.1f}")
        street = f" (street price ~${s.device.price_usd:,.0f})" if s.device.price_usd else ""
        return [table,
                f"dies per 300 mm wafer {c.dies_per_wafer}, yield {c.yield_fraction:.1%}, wafer "
                f"${c.wafer_usd:,.0f} -> die ${c.die_usd:,.0f}",
                f"device: die ${c.die_usd:,.0f} + memory ${c.memory_usd:,.0f} + packaging "
                f"${c.packaging_usd:,.0f} = ${c.device_usd:,.0f}{street}",
                f"system of {c.devices} devices (with boards and links): ${c.system_usd:,.0f}"]


def cost_report(system: str) -> CostReport:
    """Die area per block, yield, and $ per device and per system of a preset or YAML file."""
    s = load_system(system)
    return CostReport(s, system_cost(s))
