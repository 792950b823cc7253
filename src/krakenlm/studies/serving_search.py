"""`krakenlm sim serve-search`: the serving configuration search. Every configuration of a
space file (serving/config_search.py) is replayed, in this process, over local processes or
on Dask through design's runner (`runner.map_chunks`), and ranked by goodput per $ at the
space's offered rate (objective "goodput"), or by its capacity under the SLOs per $ (objective
"capacity": a capacity search per configuration); the Pareto front of goodput (or capacity)
against $ per hour uses design's `pareto_front`. Writes the rows (CSV), the front (CSV) and a
plot (PNG), each atomically."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from ..console import table_of
from ..design.runner import map_chunks
from ..design.search import pareto_front
from ..errors import KrakenError
from ..fileio import write_bytes_atomically, write_csv_atomically
from ..serving.config_search import OBJECTIVES, ConfigSpace, evaluate_configs, row_fields
from ..serving.report import PERCENTILES, png_bytes

FRONT_DIRECTIONS = ("maximize", "minimize")


class Measure(NamedTuple):
    """The row fields an objective ranks by: requests/s, requests per $, requests/s per GPU."""
    rate: str
    per_usd: str
    per_gpu: str


MEASURE = {name: Measure(f"{name}_requests_per_s", f"{name}_requests_per_usd",
                         f"{name}_requests_per_s_per_gpu") for name in OBJECTIVES}


def front_objectives(objective: str) -> tuple[str, str]:
    """The Pareto front's axes: the objective's requests/s (maximised) against $ per hour."""
    return (MEASURE[objective].rate, "usd_per_hour")


@dataclass
class ServeSearchReport:
    """The result of a serving configuration search (module docstring): the space searched, a row
    per configuration (ROW_FIELDS: goodput in requests/s, $/hour, goodput per $ and per GPU, p99
    TTFT and TPOT in s, ...; best goodput per $ first, failures with their `error`), the Pareto
    front of goodput against $/hour (cheapest first), the wall time (s), the processes used, the
    rows the table shows (`top`) and the files written. With `objective` "capacity" the rows
    also carry each configuration's capacity under the SLOs, and rank and front by it."""
    space: ConfigSpace
    rows: list[dict[str, Any]]      # every configuration, best goodput (capacity) per $ first
    front: list[dict[str, Any]]     # goodput (capacity) against $/hour, cheapest first
    wall_s: float
    processes: int
    top: int = 10
    written: list[Path] | None = None
    objective: str = "goodput"
    percentile: int = 99            # the capacity objective's SLO percentile

    @property
    def best(self) -> dict[str, Any] | None:
        return self.rows[0] if self.rows and self.rows[0]["error"] == "" else None

    def columns(self) -> list[str]:
        return [f"cfg_{k}" for k in self.space.space] + list(row_fields(self.objective))

    def to_json(self) -> dict[str, Any]:
        extra = {"objective": self.objective}
        if self.objective == "capacity":
            extra["slo_percentile"] = self.percentile
        return {**extra, "space": self.space.to_dict(), "rows": self.rows, "front": self.front,
                "wall_s": self.wall_s, "processes": self.processes,
                "evaluations_per_s": len(self.rows) / self.wall_s if self.wall_s else None,
                "written": [str(p) for p in self.written or []]}

    def to_table(self) -> list[Any]:
        names, m, what = list(self.space.space), MEASURE[self.objective], self.objective
        ranked_by = what if what == "goodput" else f"capacity (p{self.percentile} SLOs)"
        table = table_of(f"serving configurations by {ranked_by} per $ (best {self.top} of "
                         f"{len(self.rows)}; {len(self.front)} on the {what}/$-per-hour front)",
                         names + ["GPUs", f"{what} req/s", "$/hour", f"{what} req/$",
                                  "req/s per GPU", "front"], left=names)
        on_front = {r["key"] for r in self.front}
        for r in self.rows[:self.top]:
            if r["error"]:
                continue
            table.add_row(*(str(r[f"cfg_{n}"]) for n in names), str(r["devices"]),
                          f"{r[m.rate]:.3f}", f"{r['usd_per_hour']:.3f}",
                          f"{r[m.per_usd]:,.0f}", f"{r[m.per_gpu]:.3f}",
                          "*" if r["key"] in on_front else "")
        from ..console import Plain
        failed = sum(bool(r["error"]) for r in self.rows)
        lines = [Plain(f"{len(self.rows)} configurations in {self.wall_s:.1f} s on "
                       f"{self.processes} process(es)"
                       + (f"; {failed} could not run (see the `error` column)" if failed else ""))]
        lines += [Plain(f"wrote {p}") for p in self.written or []]
        return [table, *lines]

    def write(self, out: str | Path) -> list[Path]:
        out = Path(out)
        if out.exists() and not out.is_dir():
            raise KrakenError(f"--out {out} is a file; give a directory for configs.csv, "
                              "front.csv and search.png")
        columns = self.columns()
        self.written = [write_csv_atomically(out / "configs.csv", columns, self.rows),
                        write_csv_atomically(out / "front.csv", columns, self.front),
                        write_bytes_atomically(out / "search.png", self.figure_png())]
        return self.written

    def figure_png(self) -> bytes:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        ok = [r for r in self.rows if not r["error"]]
        rate, what = MEASURE[self.objective].rate, self.objective
        fig, ax = plt.subplots(figsize=(7, 5))
        ax.scatter([r["usd_per_hour"] for r in ok], [r[rate] for r in ok],
                   s=14, c=[r["devices"] for r in ok], cmap="viridis", label="configurations")
        ax.plot([r["usd_per_hour"] for r in self.front],
                [r[rate] for r in self.front], "k.-", label="Pareto front")
        if self.best is not None:
            ax.plot([self.best["usd_per_hour"]], [self.best[rate]], "r*",
                    ms=14, label=f"best {what} per $")
        ax.set_xlabel("$ per hour (amortised GPUs)")
        ax.set_ylabel("goodput (requests/s meeting the SLOs)" if self.objective == "goodput"
                      else f"capacity (largest requests/s meeting the p{self.percentile} SLOs)")
        ax.set_title(f"serving configuration search by {self.objective}: {len(ok)} "
                     "configurations", fontsize=9)
        ax.legend()
        return png_bytes(fig, dpi=100)


