"""Die area per block from the hardware description, at the device's process node.

Blocks follow the die-shot breakdown of shared/data/measured/die_area.csv: cores, on-chip
interconnect, global buffer, memory PHY, memory controller, off-chip interconnect PHY and
controller, other.

How the constants were obtained (declared, so the comparison means something):
* Fixed from public figures, at 7 nm: SRAM macro density from TSMC N7's 0.027 um^2 high-density
  bitcell at ~55 % array efficiency (0.41 mm^2 per MiB); register files (multi-ported) at twice
  that; a 16-bit multiply / 32-bit accumulate MAC at 1.5e-3 mm^2 and an FP32 vector lane (with
  its FP64/INT share) at 6e-3 mm^2 (round estimates in the range synthesis reports give).
* Fitted on the GA100 column of the die-shot file (the A100 preset): the per-core remainder
  (schedulers, load/store, caches' control, the share of cores disabled for yield), the global
  buffer's area per MiB beyond its bit cells (tags, crossbar slices), the on-chip network per
  core, the HBM PHY and controller per stack, and the "other" block. GA100 is therefore
  reproduced by construction; the Aldebaran (MI210) column is the held-out comparison.
* Node scaling: logic density relative to N7 (TSMC's published ratios: N16 0.31x, N6 1.18x,
  N5 1.84x, N4 1.94x), SRAM 0.37x / 1.0x / 1.35x / 1.35x; PHYs (analog, bump-limited) do not
  scale.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from .schema import Device, System

BLOCKS = ("cores", "on-chip interconnect", "global buffer", "memory PHY", "memory controller",
          "off-chip PHY", "off-chip controller", "other")

MIB = 2**20
SRAM_MM2_PER_MIB_N7 = 0.027e-6 * 8 * MIB / 0.55   # 0.41 mm^2 per MiB of SRAM macro
REGFILE_MM2_PER_MIB_N7 = 2 * SRAM_MM2_PER_MIB_N7
MAC_MM2_N7 = 1.5e-3
VECTOR_LANE_MM2_N7 = 6.0e-3

# Fitted on GA100 (die_area.csv column 1, A100 80GB preset): see fit_ga100() below, which
# recomputes these from the die shot; the test suite checks that they agree.
CORE_REMAINDER_MM2_N7 = 2.207
GLOBAL_BUFFER_EXTRA_MM2_PER_MIB_N7 = 2.570
NOC_MM2_PER_CORE_N7 = 0.7078
HBM_PHY_MM2_PER_STACK = 11.6
HBM_CONTROLLER_MM2_PER_STACK_N7 = 6.354
OTHER_MM2_N7 = 40.0
# Not in either die shot: DRAM (DDR/LPDDR/GDDR) PHY and controller per 64-bit channel, and the
# off-chip PHY per link when the preset gives none (GA100's NVLink PHY per link).
DRAM_PHY_MM2_PER_CHANNEL = 4.0         # estimate (DDR5 PHY IP at 7 nm, vendor briefs: 3-5 mm^2)
DRAM_CONTROLLER_MM2_PER_CHANNEL_N7 = 1.5  # estimate
DEFAULT_LINK_PHY_MM2 = 20.95 / 12

# The largest die one exposure prints: 26 mm x 33 mm (ASML immersion scanners' field), the
# bound every monolithic design must respect (GA100's 826 mm^2 is just under it).
RETICLE_LIMIT_MM2 = 26.0 * 33.0

LOGIC_SCALE = {16: 0.31, 12: 0.35, 10: 0.62, 7: 1.0, 6: 1.18, 5: 1.84, 4: 1.94, 3: 2.6}
SRAM_SCALE = {16: 0.37, 12: 0.40, 10: 0.70, 7: 1.0, 6: 1.0, 5: 1.35, 4: 1.35, 3: 1.4}


def _scale(table: dict[int, float], node_nm: float) -> float:
    nodes = sorted(table)
    nearest = min(nodes, key=lambda n: abs(n - node_nm))
    return table[nearest]


@dataclass(frozen=True)
class AreaBreakdown:
    """A device's die area per block in mm^2 at its process node (die_area(); the blocks of BLOCKS,
    after the die-shot breakdown of die_area.csv; the constants' sources are in the module
    docstring). `total_mm2` is their sum."""
    blocks: dict[str, float]

    @property
    def total_mm2(self) -> float:
        return sum(self.blocks.values())


def _is_hbm(dev: Device) -> bool:
    return dev.memory.technology.startswith("HBM")


def die_area(system: System) -> AreaBreakdown:
    dev = system.device
    c = dev.core
    logic = 1.0 / _scale(LOGIC_SCALE, dev.process_node_nm)
    sram = 1.0 / _scale(SRAM_SCALE, dev.process_node_nm)
    macs = c.lane_count * c.systolic_array_height * c.systolic_array_width
    core = (macs * MAC_MM2_N7 + c.lane_count * c.vector_width * VECTOR_LANE_MM2_N7
            + CORE_REMAINDER_MM2_N7) * logic + \
        (c.local_sram_bytes / MIB * SRAM_MM2_PER_MIB_N7
         + c.register_file_bytes / MIB * REGFILE_MM2_PER_MIB_N7) * sram
    gb_mib = dev.global_buffer.capacity_bytes / MIB
    stacks = dev.memory.stack_count
    if _is_hbm(dev):
        phy, ctrl = HBM_PHY_MM2_PER_STACK, HBM_CONTROLLER_MM2_PER_STACK_N7
    else:
        phy, ctrl = DRAM_PHY_MM2_PER_CHANNEL, DRAM_CONTROLLER_MM2_PER_CHANNEL_N7
    link_phy = system.interconnect.phy_area_mm2_per_link or DEFAULT_LINK_PHY_MM2
    blocks = {
        "cores": dev.core_count * core,
        "on-chip interconnect": dev.core_count * NOC_MM2_PER_CORE_N7 * logic,
        "global buffer": gb_mib * (SRAM_MM2_PER_MIB_N7 * sram
                                   + GLOBAL_BUFFER_EXTRA_MM2_PER_MIB_N7 * logic),
        "memory PHY": stacks * phy,
        "memory controller": stacks * ctrl * logic,
        "off-chip PHY": system.interconnect.links_per_device * link_phy,
        "off-chip controller": 0.0,
        "other": OTHER_MM2_N7 * logic,
    }
    return AreaBreakdown(blocks)


def read_die_shots(path: str | Path) -> dict[str, dict[str, float]]:
    """die_area.csv: one row per block (BLOCKS order), columns GA100 and Aldebaran, in mm^2."""
    rows = []
    with open(path) as fh:
        for row in csv.reader(fh):
            if row:
                rows.append([float(v.strip()) for v in row])
    return {name: {block: r[i] for block, r in zip(BLOCKS, rows)}
            for i, name in enumerate(("GA100", "Aldebaran"))}


def fit_ga100(ga100: dict[str, float], a100: System) -> dict[str, float]:
    """Recompute the GA100-fitted constants from its die shot (N7, so no node scaling)."""
    dev, c = a100.device, a100.device.core
    macs = c.lane_count * c.systolic_array_height * c.systolic_array_width
    fixed = (macs * MAC_MM2_N7 + c.lane_count * c.vector_width * VECTOR_LANE_MM2_N7
             + c.local_sram_bytes / MIB * SRAM_MM2_PER_MIB_N7
             + c.register_file_bytes / MIB * REGFILE_MM2_PER_MIB_N7)
    gb_mib = dev.global_buffer.capacity_bytes / MIB
    stacks = dev.memory.stack_count
    return {
        "CORE_REMAINDER_MM2_N7": ga100["cores"] / dev.core_count - fixed,
        "GLOBAL_BUFFER_EXTRA_MM2_PER_MIB_N7": ga100["global buffer"] / gb_mib - SRAM_MM2_PER_MIB_N7,
        "NOC_MM2_PER_CORE_N7": ga100["on-chip interconnect"] / dev.core_count,
        "HBM_PHY_MM2_PER_STACK": ga100["memory PHY"] / stacks,
        "HBM_CONTROLLER_MM2_PER_STACK_N7": ga100["memory controller"] / stacks,
        "OTHER_MM2_N7": ga100["other"],
    }
