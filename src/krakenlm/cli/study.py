"""`krakenlm study ...` (end-to-end studies) and `krakenlm demo` (the main job)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import KrakenError, check_seed
from . import app
from ._console import print_report, stderr_console

study_app = typer.Typer(help="End-to-end studies that write reports with plots.", no_args_is_help=True)
app.add_typer(study_app, name="study")


def _parse_seeds(seeds: str) -> list[int]:
    try:
        values = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise KrakenError(f"--seeds must be comma-separated integers, got {seeds!r}") from None
    if not values:
        raise KrakenError("--seeds needs at least one seed")
    return values


def _parse_lrs(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise KrakenError(f"--lrs must be comma-separated numbers, got {text!r}") from None
    if not values or any(not 0 < v < 1 for v in values) or len(set(values)) < len(values):
        raise KrakenError(f"--lrs needs distinct learning rates between 0 and 1, got {text!r}")
    return values


def _parse_budgets(text: str) -> list[int]:
    try:
        values = [int(v.replace("_", "")) for v in text.split(",") if v.strip()]
    except ValueError:
        raise KrakenError(f"--budgets must be comma-separated token counts, got {text!r}") from None
    if not values or any(v < 1 for v in values) or len(set(values)) < len(values):
        raise KrakenError(f"--budgets needs distinct positive token counts, got {text!r}")
    return sorted(values)


@study_app.command("compare")
def compare_command(
    out: str = typer.Option(..., "--out", help="Directory for the runs and report.md."),
    presets: list[str] = typer.Option(..., "--preset", help="A model preset; repeat for several."),
    seeds: str = typer.Option("1", "--seeds", help="Comma-separated seeds, each run per preset."),
    max_steps: int = typer.Option(600, "--max-steps", help="Steps per run (same token budget for all)."),
    batch_size: int = typer.Option(16, "--batch-size"),
    seq_len: int = typer.Option(None, "--seq-len", help="Default: each model's context."),
    lr: float = typer.Option(1e-3, "--lr"),
    warmup_steps: int = typer.Option(60, "--warmup-steps"),
    data: str = typer.Option(None, "--data", help="Corpus (default: shakespeare)."),
    precision: str = typer.Option("auto", "--precision"),
    eval_interval: int = typer.Option(100, "--eval-interval"),
    threads: int = typer.Option(None, "--threads", help="CPU threads per run (default: cores / --jobs)."),
    jobs: int = typer.Option(1, "--jobs", help="Runs trained at once (separate processes); small models train faster as 2 one-core runs than as 1 two-core run."),
    lrs: str = typer.Option(None, "--lrs", help="Learning-rate sweep, comma-separated: each preset is trained at every rate with the first seed, then at its own best rate with the other seeds (--lr is then unused)."),
    baseline: str = typer.Option(None, "--baseline", help="The preset the others are compared with (default: gpt-tiny if compared, else the first --preset)."),
    tokenizer: str = typer.Option(None, "--tokenizer", help="gpt2 (default), bpe-4k or bpe-8k (a BPE trained on the corpus's training split)."),
    budgets: str = typer.Option(None, "--budgets", help="Token budgets per run, comma-separated (e.g. 204800,409600): the whole comparison once per budget, each run with its own schedule to its own end (--max-steps then only sets the warm-up fraction, --warmup-steps / --max-steps); needs --seq-len."),
) -> None:
    """Train presets at an equal token budget and compare validation perplexity: per-seed
    paired ratios and Welch ratios with 95 % intervals, the gap against tokens, optionally each
    preset at its own best learning rate chosen on a validation slice apart from the reported
    one, optionally at several budgets (report + plots)."""
    from ..studies.compare import compare_presets
    from ..training.trainer import TrainConfig
    from .train import out_dir

    out = out_dir(out)
    template = TrainConfig(out_dir=out, data=data, tokenizer=tokenizer, max_steps=max_steps,
                           batch_size=batch_size, seq_len=seq_len, peak_lr=lr,
                           warmup_steps=warmup_steps, precision=precision,
                           eval_interval=eval_interval, checkpoint_interval=eval_interval,
                           eval_batches=25, threads=threads)
    report = compare_presets(presets, _parse_seeds(seeds), template, out, baseline=baseline,
                             lrs=_parse_lrs(lrs) if lrs is not None else None, jobs=jobs,
                             budgets=_parse_budgets(budgets) if budgets is not None else None)
    stderr_console().print(f"report: {report}")
    print(report.read_text())


@study_app.command("ttft")
def ttft_command(
    out: Path = typer.Option(Path("runs/kraken-ttft"), "--out", help="Directory for report.md and plots."),
    system: list[str] = typer.Option(None, "--system", help="Hardware preset(s) or YAML (repeatable; default a100-80gb-x8; `all`: A100 40GB and 80GB, H100, H200, B200)."),
    batch: int = typer.Option(1, "--batch", help="Sequences per prefill."),
    software: str = typer.Option("trtllm", "--software", help="Serving software profile (`krakenlm sim software`)."),
    kraken_rule: str = typer.Option("engine", "--kraken-rule", help="engine (heads of 128/64 that fused attention runs) or head-count (the spec's rule: wide heads)."),
    with_sensitivity: bool = typer.Option(False, "--sensitivity", help="Also re-run the grid on every system under alternative assumptions (collective library, contention, software, head rule)."),
) -> None:
    """Simulated TTFT of Kraken vs the standard and parallel blocks on the paper's grid."""
    from ..studies.kraken_ttft import run_study

    command = ("krakenlm study ttft " + " ".join(f"--system {s}" for s in system or [])
               + f" --batch {batch} --software {software} --kraken-rule {kraken_rule}"
               + (" --sensitivity" if with_sensitivity else "") + f" --out {out}")
    err = stderr_console()
    report = run_study(out, system, batch, software, kraken_rule, with_sensitivity, command, err)
    err.print(f"report: {report.report}")
    print_report(report)


