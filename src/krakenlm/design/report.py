"""What `krakenlm sim knobs`, `sim explore` and `sim search` show, as reports: the knobs and
their ranges, a grid run by the runner (runner.run_designs) and an NSGA-II search
(search.search) with its Pareto front, tables and plot."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..console import table_of
from ..errors import KrakenError
from .build import knob_docs
from .knobs import DesignSpace
from .objectives import Objective
from .runner import RunSummary, run_designs


def check_top(top: int) -> None:
    """--top N prints the first N rows; a negative N would silently drop rows from the end."""
    if top < 0:
        raise KrakenError(f"--top must be >= 0 (rows to print), got {top}")


def rows_tables(rows: list[dict[str, Any]], top: int, title: str) -> list[Any]:
    """The best `top` feasible rows by performance per $ against the base, then the first
    `top` rejected designs with their reasons."""
    feas = sorted((r for r in rows if r["feasible"]), key=lambda r: -r["perf_per_usd_vs_base"])
    knob_cols = sorted({k for r in rows for k in r if k.startswith("knob_")})
    table = table_of(title, [k[5:] for k in knob_cols] + ["arch", "tp", "batch", "perf",
                                                          "die mm^2", "$/device",
                                                          "perf/$ vs base"])
    for r in feas[:top]:
        cells = [f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in knob_cols]
        table.add_row(*cells, str(r["arch"]), str(r["tp"]), str(r["batch"]),
                      f"{r['perf']:.4g} {r['perf_unit']}", f"{r['die_area_mm2']:,.0f}",
                      f"{r['device_usd']:,.0f}", f"{r['perf_per_usd_vs_base']:.2f}x")
    out: list[Any] = [table]
    rejected = [r for r in rows if not r["feasible"]]
    if rejected:
        out.append(f"{len(rejected)} designs rejected:")
        for r in rejected[:top]:
            knobs = ", ".join(f"{k[5:]}={r[k]}" for k in knob_cols)
            out.append(f"  {knobs}: {r['reason']}")
    return out


@dataclass
class KnobsReport:
    """The table `krakenlm sim knobs` prints: a (knob, physical range, meaning) row per knob."""
    rows: list[tuple[str, str, str]]  # (knob, range, meaning)

    def to_json(self) -> list[dict[str, str]]:
        return [dict(zip(("knob", "range", "meaning"), r)) for r in self.rows]

    def to_table(self) -> list[Any]:
        columns = ("knob", "range", "meaning")
        table = table_of("design knobs (krakenlm sim explore / search)", columns, left=columns)
        for row in self.rows:
            table.add_row(*row)
        return [table]


def knobs_report() -> KnobsReport:
    return KnobsReport(knob_docs())


@dataclass
class ExploreReport:
    """The output of `krakenlm sim explore`: the runner's summary (rows, baseline, counts, wall
    time, table paths), the base system's name, the objective, the number of designs in the grid
    (`total`) and how many of the best rows the table shows (`top`)."""
    summary: RunSummary
    base: str
    objective: Objective
    total: int                        # designs in the space
    top: int = 15

    def to_json(self) -> dict[str, Any]:
        s = self.summary
        return {"baseline": s.baseline, "rows": s.rows, "evaluated": s.evaluated,
                "skipped": s.skipped, "seconds": s.seconds,
                "table": None if s.table is None else str(s.table),
                "parquet": None if s.parquet is None else str(s.parquet)}

    def to_table(self) -> list[Any]:
        s, b = self.summary, self.summary.baseline
        return rows_tables(s.rows, self.top, f"{self.total} designs from {self.base}: "
                                             f"{self.objective.describe()}") + [
            f"base {self.base}: {b['perf']:.4g} {b['perf_unit']} (tp {b['tp']}, batch "
            f"{b['batch']}), ${b['system_usd']:,.0f} per system (template model)",
            f"evaluated {s.evaluated}, resumed {s.skipped} from the table, in {s.seconds:.1f} s"
            + (f"; table {s.table}" if s.table else "")
            + (f" and {s.parquet}" if s.parquet else "")]


def explore(space: DesignSpace, objective: Objective, base: str = "a100-80gb-x8", *,
            out: str | Path | None = None, processes: int = 1, backend: str = "local",
            address: str | None = None, resume: bool = True, top: int = 15) -> ExploreReport:
    """Every design of a grid space on `objective`, streamed to the resumable table `out`."""
    check_top(top)
    summary = run_designs(space.grid(), objective, base, knob_names=list(space.knobs), out=out,
                          processes=processes, backend=backend, address=address, resume=resume,
                          total=space.size)
    return ExploreReport(summary, base, objective, space.size, top)


@dataclass
class SearchReport:
    """The output of `krakenlm sim search`: search.search()'s result (every trial row, the Pareto
    front, the baseline, the trial count and seed), the objective, the directory the tables and
    plot went to (None: not written) and how many front rows the table shows (`top`)."""
    result: dict[str, Any]            # search.search(): rows, front, baseline, trials, seed
    objective: Objective
    out: Path | None = None           # where trials.csv, front.csv and pareto.png were written
    top: int = 15

    def to_json(self) -> list[dict[str, Any]]:
        return self.result["front"]

    def to_table(self) -> list[Any]:
        r = self.result
        rejected = [row for row in r["rows"] if not row["feasible"]]
        return rows_tables(r["front"], self.top, f"Pareto front of {r['trials']} trials (seed "
                                                 f"{r['seed']}): {self.objective.describe()}") + [
            f"{len(rejected)} of {r['trials']} trials rejected"
            + (f"; tables and plot in {self.out}" if self.out else "")]


def search_designs(space: DesignSpace, objective: Objective, base: str = "a100-80gb-x8", *,
                   trials: int = 200, seed: int = 0, population: int = 24,
                   out: Path | None = None, top: int = 15, console=None) -> SearchReport:
    """NSGA-II over the space (performance, system $, die area); with `out`, every trial and
    the front as CSV and the front's plot. `console` (a rich Console on stderr) shows a status
    line while it runs."""
    from contextlib import nullcontext

    from ..fileio import write_csv_atomically
    from .evaluate import Evaluator
    from .search import search

    check_top(top)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)  # a bad --out fails now, not after the search
    evaluator = Evaluator(base, objective)
    status = console.status(f"NSGA-II over {len(space.knobs)} knobs, {trials} trials...") \
        if console is not None else nullcontext()
    with status:
        result = search(space, evaluator, trials, seed=seed, population=population)
    if out is not None:
        cols = sorted({k for r in result["rows"] for k in r})
        write_csv_atomically(out / "trials.csv", cols, result["rows"])
        write_csv_atomically(out / "front.csv", cols, result["front"])
        pareto_plot(result, out / "pareto.png", objective.describe())
    return SearchReport(result, objective, out, top)


def pareto_plot(result: dict, path: Path, title: str) -> None:
    """System $ against performance of every feasible trial (coloured by die area), the
    Pareto front and the base."""
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