def _rank(row: dict[str, Any], objective: str = "goodput") -> tuple:
    """Best goodput (capacity) per $ first, then more goodput (capacity); configurations that
    could not run last; the key breaks ties, so the order does not depend on which worker
    finished first."""
    m = MEASURE[objective]
    return (row["error"] != "", -(row[m.per_usd] or 0.0), -(row[m.rate] or 0.0), row["key"])


def search_configs(space: ConfigSpace, *, processes: int = 1, backend: str = "local",
                   address: str | None = None, chunk: int = 1, top: int = 10,
                   out: str | Path | None = None, progress: bool = False,
                   objective: str = "goodput", percentile: int = 99) -> ServeSearchReport:
    """Every configuration of `space`'s grid, replayed (or capacity-searched) and ranked (see
    the module docstring)."""
    if objective not in OBJECTIVES:
        raise KrakenError(f"--objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
    if objective == "capacity":
        if space.fixed.get("slo_ttft_s") is None and space.fixed.get("slo_tpot_s") is None:
            raise KrakenError("--objective capacity needs an SLO: give slo_ttft_s and/or "
                              "slo_tpot_s in the space file")
        if percentile not in PERCENTILES:
            raise KrakenError(f"--slo-percentile {percentile} is not one of "
                              f"{', '.join(map(str, PERCENTILES))}")
    if top < 0:
        raise KrakenError(f"--top must be >= 0 (rows to print), got {top}")
    if chunk < 1:
        raise KrakenError(f"--chunk must be at least 1, got {chunk}")
    if out is not None and Path(out).exists() and not Path(out).is_dir():
        raise KrakenError(f"--out {out} is a file; give a directory for configs.csv, "
                          "front.csv and search.png")
    started = time.perf_counter()
    from tqdm import tqdm

    grid = space.grid()
    rows: list[dict[str, Any]] = []
    with tqdm(total=len(grid), unit="config", disable=not progress, desc="configurations") as bar:
        for got in map_chunks(evaluate_configs, (space.fixed, objective, percentile), grid,
                              processes=processes, backend=backend, address=address,
                              chunk=chunk):
            rows.extend(got)
            bar.update(len(got))
    rows.sort(key=lambda r: _rank(r, objective))
    feasible = [dict(r, feasible=True) for r in rows if not r["error"]]
    front = [{k: v for k, v in r.items() if k != "feasible"}
             for r in pareto_front(feasible, front_objectives(objective), FRONT_DIRECTIONS)]
    front.sort(key=lambda r: (r["usd_per_hour"], r["key"]))
    report = ServeSearchReport(space, rows, front, time.perf_counter() - started, processes, top,
                               objective=objective, percentile=percentile)
    if not any(not r["error"] for r in rows):
        raise KrakenError(f"none of the {len(rows)} configurations could run; the first: "
                          f"{rows[0]['error']}")
    if out is not None:
        report.write(out)
    return report