@app.command("demo")
def demo_command(
    out: str = typer.Option("runs/demo", "--out", help="Where the runs and report.md go."),
    max_steps: int = typer.Option(None, "--max-steps", show_default="600: about 6 minutes of training in all on 2 idle cores", help="Steps of 8 x 128 tokens per model."),
    seeds: str = typer.Option(None, "--seeds", show_default="1,2,3", help="Comma-separated seeds per model."),
    jobs: int = typer.Option(None, "--jobs", show_default="2", help="Trainings at once, one process (and core) each."),
) -> None:
    """The main job: gpt-mini8 vs kraken-mini8-2way on Shakespeare + the King James Bible with
    3 seeds, text samples, sharded generation and the simulated GPU TTFT study, in one report."""
    import dataclasses

    from ..studies.demo import DemoPlan, run_demo
    from .train import out_dir

    out = out_dir(out)
    changes = {}
    if max_steps is not None:
        if max_steps < 1:
            raise KrakenError(f"--max-steps must be >= 1, got {max_steps}")
        changes["max_steps"] = max_steps
    if seeds is not None:
        changes["seeds"] = tuple(_parse_seeds(seeds))
    if jobs is not None:
        if jobs < 1:
            raise KrakenError(f"--jobs must be >= 1, got {jobs}")
        changes["jobs"] = jobs
    report = run_demo(out, dataclasses.replace(DemoPlan(), **changes))
    print(report.read_text())
    stderr_console().print(f"[bold green]demo report:[/] {report}")


@study_app.command("design-space")
def design_space_command(
    out: Path = typer.Option(Path("runs/design-space"), "--out", help="Directory for report.md, CSVs and plots."),
    trials: int = typer.Option(300, "--trials", help="NSGA-II trials per objective."),
    seed: int = typer.Option(0, "--seed", help="Search seed."),
) -> None:
    """The hardware paper's design experiments re-run next to its conclusions (compute
    organisation, bandwidth, buffers, latency- and throughput-oriented designs vs the A100),
    a multi-objective search, and Kraken x interconnect co-design."""
    from ..studies.design_space import run_experiments, write_report

    if trials < 1:
        raise KrakenError(f"--trials must be at least 1, got {trials}")
    check_seed(seed, bits=32)  # optuna's sampler takes 0 .. 2**32 - 1
    out.mkdir(parents=True, exist_ok=True)  # a bad --out fails now, not after the search
    err = stderr_console()
    res = run_experiments(trials, seed, progress=lambda m: err.print(f"[dim]{m}...[/]"))
    report = write_report(res, out, command=f"krakenlm study design-space --trials {trials} "
                                            f"--seed {seed} --out {out}")
    err.print(f"report: {report}")
    from ..studies.design_space import _best
    for key in ("throughput", "latency"):
        best = _best(res[f"search_{key}"])
        print(f"{key}-oriented: best performance per $ {best['perf_per_usd_vs_base']:.2f}x the "
              f"A100 (template model)")


def _parse_rates(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise KrakenError(f"--rates must be comma-separated request rates, got {text!r}") from None
    return values


@study_app.command("serving")
def serving_command(
    out: Path = typer.Option(Path("runs/serving-study"), "--out", help="Directory for report.md, serving.png and serving.json."),
    model: str = typer.Option("gpt3-6.7b", "--model", help="Model preset (the TTFT study's GPT-3 shapes, or any preset such as llama2-70b)."),
    system: str = typer.Option("h100-80gb-x8", "--system", help="Hardware preset or YAML."),
    software: str = typer.Option("vllm", "--software", help="Engine: vllm, vllm-v0, trtllm or sglang."),
    tp: int = typer.Option(4, "--tp", help="Tensor-parallel degree of the one replica (= the Kraken degree)."),
    rates: str = typer.Option("4,8,16,24", "--rates", help="Request rates (per second) of the p99 TTFT curve."),
    seeds: str = typer.Option("0,1,2,3,4", "--seeds", help="Arrival seeds (intervals over them)."),
    requests: int = typer.Option(3000, "--requests", help="Requests per replay (a few hundred end before the queue settles: their capacities are upper bounds)."),
    slo_ttft_s: float = typer.Option(1.0, "--slo-ttft-s", help="p99 TTFT SLO of the capacity (seconds)."),
    slo_tpot_s: float = typer.Option(0.05, "--slo-tpot-s", help="p99 TPOT SLO of the capacity (seconds)."),
    trace: str = typer.Option(None, "--trace", help="Trace whose lengths are resampled (default ../shared/data/traces/azure2023_conv.csv)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Kraken vs GPT vs the parallel block under load: p99 TTFT against rate and capacity under
    SLOs, over arrival seeds. docs/serving.md."""
    from ..studies.serving_load import ServingPlan, run_serving_study

    plan = ServingPlan(model=model, system=system, software=software, tp=tp,
                       rates=_parse_rates(rates), seeds=tuple(_parse_seeds(seeds)),
                       requests=requests, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s,
                       **({"trace": trace} if trace else {}))
    command = (f"krakenlm study serving --model {model} --system {system} --software {software} "
               f"--tp {tp} --rates {rates} --seeds {seeds} --requests {requests} "
               f"--slo-ttft-s {slo_ttft_s:g} --slo-tpot-s {slo_tpot_s:g}"
               + (f" --trace {trace}" if trace else "") + f" --out {out}")
    err = stderr_console()
    study = run_serving_study(out, plan, command, progress=err.print)
    err.print(f"report: {study.report}")
    print_report(study, as_json)
