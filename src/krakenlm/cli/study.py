"""`krakenlm study ...` (end-to-end studies) and `krakenlm demo` (the main job)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import KrakenError
from . import app
from ..console import stderr_console

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
    from ..models import get_preset
    from ..studies.compare import RunSpec, run_budgets, run_comparison
    from ..training.trainer import TrainConfig
    from .train import out_dir

    out = out_dir(out)

    for name in presets:
        get_preset(name)  # fail before any training on a typo
    if len(set(presets)) < len(presets):
        raise KrakenError(f"--preset names a model twice ({', '.join(presets)}); give each once")
    if baseline is not None and baseline not in presets:
        raise KrakenError(f"--baseline {baseline} is not one of the --preset models "
                          f"({', '.join(presets)})")
    if tokenizer is not None:
        from ..data.vocab import check_tokenizer_name
        check_tokenizer_name(tokenizer)
    sweep = _parse_lrs(lrs) if lrs is not None else None
    if jobs < 1:
        raise KrakenError(f"--jobs must be >= 1, got {jobs}")
    specs = [RunSpec(p, s) for s in _parse_seeds(seeds) for p in presets]
    template = TrainConfig(out_dir=out, data=data, tokenizer=tokenizer, max_steps=max_steps,
                           batch_size=batch_size,
                           seq_len=seq_len, peak_lr=lr, warmup_steps=warmup_steps,
                           precision=precision, eval_interval=eval_interval,
                           checkpoint_interval=eval_interval, eval_batches=25, threads=threads)
    for name in presets:
        template.check(get_preset(name))  # sizes and rates before any training
    title = "Validation loss at equal token budget"
    if budgets is not None:
        report = run_budgets(specs, template, out, _parse_budgets(budgets), title=title,
                             baseline=baseline, lrs=sweep, jobs=jobs)
    else:
        report = run_comparison(specs, template, out, title=title, baseline=baseline, lrs=sweep,
                                jobs=jobs)
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
    from ..simulator.run import KRAKEN_RULES
    from ..studies.kraken_ttft import SYSTEMS, geomean_reduction, run_grid, sensitivity, write_report

    if batch < 1:
        raise KrakenError(f"--batch must be at least 1, got {batch}")
    if kraken_rule not in KRAKEN_RULES:
        raise KrakenError(f"--kraken-rule {kraken_rule!r}: use one of {', '.join(KRAKEN_RULES)}")
    systems = list(SYSTEMS) if system == ["all"] else (system or ["a100-80gb-x8"])
    err = stderr_console()
    rows = []
    for name in systems:
        with err.status(f"simulating the grid on {name}..."):
            rows += run_grid(name, batch, software=software, kraken_rule=kraken_rule)
    sens = None
    if with_sensitivity:
        sens = {}
        for name in systems:
            with err.status(f"sensitivity on {name}..."):
                sens[name] = sensitivity(name, batch, software)
    command = ("krakenlm study ttft " + " ".join(f"--system {s}" for s in system or [])
               + f" --batch {batch} --software {software} --kraken-rule {kraken_rule}"
               + (" --sensitivity" if with_sensitivity else "") + f" --out {out}")
    report = write_report(rows, out, system=systems[0], batch=batch, software=software,
                          kraken_rule=kraken_rule, sensitivity_rows=sens, command=command)
    err.print(f"report: {report}")
    for name in systems:
        rs = [r for r in rows if r.system == name]
        print(f"{name}: geometric-mean TTFT reduction of Kraken over the standard block "
              f"{100 * geomean_reduction(rs):.1f} % ({len(rs)} configurations)")


@app.command("demo")
def demo_command(
    out: str = typer.Option("runs/demo", "--out", help="Where the runs and report.md go."),
    max_steps: int = typer.Option(None, "--max-steps", show_default="400: about 4 minutes of training in all on 2 cores", help="Steps of 8 x 128 tokens per model."),
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
