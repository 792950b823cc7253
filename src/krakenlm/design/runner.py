"""Evaluate many designs: in this process, over local cores, or on a Dask cluster, streaming
rows to a CSV table that a re-run resumes (designs already in it, by key, are skipped).

The table is an append-only log, an exception to "written whole and swapped in": 10^5 rows
cannot be rewritten after every chunk. What keeps it safe: rows are appended a whole chunk at
a time and flushed; a sidecar `<table>.meta.json` (written atomically) records the base system,
the objective and the columns, and a resume with a different one is refused rather than
mixing two experiments in one table; a torn last line left by a kill is dropped (the table is
rewritten atomically without it) before appending. At the end, when pyarrow is installed, a
Parquet copy is written next to the CSV (atomically).

Backends share one interface: `backend="local"` with `processes=1` runs in-process, more
processes use a multiprocessing pool (fork where available, each worker holding its own
Evaluator); `backend="dask"` sends chunks to a `distributed` scheduler (`address`, or a local
cluster when none is given): install the `cluster` extra.
"""

from __future__ import annotations

import csv
import io
import json
import multiprocessing as mp
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..batching import batches
from ..errors import KrakenError
from ..fileio import read_user_text, write_csv_atomically, write_text_atomically
from .evaluate import ROW_FIELDS, TEXT_FIELDS, Evaluator
from .knobs import KNOBS, design_key
from .objectives import Objective

BACKENDS = ("local", "dask")
DEFAULT_CHUNK = 32


@dataclass
class RunSummary:
    """What runner.run() returns for a grid of designs: every row of the results table (rows read
    back from an earlier, resumed run included), how many designs this run evaluated and how many
    it skipped as already in the table, the run's wall time (`seconds`), the base system's row
    (`baseline`: perf, perf_unit, tp, batch, system_usd, ...) and the CSV and parquet tables
    written (None when not written)."""
    rows: list[dict[str, Any]]      # every row of the table (old and new)
    evaluated: int                  # designs evaluated in this run
    skipped: int                    # designs already in the table (resume)
    seconds: float
    baseline: dict[str, Any]
    table: Path | None = None
    parquet: Path | None = None


# ------------------------------------------------------------------------- worker side
_WORKER: dict[str, Evaluator] = {}


def _evaluator(base: str, objective: dict, reference: dict | None = None) -> Evaluator:
    key = json.dumps([base, objective, reference], sort_keys=True)
    ev = _WORKER.get(key)
    if ev is None:
        ev = _WORKER[key] = Evaluator(base, Objective(**objective), reference=reference)
    return ev


def evaluate_chunk(base: str, objective: dict, reference: dict | None,
                   designs: list[dict]) -> list[dict]:
    """A worker's unit of work (picklable arguments only: runs under fork, spawn or Dask)."""
    ev = _evaluator(base, objective, reference)
    return [ev.evaluate(d) for d in designs]


# -------------------------------------------------------------------------------- table
def _columns(knob_names: list[str]) -> list[str]:
    return [f"knob_{k}" for k in knob_names] + list(ROW_FIELDS)


def _text_column(column: str) -> bool:
    knob = KNOBS.get(column[5:]) if column.startswith("knob_") else None
    return column in TEXT_FIELDS or (knob is not None and knob.kind == "choice")


def _parse_cell(column: str, text: str) -> Any:
    """A CSV cell back to the value `evaluate` wrote, by its column: text columns stay
    strings (a key of digits is not a number), `feasible` a bool, the rest numbers or None.
    Raises ValueError for a cell its column cannot hold."""
    if _text_column(column):
        return text
    if text == "":
        return None
    if column == "feasible":
        if text not in ("True", "False"):
            raise ValueError(f"feasible is {text!r}, not True or False")
        return text == "True"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{column} is {text!r}, not a number") from None


def _parse_row(row: dict[str | None, Any]) -> dict[str, Any]:
    if None in row:  # csv.DictReader files surplus cells under the key None
        columns = len(row) - 1
        raise ValueError(f"{columns + len(row[None])} cells where the header has {columns}")
    if None in row.values():  # ... and fills missing ones with None
        cells = sum(v is not None for v in row.values())
        raise ValueError(f"{cells} cells where the header has {len(row)}")
    return {k: _parse_cell(k, v) for k, v in row.items()}


