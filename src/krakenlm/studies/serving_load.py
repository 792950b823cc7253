"""Kraken under load (`krakenlm study serving`): the standard block (gpt), the parallel block
and the parameter-matched Kraken served by one engine on one system, with requests whose
lengths are resampled from the Azure 2023 conversation trace and Poisson arrivals.

Per architecture and arrival seed: the p99 TTFT and TPOT at each request rate of a grid, and
the capacity under the SLOs (`serving.capacity.find_capacity`: the largest rate whose p99 TTFT
and TPOT meet them, bisected to `tolerance`). Means over the seeds with 95 % t intervals
(`studies.stats`). The Kraken of the TTFT study (`arch_variant(..., "kraken", tp)`, the engine
rule) has one KV head per query head; when the model groups its KV heads (n_kv_heads <
n_heads), a Kraken with the model's grouping ratio is added (`kraken-gqa`), so the KV-cache
cost of the architecture and of its head layout are told apart. The report explains the
numbers from what the replays record: the KV blocks each variant gets, preemptions, the
step times at batch 1 and under load.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import KrakenError
from ..fileio import write_bytes_atomically, write_text_atomically
from ..models import ModelConfig, get_preset
from ..serving.capacity import find_capacity
from ..serving.replay import serve
from ..serving.report import png_bytes
from ..serving.traces import scale_rate, synthetic_trace
from ..simulator import arch_variant
from .stats import Interval, mean_interval

DEFAULT_TRACE = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "traces" / \
    "azure2023_conv.csv"


@dataclass(frozen=True)
class ServingPlan:
    """What `krakenlm study serving` runs (module docstring): the model, system, software profile
    and TP, the request rates of the grid (requests/s), the arrival seeds, the requests per
    replay, the SLOs on p99 TTFT and TPOT (s), the relative tolerance of the capacity bisection,
    and the trace whose lengths are resampled."""
    model: str = "gpt3-6.7b"
    system: str = "h100-80gb-x8"
    software: str = "vllm"
    tp: int = 4
    rates: tuple[float, ...] = (4.0, 8.0, 16.0, 24.0)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    requests: int = 3000
    slo_ttft_s: float = 1.0
    slo_tpot_s: float = 0.05
    tolerance: float = 0.02
    trace: str = str(DEFAULT_TRACE)

    def check(self) -> None:
        if len(self.seeds) < 2:
            raise KrakenError("--seeds needs at least two seeds (the intervals are over seeds)")
        if not self.rates or any(not (math.isfinite(r) and r > 0) for r in self.rates):
            raise KrakenError(f"--rates must be positive request rates, got {self.rates}")
        if self.requests < 20:
            raise KrakenError(f"--requests must be at least 20, got {self.requests}")
        for name, v in (("--slo-ttft-s", self.slo_ttft_s), ("--slo-tpot-s", self.slo_tpot_s)):
            if not (math.isfinite(v) and v > 0):
                raise KrakenError(f"{name} must be a positive number of seconds, got {v}")
        if not Path(self.trace).is_file():
            raise KrakenError(f"trace {self.trace} does not exist; pass --trace (the Azure "
                              "2023 conversation trace, ../shared/data/traces/azure2023_conv.csv)")


def variants(base: ModelConfig, tp: int) -> tuple[dict[str, ModelConfig], str]:
    """The architectures compared, and a sentence on the KV-head grouping."""
    out = {"gpt": base, "parallel": arch_variant(base, "parallel", tp),
           "kraken": arch_variant(base, "kraken", tp)}
    kv = base.n_kv_heads or base.n_heads
    if kv == base.n_heads:
        return out, (f"the model has no grouped KV heads (n_kv_heads = n_heads = {kv}): every "
                     "variant keeps one KV head per query head, so no grouped Kraken is added")
    group = base.n_heads // kv
    k = out["kraken"]
    # the KV-head count dividing the Kraken's heads whose grouping is nearest the model's
    kv_k = min((d for d in range(1, k.n_heads + 1) if k.n_heads % d == 0),
               key=lambda d: (abs(k.n_heads / d - group), d))
    out["kraken-gqa"] = k.replace(n_kv_heads=kv_k)
    same = "the same ratio" if k.n_heads // kv_k == group else \
        f"{k.n_heads // kv_k} query heads per KV head, the nearest ratio that divides its heads"
    return out, (f"the model groups {group} query heads per KV head; `kraken-gqa` is the "
                 f"engine-rule Kraken ({k.n_heads} heads per sub-layer) with {kv_k} KV heads "
                 f"({same})")


@dataclass
class ServingStudy:
    """The result of the serving study: its plan and note, a row per (architecture, seed, rate)
    replay, the capacity per architecture and seed (requests/s), each architecture's setup (KV
    blocks, ...), the replay at each seed's capacity with the SLO missed just above it, and the
    report written. Intervals are means over seeds with 95 % t intervals (studies.stats)."""
    plan: ServingPlan
    note: str
    runs: list[dict[str, Any]] = field(default_factory=list)  # one per arch, seed, rate
    capacity: dict[str, list[float]] = field(default_factory=dict)  # arch -> per seed
    setup: dict[str, dict[str, Any]] = field(default_factory=dict)  # arch -> KV blocks etc.
    # arch -> per seed: the replay at the capacity and the SLO missed first just above it
    at_capacity: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    report: Path | None = None

    def interval(self, arch: str, rate: float, key: str) -> Interval:
        return mean_interval([r[key] for r in self.runs
                              if r["arch"] == arch and r["rate_per_s"] == rate])

    def at(self, arch: str, key: str) -> Interval:
        """The mean over seeds of `key` in the replays at each seed's capacity."""
        return mean_interval([r[key] for r in self.at_capacity.get(arch, [])])

    def missed_first(self, arch: str) -> str:
        """The SLO the probes just above the capacity missed first, over the seeds ("ttft",
        "tpot", "both" or "mixed"; "" when no seed recorded one)."""
        seen = {r["missed_above"] for r in self.at_capacity.get(arch, []) if r["missed_above"]}
        return "" if not seen else seen.pop() if len(seen) == 1 else "mixed"

    def to_json(self) -> dict[str, Any]:
        return {"plan": self.plan.__dict__, "note": self.note, "runs": self.runs,
                "capacity_per_seed": self.capacity, "at_capacity": self.at_capacity,
                "setup": self.setup, "report": str(self.report) if self.report else None}

    def to_table(self) -> list[Any]:
        from ..console import table_of
        t = table_of(f"Capacity under p99 TTFT <= {self.plan.slo_ttft_s} s and TPOT <= "
                     f"{self.plan.slo_tpot_s} s ({len(self.plan.seeds)} seeds, 95 % interval)",
                     ("arch", "capacity (req/s)", "KV blocks", "TTFT p99 at lowest rate (s)"),
                     left=("arch",))
        low = min(self.plan.rates)
        for arch, caps in self.capacity.items():
            t.add_row(arch, mean_interval(caps).text("{:.2f}"),
                      f"{self.setup[arch]['kv_blocks']:,}",
                      self.interval(arch, low, "ttft_p99_s").text("{:.3f}"))
        return [t]


