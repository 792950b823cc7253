"""`krakenlm sim ...`: the hardware simulator's commands."""

from __future__ import annotations

import json

import typer

from ..errors import KrakenError
from . import app
from ._console import stdout_console, table as _table

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
    table = _table(title="krakenlm hardware presets (per device)")
    for col in ("name", "device", "n", "topology", "16-bit TFLOP/s", "memory GiB", "mem TB/s",
                "links x GB/s/dir"):
        table.add_column(col, justify="left" if col in ("name", "device", "topology") else "right")
    for r in rows:
        table.add_row(r["name"], r["device"], str(r["devices"]), r["topology"],
                      f"{r['fp16_flops_per_s'] / 1e12:,.0f}", f"{r['memory_bytes'] / 2**30:,.0f}",
                      f"{r['memory_bandwidth_bytes_per_s'] / 1e12:.2f}",
                      f"{r['links_per_device']} x {r['link_bandwidth_bytes_per_s'] / 1e9:g}")
    stdout_console().print(table)


def _device_systems(pairs: list[str] | None) -> dict[str, str] | None:
    from ..simulator.validation.template import DEVICE_SYSTEMS

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
    source: str = typer.Option("llmcompass", "--source", help="aiconfigurator (NVIDIA's measured kernel tables; needs `pip install 'krakenlm[calibrate]'`), vidur (streaming kernels per kind from real Llama-2-70B layers, merged into a GPU file) or llmcompass (a directory of measurements, --measured)."),
    system: str = typer.Option(None, "--system", help="aiconfigurator: the system preset to calibrate (e.g. h100-80gb-x8)."),
    framework: list[str] = typer.Option(None, "--framework", help="aiconfigurator: trtllm, vllm or sglang (repeatable; default: every framework measured on the system)."),
    tables: str = typer.Option(None, "--tables", help="aiconfigurator: a directory in the layout of aiconfigurator_core/systems (your own collected tables) instead of the installed package."),
    measured: str = typer.Option(None, "--measured", help="llmcompass: directory of measurements (the LLMCompass set; docs/simulator.md)."),
    output: str = typer.Option(None, "--output", "-o", help="Where to write the constants (default: ./calibration-<DEVICE>.yaml, or ./calibration.yaml for llmcompass)."),
    install: bool = typer.Option(False, "--install", help="Write into the package's shipped calibration files instead (what the presets use by default)."),
    device_system: list[str] = typer.Option(None, "--device-system", help=_DEVICE_SYSTEM_HELP),
    family: list[str] = typer.Option(None, "--family", help="aiconfigurator: refit only this family (repeatable: gemm, elementwise, context_attention, generation_attention, nccl, custom_all_reduce) and keep every other entry of the existing file."),
    variant: list[str] = typer.Option(None, "--variant", help="aiconfigurator, with --family: refit only this variant of it (repeatable: bf16, fp8, ...; the dtype of a GEMM or attention entry) and keep the others."),
) -> None:
    """Fit the simulator's constants: per GPU and framework from measured kernel tables
    (aiconfigurator), or the template constants from a measurement directory (llmcompass).
    Constants are fitted on one half of the shapes and scored on the other half."""
    if family and source != "aiconfigurator":
        raise KrakenError("--family belongs to --source aiconfigurator")
    if variant and not family:
        raise KrakenError("--variant narrows a --family refit; give the family too")
    if source == "aiconfigurator":
        _calibrate_aiconfigurator(system, framework, tables, output, install, measured, family,
                                  variant)
    elif source == "vidur":
        _calibrate_vidur(system, output, install)
    elif source == "llmcompass":
        _calibrate_llmcompass(measured, output, install, device_system, system)
    else:
        raise KrakenError(f"--source {source!r}: use aiconfigurator, vidur or llmcompass")


