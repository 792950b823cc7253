"""`krakenlm sim explore` (grid, parallel, resumable) and `krakenlm sim search` (NSGA-II):
design-space exploration over the knobs of krakenlm.design. Registered on `sim` by cli/sim.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ._console import stderr_console, stdout_console, table as _table
from .sim import _check_top, sim_app

_KNOB_HELP = ("A knob as name=values (grid: 'cores=32,64,108') or name=low:high[:log] (search "
              "ranges); repeatable. Knobs: see `krakenlm sim knobs`.")


def _space(space_file: Path | None, knobs: list[str] | None):
    from ..design.knobs import DesignSpaceError, load_space, space_from_strings

    if space_file is None and not knobs:
        raise DesignSpaceError("give a design space: --space FILE.yaml or --knob name=values "
                               "(e.g. --knob cores=64,108 --knob memory=HBM2e,DDR5)")
    if space_file is not None and knobs:
        raise DesignSpaceError("give --space or --knob, not both")
    return load_space(space_file) if space_file is not None else space_from_strings(knobs)


def _objective(kind: str, model: str, prompt: int, gen: int, batch: int, metric: str,
               slo: float | None, max_batch: int, arch: str):
    from ..design.objectives import Objective

    return Objective(kind=kind, model=model, prompt_tokens=prompt, gen_tokens=gen, batch=batch,
                     metric=metric, slo_s=slo, max_batch=max_batch, arch=arch)


def _print_rows(rows: list[dict], top: int, title: str) -> None:
    console = stdout_console()
    feas = sorted((r for r in rows if r["feasible"]), key=lambda r: -r["perf_per_usd_vs_base"])
    knob_cols = sorted({k for r in rows for k in r if k.startswith("knob_")})
    table = _table(title=title)
    for col in [k[5:] for k in knob_cols] + ["arch", "tp", "batch", "perf", "die mm^2",
                                             "$/device", "perf/$ vs base"]:
        table.add_column(col, justify="right")
    for r in feas[:top]:
        cells = [f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in knob_cols]
        table.add_row(*cells, str(r["arch"]), str(r["tp"]), str(r["batch"]),
                      f"{r['perf']:.4g} {r['perf_unit']}", f"{r['die_area_mm2']:,.0f}",
                      f"{r['device_usd']:,.0f}", f"{r['perf_per_usd_vs_base']:.2f}x")
    console.print(table)
    rejected = [r for r in rows if not r["feasible"]]
    if rejected:
        console.print(f"{len(rejected)} designs rejected:")
        for r in rejected[:top]:
            knobs = ", ".join(f"{k[5:]}={r[k]}" for k in knob_cols)
            console.print(f"  {knobs}: {r['reason']}")


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
    from ..design.build import knob_docs

    table = _table(title="design knobs (krakenlm sim explore / search)")
    for col in ("knob", "range", "meaning"):
        table.add_column(col)
    for row in knob_docs():
        table.add_row(*row)
    stdout_console().print(table)


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
    from ..design.runner import run_designs

    space = _space(space_file, knobs)
    objective = _objective(kind, model, prompt, gen, batch, metric, slo, max_batch, arch)
    _check_top(top)
    total = space.size
    result = run_designs(space.grid(), objective, base, knob_names=list(space.knobs), out=out,
                         processes=processes, backend=backend, address=address, resume=resume,
                         total=total)
    b = result.baseline
    _print_rows(result.rows, top, f"{total} designs from {base}: {objective.describe()}")
    out_console = stdout_console()
    out_console.print(f"base {base}: {b['perf']:.4g} {b['perf_unit']} (tp {b['tp']}, batch "
                      f"{b['batch']}), ${b['system_usd']:,.0f} per system (template model)")
    out_console.print(f"evaluated {result.evaluated}, resumed {result.skipped} from the table, "
                      f"in {result.seconds:.1f} s"
                      + (f"; table {result.table}" if result.table else "")
                      + (f" and {result.parquet}" if result.parquet else ""))


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
    from ..design.evaluate import Evaluator
    from ..design.search import search
    from ..fileio import write_csv_atomically

    space = _space(space_file, knobs)
    objective = _objective(kind, model, prompt, gen, batch, metric, slo, max_batch, arch)
    _check_top(top)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)  # a bad --out fails now, not after the search
    evaluator = Evaluator(base, objective)
    with stderr_console().status(f"NSGA-II over {len(space.knobs)} knobs, {trials} trials..."):
        result = search(space, evaluator, trials, seed=seed, population=population)
    if out is not None:
        cols = sorted({k for r in result["rows"] for k in r})
        write_csv_atomically(out / "trials.csv", cols, result["rows"])
        write_csv_atomically(out / "front.csv", cols, result["front"])
        _pareto_plot(result, out / "pareto.png", objective.describe())
    if as_json:
        print(json.dumps(result["front"], indent=2, default=str))
        return
    _print_rows(result["front"], top, f"Pareto front of {trials} trials (seed {seed}): "
                                      f"{objective.describe()}")
    rejected = [r for r in result["rows"] if not r["feasible"]]
    stdout_console().print(f"{len(rejected)} of {trials} trials rejected"
                           + (f"; tables and plot in {out}" if out else ""))


def _pareto_plot(result: dict, path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    feas = [r for r in result["rows"] if r["feasible"]]
    front = sorted(result["front"], key=lambda r: r["system_usd"])
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.scatter([r["system_usd"] / 1e3 for r in feas], [r["perf"] for r in feas], s=12,
               c=[r["die_area_mm2"] for r in feas], cmap="viridis", label="feasible")
    ax.plot([r["system_usd"] / 1e3 for r in front], [r["perf"] for r in front], "k.-",
            label="Pareto front")
    b = result["baseline"]
    ax.plot([b["system_usd"] / 1e3], [b["perf"]], "r*", ms=14, label="base")
    ax.set_xlabel("system cost (k$, model estimate)")
    ax.set_ylabel(b["perf_unit"])
    ax.set_title(title, fontsize=8)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