def run_serving_study(out: Path, plan: ServingPlan = ServingPlan(), command: str = "",
                      progress=None) -> ServingStudy:
    plan.check()
    base = get_preset(plan.model)
    out.mkdir(parents=True, exist_ok=True)  # before the replays: a bad --out fails at once
    models, note = variants(base, plan.tp)
    study = ServingStudy(plan, note)
    lengths = f"trace:{plan.trace}"
    for arch, config in models.items():
        caps = []
        for seed in plan.seeds:
            for rate in plan.rates:
                trace = synthetic_trace(np.random.default_rng(seed), plan.requests, rate, lengths)
                r = _replay(trace, config, plan, arch)
                s = r.summary
                study.setup.setdefault(arch, {"kv_blocks": r.setup["kv_cache"]["blocks"],
                                              "bytes_per_block":
                                                  r.setup["kv_cache"]["bytes_per_block"]})
                study.runs.append({
                    "arch": arch, "seed": seed, "rate_per_s": rate,
                    "requests": s["requests"], "ttft_p50_s": s["ttft_s"]["p50"],
                    "ttft_p99_s": s["ttft_s"]["p99"], "tpot_p50_s": s["tpot_s"]["p50"],
                    "tpot_p99_s": s["tpot_s"]["p99"],
                    "goodput_requests_per_s": s["slo"]["goodput_requests_per_s"],
                    "preemptions": s["kv_cache"]["preemptions"],
                    "overloaded": s["overloaded"]})
            base_trace = synthetic_trace(np.random.default_rng(seed), plan.requests,
                                         min(plan.rates), lengths)
            cap = find_capacity(
                lambda scale, t=base_trace, c=config, a=arch: _replay(scale_rate(t, scale), c,
                                                                       plan, a),
                base_trace.rate_per_s(), slo_ttft_s=plan.slo_ttft_s, slo_tpot_s=plan.slo_tpot_s,
                percentile=99, tolerance=plan.tolerance)
            caps.append(cap.rate_per_s)
            study.at_capacity.setdefault(arch, []).append(_at_capacity(cap, plan))
            if progress is not None:
                progress(f"{arch} seed {seed}: capacity {cap.rate_per_s:.2f} requests/s")
        study.capacity[arch] = caps
    write_text_atomically(out / "serving.json", json.dumps(study.to_json(), indent=2) + "\n")
    write_bytes_atomically(out / "serving.png", _figure(study))
    study.report = out / "report.md"
    write_text_atomically(study.report, _markdown(study, command))
    return study