def _read_rows(path: Path, text: str, columns: list[str] | None) -> list[dict[str, Any]]:
    """Every row of a table's text, typed; a KrakenError naming the line of a malformed one
    (or a header that is not `columns`)."""
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = reader.fieldnames or []
        if columns is not None and header != columns:
            raise KrakenError(f"{path}: its header is not the columns its "
                              f"{path.name}.meta.json names; the table was edited or damaged: "
                              "pass --no-resume to start it afresh, or another --out")
        rows = []
        for row in reader:
            try:
                rows.append(_parse_row(row))
            except ValueError as exc:
                raise KrakenError(f"{path} line {reader.line_num} is malformed ({exc}); delete "
                                  "that line to re-evaluate its design, or pass --no-resume "
                                  "to start afresh") from None
        return rows
    except csv.Error as exc:
        raise KrakenError(f"{path} is not a readable CSV table ({exc}); pass --no-resume to "
                          "start it afresh, or another --out") from None


def read_table(path: str | Path) -> list[dict[str, Any]]:
    """The rows of an explore table (see `_parse_cell` for the types)."""
    path = Path(path)
    return _read_rows(path, read_user_text(path, "design table"), None)


class Table:
    """The streaming CSV plus its meta sidecar (see the module docstring)."""

    def __init__(self, path: Path, columns: list[str], meta: dict[str, Any], resume: bool):
        self.path, self.columns = path, columns
        self.meta_path = path.with_name(path.name + ".meta.json")
        self.rows: list[dict[str, Any]] = []
        if path.exists() and resume:
            old = self._read_meta() if self.meta_path.exists() else None
            if old != meta:
                raise KrakenError(f"{path} holds another experiment (base, objective or knobs "
                                  f"differ from its {self.meta_path.name}); pass another --out "
                                  "or --no-resume to start it afresh")
            self._load_dropping_torn_tail()
        else:
            write_text_atomically(self.meta_path, json.dumps(meta, indent=1, sort_keys=True))
            write_csv_atomically(path, columns, [])

    def _read_meta(self) -> Any:
        try:
            return json.loads(read_user_text(self.meta_path, "table sidecar"))
        except json.JSONDecodeError as exc:
            raise KrakenError(f"{self.meta_path} is not valid JSON ({exc.msg} at line "
                              f"{exc.lineno}): it cannot tell which experiment {self.path.name} "
                              "holds; pass --no-resume to start the table afresh, or another "
                              "--out") from None

    def _load_dropping_torn_tail(self) -> None:
        """Rows are appended whole chunks at a time, so only the last line can be torn (by a
        kill mid-append): it is dropped. Any other malformed line is damage: an error."""
        text = read_user_text(self.path, "design table")
        complete = text[:text.rfind("\n") + 1]
        self.rows = _read_rows(self.path, complete, self.columns) if text else []
        if len(complete) != len(text) or not text:
            write_csv_atomically(self.path, self.columns, self.rows)  # drop what a kill tore

    def keys(self) -> set[str]:
        return {r["key"] for r in self.rows}

    def append(self, rows: list[dict[str, Any]]) -> None:
        buffer = io.StringIO(newline="")
        csv.DictWriter(buffer, fieldnames=self.columns, extrasaction="ignore").writerows(rows)
        with open(self.path, "a", newline="") as fh:
            fh.write(buffer.getvalue())
            fh.flush()
            os.fsync(fh.fileno())
        self.rows.extend(rows)


def write_parquet(rows: list[dict[str, Any]], csv_path: Path) -> Path | None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    out = csv_path.with_suffix(".parquet")
    tmp = out.with_name(f".{out.name}.tmp")
    columns = list(rows[0]) if rows else []
    table = pa.table({c: [r.get(c) if r.get(c) != "" else None for r in rows] for c in columns})
    pq.write_table(table, tmp)
    os.replace(tmp, out)
    return out


# ------------------------------------------------------------------------------- runners
def _local(work, fixed: tuple, chunks: Iterator[list[dict]], processes: int):
    if processes <= 1:
        for chunk in chunks:
            yield work(*fixed, chunk)
        return
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    with mp.get_context(method).Pool(processes) as pool:
        args = ((work, fixed, c) for c in chunks)
        yield from pool.imap_unordered(_star, args)


