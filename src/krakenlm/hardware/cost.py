"""Cost per device and per system: die (wafer price, dies per wafer, yield), memory, packaging.

All prices are public estimates, rounded, and meant for *relative* comparisons (performance
per dollar against an A100 computed the same way), not for quoting a street price:
* Wafer price per 300 mm wafer by node: CSET, Khan and Mann, "AI Chips: What They Are and Why
  They Matter" (2020), foundry sale price estimates: 16/12 nm $3,984, 7 nm $9,346, 5 nm
  $16,988; 6 nm taken as 7 nm and 4 nm as 5 nm; 3 nm $20,000 (press estimate).
* Defect density (per cm^2): ~0.09 for a mature N7/N6, ~0.10 for N5/N4 (TSMC figures reported
  by the press in 2020-2021), 0.05 for 16 nm; Murphy's yield model Y = ((1 - e^-AD) / AD)^2,
  with every defect fatal (products that disable cores do better: a pessimistic bound).
* Memory $/GiB (2023 market estimates, TrendForce / DRAMeXchange contract prices, rounded):
  HBM2/HBM2e 10, HBM3 15, HBM3e 18, DDR4 2.5, DDR5 3.5, LPDDR5 4, GDDR6 6. The prices are per
  binary gigabyte (2^30 bytes): a DRAM die's density is a power of two (16 Gb, 24 Gb = 3 x 8 Gb
  ...), and a "GB" of DRAM or HBM in a contract price or a datasheet is that binary unit. Every
  preset's capacity is binary too (presets/*.yaml: "80 GB HBM2e" is 85899345920 bytes = 80 GiB,
  the MI300X's "192 GB HBM3: 8 x 24 GiB stacks", the H200's "141 GB HBM3e, read as GiB like
  every HBM capacity"), and so are the design-space sweep's (design.build: stacks x GiB). So
  memory = capacity_bytes / 2^30 x $/GiB: an "80 GB" HBM2e A100 is charged 80 x $10 = $800
  (dividing by 1e9 instead charged 85.9 x $10 = $859, 7.4 % too much).
* Packaging: a 2.5D silicon interposer (CoWoS-class) for HBM, ~$700 per device plus $50 per
  stack to assemble; an organic package for DRAM channels, ~$100. Estimates.
* A system is its devices plus $1,000 per device for board, power and cooling and $100 per
  inter-device link (estimates); hosts and switches are left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .area import AreaBreakdown, die_area
from .schema import System

WAFER_DIAMETER_MM = 300.0
WAFER_PRICE_USD = {16: 3984.0, 12: 3984.0, 10: 5992.0, 7: 9346.0, 6: 9346.0, 5: 16988.0,
                   4: 16988.0, 3: 20000.0}
DEFECTS_PER_CM2 = {16: 0.05, 12: 0.05, 10: 0.08, 7: 0.09, 6: 0.09, 5: 0.10, 4: 0.10, 3: 0.12}
BYTES_PER_GIB = 2**30
# USD per GiB (2^30 bytes) of device memory, by technology (sources below and in the docstring).
MEMORY_USD_PER_GIB = {"HBM2": 10.0, "HBM2e": 10.0, "HBM3": 15.0, "HBM3e": 18.0, "DDR4": 2.5,
                      "DDR5": 3.5, "LPDDR5": 4.0, "GDDR6": 6.0}
# Where each $/GiB comes from and when (a design report prints it next to the ratio: the
# HBM/DRAM price gap drives the DRAM-design results).
MEMORY_PRICE_SOURCES = {
    "HBM2": "TrendForce HBM contract estimates, 2023 (rounded)",
    "HBM2e": "TrendForce HBM contract estimates, 2023 (rounded)",
    "HBM3": "TrendForce HBM3 estimates, 2023 (rounded)",
    "HBM3e": "TrendForce HBM3e estimates, 2024 (rounded)",
    "DDR4": "DRAMeXchange DDR4 server RDIMM contract prices, 2023 (rounded)",
    "DDR5": "DRAMeXchange DDR5 server RDIMM contract prices, 2023 (rounded)",
    "LPDDR5": "TrendForce mobile DRAM contract prices, 2023 (rounded)",
    "GDDR6": "TrendForce graphics DRAM contract prices, 2023 (rounded)",
}
INTERPOSER_USD = 700.0
HBM_STACK_ASSEMBLY_USD = 50.0
ORGANIC_PACKAGE_USD = 100.0
BOARD_USD_PER_DEVICE = 1000.0
LINK_USD = 100.0


def _nearest(table: dict[int, float], node: float) -> float:
    return table[min(table, key=lambda n: abs(n - node))]


def dies_per_wafer(area_mm2: float, diameter_mm: float = WAFER_DIAMETER_MM) -> int:
    """Gross dies on a round wafer (area term minus the edge loss term)."""
    r = diameter_mm / 2
    return max(0, int(math.pi * r * r / area_mm2 - math.pi * diameter_mm / math.sqrt(2 * area_mm2)))


def murphy_yield(area_mm2: float, defects_per_cm2: float) -> float:
    ad = area_mm2 / 100.0 * defects_per_cm2
    return 1.0 if ad == 0 else ((1 - math.exp(-ad)) / ad) ** 2


@dataclass(frozen=True)
class CostBreakdown:
    """The cost estimate of one system (system_cost(); sources in the module docstring), all prices
    in USD: the die area per block, gross dies per 300 mm wafer, Murphy yield (0-1), the wafer
    price at the node, die = wafer / (dies per wafer x yield), memory = capacity in GiB (2^30
    bytes, the unit DRAM is sold and presets are given in) x the technology's $/GiB, packaging (interposer + per-stack assembly for HBM, an
    organic package otherwise), device = die + memory + packaging, and system = devices x (device
    + board) + links x link price over its `devices` devices. Public estimates for relative
    comparisons."""
    area: AreaBreakdown
    dies_per_wafer: int
    yield_fraction: float
    wafer_usd: float
    die_usd: float
    memory_usd: float
    packaging_usd: float
    device_usd: float
    system_usd: float
    devices: int

    def to_dict(self) -> dict:
        return {"area_mm2": self.area.blocks, "die_area_mm2": self.area.total_mm2,
                "dies_per_wafer": self.dies_per_wafer, "yield": self.yield_fraction,
                "wafer_usd": self.wafer_usd, "die_usd": self.die_usd,
                "memory_usd": self.memory_usd, "packaging_usd": self.packaging_usd,
                "device_usd": self.device_usd, "system_usd": self.system_usd,
                "devices": self.devices}


def system_cost(system: System) -> CostBreakdown:
    dev = system.device
    area = die_area(system)
    a = area.total_mm2
    node = dev.process_node_nm
    dpw = dies_per_wafer(a)
    y = murphy_yield(a, _nearest(DEFECTS_PER_CM2, node))
    wafer = _nearest(WAFER_PRICE_USD, node)
    die = wafer / max(dpw * y, 1e-9)
    memory = (dev.memory.capacity_bytes / BYTES_PER_GIB
              * MEMORY_USD_PER_GIB[dev.memory.technology])
    if dev.memory.technology.startswith("HBM"):
        packaging = INTERPOSER_USD + HBM_STACK_ASSEMBLY_USD * dev.memory.stack_count
    else:
        packaging = ORGANIC_PACKAGE_USD
    device = die + memory + packaging
    n = system.device_count
    links = n * system.interconnect.links_per_device
    total = n * (device + BOARD_USD_PER_DEVICE) + links * LINK_USD
    return CostBreakdown(area, dpw, y, wafer, die, memory, packaging, device, total, n)