def _at_capacity(cap, plan: ServingPlan) -> dict[str, Any]:
    """What the replay at a capacity shows (its p99 TTFT and TPOT, median TPOT, the KV cache's
    peak use and its preemptions), and which SLO the nearest probe above it missed: "ttft",
    "tpot" or "both" ("ttft" for a probe stopped early: its TTFT misses decided it)."""
    s = cap.report.summary
    above = [e for e in cap.evaluations if not e["meets"] and e["rate_scale"] > cap.rate_scale]
    missed = ""
    if above:
        e = min(above, key=lambda e: e["rate_scale"])
        if e["stopped_early"]:
            missed = "ttft"
        else:
            ttft = e["ttft_p99_s"] is not None and e["ttft_p99_s"] > plan.slo_ttft_s
            tpot = e["tpot_p99_s"] is not None and e["tpot_p99_s"] > plan.slo_tpot_s
            missed = "both" if ttft and tpot else "ttft" if ttft else "tpot" if tpot else ""
    return {"rate_per_s": cap.rate_per_s, "ttft_p99_s": s["ttft_s"]["p99"],
            "tpot_p50_s": s["tpot_s"]["p50"], "tpot_p99_s": s["tpot_s"]["p99"],
            "kv_max_used": s["kv_cache"]["max_used"],
            "preemptions": s["kv_cache"]["preemptions"], "missed_above": missed}


FULL = 0.95  # a KV cache whose peak use reaches this is full (blocks are freed and reused)


def _limits(study: ServingStudy) -> str:
    """What limits GPT and Kraken at their capacities, read off the replays there."""
    k_tpot, g_tpot = (study.at(a, "tpot_p50_s").mean for a in ("kraken", "gpt"))
    k_kv, g_kv = (study.at(a, "kv_max_used").mean for a in ("kraken", "gpt"))
    k_pre, g_pre = (study.at(a, "preemptions").mean for a in ("kraken", "gpt"))
    missed = {a: study.missed_first(a) or "no" for a in ("gpt", "kraken")}
    text = (f"* At their capacities GPT's median TPOT is {g_tpot * 1e3:.1f} ms and Kraken's "
            f"{k_tpot * 1e3:.1f} ms ({k_tpot / g_tpot:.2f}x); their KV caches peak at "
            f"{g_kv:.0%} and {k_kv:.0%} of their blocks ({g_pre:.0f} and {k_pre:.0f} "
            f"preemptions); just above, the probes miss the {missed['gpt']} SLO (GPT) and the "
            f"{missed['kraken']} SLO (Kraken).")
    k_bytes = study.setup["kraken"]["bytes_per_block"]
    g_bytes = study.setup["gpt"]["bytes_per_block"]
    k_blocks, g_blocks = study.setup["kraken"]["kv_blocks"], study.setup["gpt"]["kv_blocks"]
    if k_kv >= FULL:
        text += (f" Kraken's KV cache is full at its capacity: it holds {k_blocks / g_blocks:.0%} "
                 f"of GPT's blocks ({k_bytes / g_bytes:.1f}x GPT's KV bytes per token and "
                 "device), so requests start waiting for blocks at a lower rate"
                 + ("; GPT's cache is full at its own capacity too: the cache decides both."
                    if g_kv >= FULL else "."))
    elif k_tpot > g_tpot and k_bytes > g_bytes:
        text += (f" A decode step reads every running request's KV, {k_bytes / g_bytes:.1f}x "
                 "GPT's bytes per token for Kraken, so its steps lengthen faster with the "
                 "running batch.")
    if missed["gpt"] == missed["kraken"] == "tpot" and \
            max(k_tpot, g_tpot) < 0.5 * study.plan.slo_tpot_s:
        text += (" Both capacities end where the p99 TPOT crosses its SLO: the medians are "
                 "under half of it, so the tail is the steps that carry prompt chunks, where "
                 "Kraken's prefill is faster.")
    return text


