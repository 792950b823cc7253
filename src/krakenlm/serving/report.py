"""What a replay reports: one row per request, the summary (percentiles, throughput, SLO
attainment and goodput, KV cache use, preemptions, cost) and the engine timeline.

Metrics (the definitions vLLM's `benchmarks/benchmark_serving.py` and BLIS use): queueing
delay = first scheduled - arrival; TTFT = first token - arrival; TPOT = (finish - first token)
/ (output tokens - 1) per request with more than one output token; ITL = every gap between two
tokens of a request (a preemption's recompute included; percentiles of the inverted CDF, since
a decode window records one gap for all its requests); E2E = finish - arrival. Goodput =
requests per second meeting both SLOs (DistServe's definition). Cost: the cost model's price
of the devices used (`hardware.cost.system_cost`, per device x TP x replicas) written off over
`AMORTISATION_YEARS`, for the simulated time, per million tokens.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..fileio import write_bytes_atomically, write_csv_atomically, write_text_atomically
from .packing import packed_array

AMORTISATION_YEARS = 3.0  # an assumption: a typical depreciation period for servers
PERCENTILES = (50, 90, 95, 99)
OVERLOAD_QUEUE_S = 1.0  # mean queueing delay of the last fifth of the requests, at least
TIMELINE_BINS = 200
REQUEST_COLUMNS = ("id", "replica", "arrival_s", "queue_s", "first_token_s", "finish_s",
                   "ttft_s", "tpot_s", "e2e_s", "prompt_tokens", "output_tokens",
                   "cached_tokens", "preemptions")


def _stats(values: np.ndarray) -> dict[str, float | None]:
    if len(values) == 0:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    pct = np.percentile(values, PERCENTILES)
    return {"mean": float(values.mean()), **{f"p{p}": float(v) for p, v in zip(PERCENTILES, pct)}}


def _stable_sorted(values: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """values and weights in the order of a stable sort of the values, sorting each run of
    consecutive equal (value, weight) pairs as one entry: a replay logs a step's gap once per
    decoding request, so its gaps come in runs. A run's entries sit next to each other in
    the stable order too (equal values keep their index order, and no index falls between a
    run's), so expanding the sorted runs gives exactly the arrays `argsort(kind="stable")`
    gives, from a sort of far fewer entries."""
    n = len(values)
    starts = np.flatnonzero(np.r_[True, (values[1:] != values[:-1]) |
                                  (weights[1:] != weights[:-1])])
    if len(starts) > n // 2:  # few runs: sort the entries themselves
        order = np.argsort(values, kind="stable")
        return values[order], weights[order]
    counts = np.diff(np.r_[starts, n])
    order = np.argsort(values[starts], kind="stable")
    counts = counts[order]
    first = starts[order]
    return np.repeat(values[first], counts), np.repeat(weights[first], counts)


def weighted_stats(values: np.ndarray, weights: np.ndarray,
                   counts: np.ndarray | None = None) -> dict[str, float | None]:
    """Mean and percentiles of values that stand for `weights` samples each (the inverted
    CDF: the smallest value with at least p % of the weight at or below it).

    `counts`: entry i stands for `counts[i]` consecutive equal entries (a run; weights are
    then whole numbers, as token counts are): the same floats as the expanded entries give
    (see `_run_stats`) without expanding more than their products."""
    if counts is not None:
        return _run_stats(values, weights, counts)
    if len(values) == 0 or weights.sum() <= 0:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    v, w = _stable_sorted(values, weights)
    return _sorted_stats(v, np.cumsum(w), v * w)


def _sorted_stats(v: np.ndarray, cum: np.ndarray, products: np.ndarray) -> dict[str, float]:
    """`weighted_stats` of sorted values `v` (or sorted runs of them) given the cumulative
    weight at each one's end and every entry's value x weight."""
    total = cum[-1]
    out = {"mean": float(products.sum() / total)}
    for p in PERCENTILES:
        out[f"p{p}"] = float(v[min(len(v) - 1, int(np.searchsorted(cum, total * p / 100)))])
    return out


def _run_stats(values: np.ndarray, weights: np.ndarray,
               counts: np.ndarray) -> dict[str, float | None]:
    """`weighted_stats` of runs, bit for bit that of the expanded entries: a stable sort of
    the runs by value puts their entries where a stable sort of every entry does (equal
    values keep their index order, and no index falls between a run's); the cumulative
    weight at a run's end is the expanded one there (sums of whole numbers below 2**53 are
    exact), and the first entry reaching a percentile's weight lies in the first run whose
    end reaches it, with that run's value; the mean sums the expanded products in order."""
    if len(values) == 0 or (weights * counts).sum() <= 0:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    order = np.argsort(_sort_key(values), kind="stable")
    v, w, c = values[order], weights[order], counts[order]
    cum = np.cumsum(w * c)
    total = cum[-1]
    out = {"mean": float(_expanded_sum(v * w, c) / total)}
    for p in PERCENTILES:
        out[f"p{p}"] = float(v[min(len(v) - 1, int(np.searchsorted(cum, total * p / 100)))])
    return out


def _sort_key(values: np.ndarray) -> np.ndarray:
    """What a stable argsort of `values` may sort instead, in the same order: the bits of
    positive doubles as int64 (IEEE 754 orders positive finite doubles as their bit
    patterns, and two are equal exactly when their bits are: no -0.0 among them), which
    numpy's timsort compares faster than doubles; `values` themselves when any is not
    positive (or NaN). Inter-token gaps are positive."""
    if values.dtype == np.float64 and values.min() > 0.0:
        return values.view(np.int64)
    return values


SUM_LEAF = 1 << 18  # entries `_expanded_sum` expands at once (2 MiB of doubles)


def _expanded_sum(products: np.ndarray, counts: np.ndarray, leaf: int = SUM_LEAF) -> float:
    """`np.repeat(products, counts).sum()` bit for bit, without the expanded array (5 x 10^6
    doubles for 10^5 requests: 41 MB, which numpy asks the kernel to back with huge pages).
    numpy sums a contiguous double array pairwise (`DOUBLE_pairwise_sum`, numpy/_core/src/
    umath/loops_utils.h.src): n entries above 128 as the sum of the first n2 = n // 2 - (n // 2)
    % 8 and of the rest, each summed the same way, so a sum of the first n2 and a sum of the
    rest, each over its own contiguous array, added, is the same double. Splitting down to
    at most `leaf` entries (at least 128: numpy splits only above it) and summing each leaf's
    expansion keeps numpy's tree."""
    ends = np.cumsum(counts)
    n = int(ends[-1]) if len(ends) else 0
    if n <= leaf:
        return float(np.repeat(products, counts).sum())
    starts = ends - counts

    def part(lo: int, hi: int) -> float:
        if hi - lo > leaf:
            half = (hi - lo) // 2
            half -= half % 8
            return part(lo, lo + half) + part(lo + half, hi)
        a = int(np.searchsorted(ends, lo, side="right"))  # the run holding entry lo
        b = int(np.searchsorted(ends, hi - 1, side="right")) + 1  # and hi - 1, past it
        taken = np.minimum(ends[a:b], hi) - np.maximum(starts[a:b], lo)
        return float(np.repeat(products[a:b], taken).sum())

    return part(0, n)


@dataclass
class ServeReport:
    """The outcome of one replay (`serving.replay.serve`)."""
    setup: dict[str, Any]
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    timeline: dict[str, list[float]]
    # every inter-token gap as runs (value, count of equal gaps in a row), in the engines' log
    # order; `itl_s` expands them (a replay's summary reads the runs: 10^5 requests log ~5
    # million gaps in ~1 million runs)
    itl_runs: tuple[np.ndarray, np.ndarray] = field(
        repr=False, default_factory=lambda: (np.zeros(0), np.zeros(0, dtype=np.intp)))
    wall_s: float = 0.0  # wall-clock time of the replay (not deterministic)
    build_s: float = 0.0  # of which: tabulating the step-time oracle
    written: list[Path] = field(default_factory=list)  # files `write` wrote

    @property
    def itl_s(self) -> np.ndarray:
        """Every inter-token gap, one per token, in the engines' log order."""
        values, counts = self.itl_runs
        return np.repeat(values, counts)

    def to_json(self) -> dict[str, Any]:
        return {"setup": self.setup, "summary": self.summary,
                "simulated_requests_per_wall_s": (len(self.rows) / self.wall_s
                                                  if self.wall_s else None),
                "wall_s": self.wall_s, "oracle_build_s": self.build_s}

    def to_table(self) -> list[Any]:
        """The latency table and summary lines `sim serve` prints (krakenlm.console.Report)."""
        from ..console import table_of

        s, setup = self.summary, self.setup
        t = table_of(f"{setup['model']} ({setup['arch']}) on {setup['system']}, "
                     f"{setup['software']} ({setup['scheduler']}), TP {setup['tp']} x "
                     f"{setup['replicas']} replicas, trace {setup['trace']}: latency (ms)",
                     ("metric", "mean", "p50", "p90", "p95", "p99"), left=("metric",))
        for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"),
                           ("e2e_s", "E2E"), ("queue_s", "queueing delay")):
            t.add_row(label, *(_ms(s[key][k]) for k in ("mean", "p50", "p90", "p95", "p99")))
        tp = s["throughput"]
        items: list[Any] = [t, (
            f"{s['requests']:,} requests in {s['makespan_s']:,.1f} s: "
            f"{tp['requests_per_s']:.2f} requests/s, {tp['output_tokens_per_s']:,.0f} output "
            f"tokens/s, {tp['tokens_per_s']:,.0f} tokens/s ({s['steps']:,} engine steps)")]
        slo = s["slo"]
        if slo["ttft_s"] is not None or slo["tpot_s"] is not None:
            items.append(f"SLO (TTFT <= {slo['ttft_s']} s, TPOT <= {slo['tpot_s']} s): "
                         f"{slo['attainment']:.1%} of requests, goodput "
                         f"{slo['goodput_requests_per_s']:.2f} requests/s")
        kv, blocks = s["kv_cache"], setup["kv_cache"]
        items.append(f"KV cache: {blocks['blocks']:,} blocks of {blocks['block_size']} tokens per "
                     f"replica, mean use {kv['mean_used']:.1%}, peak {kv['max_used']:.1%}, "
                     f"{kv['preemptions']:,} preemptions, {kv['prefix_hit_tokens']:,} prompt "
                     "tokens from the prefix cache")
        net = setup.get("network")
        if net is not None:
            items.append(f"network between nodes: {net['gbps']:g} Gb/s per device and direction, "
                         f"{net['latency_s'] * 1e6:g} us (bandwidth from {net['source']}, "
                         f"latency from {net['latency_source']})")
        c = s["cost"]
        if c["usd_per_million_output_tokens"] is not None:
            items.append(f"cost: ${c['usd_per_million_output_tokens']:.3f} per million output "
                         f"tokens (${c['usd_per_million_tokens']:.3f} per million tokens; "
                         f"devices written off over {c['amortisation_years']:g} years)")
        items.append(f"replayed in {self.wall_s:.1f} s")
        if self.written:
            from ..console import Plain
            items.append(Plain("wrote " + ", ".join(str(p) for p in self.written)))
        return items

    def write(self, out: str | Path) -> list[Path]:
        """requests.csv, timeline.csv, summary.json (without wall-clock fields: byte-identical
        for a seed) and serve.png, each written atomically."""
        out = Path(out)
        # a disaggregated replay's rows carry their KV transfer after the common columns
        columns = REQUEST_COLUMNS + tuple(k for k in (self.rows[0] if self.rows else ())
                                          if k not in REQUEST_COLUMNS)
        paths = [write_csv_atomically(out / "requests.csv", columns,
                                      [{k: _cell(r[k]) for k in columns}
                                       for r in self.rows])]
        names = list(self.timeline)
        paths.append(write_csv_atomically(out / "timeline.csv", names, [
            {k: _cell(self.timeline[k][i]) for k in names}
            for i in range(len(self.timeline[names[0]]))]))
        paths.append(write_text_atomically(out / "summary.json", json.dumps(
            {"setup": self.setup, "summary": self.summary}, indent=2, sort_keys=True) + "\n"))
        paths.append(write_bytes_atomically(out / "serve.png", self.figure_png()))
        self.written = paths
        return paths

    def figure_png(self) -> bytes:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(2, 2, figsize=(12, 8))
        ttft = np.sort([r["ttft_s"] for r in self.rows])
        tpot = np.sort([r["tpot_s"] for r in self.rows if r["tpot_s"] is not None])
        for ax, values, what in ((axes[0, 0], ttft, "TTFT (s)"), (axes[0, 1], tpot, "TPOT (s)")):
            if len(values):
                ax.plot(values, np.arange(1, len(values) + 1) / len(values))
            ax.set_xlabel(what)
            ax.set_ylabel("fraction of requests")
            ax.grid(alpha=0.3)
        tl = self.timeline
        axes[1, 0].plot(tl["t_s"], tl["kv_used"], label="KV blocks in use (mean over replicas)")
        axes[1, 0].set_ylim(0, 1.05)
        axes[1, 0].set_xlabel("time (s)")
        axes[1, 0].set_ylabel("fraction of KV blocks")
        twin = axes[1, 0].twinx()
        twin.plot(tl["t_s"], tl["preemptions"], color="C3", label="preemptions per bin")
        twin.set_ylabel("preemptions")
        axes[1, 0].legend(loc="upper left", fontsize=8)
        axes[1, 1].plot(tl["t_s"], tl["running"], label="running")
        axes[1, 1].plot(tl["t_s"], tl["waiting"], label="waiting")
        axes[1, 1].set_xlabel("time (s)")
        axes[1, 1].set_ylabel("requests (all replicas)")
        axes[1, 1].legend(fontsize=8)
        s = self.setup
        fig.suptitle(f"{s['model']} on {s['system']} ({s['software']}, TP {s['tp']} x "
                     f"{s['replicas']}), trace {s['trace']}")
        return png_bytes(fig, dpi=100)


