"""`krakenlm sim sweep`: a preset grid of the design-space runner (cores x memory configuration
x global buffer on one fixed workload), reported as throughput, cost and performance per $
against the unmodified base (an A100 node).

Each design is the base device with knobs (build.build_system): `cores` (peak rates rescaled
with them, the per-core design unchanged), the off-chip memory of a configuration
TECHNOLOGY-UNITS (`memory` and `memory_units`: e.g. HBM3-5 is five HBM3 stacks of the
technology's default capacity, knobs.MEMORY_TECHNOLOGIES) and `global_buffer_mib`; `tp` is the
workload's. They are evaluated like every grid of `sim explore` (runner.run_designs): the
latency objective at the workload's batch, the baseline the base at the same tp, every design
and the baseline timed by the template (tile) model. A design the build rules reject (a die
beyond the reticle, memory PHYs that do not fit on the die's edge) is infeasible, not timed or
ranked; one whose memory cannot hold the model is reported as not fitting. Throughput is the
workload's generated tokens over its end-to-end time.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass
from typing import Any

from ..console import table_of
from ..errors import KrakenError
from ..hardware import load_system
from ..hardware.area import RETICLE_LIMIT_MM2
from ..hardware.schema import System
from .build import build_system, infeasible_reason
from .knobs import MEMORY_TECHNOLOGIES, check_design, design_key
from .objectives import Objective
from .report import check_top
from .runner import run_designs

DEFAULT_CORES = (32, 64, 96, 108, 128)
DEFAULT_MEMORIES = ("HBM2e-5", "HBM3-5", "DDR5-16", "LPDDR5-16")
DEFAULT_GLOBAL_BUFFER_MIB = (10, 20, 40, 80, 160)
KNOB_NAMES = ["cores", "memory", "memory_units", "global_buffer_mib", "tp"]


@dataclass(frozen=True)
class Workload:
    """The fixed workload of a hardware sweep: `model` (a preset name) at tensor-parallel degree
    `tp`, `batch` requests of `prompt_tokens` prompt and `gen_tokens` generated tokens; scored as
    the end-to-end latency of that batch (`objective()`)."""
    model: str = "gpt3-175b"
    tp: int = 8
    batch: int = 8
    prompt_tokens: int = 1024
    gen_tokens: int = 128

    def objective(self) -> Objective:
        """The end-to-end latency of the workload's batch: the runner's objective for it."""
        return Objective("latency", self.model, self.prompt_tokens, self.gen_tokens,
                         batch=self.batch, metric="e2e")


def memory_knobs(configuration: str) -> dict[str, Any]:
    """The knobs of a memory configuration TECHNOLOGY-UNITS, e.g. HBM3-5."""
    tech, _, units = configuration.rpartition("-")
    if tech not in MEMORY_TECHNOLOGIES or not units.isdigit() or int(units) < 1:
        raise KrakenError(f"--memories: unknown [{configuration!r}]; write TECHNOLOGY-UNITS with "
                          f"a technology of {list(MEMORY_TECHNOLOGIES)}, e.g. "
                          f"{', '.join(DEFAULT_MEMORIES)}")
    return {"memory": tech, "memory_units": int(units)}


def design_knobs(cores: int, memory: str, global_buffer_mib: float) -> dict[str, Any]:
    return {"cores": cores, **memory_knobs(memory), "global_buffer_mib": global_buffer_mib}


def design(base: System, cores: int, memory: str, global_buffer_mib: float) -> System:
    """The base system with `cores`, the memory configuration `memory` and the global buffer."""
    return build_system(base, design_knobs(cores, memory, global_buffer_mib))


@dataclass
class SweepReport:
    """The output of a hardware sweep (`krakenlm sim sweep`): the base system's name and row, the
    workload, a row per design in grid order (cores, memory, bandwidth, capacity, die area,
    device and system price from the template area/cost model, tokens/s, performance per $
    against the base; `feasible`/`reason` for a design that cannot be built or does not fit), the
    wall time of the sweep (`seconds`) and how many rows the table shows (`top`, best performance
    per $ first)."""
    base_name: str
    workload: Workload
    base: dict[str, Any]             # the base's row
    designs: list[dict[str, Any]]    # a row per design, in grid order
    seconds: float
    top: int = 15                    # rows in the table (best performance per $ first)

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "workload": dataclasses.asdict(self.workload),
                "designs": self.designs, "configurations": len(self.designs),
                "seconds": self.seconds}

    def to_table(self) -> list[Any]:
        w, ref = self.workload, self.base
        rows = sorted((r for r in self.designs if "perf_per_usd_vs_base" in r),
                      key=lambda r: -r["perf_per_usd_vs_base"])
        table = table_of(f"{len(self.designs)} designs from {self.base_name}, {w.model} TP {w.tp} "
                         f"batch {w.batch} prompt {w.prompt_tokens} gen {w.gen_tokens} "
                         f"(simulated in {self.seconds:.1f} s)",
                         ("cores", "memory", "GB/s", "GB", "L2 MiB", "die mm^2", "$/device",
                          "tokens/s", "perf/$ vs base"), left=("memory",))
        for r in rows[:self.top]:
            table.add_row(str(r["cores"]), r["memory"],
                          f"{r['memory_bandwidth_bytes_per_s'] / 1e9:,.0f}",
                          f"{r['memory_capacity_bytes'] / 1e9:,.0f}",
                          f"{r['global_buffer_bytes'] / 2**20:g}", f"{r['die_area_mm2']:,.0f}",
                          f"{r['device_usd']:,.0f}", f"{r['tokens_per_s']:,.1f}",
                          f"{r['perf_per_usd_vs_base']:.2f}x")
        out: list[Any] = [table, f"base {ref['system']}: "
                          f"{ref.get('tokens_per_s', float('nan')):,.1f} tokens/s, "
                          f"${ref['device_usd']:,.0f} per device (model estimate), "
                          f"${ref['system_usd']:,.0f} per system"]
        unbuilt = [r for r in self.designs if not r["feasible"] and "fits" not in r]
        over = [r for r in unbuilt if r["die_area_mm2"] > RETICLE_LIMIT_MM2]
        if over:
            out.append(f"{len(over)} designs have a die beyond the reticle limit "
                       f"({RETICLE_LIMIT_MM2:g} mm^2: not manufacturable as one die; not timed or "
                       f"ranked), e.g. {over[0]['cores']} cores: {over[0]['die_area_mm2']:,.0f} "
                       "mm^2")
        other = [r for r in unbuilt if r not in over]
        if other:
            out.append(f"{len(other)} designs cannot be built (not timed or ranked), e.g. "
                       f"{other[0]['cores']} cores, {other[0]['memory']}: {other[0]['reason']}")
        misfits = [r for r in self.designs if r.get("fits") is False]
        if misfits:
            out.append(f"{len(misfits)} designs cannot hold the model (not timed)")
        return out


def _check(cores, memories, global_buffers_mib, workload: Workload, top: int) -> None:
    check_top(top)
    for name, values in (("--cores", cores), ("--memories", memories),
                         ("--global-buffers", global_buffers_mib)):
        if not values:
            raise KrakenError(f"{name} needs at least one value")
    for m in memories:
        memory_knobs(m)
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


def _row(name: str, system: System, knobs: dict[str, Any], row: dict[str, Any],
         workload: Workload) -> dict[str, Any]:
    """A runner row as a sweep row: the design's hardware, cost, and its throughput."""
    dev = system.device
    out = {"system": name, "cores": dev.core_count, "memory": dev.memory.technology,
           "memory_bandwidth_bytes_per_s": dev.memory.bandwidth_bytes_per_s,
           "memory_capacity_bytes": dev.memory.capacity_bytes,
           "global_buffer_bytes": dev.global_buffer.capacity_bytes,
           "die_area_mm2": row["die_area_mm2"], "yield": row["yield"],
           "device_usd": row["device_usd"], "system_usd": row["system_usd"],
           "feasible": row["feasible"]}
    if not row["feasible"]:
        built = infeasible_reason(system, knobs) is not None  # rejected before any timing
        out.update({"reason": row["reason"]} if built else {"fits": False,
                                                            "reason": row["reason"]})
        return out
    tokens = workload.batch * workload.gen_tokens
    out.update(fits=True, ttft_s=row["ttft_s"], tpot_s=row["tpot_s"], e2e_s=row["e2e_s"],
               tokens_per_s=tokens / row["e2e_s"],
               tokens_per_s_per_kusd=tokens / row["e2e_s"] / (row["system_usd"] / 1e3))
    return out