def _calibration_target(output: str | None, install: bool, default: "Path", shipped: "Path",
                        tables: str | None = None) -> "Path":
    """Where `sim calibrate` writes. The package's shipped constants are what every user of the
    presets gets, so they are replaced only on purpose (--install), never by an --output that
    happens to point at them, and never with fits of private tables."""
    from pathlib import Path

    from ._console import stderr_console

    if install and output:
        raise KrakenError("give either --output or --install, not both")
    if install:
        if tables:
            raise KrakenError("--install replaces the shipped constants, which come from the "
                              "published tables; write fits of --tables with --output FILE and "
                              "use them with --gpu-calibration FILE")
        stderr_console().print(f"replacing the shipped constants in {shipped} (--install; "
                               "reinstall krakenlm to restore them)")
        return shipped
    path = Path(output) if output else default
    if path.resolve() == shipped.resolve():
        raise KrakenError(f"--output {output} is the package's shipped calibration; pass "
                          "--install to replace it on purpose, or write elsewhere")
    return path


def _calibrate_vidur(system: str | None, output: str | None, install: bool) -> None:
    """Streaming kernels per kind (norm, activation, rotary, residual) from Vidur's layers,
    merged into the device's GPU calibration file."""
    from pathlib import Path

    from ..simulator.measurements.kernel_tables import device_key
    from ..simulator.constants import gpu_kernels as store
    from ..simulator.calibration.layers import calibrate_layers

    if not system:
        raise KrakenError("--source vidur needs --system (a100-80gb-x8 or h100-80gb-x8: the GPUs "
                          "Vidur's layer profiles were measured on)")
    key = device_key(system)
    path = _calibration_target(output, install, Path(f"calibration-{key}.yaml"),
                               store.shipped_dir() / f"{key}.yaml")
    if not path.is_file():
        raise KrakenError(f"{path} does not exist: calibrate the kernel tables first "
                          f"(krakenlm sim calibrate --source aiconfigurator --system {system})")
    cal = store.load_file(path)
    fits = calibrate_layers(system, cal)
    if not fits:
        raise KrakenError(f"the layer measurements have no streaming-kernel rows for {system}")
    for kind, r in fits:
        print(f"  vllm    elementwise ({kind:10s}) n={r.n_fit:>4}  fit {r.mape_fit:5.1f} %  "
              f"held-out {r.mape_held_out:5.1f} %")
    store.save(cal, path)
    print(f"wrote {path}")


def _calibrate_aiconfigurator(system: str | None, frameworks: list[str] | None, tables: str | None,
                              output: str | None, install: bool, measured: str | None,
                              families: list[str] | None = None,
                              variants: list[str] | None = None) -> None:
    from pathlib import Path

    from ..simulator.calibration.gpu import calibrate as fit_tables
    from ..simulator.measurements.kernel_tables import check as check_tables, device_key
    from ..simulator.constants import gpu_kernels as store
    from ._console import stderr_console

    if measured:
        raise KrakenError("--measured belongs to --source llmcompass; aiconfigurator reads the "
                          "installed tables (or --tables DIR)")
    if not system:
        raise KrakenError("--source aiconfigurator needs --system, e.g. --system h100-80gb-x8")
    check_tables(system, frameworks or None, tables)
    key = device_key(system)
    path = _calibration_target(output, install, Path(f"calibration-{key}.yaml"),
                               store.shipped_dir() / f"{key}.yaml", tables)
    base = store.load_file(path) if path.is_file() else None
    if families and base is None:
        raise KrakenError(f"--family refits part of an existing calibration, and {path} does not "
                          "exist: calibrate every family first (without --family)")
    if base is not None and base.device_key != key:
        raise KrakenError(f"{path} holds constants of {base.device_key}, not {key}; choose another "
                          "--output")
    err = stderr_console()
    command = "krakenlm sim calibrate --source aiconfigurator --system " + system + "".join(
        f" --framework {f}" for f in frameworks or []) + "".join(
        f" --family {f}" for f in families or []) + "".join(
        f" --variant {v}" for v in variants or [])

    banner = [f"calibrating {system} ({key}) from aiconfigurator tables; every fit on one half "
              "of the shapes, scored on the other"]

    def progress(job, result, problem):  # job: a gpu.calibrate.Dataset
        if banner:  # printed with the first fit, so that bad input gets its error line alone
            err.print(banner.pop())
        if result is None:
            err.print(f"  skipped {job.framework} {job.family} {job.variant}: {problem}")
        else:
            err.print(f"  {job.framework:7s} {job.family:22s} {job.variant:5s} n={result.n_fit:>6,}"
                      f"  fit {result.mape_fit:5.1f} %  held-out {result.mape_held_out:5.1f} %")

    with err.status("fitting..."):
        cal = fit_tables(system, frameworks or None, tables, command, base, progress,
                             families or None, variants or None)
    store.save(cal, path)
    print(f"wrote {path} ({sum(len(v) for info in cal.frameworks.values() for v in info['families'].values())} fitted families)")