def _star(args: tuple) -> list[dict]:
    work, fixed, chunk = args
    return work(*fixed, chunk)


def _dask(work, fixed: tuple, chunks: Iterator[list[dict]], processes: int,
          address: str | None):
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise KrakenError("--backend dask needs the `distributed` package: pip install "
                          "'krakenlm[cluster]'") from None
    cluster = None if address else LocalCluster(n_workers=max(1, processes),
                                                threads_per_worker=1, processes=True,
                                                dashboard_address=None)
    client = Client(address or cluster)
    try:
        in_flight = 4 * max(1, len(client.scheduler_info().get("workers", {})))
        pending = as_completed()
        for chunk in chunks:  # bounded submission: a 10^5-design space never sits in memory
            pending.add(client.submit(work, *fixed, chunk, pure=False))
            if pending.count() >= in_flight:
                yield next(pending).result()
        for future in pending:
            yield future.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def check_backend(backend: str, processes: int, address: str | None) -> None:
    if backend not in BACKENDS:
        raise KrakenError(f"--backend {backend!r} is not one of {BACKENDS}")
    if processes < 1:
        raise KrakenError(f"--processes must be at least 1, got {processes}")
    if address is not None and backend != "dask":
        raise KrakenError(f"--address {address} names a Dask scheduler: add --backend dask (the "
                          f"{backend} backend would ignore it)")


def map_chunks(work, fixed: tuple, items: Iterable[dict], *, processes: int = 1,
               backend: str = "local", address: str | None = None,
               chunk: int = DEFAULT_CHUNK) -> Iterator[list[dict]]:
    """`work(*fixed, chunk)` for chunks of `items`, in this process, a local pool or on Dask
    (see the module docstring); yields each chunk's rows as they come (in any order). `work`
    must be a module-level function and `fixed` picklable."""
    check_backend(backend, processes, address)
    chunks = batches(items, chunk)
    if backend == "local":
        return _local(work, fixed, chunks, processes)
    return _dask(work, fixed, chunks, processes, address)


def run_designs(designs: Iterable[dict], objective: Objective, base: str = "a100-80gb-x8", *,
                knob_names: list[str], out: str | Path | None = None, processes: int = 1,
                backend: str = "local", address: str | None = None, resume: bool = True,
                chunk: int = DEFAULT_CHUNK, total: int | None = None,
                progress: bool = True, reference: dict | None = None) -> RunSummary:
    """Evaluate `designs` (an iterable of knob dicts over `knob_names`) on `objective`, each
    compared with the base system with the knobs of `reference` (see Evaluator)."""
    import time

    from tqdm import tqdm

    check_backend(backend, processes, address)
    if out is not None and Path(out).is_dir():
        raise KrakenError(f"--out {out} is a directory; give the CSV file to stream the table "
                          "to (e.g. designs.csv)")
    started = time.perf_counter()
    # fails early on an impossible objective
    baseline = Evaluator(base, objective, reference=reference).baseline
    columns = _columns(knob_names)
    table = None
    if out is not None:
        meta = {"base": base, "objective": objective.to_dict(), "columns": columns,
                **({"reference": reference} if reference else {})}
        table = Table(Path(out), columns, meta, resume)
    done = table.keys() if table else set()
    skipped = 0

    def todo() -> Iterator[dict]:
        nonlocal skipped
        for d in designs:
            if d and design_key(d) in done:
                skipped += 1
                continue
            yield d
    rows: list[dict[str, Any]] = []
    obj = objective.to_dict()
    stream = map_chunks(evaluate_chunk, (base, obj, reference), todo(), processes=processes,
                        backend=backend, address=address, chunk=chunk)
    bar = tqdm(total=total, unit="design", disable=not progress, desc="designs")
    try:
        for got in stream:
            rows.extend(got)
            if table is not None:
                table.append(got)
            bar.update(len(got))
    finally:
        bar.close()
    all_rows = table.rows if table is not None else rows
    parquet = write_parquet(all_rows, Path(out)) if out is not None and all_rows else None
    return RunSummary(all_rows, len(rows), skipped, time.perf_counter() - started, baseline,
                      Path(out) if out is not None else None, parquet)
