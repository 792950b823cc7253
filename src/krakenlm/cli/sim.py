"""`krakenlm sim ...`: the hardware simulator's commands."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from ..errors import KrakenError
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
                     "topology": ic.topology,
                     "fp16_flops_per_s": d.matrix_flops_per_s.fp16 or d.matrix_flops_per_s.bf16,
                     "memory_bytes": d.memory.capacity_bytes,
                     "memory_bandwidth_bytes_per_s": d.memory.bandwidth_bytes_per_s,
                     "link_bandwidth_bytes_per_s": ic.link_bandwidth_bytes_per_s,
                     "links_per_device": ic.links_per_device, "description": s.description})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title="krakenlm hardware presets (per device)")
    for col in ("name", "device", "n", "topology", "16-bit TFLOP/s", "memory GiB", "mem TB/s",
                "links x GB/s/dir"):
        table.add_column(col, justify="left" if col in ("name", "device", "topology") else "right")
    for r in rows:
        table.add_row(r["name"], r["device"], str(r["devices"]), r["topology"],
                      f"{r['fp16_flops_per_s'] / 1e12:,.0f}", f"{r['memory_bytes'] / 2**30:,.0f}",
                      f"{r['memory_bandwidth_bytes_per_s'] / 1e12:.2f}",
                      f"{r['links_per_device']} x {r['link_bandwidth_bytes_per_s'] / 1e9:g}")
    Console().print(table)


def _device_systems(pairs: list[str] | None) -> dict[str, str] | None:
    from ..simulator.validate import DEVICE_SYSTEMS

    if not pairs:
        return None
    mapping = dict(DEVICE_SYSTEMS)
    for pair in pairs:
        device, sep, system = pair.partition("=")
        if not sep or not device or not system:
            raise KrakenError(f"--device-system {pair!r}: write DEVICE=SYSTEM, e.g. A100=a100-80gb-x4")
        mapping[device] = system
    return mapping


_DEVICE_SYSTEM_HELP = ("Which system a device name in the file names ran on, DEVICE=SYSTEM "
                       "(repeatable; defaults: A100=a100-80gb-x4, MI210=mi210-x4).")


@sim_app.command("calibrate")
def calibrate(
    measured: str = typer.Option(..., "--measured", help="Directory of measurements (format of shared/data/measured)."),
    output: str = typer.Option(None, "--output", "-o", help="Where to write the constants (default: the package's calibration.yaml)."),
    device_system: list[str] = typer.Option(None, "--device-system", help=_DEVICE_SYSTEM_HELP),
) -> None:
    """Fit the simulator's constants on the fit half (even rows) of a measurement directory."""
    from importlib import resources

    from ..hardware import load_system
    from ..simulator.calibration import CALIBRATION_FILE, fit_calibration, save_calibration
    from ..simulator.measured import load_measured
    from ..simulator.validate import DEVICE_SYSTEMS

    data = load_measured(measured)
    names = _device_systems(device_system) or DEVICE_SYSTEMS
    systems = {d: load_system(s) for d, s in names.items()
               if any(p.device == d for p in data.points)}
    command = "krakenlm sim calibrate --measured " + measured
    calibration = fit_calibration(data, systems, command=command)
    path = output or str(resources.files("krakenlm.simulator").joinpath(CALIBRATION_FILE))
    save_calibration(calibration, path)
    print(f"wrote {path} ({sum(len(v) for v in calibration.devices.values())} operator groups)")


