"""`krakenlm sim ...`: the hardware simulator's commands. Each parses its options, calls one
function that returns a report and prints it (krakenlm.console); `sim knobs/explore/search`
are in cli/sim_design.py.

No `from __future__ import annotations` here: typer reads the invoked command's annotations,
and as strings it compiles each one (typing.get_type_hints), about 6 M instructions of a cold
`sim run`; evaluated when the module runs, they are names typer reads as they are."""

from pathlib import Path

import typer

from ..errors import KrakenError
from . import app, imported_for_good
from ._console import print_report, stderr_console

sim_app = typer.Typer(help="Hardware simulator: predict LLM inference latency, memory and cost.",
                      no_args_is_help=True)
app.add_typer(sim_app, name="sim")

_DEVICE_SYSTEM_HELP = ("Which system a device name in the file names ran on, DEVICE=SYSTEM "
                       "(repeatable; defaults: A100=a100-80gb-x4, MI210=mi210-x4).")


@sim_app.command("systems")
def systems(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the hardware presets (devices, topology, peak rates, memory)."""
    from ..hardware.report import presets_report

    print_report(presets_report(), as_json)


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
    from ..simulator.calibration.report import calibrate as run_calibration

    print_report(run_calibration(source, system=system, frameworks=framework, tables=tables,
                                 measured=measured, output=output, install=install,
                                 device_systems=device_system, families=family,
                                 variants=variant, console=stderr_console()))


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
    models_csv: str = typer.Option(None, "--models-csv", help="Models: score this whole-model measurement file (the columns of the shipped measurements/data/model_measurements.csv, values in ms) instead of the shipped one; with --loso a new source is scored before anything is fitted on it."),
    loso: bool = typer.Option(False, "--loso", help="Models: also score each public source with the whole-model constants refitted without it (leave-one-source-out), per source, TP, batch band, device and phase, and the coverage of the 80 % intervals on unseen sources."),
) -> None:
    """Compare the simulator with measurements it was not fitted on, at three levels:
    operators (per family, device and framework, fit half vs held-out half), layers (the
    operators of real Llama-2-70B layers on A100/H100), and whole models (published serving
    benchmarks: TTFT, TPOT, end-to-end). Errors are mean absolute percentage errors."""
    from ..simulator.measurements.llmcompass import device_systems
    from ..simulator.validation.report import validate

    given = [flag for flag, value in (("--csv", csv_path), ("--plot", plot_path),
                                      ("--calibration", calibration_path),
                                      ("--device-system", device_system)) if value]
    if given and not measured:
        raise KrakenError(f"{', '.join(given)} belong to the LLMCompass set: give --measured DIR "
                          "(or use --out DIR for every level)")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)  # a bad --out fails now, not after the work
    report = validate(level, measured, calibration_path, tables, device_systems(device_system),
                      console=stderr_console(), models_csv=models_csv, loso=loso)
    if loso:
        from ..simulator.calibration.loso import loso_report

        report.models_loso = loso_report(report.model_rows, console=stderr_console())
    if measured:
        report.write_llmcompass(csv_path, plot_path)
    if out:
        report.write(out)
    print_report(report, as_json, json_default=float)


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
    cuda_graph_max: int = typer.Option(None, "--cuda-graph-max", help="The largest CUDA graph the engine captures: vLLM V1's --max-cudagraph-capture-size (tokens a step; default 512), SGLang's --cuda-graph-max-bs (decode batch; default 256 or 512 by GPU memory and TP); a larger step runs without a graph. 0: no CUDA graphs, every kernel issued from the host (vLLM --enforce-eager, SGLang --disable-cuda-graph; any engine)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Simulate inference: per-operator breakdown, TTFT, mean TPOT, end-to-end time and memory
    per device."""
    from ..simulator.report import run_report

    imported_for_good()
    print_report(run_report(system, model, tp, batch, prompt, gen, arch=arch,
                            kraken_rule=kraken_rule, mode=mode, software=software, dtype=dtype,
                            attention=attention, check_memory=not skip_memory_check,
                            check_context=not beyond_context, calibration_path=calibration_path,
                            gpu_calibration_path=gpu_calibration_path,
                            cuda_graph_max=cuda_graph_max), as_json)


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
    from ..simulator.calibration.report import fit_software

    print_report(fit_software(software, system, install, output, mark_split))


@sim_app.command("software")
def software_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the serving-software profiles (kernels, CUDA graphs, host overheads, all-reduce)."""
    from ..simulator.report import software_report

    print_report(software_report(), as_json)


@sim_app.command("cost")
def cost(
    system: str = typer.Option(..., "--system", help="Hardware preset or YAML file."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Die area per block, yield, and $ per device and per system (public-estimate prices;
    for relative comparisons)."""
    from ..hardware.report import cost_report

    print_report(cost_report(system), as_json)


@sim_app.command("sweep")
def sweep_cmd(
    base: str = typer.Option("a100-80gb-x8", "--base", help="System whose device is varied (the reference)."),
    model: str = typer.Option("gpt3-175b", "--model", help="Model preset of the workload."),
    tp: int = typer.Option(8, "--tp", help="Tensor-parallel degree of the workload."),
    batch: int = typer.Option(8, "--batch", help="Batch of the workload."),
    prompt: int = typer.Option(1024, "--prompt", help="Prompt tokens of the workload."),
    gen: int = typer.Option(128, "--gen", help="Generated tokens of the workload."),
    cores: str = typer.Option("32,64,96,108,128", "--cores", help="Core counts to try, comma-separated."),
    memories: str = typer.Option("HBM2e-5,HBM3-5,DDR5-16,LPDDR5-16", "--memories", help="Memory configurations to try, TECHNOLOGY-UNITS (HBM stacks or 64-bit DRAM channels; technologies: krakenlm.design.knobs.MEMORY_TECHNOLOGIES)."),
    global_buffers: str = typer.Option("10,20,40,80,160", "--global-buffers", help="Global buffer sizes in MiB, comma-separated."),
    top: int = typer.Option(15, "--top", help="Rows to print (best performance per $ first)."),
    as_json: bool = typer.Option(False, "--json", help="Print every design as JSON."),
) -> None:
    """Design-space sweep (cores x memory technology x global buffer): throughput, cost and
    performance per $ against the base system."""
    from ..design.sweep import Workload, sweep

    def numbers(text: str, kind=int) -> tuple:
        try:
            return tuple(kind(v) for v in text.split(",") if v.strip())
        except ValueError:
            raise KrakenError(f"expected comma-separated numbers, got {text!r}") from None

    mems = tuple(m.strip() for m in memories.split(",") if m.strip())
    print_report(sweep(base, Workload(model, tp, batch, prompt, gen), numbers(cores), mems,
                       numbers(global_buffers, float), top=top), as_json)
