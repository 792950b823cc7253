"""Capacity under SLOs: the largest request rate whose TTFT and TPOT percentiles meet them.

The trace's arrivals are scaled (`traces.scale_rate`): from the trace's own rate, the scale
is doubled until the SLOs fail (or halved until they hold), then bisected geometrically until
the highest passing and lowest failing scales are within `tolerance` (1 %) of each other. A
replay whose queue keeps growing (`summary["overloaded"]`) fails whatever its tails say. Every
replay after the first reuses the step-time oracle (kept per process). If even 1/1024 of the
rate fails, no rate meets the SLOs: an error saying which percentile misses and by how much.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from .replay import ReplayStopped, ServeError
from .report import PERCENTILES, ServeReport

MAX_HALVINGS = 10
MAX_DOUBLINGS = 16


@dataclass
class Capacity:
    """The result of find_capacity (module docstring): the largest passing scale of the trace's
    arrival rate and that rate (requests/s), the percentile the SLOs bound (e.g. 99) and the SLOs
    (TTFT and TPOT, seconds; None: unbounded), the replay at the capacity, and a row per replay
    of the search (rate, scale, the percentile TTFT and TPOT, overloaded, meets)."""
    rate_scale: float
    rate_per_s: float
    percentile: int
    slo_ttft_s: float | None
    slo_tpot_s: float | None
    report: ServeReport  # the replay at the capacity
    evaluations: list[dict] = field(default_factory=list)

    def to_table(self) -> list:
        """The replays of the search, the capacity and the report at it (console.Report)."""
        from ..console import table_of

        p = self.percentile
        t = table_of(f"Capacity search: p{p} TTFT <= {self.slo_ttft_s} s, TPOT <= "
                     f"{self.slo_tpot_s} s", ("rate /s", "scale", f"TTFT p{p} ms",
                                              f"TPOT p{p} ms", "overloaded", "meets"))
        for row in sorted(self.evaluations, key=lambda r: r["rate_scale"]):
            ttft, tpot = row[f"ttft_p{p}_s"], row[f"tpot_p{p}_s"]
            t.add_row(f"{row['rate_per_s']:.3f}", f"{row['rate_scale']:.4g}",
                      "stopped" if ttft is None else f"{ttft * 1e3:,.1f}",
                      "-" if tpot is None else f"{tpot * 1e3:,.1f}",
                      "yes" if row["overloaded"] else "", "yes" if row["meets"] else "no")
        goodput = self.report.summary["slo"]["goodput_requests_per_s"]
        line = (f"capacity: {self.rate_per_s:.3f} requests/s ({self.rate_scale:.4g}x the "
                f"trace's rate), goodput {goodput:.3f} requests/s")
        return [t, line, *self.report.to_table()]

    def to_json(self) -> dict:
        return {"capacity_rate_per_s": self.rate_per_s, "rate_scale": self.rate_scale,
                "percentile": self.percentile, "slo_ttft_s": self.slo_ttft_s,
                "slo_tpot_s": self.slo_tpot_s, "evaluations": self.evaluations,
                "at_capacity": self.report.to_json()}


def ttft_misses_deciding(requests: int, percentile: int) -> int:
    """How many of `requests` TTFTs above the SLO put the percentile above it: numpy's linear
    percentile sits between sorted values floor((n - 1) p / 100) and the next, so once the m
    largest miss with n - m <= that index, it misses whatever the rest are."""
    return requests - math.floor((requests - 1) * percentile / 100)


def meets(report: ServeReport, percentile: int, slo_ttft_s: float | None,
          slo_tpot_s: float | None) -> bool:
    s, key = report.summary, f"p{percentile}"
    if s["overloaded"]:
        return False
    if slo_ttft_s is not None and s["ttft_s"][key] > slo_ttft_s:
        return False
    tpot = s["tpot_s"][key]
    return slo_tpot_s is None or tpot is None or tpot <= slo_tpot_s


def find_capacity(replay: Callable[[float], ServeReport], base_rate_per_s: float, *,
                  slo_ttft_s: float | None, slo_tpot_s: float | None, percentile: int = 99,
                  tolerance: float = 0.01,
                  progress: Callable[[dict], None] | None = None,
                  start_scale: float = 1.0) -> Capacity:
    """`replay(scale)` replays the trace at `scale` times its rate; it may raise
    `ReplayStopped` (a probe given up once its TTFT misses decide the percentile: it fails).
    `start_scale`: the first scale tried (the warm start, e.g. the static throughput bound
    over the trace's rate); halving goes down to 1/1024 of the trace's rate whatever it is."""
    if slo_ttft_s is None and slo_tpot_s is None:
        raise ServeError("a capacity search needs an SLO: give --slo-ttft-s and/or --slo-tpot-s")
    if percentile not in PERCENTILES:
        raise ServeError(f"--slo-percentile {percentile} is not one of "
                         f"{', '.join(map(str, PERCENTILES))}")
    if not (math.isfinite(base_rate_per_s) and base_rate_per_s > 0):
        raise ServeError("a capacity search needs a trace with at least two arrival times")
    evaluations: list[dict] = []
    reports: dict[float, ServeReport] = {}

    def ok(scale: float) -> bool:
        try:
            report = reports[scale] = replay(scale)
        except ReplayStopped:
            row = {"rate_scale": scale, "rate_per_s": base_rate_per_s * scale,
                   f"ttft_p{percentile}_s": None, f"tpot_p{percentile}_s": None,
                   "overloaded": True, "meets": False, "stopped_early": True}
        else:
            s, key = report.summary, f"p{percentile}"
            row = {"rate_scale": scale, "rate_per_s": base_rate_per_s * scale,
                   f"ttft_p{percentile}_s": s["ttft_s"][key],
                   f"tpot_p{percentile}_s": s["tpot_s"][key], "overloaded": s["overloaded"],
                   "meets": meets(report, percentile, slo_ttft_s, slo_tpot_s),
                   "stopped_early": False}
        evaluations.append(row)
        if progress is not None:
            progress(row)
        return row["meets"]

    lo = hi = start_scale
    if ok(start_scale):
        for _ in range(MAX_DOUBLINGS):
            hi *= 2
            if not ok(hi):
                break
            lo = hi
        else:
            raise ServeError(f"the SLOs still hold at {hi:g}x the trace's rate; the capacity is "
                             "beyond what the search tries (the trace may be too short)")
    else:
        floor = 2.0 ** -MAX_HALVINGS
        while lo / 2 >= floor * (1 - 1e-9):
            lo /= 2
            if ok(lo):
                break
            hi = lo
        else:
            worst = next(r for r in reversed(evaluations) if not r["stopped_early"]) \
                if any(not r["stopped_early"] for r in evaluations) else evaluations[-1]
            raise ServeError(
                f"no request rate meets the SLOs: at {lo:g}x the trace's rate the p{percentile} "
                f"TTFT is {worst[f'ttft_p{percentile}_s'] or math.inf:.3g} s and TPOT "
                f"{worst[f'tpot_p{percentile}_s'] or 0:.3g} s (SLOs {slo_ttft_s} / {slo_tpot_s} s)")
    while hi / lo - 1 > tolerance:
        mid = math.sqrt(lo * hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return Capacity(lo, base_rate_per_s * lo, percentile, slo_ttft_s, slo_tpot_s, reports[lo],
                    evaluations)