@sim_app.command("validate")
def validate_cmd(
    measured: str = typer.Option(..., "--measured", help="Directory of measurements (format of shared/data/measured)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    csv_path: str = typer.Option(None, "--csv", help="Also save every point (predicted vs measured) as CSV."),
    plot_path: str = typer.Option(None, "--plot", help="Also save a predicted-vs-measured plot (PNG)."),
    calibration_path: str = typer.Option(None, "--calibration", help="Constants file (default: the package's)."),
    device_system: list[str] = typer.Option(None, "--device-system", help=_DEVICE_SYSTEM_HELP),
) -> None:
    """Compare simulated operator latencies with measurements: MAPE per operator and device,
    on the fit half, the held-out half and all points, and the GPT-3 175B layer."""
    from ..simulator.calibration import load_calibration
    from ..simulator.validate import validate, write_csv, write_plot

    report = validate(measured, load_calibration(calibration_path), _device_systems(device_system))
    if csv_path:
        write_csv(report, csv_path)
    if plot_path:
        write_plot(report, plot_path)
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
        return
    console = Console()
    table = Table(title="Operator error (MAPE %, predicted vs measured)")
    for col in ("device", "op", "n", "fit half", "held-out", "all"):
        table.add_column(col, justify="left" if col in ("device", "op") else "right")
    for o in report.ops:
        table.add_row(o["device"], o["op"], str(o["n"]), f"{o['mape_fit_half']:.1f}",
                      f"{o['mape_held_out']:.1f}", f"{o['mape']:.1f}")
    for device, s in report.per_device.items():
        table.add_row(device, "all ops", str(s["n"]), f"{s['fit']:.1f}", f"{s['held_out']:.1f}",
                      f"{s['all']:.1f}", style="bold")
    o = report.overall
    table.add_row("all", "all ops", str(o["n"]), f"{o['fit']:.1f}", f"{o['held_out']:.1f}",
                  f"{o['all']:.1f}", style="bold")
    console.print(table)
    for device, phases in report.layer.items():
        lt = Table(title=f"GPT-3 175B layer on {device} (TP 4, batch 8; never fitted on)")
        lt.add_column("op")
        for phase in phases:
            for col in ("measured ms", "predicted ms", "error %"):
                lt.add_column(f"{phase} {col}", justify="right")
        names = [op["op"] for op in next(iter(phases.values()))["ops"]]
        for i, name in enumerate(names):
            cells = []
            for info in phases.values():
                op = info["ops"][i]
                cells += [f"{op['measured_s'] * 1e3:.4f}", f"{op['predicted_s'] * 1e3:.4f}",
                          f"{op['error_pct']:+.1f}"]
            lt.add_row(name, *cells)
        cells = []
        for info in phases.values():
            cells += [f"{info['sum_measured_s'] * 1e3:.4f}", f"{info['sum_predicted_s'] * 1e3:.4f}",
                      f"{info['sum_error_pct']:+.1f}"]
        lt.add_row("sum", *cells, style="bold")
        console.print(lt)
    for note in report.skipped:
        console.print(f"skipped: {note}")


@sim_app.command("run")
def run(
    system: str = typer.Option(..., "--system", help="Hardware preset (see `krakenlm sim systems`) or a YAML file."),
    model: str = typer.Option(..., "--model", help="Model preset (see `krakenlm models`) or a path to a config.json (Hugging Face or krakenlm)."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree (devices used)."),
    batch: int = typer.Option(1, "--batch", help="Sequences per batch."),
    prompt: int = typer.Option(..., "--prompt", help="Prompt tokens per sequence."),
    gen: int = typer.Option(..., "--gen", help="Generated tokens per sequence (the first comes from prefill)."),
    arch: str = typer.Option(None, "--arch", help="gpt | parallel | kraken: run the model as this architecture (kraken: the parameter-matched Kraken with degree = tp)."),
    mode: str = typer.Option("simulate", "--mode", help="simulate (tile models, fitted constants) or roofline."),
    dtype: str = typer.Option("fp16", "--dtype", help="Weights and activations: fp16, bf16, fp8, int8, fp32."),
    attention: str = typer.Option("fused", "--attention", help="fused (FlashAttention) or unfused (eager kernels)."),
    skip_memory_check: bool = typer.Option(False, "--skip-memory-check", help="Time a model that does not fit instead of failing (reported as not fitting)."),
    calibration_path: str = typer.Option(None, "--calibration", help="Constants file (default: the package's)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Simulate inference: per-operator breakdown, TTFT, mean TPOT, end-to-end time and memory
    per device."""
    from ..hardware import load_system
    from ..simulator.calibration import load_calibration
    from ..simulator.run import arch_variant, resolve_model, simulate

    name, original = resolve_model(model)
    config = arch_variant(original, arch, tp)
    label = name if arch in (None, original.arch) else f"{name} as {arch}"
    result = simulate(config, load_system(system), tp, batch, prompt, gen, mode, dtype=dtype,
                      attention=attention, calibration=load_calibration(calibration_path),
                      check_memory=not skip_memory_check, model_name=label)
    if as_json:
        print(json.dumps(result.to_json(), indent=2))
        return
    console = Console()
    table = Table(title=f"{result.model} ({config.arch}) on {result.system}, TP {tp}, batch "
                        f"{batch}, prompt {prompt}, gen {gen}, {mode}, {dtype}: time per operator"
                        " (a collective overlapped with compute counts in full here)")
    for col in ("op", "category", "prefill ms", "decode ms (all steps)", "% of end-to-end"):
        table.add_column(col, justify="left" if col in ("op", "category") else "right")
    total = result.e2e_s
    names = list(dict.fromkeys(list(result.prefill.ops) + list(result.decode.ops)))
    for op in names:
        p = result.prefill.ops.get(op, {})
        d = result.decode.ops.get(op, {})
        t = p.get("time_s", 0.0) + d.get("time_s", 0.0)
        table.add_row(op, (p or d)["category"], f"{p.get('time_s', 0.0) * 1e3:,.3f}",
                      f"{d.get('time_s', 0.0) * 1e3:,.3f}", f"{100 * t / total:.1f}")
    console.print(table)
    cats = Table(title="Wall time by category (adds up to the total; communication overlapped "
                       "with compute is not counted twice)")
    for col in ("category", "prefill ms", "decode ms"):
        cats.add_column(col, justify="left" if col == "category" else "right")
    for cat in dict.fromkeys(list(result.prefill.categories) + list(result.decode.categories)):
        cats.add_row(cat, f"{result.prefill.categories.get(cat, 0.0) * 1e3:,.3f}",
                     f"{result.decode.categories.get(cat, 0.0) * 1e3:,.3f}")
    console.print(cats)
    m = result.memory
    console.print(f"TTFT {result.ttft_s * 1e3:,.2f} ms | mean TPOT {result.tpot_s * 1e3:,.3f} ms | "
                  f"end-to-end {result.e2e_s:,.3f} s")
    console.print(f"memory per device: weights {m.weights_bytes / 1e9:.2f} GB + KV cache "
                  f"{m.kv_cache_bytes / 1e9:.2f} GB + activations {m.activation_bytes / 1e9:.2f} GB"
                  f" + reserve {m.reserve_bytes / 1e9:.2f} GB = {m.total_bytes / 1e9:.2f} GB of "
                  f"{m.capacity_bytes / 1e9:.2f} GB" + ("" if m.fits else "  [DOES NOT FIT]"))


@sim_app.command("cost")
def cost(
    system: str = typer.Option(..., "--system", help="Hardware preset or YAML file."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Die area per block, yield, and $ per device and per system (public-estimate prices;
    for relative comparisons)."""
    from ..hardware import load_system
    from ..hardware.cost import system_cost

    s = load_system(system)
    c = system_cost(s)
    if as_json:
        print(json.dumps({"system": s.name, **c.to_dict()}, indent=2))
        return
    console = Console()
    table = Table(title=f"{s.device.name}: die area per block at {s.device.process_node_nm:g} nm")
    table.add_column("block")
    table.add_column("mm^2", justify="right")
    for block, area in c.area.blocks.items():
        table.add_row(block, f"{area:,.1f}")
    table.add_row("total", f"{c.area.total_mm2:,.1f}", style="bold")
    if s.device.die_area_mm2:
        table.add_row("published die area", f"{s.device.die_area_mm2:,.1f}")
    console.print(table)
    console.print(f"dies per 300 mm wafer {c.dies_per_wafer}, yield {c.yield_fraction:.1%}, wafer "
                  f"${c.wafer_usd:,.0f} -> die ${c.die_usd:,.0f}")
    console.print(f"device: die ${c.die_usd:,.0f} + memory ${c.memory_usd:,.0f} + packaging "
                  f"${c.packaging_usd:,.0f} = ${c.device_usd:,.0f}"
                  + (f" (street price ~${s.device.price_usd:,.0f})" if s.device.price_usd else ""))
    console.print(f"system of {c.devices} devices (with boards and links): ${c.system_usd:,.0f}")


@sim_app.command("sweep")
def sweep_cmd(
    base: str = typer.Option("a100-80gb-x8", "--base", help="System whose device is varied (the reference)."),
    model: str = typer.Option("gpt3-175b", "--model", help="Model preset of the workload."),
    tp: int = typer.Option(8, "--tp", help="Tensor-parallel degree of the workload."),
    batch: int = typer.Option(8, "--batch", help="Batch of the workload."),
    prompt: int = typer.Option(1024, "--prompt", help="Prompt tokens of the workload."),
    gen: int = typer.Option(128, "--gen", help="Generated tokens of the workload."),
    cores: str = typer.Option("32,64,96,108,128", "--cores", help="Core counts to try, comma-separated."),
    memories: str = typer.Option("HBM2e-5,HBM3-5,DDR5-16,LPDDR5-16", "--memories", help="Memory configurations to try (see krakenlm.simulator.sweep.MEMORIES)."),
    global_buffers: str = typer.Option("10,20,40,80,160", "--global-buffers", help="Global buffer sizes in MiB, comma-separated."),
    top: int = typer.Option(15, "--top", help="Rows to print (best performance per $ first)."),
    as_json: bool = typer.Option(False, "--json", help="Print every design as JSON."),
) -> None:
    """Design-space sweep (cores x memory technology x global buffer): throughput, cost and
    performance per $ against the base system."""
    from ..simulator.sweep import MEMORIES, Workload, sweep

    def numbers(text: str, kind=int) -> tuple:
        try:
            return tuple(kind(v) for v in text.split(",") if v.strip())
        except ValueError:
            raise KrakenError(f"expected comma-separated numbers, got {text!r}") from None

    mems = tuple(m.strip() for m in memories.split(",") if m.strip())
    unknown = [m for m in mems if m not in MEMORIES]
    if unknown:
        raise KrakenError(f"--memories: unknown {unknown}; choose from {list(MEMORIES)}")
    result = sweep(base, Workload(model, tp, batch, prompt, gen), numbers(cores), mems,
                   numbers(global_buffers, float))
    if as_json:
        print(json.dumps(result, indent=2))
        return
    ref = result["base"]
    console = Console()
    rows = sorted((r for r in result["designs"] if r.get("fits")),
                  key=lambda r: -r["perf_per_usd_vs_base"])
    table = Table(title=f"{result['configurations']} designs from {base}, {model} TP {tp} batch "
                        f"{batch} prompt {prompt} gen {gen} (simulated in {result['seconds']:.1f} s)")
    for col in ("cores", "memory", "GB/s", "GB", "L2 MiB", "die mm^2", "$/device", "tokens/s",
                "perf/$ vs base"):
        table.add_column(col, justify="left" if col == "memory" else "right")
    for r in rows[:top]:
        table.add_row(str(r["cores"]), r["memory"], f"{r['memory_bandwidth_bytes_per_s'] / 1e9:,.0f}",
                      f"{r['memory_capacity_bytes'] / 1e9:,.0f}", f"{r['global_buffer_bytes'] / 2**20:g}",
                      f"{r['die_area_mm2']:,.0f}", f"{r['device_usd']:,.0f}",
                      f"{r['tokens_per_s']:,.1f}", f"{r['perf_per_usd_vs_base']:.2f}x")
    console.print(table)
    console.print(f"base {ref['system']}: {ref.get('tokens_per_s', float('nan')):,.1f} tokens/s, "
                  f"${ref['device_usd']:,.0f} per device (model estimate), "
                  f"${ref['system_usd']:,.0f} per system")
    misfits = [r for r in result["designs"] if not r.get("fits")]
    if misfits:
        console.print(f"{len(misfits)} designs cannot hold the model (not timed)")
