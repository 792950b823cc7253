"""Design-space sweep: vary cores, memory technology and global buffer of a base system and
report throughput, cost and performance per dollar against the unmodified base (an A100 node).

Each design is the base device with: `core_count` changed (peak rates rescaled with it, the
per-core design unchanged), the off-chip memory replaced by one of MEMORIES (bandwidth and
capacity per stack or channel from the JEDEC speed grades), and the global buffer resized. Its
cost comes from krakenlm.hardware.cost (die area per block at the base's node, yield, memory
$/GB, packaging); its performance from `simulate` on a fixed workload, with the template (tile)
model for the base and the designs alike. The richer design-space tools (objectives that pick
batch and tp per design, feasibility, search, parallel runs) are in krakenlm.design. A design whose memory
cannot hold the model is reported as not fitting rather than timed; a design whose die is larger
than the reticle (hardware.area.RETICLE_LIMIT_MM2) cannot be made as one die and is reported as
infeasible, not timed or ranked.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass
from typing import Any

from ..errors import KrakenError
from ..hardware import load_system
from ..hardware.area import RETICLE_LIMIT_MM2
from ..hardware.cost import system_cost
from ..hardware.schema import Memory, PeakRates, System
from ..models import get_preset
from ..simulator.graph import SimulationError
from ..simulator.memory import ModelDoesNotFit
from ..simulator.run import simulate

# name -> (technology, units, bandwidth per unit B/s, capacity per unit B, latency s)
# HBM2e: 3.2 Gb/s x 1024 bits = 410 GB/s and 16 GB per stack (the A100 80GB's stacks);
# HBM3: 6.4 Gb/s x 1024 bits = 819 GB/s, 16 GB per stack (JESD238);
# DDR5-4800: 38.4 GB/s per 64-bit channel, one 64 GB RDIMM per channel (JESD79-5);
# LPDDR5-6400: 51.2 GB/s per 64-bit (4 x 16-bit) channel, 32 GB per channel (JESD209-5).
MEMORIES = {
    "HBM2e-5": ("HBM2e", 5, 410e9, 16 * 2**30, 4.7e-7),
    "HBM3-5": ("HBM3", 5, 819e9, 16 * 2**30, 4.8e-7),
    "DDR5-16": ("DDR5", 16, 38.4e9, 64 * 2**30, 9.0e-7),
    "LPDDR5-16": ("LPDDR5", 16, 51.2e9, 32 * 2**30, 9.0e-7),
}
DEFAULT_CORES = (32, 64, 96, 108, 128)
DEFAULT_GLOBAL_BUFFER_MIB = (10, 20, 40, 80, 160)


@dataclass(frozen=True)
class Workload:
    model: str = "gpt3-175b"
    tp: int = 8
    batch: int = 8
    prompt_tokens: int = 1024
    gen_tokens: int = 128


def _scale_rates(rates: PeakRates, factor: float) -> PeakRates:
    return PeakRates(**{f.name: (None if getattr(rates, f.name) is None
                                 else getattr(rates, f.name) * factor)
                        for f in dataclasses.fields(PeakRates)})


def design(base: System, cores: int, memory: str, global_buffer_mib: float) -> System:
    dev = base.device
    tech, units, bw, cap, lat = MEMORIES[memory]
    factor = cores / dev.core_count
    new_dev = dataclasses.replace(
        dev, name=f"{dev.name} design: {cores} cores, {memory}, {global_buffer_mib:g} MiB",
        core_count=cores,
        matrix_flops_per_s=_scale_rates(dev.matrix_flops_per_s, factor),
        vector_flops_per_s=_scale_rates(dev.vector_flops_per_s, factor),
        global_buffer=dataclasses.replace(dev.global_buffer,
                                          capacity_bytes=global_buffer_mib * 2**20),
        memory=Memory(technology=tech, capacity_bytes=units * cap, bandwidth_bytes_per_s=units * bw,
                      latency_s=lat, stack_count=units),
        price_usd=None)
    return dataclasses.replace(base, name=f"{base.name}:{cores}c-{memory}-{global_buffer_mib:g}M",
                               device=new_dev)


def evaluate(system: System, workload: Workload) -> dict[str, Any]:
    cost = system_cost(system)
    row: dict[str, Any] = {"system": system.name, "cores": system.device.core_count,
                           "memory": system.device.memory.technology,
                           "memory_bandwidth_bytes_per_s": system.device.memory.bandwidth_bytes_per_s,
                           "memory_capacity_bytes": system.device.memory.capacity_bytes,
                           "global_buffer_bytes": system.device.global_buffer.capacity_bytes,
                           "die_area_mm2": cost.area.total_mm2, "yield": cost.yield_fraction,
                           "device_usd": cost.device_usd, "system_usd": cost.system_usd,
                           "feasible": True}
    if cost.area.total_mm2 > RETICLE_LIMIT_MM2:
        row.update(feasible=False, reason=f"die area {cost.area.total_mm2:,.0f} mm^2 exceeds the "
                                          f"reticle limit {RETICLE_LIMIT_MM2:g} mm^2")
        return row
    try:
        # template (tile) model for the base and every design alike: the measured-kernel A100
        # calibration would otherwise time the renamed designs too and ignore their knobs
        r = simulate(get_preset(workload.model), system, workload.tp, workload.batch,
                     workload.prompt_tokens, workload.gen_tokens, mode="tile",
                     model_name=workload.model)
    except (ModelDoesNotFit, SimulationError) as exc:
        row.update(feasible=False, fits=False, reason=str(exc).split(";")[0])
        return row
    tokens = workload.batch * workload.gen_tokens
    row.update(fits=True, ttft_s=r.ttft_s, tpot_s=r.tpot_s, e2e_s=r.e2e_s,
               tokens_per_s=tokens / r.e2e_s,
               tokens_per_s_per_kusd=tokens / r.e2e_s / (cost.system_usd / 1e3))
    return row


def sweep(base: str = "a100-80gb-x8", workload: Workload = Workload(),
          cores=DEFAULT_CORES, memories=tuple(MEMORIES),
          global_buffers_mib=DEFAULT_GLOBAL_BUFFER_MIB) -> dict[str, Any]:
    for name, values in (("--cores", cores), ("--memories", memories),
                         ("--global-buffers", global_buffers_mib)):
        if not values:
            raise KrakenError(f"{name} needs at least one value")
    for flag, value in (("--tp", workload.tp), ("--batch", workload.batch),
                        ("--prompt", workload.prompt_tokens), ("--gen", workload.gen_tokens)):
        if value < 1:
            raise KrakenError(f"{flag} must be at least 1, got {value}")
    for c in cores:
        if isinstance(c, bool) or c != int(c) or c < 1:
            raise KrakenError(f"--cores takes whole numbers of at least 1, got {c!r}")
    for g in global_buffers_mib:
        if not 0 < g < float("inf"):
            raise KrakenError(f"--global-buffers takes sizes above 0 MiB, got {g!r}")
    started = time.perf_counter()
    base_system = load_system(base)
    reference = evaluate(base_system, workload)
    rows = []
    for c, m, g in itertools.product(cores, memories, global_buffers_mib):
        row = evaluate(design(base_system, c, m, g), workload)
        if row["feasible"] and reference["feasible"]:
            row["perf_per_usd_vs_base"] = (row["tokens_per_s_per_kusd"]
                                           / reference["tokens_per_s_per_kusd"])
        rows.append(row)
    return {"base": reference, "workload": dataclasses.asdict(workload), "designs": rows,
            "configurations": len(rows), "seconds": time.perf_counter() - started}
