"""`krakenlm sim ...`: the hardware simulator's commands."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from . import app

sim_app = typer.Typer(help="Hardware simulator: predict LLM inference latency, memory and cost.",
                      no_args_is_help=True)
app.add_typer(sim_app, name="sim")



@sim_app.command("systems")
def systems(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the hardware presets (devices, topology, peak rates, memory)."""
    from ..hardware import load_system, preset_system_names

    rows = []
    for name in preset_system_names():
        s = load_system(name)
        d, ic = s.device, s.interconnect
        rows.append({"name": name, "device": d.name, "devices": ic.device_count,
                     "topology": ic.topology, "fp16_flops_per_s": d.matrix_rate("fp16"),
                     "memory_bytes": d.memory.capacity_bytes,
                     "memory_bandwidth_bytes_per_s": d.memory.bandwidth_bytes_per_s,
                     "link_bandwidth_bytes_per_s": ic.link_bandwidth_bytes_per_s,
                     "links_per_device": ic.links_per_device, "description": s.description})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title="krakenlm hardware presets (per device)")
    for col in ("name", "device", "n", "topology", "fp16 TFLOP/s", "memory GiB", "mem TB/s",
                "links x GB/s/dir"):
        table.add_column(col, justify="left" if col in ("name", "device", "topology") else "right")
    for r in rows:
        table.add_row(r["name"], r["device"], str(r["devices"]), r["topology"],
                      f"{r['fp16_flops_per_s'] / 1e12:,.0f}", f"{r['memory_bytes'] / 2**30:,.0f}",
                      f"{r['memory_bandwidth_bytes_per_s'] / 1e12:.2f}",
                      f"{r['links_per_device']} x {r['link_bandwidth_bytes_per_s'] / 1e9:g}")
    Console().print(table)