def _replay(trace, config: ModelConfig, plan: ServingPlan, arch: str):
    return serve(trace, config, plan.system, software=plan.software, tp=plan.tp,
                 model_name=f"{plan.model} {arch}", skip_long=True,
                 slo_ttft_s=plan.slo_ttft_s, slo_tpot_s=plan.slo_tpot_s)


def _figure(study: ServingStudy) -> bytes:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    rates = sorted(study.plan.rates)
    for i, arch in enumerate(study.capacity):
        iv = [study.interval(arch, r, "ttft_p99_s") for r in rates]
        ax.plot(rates, [v.mean for v in iv], "o-", color=f"C{i}", label=arch)
        ax.fill_between(rates, [v.low for v in iv], [v.high for v in iv], color=f"C{i}",
                        alpha=0.2)
        c = mean_interval(study.capacity[arch])
        bx.bar(i, c.mean, color=f"C{i}", yerr=[[c.mean - c.low], [c.high - c.mean]], capsize=4)
    ax.axhline(study.plan.slo_ttft_s, color="grey", ls=":", label="TTFT SLO")
    ax.set_yscale("log")
    ax.set_xlabel("request rate (/s)")
    ax.set_ylabel("p99 TTFT (s), mean and 95 % interval")
    ax.legend()
    bx.set_xticks(range(len(study.capacity)), list(study.capacity))
    bx.set_ylabel("capacity under the SLOs (requests/s)")
    p = study.plan
    fig.suptitle(f"{p.model}, TP {p.tp} on {p.system}, {p.software}: Azure conversation lengths, "
                 f"Poisson arrivals, {len(p.seeds)} seeds")
    return png_bytes(fig, dpi=110)


def _markdown(study: ServingStudy, command: str) -> str:
    p = study.plan
    caps = {a: mean_interval(c) for a, c in study.capacity.items()}
    lines = [f"# Kraken under load: {p.model}, TP {p.tp} on {p.system} ({p.software})", "",
             f"`{command}`" if command else "", "",
             (f"{p.requests} requests per replay, lengths resampled from `{Path(p.trace).name}` "
             f"(those beyond the model's context dropped), Poisson arrivals, seeds "
             f"{', '.join(map(str, p.seeds))}; SLOs: p99 TTFT <= {p.slo_ttft_s} s and p99 "
             f"TPOT <= {p.slo_tpot_s} s. Means with 95 % t intervals over the seeds. "
             f"KV-head grouping: {study.note}."), "",
             "![p99 TTFT against rate, capacity under SLO](serving.png)", "",
             "| arch | capacity (req/s) | KV blocks per replica | KV bytes per block |",
             "|---|---:|---:|---:|"]
    for arch, c in caps.items():
        s = study.setup[arch]
        lines.append(f"| {arch} | {c.text('{:.2f}')} | {s['kv_blocks']:,} | "
                     f"{s['bytes_per_block']:,} |")
    if study.at_capacity:
        lines += ["", ("At each seed's capacity (the replay there; means over the seeds) and the "
                       "SLO the nearest probe above it missed:"), "",
                  ("| arch | p99 TTFT (s) | median TPOT (ms) | p99 TPOT (ms) | KV cache peak | "
                   "preemptions | missed above |"), "|---|---:|---:|---:|---:|---:|---|"]
        for arch in caps:
            if arch not in study.at_capacity:
                continue
            lines.append(f"| {arch} | {study.at(arch, 'ttft_p99_s').mean:.3f} | "
                         f"{study.at(arch, 'tpot_p50_s').mean * 1e3:.1f} | "
                         f"{study.at(arch, 'tpot_p99_s').mean * 1e3:.1f} | "
                         f"{study.at(arch, 'kv_max_used').mean:.0%} | "
                         f"{study.at(arch, 'preemptions').mean:.0f} | "
                         f"{study.missed_first(arch) or '-'} |")
    lines += ["", "| rate (/s) | " + " | ".join(f"{a} p99 TTFT (s)" for a in caps) + " | "
              + " | ".join(f"{a} preemptions" for a in caps) + " |",
              "|---:|" + "---:|" * (2 * len(caps))]
    for rate in sorted(p.rates):
        cells = [study.interval(a, rate, "ttft_p99_s").text("{:.3f}") for a in caps]
        pre = [f"{study.interval(a, rate, 'preemptions').mean:.0f}" for a in caps]
        lines.append(f"| {rate:g} | " + " | ".join(cells) + " | " + " | ".join(pre) + " |")
    lines += ["", "## Where Kraken's advantage grows or vanishes", "", *_explain(study, caps)]
    return "\n".join(lines) + "\n"