def sweep(base: str = "a100-80gb-x8", workload: Workload = Workload(),
          cores=DEFAULT_CORES, memories=DEFAULT_MEMORIES,
          global_buffers_mib=DEFAULT_GLOBAL_BUFFER_MIB, top: int = 15) -> SweepReport:
    """Every design of cores x memories x global_buffers_mib on `workload`, with the base."""
    _check(cores, memories, global_buffers_mib, workload, top)
    started = time.perf_counter()
    base_system = load_system(base)
    grid = [(f"{base_system.name}:{c}c-{m}-{g:g}M",
             check_design({**design_knobs(c, m, g), "tp": workload.tp}))
            for c, m, g in itertools.product(cores, memories, global_buffers_mib)]
    reference = {"tp": workload.tp}
    summary = run_designs((knobs for _, knobs in grid), workload.objective(), base,
                          knob_names=KNOB_NAMES, progress=False, reference=reference)
    by_key = {r["key"]: r for r in summary.rows}
    ref = _row(base_system.name, build_system(base_system, reference), reference,
               summary.baseline, workload)
    rows = []
    for name, knobs in grid:
        row = _row(name, build_system(base_system, knobs), knobs, by_key[design_key(knobs)],
                   workload)
        if row["feasible"]:
            row["perf_per_usd_vs_base"] = (row["tokens_per_s_per_kusd"]
                                           / ref["tokens_per_s_per_kusd"])
        rows.append(row)
    return SweepReport(base_system.name, workload, ref, rows, time.perf_counter() - started, top)
