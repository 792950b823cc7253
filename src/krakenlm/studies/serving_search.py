"""`krakenlm sim serve-search`: the serving configuration search. Every configuration of a
space file (serving/config_search.py) is replayed, in this process, over local processes or
on Dask through design's runner (`runner.map_chunks`), and ranked by goodput per $; the
Pareto front of goodput against $ per hour uses design's `pareto_front`. Writes the rows
(CSV), the front (CSV) and a plot (PNG), each atomically."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..console import table_of
from ..design.runner import map_chunks
from ..design.search import pareto_front
from ..errors import KrakenError
from ..fileio import write_bytes_atomically, write_csv_atomically
from ..serving.config_search import ROW_FIELDS, ConfigSpace, evaluate_configs
from ..serving.report import png_bytes

FRONT_OBJECTIVES = ("goodput_requests_per_s", "usd_per_hour")
FRONT_DIRECTIONS = ("maximize", "minimize")


@dataclass
class ServeSearchReport:
    """The result of a serving configuration search (module docstring): the space searched, a row
    per configuration (ROW_FIELDS: goodput in requests/s, $/hour, goodput per $ and per GPU, p99
    TTFT and TPOT in s, ...; best goodput per $ first, failures with their `error`), the Pareto
    front of goodput against $/hour (cheapest first), the wall time (s), the processes used, the
    rows the table shows (`top`) and the files written."""
    space: ConfigSpace
    rows: list[dict[str, Any]]      # every configuration, best goodput per $ first
    front: list[dict[str, Any]]     # goodput against $/hour, cheapest first
    wall_s: float
    processes: int
    top: int = 10
    written: list[Path] | None = None

    @property
    def best(self) -> dict[str, Any] | None:
        return self.rows[0] if self.rows and self.rows[0]["error"] == "" else None

    def columns(self) -> list[str]:
        return [f"cfg_{k}" for k in self.space.space] + list(ROW_FIELDS)

    def to_json(self) -> dict[str, Any]:
        return {"space": self.space.to_dict(), "rows": self.rows, "front": self.front,
                "wall_s": self.wall_s, "processes": self.processes,
                "evaluations_per_s": len(self.rows) / self.wall_s if self.wall_s else None,
                "written": [str(p) for p in self.written or []]}

    def to_table(self) -> list[Any]:
        names = list(self.space.space)
        table = table_of(f"serving configurations by goodput per $ (best {self.top} of "
                         f"{len(self.rows)}; {len(self.front)} on the goodput/$-per-hour front)",
                         names + ["GPUs", "goodput req/s", "$/hour", "goodput req/$",
                                  "req/s per GPU", "front"], left=names)
        on_front = {r["key"] for r in self.front}
        for r in self.rows[:self.top]:
            if r["error"]:
                continue
            table.add_row(*(str(r[f"cfg_{n}"]) for n in names), str(r["devices"]),
                          f"{r['goodput_requests_per_s']:.3f}", f"{r['usd_per_hour']:.3f}",
                          f"{r['goodput_requests_per_usd']:,.0f}",
                          f"{r['goodput_requests_per_s_per_gpu']:.3f}",
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
        fig, ax = plt.subplots(figsize=(7, 5))
        ax.scatter([r["usd_per_hour"] for r in ok], [r["goodput_requests_per_s"] for r in ok],
                   s=14, c=[r["devices"] for r in ok], cmap="viridis", label="configurations")
        ax.plot([r["usd_per_hour"] for r in self.front],
                [r["goodput_requests_per_s"] for r in self.front], "k.-", label="Pareto front")
        if self.best is not None:
            ax.plot([self.best["usd_per_hour"]], [self.best["goodput_requests_per_s"]], "r*",
                    ms=14, label="best goodput per $")
        ax.set_xlabel("$ per hour (amortised GPUs)")
        ax.set_ylabel("goodput (requests/s meeting the SLOs)")
        ax.set_title(f"serving configuration search: {len(ok)} configurations", fontsize=9)
        ax.legend()
        return png_bytes(fig, dpi=100)


def _rank(row: dict[str, Any]) -> tuple:
    """Best goodput per $ first, then more goodput; configurations that could not run last;
    the key breaks ties, so the order does not depend on which worker finished first."""
    per_usd = row["goodput_requests_per_usd"]
    return (row["error"] != "", -(per_usd or 0.0), -(row["goodput_requests_per_s"] or 0.0),
            row["key"])


def search_configs(space: ConfigSpace, *, processes: int = 1, backend: str = "local",
                   address: str | None = None, chunk: int = 1, top: int = 10,
                   out: str | Path | None = None, progress: bool = False) -> ServeSearchReport:
    """Every configuration of `space`'s grid, replayed and ranked (see the module docstring)."""
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
        for got in map_chunks(evaluate_configs, (space.fixed,), grid, processes=processes,
                              backend=backend, address=address, chunk=chunk):
            rows.extend(got)
            bar.update(len(got))
    rows.sort(key=_rank)
    feasible = [dict(r, feasible=True) for r in rows if not r["error"]]
    front = [{k: v for k, v in r.items() if k != "feasible"}
             for r in pareto_front(feasible, FRONT_OBJECTIVES, FRONT_DIRECTIONS)]
    front.sort(key=lambda r: (r["usd_per_hour"], r["key"]))
    report = ServeSearchReport(space, rows, front, time.perf_counter() - started, processes, top)
    if not any(not r["error"] for r in rows):
        raise KrakenError(f"none of the {len(rows)} configurations could run; the first: "
                          f"{rows[0]['error']}")
    if out is not None:
        report.write(out)
    return report