def _change(a: float, b: float) -> str:
    """'12 % lower' / '5 % higher': a against b."""
    pct = 100 * (a / b - 1)
    return f"{abs(pct):.0f} % {'lower' if pct < 0 else 'higher'}"


def _explain(study: ServingStudy, caps: dict[str, Interval]) -> list[str]:
    """Statements read off the study's own numbers (each says which way they point)."""
    low, high = min(study.plan.rates), max(study.plan.rates)
    ttft = {r: (study.interval("kraken", r, "ttft_p99_s").mean,
                study.interval("gpt", r, "ttft_p99_s").mean) for r in (low, high)}
    pre = {a: study.interval(a, high, "preemptions").mean for a in ("gpt", "kraken")}
    k_low, g_low = ttft[low]
    k_high, g_high = ttft[high]
    out = [(f"* At {low:g} requests/s Kraken's p99 TTFT is {_change(k_low, g_low)} than GPT's "
           f"({k_low:.3f} s vs {g_low:.3f} s); at {high:g} requests/s it is "
           f"{_change(k_high, g_high)} ({k_high:.3f} s vs {g_high:.3f} s). At a low rate a "
           "request's TTFT is about one prefill step, where Kraken's all-reduces overlap its "
           "sub-layers' work (the TTFT study's batch-1 gain); under load TTFT adds the wait "
           "behind other requests' prefills and the mixed steps they share with decodes, "
           "which the step-time gain shortens only in proportion, while a smaller KV cache "
           "lengthens the wait once it fills.")]
    kb, gb = study.setup["kraken"]["kv_blocks"], study.setup["gpt"]["kv_blocks"]
    kbytes = study.setup["kraken"]["bytes_per_block"]
    gbytes = study.setup["gpt"]["bytes_per_block"]
    out.append(f"* KV cache: a block of Kraken's KV takes {kbytes:,} bytes against GPT's "
               f"{gbytes:,} per device, so one replica holds {kb:,} blocks against {gb:,}. "
               f"At {high:g} requests/s the replays preempt {pre['kraken']:.0f} (Kraken) and "
               f"{pre['gpt']:.0f} (GPT) requests on average"
               + (": the cache is not the limit at these rates." if max(pre.values()) == 0
                  else ": preempted requests are recomputed and batches stay small."))
    ratio = caps["kraken"].mean / caps["gpt"].mean
    overlap = caps["kraken"].low is not None and caps["gpt"].low is not None and \
        caps["kraken"].low <= caps["gpt"].high and caps["gpt"].low <= caps["kraken"].high
    out.append(f"* Capacity under the SLOs: Kraken {caps['kraken'].text('{:.2f}')} against GPT "
               f"{caps['gpt'].text('{:.2f}')} requests/s ({ratio:.2f}x; the intervals "
               f"{'overlap: no difference is shown' if overlap else 'do not overlap'}); the "
               f"parallel block {caps['parallel'].text('{:.2f}')}. At GPT's capacity the "
               f"{study.plan.requests} requests of a replay arrive over "
               f"{study.plan.requests / caps['gpt'].mean:.0f} s; a replay that ends before its "
               "queue settles overstates the capacity, so replays of a few hundred requests give "
               "upper bounds.")
    if "kraken" in study.at_capacity and "gpt" in study.at_capacity:
        out.append(_limits(study))
    if "kraken-gqa" in caps:
        out.append(f"* With the model's KV-head grouping the Kraken holds "
                   f"{study.setup['kraken-gqa']['kv_blocks']:,} blocks and serves "
                   f"{caps['kraken-gqa'].text('{:.2f}')} requests/s against the engine-rule "
                   f"Kraken's {caps['kraken'].text('{:.2f}')}: the difference is its head "
                   "layout's KV size, not the parallel sub-layers.")
    return out