def png_bytes(fig, *, dpi: int) -> bytes:
    """The PNG of a matplotlib figure, laid out tight, then closed; written without the
    "Software" metadata, so the bytes do not change with the matplotlib version."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:,.1f}"


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return "" if value is None else value


@dataclass(frozen=True)
class RequestColumns:
    """What `summarise` reads of the request rows, in row order: arrival, queueing delay,
    TTFT, E2E and finish (s) as float arrays, the TPOT of the rows that have one (more than
    one output token) and which rows those are, and the output, prompt and prefix-cached token
    totals (ints). `of_rows` reads them from the rows; a replay builds them with its rows
    (`replay._rows`), so that the summary does not read ~10 columns back out of 10^5 dicts."""
    arrival_s: np.ndarray
    queue_s: np.ndarray
    ttft_s: np.ndarray
    e2e_s: np.ndarray
    finish_s: np.ndarray
    tpot_s: np.ndarray
    has_tpot: np.ndarray
    output_tokens: int
    prompt_tokens: int
    cached_tokens: int

    @classmethod
    def of_rows(cls, rows: list[dict[str, Any]]) -> RequestColumns:
        tpot = [r["tpot_s"] for r in rows]
        return cls(np.array([r["arrival_s"] for r in rows]),
                   np.array([r["queue_s"] for r in rows]),
                   np.array([r["ttft_s"] for r in rows]),
                   np.array([r["e2e_s"] for r in rows]),
                   np.array([r["finish_s"] for r in rows]),
                   np.array([t for t in tpot if t is not None]),
                   np.array([t is not None for t in tpot], dtype=bool),
                   sum([r["output_tokens"] for r in rows]),  # lists: a generator costs more
                   sum([r["prompt_tokens"] for r in rows]),
                   sum([r["cached_tokens"] for r in rows]))


def summarise(rows: list[dict[str, Any]], itl_s: np.ndarray, itl_weights: np.ndarray, *,
              duration_s: float,
              makespan_s: float, slo_ttft_s: float | None, slo_tpot_s: float | None,
              preemptions: int, kv_used: np.ndarray, usd_per_s: float,
              itl_counts: np.ndarray | None = None,
              columns: RequestColumns | None = None) -> dict[str, Any]:
    """The summary of a replay's rows and series; `itl_counts`: the gaps are runs
    (`weighted_stats`); `columns`: the rows' `RequestColumns` when the caller has them (else
    read from the rows)."""
    n = len(rows)
    c = columns if columns is not None else RequestColumns.of_rows(rows)
    ttft, e2e, queue, tpot = c.ttft_s, c.e2e_s, c.queue_s, c.tpot_s
    out_tokens = c.output_tokens
    all_tokens = out_tokens + c.prompt_tokens
    ok = np.ones(n, bool)
    if slo_ttft_s is not None:
        ok &= ttft <= slo_ttft_s
    if slo_tpot_s is not None:  # a row without a TPOT meets the TPOT SLO
        tpot_ok = np.ones(n, bool)
        tpot_ok[c.has_tpot] = tpot <= slo_tpot_s
        ok &= tpot_ok
    offered = (n - 1) / duration_s if n > 1 and duration_s > 0 else None
    served = n / makespan_s if makespan_s > 0 else None
    # overloaded: the queue keeps growing. A stable system's queueing delays are stationary; an
    # overloaded one's grow with the time: the last fifth of the requests (by arrival) waits
    # over a second on average and five times longer than the first fifth.
    by_arrival = np.argsort(c.arrival_s, kind="stable")
    fifth = max(1, n // 5)
    q_first = float(queue[by_arrival[:fifth]].mean()) if n else 0.0
    q_last = float(queue[by_arrival[-fifth:]].mean()) if n else 0.0
    overloaded = bool(n >= 50 and q_last > OVERLOAD_QUEUE_S and q_last > 5 * q_first)
    last_arrival = float(c.arrival_s.max())
    done = int(np.count_nonzero(c.finish_s <= last_arrival))
    cost = usd_per_s * makespan_s
    return {
        "requests": n,
        "duration_s": duration_s, "makespan_s": makespan_s,
        "offered_rate_per_s": offered,
        "throughput": {"requests_per_s": served,
                       "output_tokens_per_s": out_tokens / makespan_s if makespan_s else None,
                       "tokens_per_s": all_tokens / makespan_s if makespan_s else None},
        "ttft_s": _stats(ttft), "tpot_s": _stats(tpot), "itl_s": weighted_stats(itl_s, itl_weights, itl_counts),
        "e2e_s": _stats(e2e), "queue_s": _stats(queue),
        "slo": {"ttft_s": slo_ttft_s, "tpot_s": slo_tpot_s,
                "attainment": float(ok.mean()) if n else None,
                "goodput_requests_per_s": float(ok.sum()) / makespan_s if makespan_s else None},
        "kv_cache": {"mean_used": float(kv_used.mean()) if len(kv_used) else 0.0,
                     "max_used": float(kv_used.max()) if len(kv_used) else 0.0,
                     "preemptions": preemptions,
                     "prefix_hit_tokens": int(c.cached_tokens)},
        "cost": {"usd": cost,
                 "usd_per_million_output_tokens": cost / out_tokens * 1e6 if out_tokens else None,
                 "usd_per_million_tokens": cost / all_tokens * 1e6 if all_tokens else None,
                 "amortisation_years": AMORTISATION_YEARS},
        "overloaded": overloaded,
        "queue_first_fifth_mean_s": q_first, "queue_last_fifth_mean_s": q_last,
        "finished_by_last_arrival": done,
    }


def _last_index_per_bin(idx: np.ndarray, bins: int) -> np.ndarray:
    """Per bin the last position in `idx` holding it, -1 for none: from where the bins change
    when `idx` does not decrease (a replica's steps in time order), else by `maximum.at`."""
    last = np.full(bins, -1)
    steps = np.diff(idx)
    if (steps >= 0).all():
        ends = np.flatnonzero(np.r_[steps != 0, True])
        last[idx[ends]] = ends
    else:
        np.maximum.at(last, idx, np.arange(len(idx)))
    return last


def _bin_index(edges: np.ndarray, t: np.ndarray, bins: int) -> np.ndarray:
    """Per time in `t` its bin, `np.clip(np.searchsorted(edges, t, side="right") - 1, 0,
    bins - 1)`. For times in order (a replica's steps) from one search per edge instead of
    one per time: with below[j] the count of times before edge j, the edges at or below
    t[i] are those with below[j] <= i (t[i] >= edge j exactly when every time before the
    edge comes before t[i]), counted by a cumulative sum; times out of order search each."""
    n = len(t)
    if n > 1 and not (t[1:] >= t[:-1]).all():
        return np.clip(np.searchsorted(edges, t, side="right") - 1, 0, bins - 1)
    below = np.searchsorted(t, edges, side="left")
    at_or_below = np.cumsum(np.bincount(below, minlength=n + 1)[:n])
    return np.clip(at_or_below - 1, 0, bins - 1)


def timeline(engines, makespan_s: float, bins: int = TIMELINE_BINS) -> dict[str, list[float]]:
    """The engines' per-step records in `bins` equal time bins: KV blocks in use (mean over
    steps and replicas), running and waiting requests (summed over replicas, last step in the
    bin), preemptions in the bin."""
    edges = np.linspace(0.0, makespan_s, bins + 1) if makespan_s > 0 else np.zeros(bins + 1)
    running = np.zeros(bins)
    waiting = np.zeros(bins)
    preempt = np.zeros(bins)
    bin_parts, kv_parts = [np.zeros(0, dtype=np.intp)], [np.zeros(0)]
    for e in engines:
        tl = e.timeline
        t = packed_array(tl.t_s, float)
        if not len(t):
            continue
        idx = _bin_index(edges, t, bins)
        bin_parts.append(idx)
        kv_parts.append(np.array(tl.kv_used))
        last = _last_index_per_bin(idx, bins)
        seen = last >= 0
        fill = np.maximum.accumulate(np.where(seen, last, -1))
        has = fill >= 0
        # the records' values at the bins' last steps (`Timeline.values_at`: the same values
        # as the expanded columns there, without expanding ~10 values a request)
        running[has] += tl.values_at(1, fill[has])
        waiting[has] += tl.values_at(3, fill[has])
        cum = tl.values_at(4, np.maximum(fill, 0))  # the preemptions so far
        end = np.where(has, cum, 0.0)
        preempt += np.diff(np.r_[0.0, end])
    # per bin the steps' sum over the engines, added in engine and step order (as a loop of
    # `kv[i] += x` does: bincount's weighted sum runs through its input in order)
    idx = np.concatenate(bin_parts)
    kv = np.bincount(idx, weights=np.concatenate(kv_parts), minlength=bins).astype(float)
    kv_n = np.bincount(idx, minlength=bins).astype(float)
    centre = (edges[:-1] + edges[1:]) / 2
    kv_mean = np.divide(kv, kv_n, out=np.zeros(bins), where=kv_n > 0)
    return {"t_s": centre.tolist(), "kv_used": kv_mean.tolist(), "running": running.tolist(),
            "waiting": waiting.tolist(), "preemptions": preempt.tolist()}