def _calibrate_llmcompass(measured: str | None, output: str | None, install: bool,
                          device_system: list[str] | None, system: str | None) -> None:
    from importlib import resources
    from pathlib import Path

    from ..hardware import load_system
    from ..simulator.constants.template import CALIBRATION_FILE
    from ..simulator.calibration.template import fit_calibration, save_calibration
    from ..simulator.measurements.llmcompass import load_measured
    from ..simulator.validation.template import DEVICE_SYSTEMS

    if not measured:
        raise KrakenError("--source llmcompass needs --measured DIR, the LLMCompass measurement "
                          "set (docs/simulator.md says how to get it)")
    if system:
        raise KrakenError("--system belongs to --source aiconfigurator; llmcompass maps devices "
                          "with --device-system DEVICE=SYSTEM")
    data = load_measured(measured)
    names = _device_systems(device_system) or DEVICE_SYSTEMS
    systems = {d: load_system(s) for d, s in names.items()
               if any(p.device == d for p in data.points)}
    command = "krakenlm sim calibrate --source llmcompass --measured " + measured
    path = str(_calibration_target(
        output, install, Path("calibration.yaml"),
        Path(str(resources.files("krakenlm.simulator.constants").joinpath(CALIBRATION_FILE)))))
    calibration = fit_calibration(data, systems, command=command)
    save_calibration(calibration, path)
    print(f"wrote {path} ({sum(len(v) for v in calibration.devices.values())} operator groups)")


