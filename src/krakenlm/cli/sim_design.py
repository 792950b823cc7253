"""`krakenlm sim knobs`, `sim explore` (grid, parallel, resumable) and `sim search` (NSGA-II):
design-space exploration over the knobs of krakenlm.design. Each command parses its options,
calls one function of krakenlm.design.report and prints the report."""

from __future__ import annotations

from pathlib import Path

import typer

from ._console import print_report, stderr_console
from .sim import sim_app

_KNOB_HELP = ("A knob as name=values (grid: 'cores=32,64,108') or name=low:high[:log] (search "
              "ranges); repeatable. Knobs: see `krakenlm sim knobs`.")


def _objective(kind: str, model: str, prompt: int, gen: int, batch: int, metric: str,
               slo: float | None, max_batch: int, arch: str):
    from ..design.objectives import Objective

    return Objective(kind=kind, model=model, prompt_tokens=prompt, gen_tokens=gen, batch=batch,
                     metric=metric, slo_s=slo, max_batch=max_batch, arch=arch)


_OBJ_OPTS = dict(
    kind=typer.Option("throughput", "--objective", help="throughput (tokens/s at the largest batch memory holds) or latency (1 / --metric at --batch)."),
    model=typer.Option("gpt3-175b", "--model", help="Model preset of the workload."),
    prompt=typer.Option(1024, "--prompt", help="Prompt tokens."),
    gen=typer.Option(128, "--gen", help="Generated tokens."),
    batch=typer.Option(1, "--batch", help="Batch (latency objective)."),
    metric=typer.Option("e2e", "--metric", help="ttft, tpot or e2e: what latency minimises / what --slo bounds."),
    slo=typer.Option(None, "--slo", help="Bound on --metric in seconds (optional)."),
    max_batch=typer.Option(4096, "--max-batch", help="Largest batch per replica (throughput)."),
    arch=typer.Option("gpt", "--arch", help="gpt, parallel or kraken (a design's arch knob overrides)."),
)


@sim_app.command("knobs")
def knobs_cmd() -> None:
    """The design knobs and their physical ranges."""
    from ..design.report import knobs_report

    print_report(knobs_report())


@sim_app.command("explore")
def explore_cmd(
    space_file: Path = typer.Option(None, "--space", help="Design space YAML (knob: [values])."),
    knobs: list[str] = typer.Option(None, "--knob", help=_KNOB_HELP),
    base: str = typer.Option("a100-80gb-x8", "--base", help="System the knobs modify (and the reference)."),
    out: Path = typer.Option(None, "--out", help="CSV table, streamed and resumed (a .parquet copy too with pyarrow)."),
    processes: int = typer.Option(1, "--processes", help="Local worker processes."),
    backend: str = typer.Option("local", "--backend", help="local or dask (pip install 'krakenlm[cluster]')."),
    address: str = typer.Option(None, "--address", help="Dask scheduler address (default: a local cluster)."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Skip designs already in --out."),
    top: int = typer.Option(15, "--top", help="Rows to print."),
    kind: str = _OBJ_OPTS["kind"], model: str = _OBJ_OPTS["model"], prompt: int = _OBJ_OPTS["prompt"],
    gen: int = _OBJ_OPTS["gen"], batch: int = _OBJ_OPTS["batch"], metric: str = _OBJ_OPTS["metric"],
    slo: float = _OBJ_OPTS["slo"], max_batch: int = _OBJ_OPTS["max_batch"], arch: str = _OBJ_OPTS["arch"],
) -> None:
    """Grid a design space on a workload objective: feasibility, area, cost, performance and
    performance per $ against the base, in parallel, streamed to a resumable table."""
    from ..design.knobs import space_from_options
    from ..design.report import explore

    space = space_from_options(space_file, knobs)
    objective = _objective(kind, model, prompt, gen, batch, metric, slo, max_batch, arch)
    print_report(explore(space, objective, base, out=out, processes=processes, backend=backend,
                         address=address, resume=resume, top=top))


@sim_app.command("search")
def search_cmd(
    space_file: Path = typer.Option(None, "--space", help="Design space YAML (lists or {low, high, log} ranges)."),
    knobs: list[str] = typer.Option(None, "--knob", help=_KNOB_HELP),
    base: str = typer.Option("a100-80gb-x8", "--base", help="System the knobs modify (and the reference)."),
    trials: int = typer.Option(200, "--trials", help="Designs evaluated by NSGA-II."),
    seed: int = typer.Option(0, "--seed", help="Sampler seed (same seed, same designs)."),
    population: int = typer.Option(24, "--population", help="NSGA-II population size."),
    out: Path = typer.Option(None, "--out", help="Directory for trials.csv, front.csv and pareto.png."),
    top: int = typer.Option(15, "--top", help="Pareto designs to print."),
    as_json: bool = typer.Option(False, "--json", help="Print the Pareto front as JSON."),
    kind: str = _OBJ_OPTS["kind"], model: str = _OBJ_OPTS["model"], prompt: int = _OBJ_OPTS["prompt"],
    gen: int = _OBJ_OPTS["gen"], batch: int = _OBJ_OPTS["batch"], metric: str = _OBJ_OPTS["metric"],
    slo: float = _OBJ_OPTS["slo"], max_batch: int = _OBJ_OPTS["max_batch"], arch: str = _OBJ_OPTS["arch"],
) -> None:
    """Multi-objective search (performance, system $, die area) over knobs with optuna NSGA-II;
    prints and saves the Pareto front."""
    from ..design.knobs import space_from_options
    from ..design.report import search_designs

    space = space_from_options(space_file, knobs)
    objective = _objective(kind, model, prompt, gen, batch, metric, slo, max_batch, arch)
    print_report(search_designs(space, objective, base, trials=trials, seed=seed,
                                population=population, out=out, top=top,
                                console=stderr_console()), as_json, json_default=str)