@sim_app.command("validate")
def validate_cmd(
    level: str = typer.Option("all", "--level", help="operators (kernel tables, fit vs held-out halves), layers (operators of real model layers), models (public end-to-end measurements), or all."),
    measured: str = typer.Option(None, "--measured", help="Also score the LLMCompass measurement set in this directory (A100/MI210 operators and the GPT-3 175B layer)."),
    out: str = typer.Option(None, "--out", help="Write every point as CSV and a predicted-vs-measured log-log plot per level into this directory."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    csv_path: str = typer.Option(None, "--csv", help="LLMCompass set: save every point as CSV."),
    plot_path: str = typer.Option(None, "--plot", help="LLMCompass set: save its predicted-vs-measured plot (PNG)."),
    calibration_path: str = typer.Option(None, "--calibration", help="Template constants file (default: the package's)."),
    tables: str = typer.Option(None, "--tables", help="Operators: kernel tables in the layout of aiconfigurator_core/systems instead of the installed package."),
    device_system: list[str] = typer.Option(None, "--device-system", help=_DEVICE_SYSTEM_HELP),
) -> None:
    """Compare the simulator with measurements it was not fitted on, at three levels:
    operators (per family, device and framework, fit half vs held-out half), layers (the
    operators of real Llama-2-70B layers on A100/H100), and whole models (published serving
    benchmarks: TTFT, TPOT, end-to-end). Errors are mean absolute percentage errors."""
    from pathlib import Path

    from ._console import stderr_console, stdout_console

    levels = {"all": ("operators", "layers", "models"), "operators": ("operators",),
              "layers": ("layers",), "models": ("models",)}
    if level not in levels:
        raise KrakenError(f"--level {level!r}: use operators, layers, models or all")
    wanted = levels[level]
    result: dict = {"skipped": []}
    outdir = Path(out) if out else None
    err = stderr_console()
    console = stdout_console()

    if measured:
        from ..simulator.constants.template import load_calibration
        from ..simulator.validation.template import validate, write_csv, write_plot

        report = validate(measured, load_calibration(calibration_path),
                          _device_systems(device_system))
        if csv_path:
            write_csv(report, csv_path)
        if plot_path:
            write_plot(report, plot_path)
        if outdir:
            outdir.mkdir(parents=True, exist_ok=True)
            write_csv(report, outdir / "llmcompass.csv")
            write_plot(report, outdir / "llmcompass.png")
        result["llmcompass"] = report.to_json()
        if not as_json:
            _print_llmcompass(console, report)
    elif csv_path or plot_path:
        raise KrakenError("--csv and --plot belong to the LLMCompass set: give --measured DIR "
                          "(or use --out DIR for every level)")

    if "operators" in wanted:
        from ..simulator.validation.kernels import validate_kernels

        with err.status("operators: scoring the kernel tables..."):
            kr = validate_kernels(root=tables)
        result["operators"] = kr.to_json()
        result["skipped"] += kr.skipped
        if not as_json and kr.groups:
            t = _table(title="Operators: kernel tables (MAPE %; constants fitted on one half of the "
                            "shapes)")
            for col in ("device", "framework", "family", "variant", "n", "fit half",
                        "held-out", "median signed"):
                t.add_column(col, justify="left" if col in ("device", "framework", "family",
                                                            "variant") else "right")
            for g in kr.groups:
                t.add_row(g["device"], g["framework"], g["family"], g["variant"], f"{g['n']:,}",
                          f"{g['mape_fit_pct']:.1f}", f"{g['mape_held_out_pct']:.1f}",
                          f"{g['median_signed_held_out_pct']:+.1f}")
            console.print(t)
        if outdir and kr.points:
            from ..simulator.validation.plots import scatter
            _write_rows(outdir / "operators.csv", kr.points)
            scatter(kr.points, outdir / "operators.png",
                    "Operators: kernel tables (hollow: fit half)", "family", "device",
                    hollow=lambda p: p["half"] == "fit")

    if "layers" in wanted:
        from ..simulator.validation.layers import validate_layers

        lr = validate_layers()
        result["layers"] = lr.to_json()
        if not as_json:
            t = _table(title="Layers: operators of Llama-2-70B layers (Vidur, MLSys 2024; MAPE %)")
            for col in ("system", "op", "n", "MAPE", "mean signed"):
                t.add_column(col, justify="left" if col in ("system", "op") else "right")
            for g in lr.by(("system", "op")) + lr.by(("system", "op"), lr.gemm_sums):
                t.add_row(g["system"], g["op"], str(g["n"]), f"{g['mape_pct']:.1f}",
                          f"{g['mean_signed_pct']:+.1f}")
            console.print(t)
        if outdir:
            from ..simulator.validation.plots import scatter
            _write_rows(outdir / "layers.csv", lr.rows + lr.gemm_sums)
            scatter(lr.rows, outdir / "layers.png", "Layers: Llama-2-70B operators (Vidur)",
                    "op", "system")

    if "models" in wanted:
        from ..simulator.validation.models import validate_models

        with err.status("models: simulating the published setups..."):
            mr = validate_models()
        result["models"] = mr.to_json()
        result["skipped"] += mr.skipped
        if not as_json:
            t = _table(title="Models: published end-to-end measurements (MAPE %; rows flagged "
                            "anomalous by the data excluded)")
            for col in ("source", "system", "metric", "n", "MAPE", "fit half", "held-out",
                        "mean signed", "too fast"):
                t.add_column(col, justify="left" if col in ("source", "system", "metric") else "right")

            def half(g: dict) -> str:
                return f"{g['mape_pct']:.1f} ({g['n']})" if g["n"] else "-"

            keys = ("source", "system", "metric")
            by_half = {h: {tuple(g[k] for k in keys): g for g in mr.groups(keys, h)}
                       for h in ("fit", "held_out")}
            empty = {"n": 0}
            for g in mr.groups(keys):
                k = tuple(g[c] for c in keys)
                t.add_row(g["source"], g["system"], g["metric"], str(g["n"]),
                          f"{g['mape_pct']:.1f}", half(by_half["fit"].get(k, empty)),
                          half(by_half["held_out"].get(k, empty)),
                          f"{g['mean_signed_pct']:+.1f}", f"{g['too_fast']}/{g['n']}")
            o = mr.overall()
            t.add_row("all", "", "", str(o["n"]), f"{o['mape_pct']:.1f}",
                      half(mr.overall("fit")), half(mr.overall("held_out")),
                      f"{o['mean_signed_pct']:+.1f}", f"{o['too_fast']}/{o['n']}", style="bold")
            console.print(t)
            anomalous = sum(1 for r in mr.rows if r["anomalous"])
            if anomalous:
                console.print(f"{anomalous} rows flagged anomalous in the data were not scored")
        if outdir:
            from ..simulator.validation.plots import scatter
            _write_rows(outdir / "models.csv", mr.rows)
            scatter([r for r in mr.rows if not r["anomalous"]], outdir / "models.png",
                    "Whole models: published TTFT / TPOT / end-to-end", "source", "metric")

    if as_json:
        print(json.dumps(result, indent=2, default=float))
    else:
        for note in result["skipped"]:
            console.print(f"skipped: {note}")
        if outdir:
            console.print(f"CSV and plots in {outdir}/")


def _write_rows(path, rows: list[dict]) -> None:
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    if not rows:
        return
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def _print_llmcompass(console, report) -> None:
    table = _table(title="LLMCompass set: operator error (MAPE %, predicted vs measured)")
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
        lt = _table(title=f"GPT-3 175B layer on {device} (TP 4, batch 8; never fitted on)")
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
    kraken_rule: str = typer.Option("engine", "--kraken-rule", help="With --arch kraken: engine (heads of 128 or 64 that fused attention runs) or head-count (the spec's rule: total heads kept, wide heads)."),
    mode: str = typer.Option("simulate", "--mode", help="simulate (kernel models fitted on measured kernels where the GPU has them, template tile models otherwise), tile (template tile models only) or roofline."),
    software: str = typer.Option(None, "--software", help="Serving software profile: trtllm (default), vllm, vllm-v0, sglang, eager, or a YAML file (`krakenlm sim software` lists them)."),
    dtype: str = typer.Option("fp16", "--dtype", help="Weights and activations: fp16, bf16, fp8, int8, fp32."),
    attention: str = typer.Option("fused", "--attention", help="fused (FlashAttention) or unfused (eager kernels)."),
    skip_memory_check: bool = typer.Option(False, "--skip-memory-check", help="Time a model that does not fit instead of failing (reported as not fitting)."),
    beyond_context: bool = typer.Option(False, "--beyond-context", help="Time prompt + generation longer than the model's context, as if its context were extended (default: an error)."),
    calibration_path: str = typer.Option(None, "--calibration", help="Template constants file (default: the package's)."),
    gpu_calibration_path: str = typer.Option(None, "--gpu-calibration", help="GPU kernel constants file from `sim calibrate --source aiconfigurator` (default: the package's file for the device)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Simulate inference: per-operator breakdown, TTFT, mean TPOT, end-to-end time and memory
    per device."""
    from ..hardware import load_system
    from ..simulator.constants.template import load_calibration
    from ..simulator.run import arch_variant, resolve_model, simulate

    name, original = resolve_model(model)
    config = arch_variant(original, arch, tp, kraken_rule)
    label = name if arch in (None, original.arch) else f"{name} as {arch}"
    result = simulate(config, load_system(system), tp, batch, prompt, gen, mode, dtype=dtype,
                      attention=attention, calibration=load_calibration(calibration_path),
                      gpu_calibration=_gpu_calibration(gpu_calibration_path),
                      software=software, check_memory=not skip_memory_check,
                      check_context=not beyond_context, model_name=label)
    if as_json:
        print(json.dumps(result.to_json(), indent=2))
        return
    console = stdout_console()
    table = _table(title=f"{result.model} ({config.arch}) on {result.system}, TP {tp}, batch "
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
    cats = _table(title="Wall time by category (adds up to the total; communication overlapped "
                       "with compute is not counted twice)")
    for col in ("category", "prefill ms", "decode ms"):
        cats.add_column(col, justify="left" if col == "category" else "right")
    for cat in dict.fromkeys(list(result.prefill.categories) + list(result.decode.categories)):
        cats.add_row(cat, f"{result.prefill.categories.get(cat, 0.0) * 1e3:,.3f}",
                     f"{result.decode.categories.get(cat, 0.0) * 1e3:,.3f}")
    console.print(cats)
    m = result.memory
    console.print(f"software {result.software}; attention {result.attention_path}")
    for family, how in result.kernel_sources.items():
        console.print(f"  {family}: {how}")
    console.print(f"TTFT {result.ttft_s * 1e3:,.2f} ms | mean TPOT {result.tpot_s * 1e3:,.3f} ms | "
                  f"end-to-end {result.e2e_s:,.3f} s")
    console.print(f"memory per device: weights {m.weights_bytes / 1e9:.2f} GB + KV cache "
                  f"{m.kv_cache_bytes / 1e9:.2f} GB + activations {m.activation_bytes / 1e9:.2f} GB"
                  f" + reserve {m.reserve_bytes / 1e9:.2f} GB = {m.total_bytes / 1e9:.2f} GB of "
                  f"{m.capacity_bytes / 1e9:.2f} GB" + ("" if m.fits else "  [DOES NOT FIT]"))


def _gpu_calibration(path: str | None):
    if path is None:
        return None
    from ..simulator.constants.gpu_kernels import load_file
    return load_file(path)


@sim_app.command("fit-software")
def fit_software_cmd(
    software: str = typer.Option(..., "--software", help="The profile whose host constants to fit (e.g. vllm-eager, trtllm)."),
    system: list[str] = typer.Option(None, "--system", help="System(s) to fit (repeatable; default: every system with fit rows for this software)."),
    install: bool = typer.Option(False, "--install", help="Write the fitted constants into the package's profile (default: only print them)."),
    output: str = typer.Option(None, "--output", help="Write a copy of the profile with the fitted constants to this path."),
    mark_split: bool = typer.Option(False, "--mark-split", help="First (re)mark the end-to-end set's fit / held_out halves by the CRC-32 of each setup."),
) -> None:
    """Fit a software profile's host constants (time per kernel outside CUDA graphs, per-step
    work) on the fit half of the public end-to-end set; score the held-out half."""
    import shutil
    from importlib import resources
    from pathlib import Path

    from ..simulator.calibration.software import fit_host, mark_split as mark, write_host
    from ..simulator.constants.software import software_names
    from ..simulator.measurements.models import load_rows, row_software

    if software not in software_names():
        raise KrakenError(f"unknown software {software!r}; profiles: {', '.join(software_names())}")
    if install and output:
        raise KrakenError("give either --install or --output, not both")
    if mark_split:
        print(f"marked {mark()} rows as fit (the rest held out)")
    rows = load_rows()
    systems = system or sorted({r.system for r in rows if row_software(r) == software
                                and r.split == "fit"})
    if not systems:
        raise KrakenError(f"no rows of the end-to-end set are fit rows for software {software!r}; "
                          "run with --mark-split first")
    src = Path(str(resources.files("krakenlm.simulator.constants.software_profiles").joinpath(f"{software}.yaml")))
    target = src if install else (Path(output) if output else None)
    if target is not None and target != src:
        shutil.copyfile(src, target)
    command = f"krakenlm sim fit-software --software {software}" + "".join(f" --system {s}" for s in systems)
    console = stdout_console()
    t = _table(title=f"Host constants of {software}, fitted on the fit half (MAPE %)")
    for col in ("system", "constants", "n fit", "fit", "n held-out", "held-out", "held-out before"):
        t.add_column(col)
    for name in systems:
        fit = fit_host(software, name, rows)
        t.add_row(name, ", ".join(f"{k} {v * 1e6:,.1f} us" if k.endswith("_s") else f"{k} {v:.3f}"
                                  for k, v in fit.host.items()),
                  str(fit.n_fit), f"{fit.mape_fit:.1f}", str(fit.n_held_out),
                  f"{fit.mape_held_out:.1f}", f"{fit.mape_held_out_before:.1f}")
        if target is not None:
            write_host(target, fit, command)
    console.print(t)
    if target is not None:
        print(f"wrote {target}")


@sim_app.command("software")
def software_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the serving-software profiles (kernels, CUDA graphs, host overheads, all-reduce)."""
    import dataclasses

    from ..simulator.constants.software import load_software, software_names

    profiles = [load_software(n) for n in software_names()]
    if as_json:
        print(json.dumps([dataclasses.asdict(p) for p in profiles], indent=2))
        return
    table = _table(title="krakenlm serving-software profiles")
    for col in ("name", "kernels", "CUDA graphs", "host us/kernel", "step ms (prefill/decode)",
                "all-reduce", "attention (max head dim)", "host fitted for"):
        table.add_column(col)
    for p in profiles:
        graphs = "+".join(k for k, v in (("prefill", p.graphs.prefill), ("decode", p.graphs.decode)) if v) or "none"
        ar = p.collectives.all_reduce + (f" <= {p.collectives.custom_max_bytes / 2**20:g} MiB"
                                         if p.collectives.custom_max_bytes else "")
        table.add_row(p.name, p.kernels, graphs, f"{p.host.per_kernel_s * 1e6:g}",
                      f"{p.host.prefill_step_s * 1e3:g} / {p.host.decode_step_s * 1e3:g}", ar,
                      f"{p.attention.kernel} ({p.attention.max_head_dim})",
                      ", ".join(sorted(p.host_systems)) or "-")
    stdout_console().print(table)


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
    console = stdout_console()
    table = _table(title=f"{s.device.name}: die area per block at {s.device.process_node_nm:g} nm")
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
    memories: str = typer.Option("HBM2e-5,HBM3-5,DDR5-16,LPDDR5-16", "--memories", help="Memory configurations to try (see krakenlm.design.sweep.MEMORIES)."),
    global_buffers: str = typer.Option("10,20,40,80,160", "--global-buffers", help="Global buffer sizes in MiB, comma-separated."),
    top: int = typer.Option(15, "--top", help="Rows to print (best performance per $ first)."),
    as_json: bool = typer.Option(False, "--json", help="Print every design as JSON."),
) -> None:
    """Design-space sweep (cores x memory technology x global buffer): throughput, cost and
    performance per $ against the base system."""
    from ..hardware.area import RETICLE_LIMIT_MM2
    from ..design.sweep import MEMORIES, Workload, sweep

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
    console = stdout_console()
    rows = sorted((r for r in result["designs"] if "perf_per_usd_vs_base" in r),
                  key=lambda r: -r["perf_per_usd_vs_base"])
    table = _table(title=f"{result['configurations']} designs from {base}, {model} TP {tp} batch "
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
    over = [r for r in result["designs"] if not r["feasible"] and "fits" not in r]
    if over:
        console.print(f"{len(over)} designs have a die beyond the reticle limit "
                      f"({RETICLE_LIMIT_MM2:g} mm^2: not manufacturable as one die; not timed or "
                      f"ranked), e.g. {over[0]['cores']} cores: {over[0]['die_area_mm2']:,.0f} mm^2")
    misfits = [r for r in result["designs"] if r.get("fits") is False]
    if misfits:
        console.print(f"{len(misfits)} designs cannot hold the model (not timed)")


from . import sim_design as _sim_design  # noqa: E402,F401  (registers `sim knobs/explore/search`)
from . import sim_serve as _sim_serve  # noqa: E402,F401  (registers `sim serve`)
