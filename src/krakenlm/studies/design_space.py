"""`krakenlm study design-space`: the hardware paper's design experiments re-run, next to its
conclusions, plus a multi-objective search and the Kraken co-design.

Every design and the A100 baseline are timed by the template (tile) model (design/evaluate.py
says why). Experiments 1-3 fix tp = 8 and the workload (GPT-3 175B, batch 8, prompt 1024,
gen 128) so that only the hardware knob moves; 4-5 let each design pick its deployment.

What "the paper" says here is LLMCompass (ISCA 2024, arXiv 2312.03134): our spec records its
headline (designs with less compute, or DRAM instead of HBM, reach up to 3.41x performance
per cost over an A100); the per-experiment conclusions below are our reading of its
architectural-implications section, stated qualitatively because our spec does not carry
its per-figure numbers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..design.evaluate import Evaluator
from ..design.knobs import space_from_dict
from ..design.objectives import Objective
from ..design.search import search
from ..fileio import write_csv_atomically, write_text_atomically

BASE = "a100-80gb-x8"
PAPER_BEST_PERF_PER_COST = 3.41
FIXED = Objective("latency", "gpt3-175b", prompt_tokens=1024, gen_tokens=128, batch=8,
                  metric="e2e")
LATENCY = Objective("latency", "gpt3-175b", prompt_tokens=1024, gen_tokens=128, batch=1,
                    metric="e2e")
THROUGHPUT = Objective("throughput", "gpt3-175b", prompt_tokens=1024, gen_tokens=128)
KRAKEN = Objective("latency", "gpt3-13b", prompt_tokens=2048, gen_tokens=1, batch=1,
                   metric="ttft")


def _kib_per_core(macs_per_core: int) -> float:
    return 192 * macs_per_core / 1024  # the A100's 192 KiB per 4 x 16 x 16 MACs, kept per MAC


# (label, design): constant 110,592 MACs per cycle and 64 FP32 lanes per core
COMPUTE_ORGANISATIONS = [
    ("108 cores x 4 lanes x 16x16 (A100)", {}),
    ("216 x 2 x 16x16", {"cores": 216, "lanes": 2, "vector_width": 32,
                         "local_sram_kib": _kib_per_core(512)}),
    ("54 x 8 x 16x16", {"cores": 54, "lanes": 8, "vector_width": 8,
                        "local_sram_kib": _kib_per_core(2048)}),
    ("108 x 1 x 32x32", {"lanes": 1, "systolic_array": 32, "vector_width": 64}),
    ("27 x 4 x 32x32", {"cores": 27, "systolic_array": 32, "local_sram_kib": _kib_per_core(4096),
                        "vector_width": 64}),
    ("27 x 1 x 64x64", {"cores": 27, "lanes": 1, "systolic_array": 64, "vector_width": 256,
                        "local_sram_kib": _kib_per_core(4096)}),
]
BANDWIDTHS_GB_PER_S = (500, 1000, 1500, 2039, 3000, 4000)
LOCAL_KIB = (48, 96, 192, 384, 768)
GLOBAL_MIB = (10, 20, 40, 80, 160)
LATENCY_DESIGNS = [
    ("A100", {}),
    ("64 cores, 128 KiB local, 20 MiB global", {"cores": 64, "local_sram_kib": 128,
                                                 "global_buffer_mib": 20}),
    ("54 cores, 96 KiB local, 10 MiB global", {"cores": 54, "local_sram_kib": 96,
                                                "global_buffer_mib": 10}),
]
THROUGHPUT_DESIGNS = [
    ("A100", {}),
    ("A100 compute, DDR5 16 ch x 64 GiB", {"memory": "DDR5", "memory_units": 16,
                                           "memory_gib_per_unit": 64}),
    ("54 cores, DDR5 16 ch x 64 GiB", {"cores": 54, "memory": "DDR5", "memory_units": 16,
                                       "memory_gib_per_unit": 64}),
    ("54 cores, LPDDR5 24 ch x 32 GiB", {"cores": 54, "memory": "LPDDR5", "memory_units": 24,
                                         "memory_gib_per_unit": 32}),
    ("54 cores, HBM2e 5 x 16 GiB", {"cores": 54}),
]
SEARCH_SPACE = {
    "cores": {"low": 16, "high": 160},
    "lanes": [2, 4, 8],
    "local_sram_kib": {"low": 64, "high": 512, "log": True},
    "global_buffer_mib": {"low": 8, "high": 128, "log": True},
    "memory": ["HBM2e", "HBM3", "DDR5", "LPDDR5"],
    "memory_units": {"low": 2, "high": 32},
    "memory_gib_per_unit": {"low": 8, "high": 256, "log": True},
}
KRAKEN_LINKS_GB_PER_S = (2.5, 10, 25, 100)   # per link; 12 links per device
KRAKEN_LATENCIES_US = (0.5, 2.0, 10.0)
KRAKEN_DEGREES = (2, 4, 8)

PAPER = {
    "compute": "At the same MACs per cycle, decoding barely changes (memory-bound) and prefill "
               "changes little until arrays get so large that matrix shapes leave them idle; "
               "larger arrays cost less area per MAC.",
    "bandwidth": "Decode latency falls almost in proportion to memory bandwidth; prefill is "
                 "nearly insensitive to it.",
    "buffer": "Buffer sizes beyond what the mapper's tiles need buy little; the latency-oriented "
              "design shrinks the local buffer.",
    "latency": "Fewer cores and a smaller buffer keep latency close to the A100's with a "
               "smaller, cheaper die: better performance per cost.",
    "throughput": "Replacing HBM with large, cheap DRAM lets far larger batches fit: up to "
                  f"{PAPER_BEST_PERF_PER_COST}x performance per cost over an A100.",
}


def _rows(ev: Evaluator, labelled: list[tuple[str, dict]]) -> list[dict[str, Any]]:
    out = []
    for label, design in labelled:
        row = ev.evaluate(design)
        row["label"] = label
        out.append(row)
    return out


def run_experiments(search_trials: int = 300, seed: int = 0,
                    progress=lambda message: None) -> dict[str, Any]:
    res: dict[str, Any] = {}
    progress("compute organisation, bandwidth and buffer sweeps")
    fixed = Evaluator(BASE, FIXED)
    tp8 = {"tp": 8}
    res["compute"] = _rows(fixed, [(lab, {**d, **tp8}) for lab, d in COMPUTE_ORGANISATIONS])
    res["bandwidth"] = _rows(fixed, [(f"{bw} GB/s", {"memory_bandwidth_gb_per_s": bw, **tp8})
                                     for bw in BANDWIDTHS_GB_PER_S])
    res["local"] = _rows(fixed, [(f"{k} KiB", {"local_sram_kib": k, **tp8}) for k in LOCAL_KIB])
    res["global"] = _rows(fixed, [(f"{m} MiB", {"global_buffer_mib": m, **tp8})
                                  for m in GLOBAL_MIB])
    progress("latency- and throughput-oriented designs")
    lat, thr = Evaluator(BASE, LATENCY), Evaluator(BASE, THROUGHPUT)
    res["latency"] = _rows(lat, LATENCY_DESIGNS)
    res["throughput"] = _rows(thr, THROUGHPUT_DESIGNS)
    progress(f"NSGA-II search, {search_trials} trials per objective")
    space = space_from_dict(dict(SEARCH_SPACE))
    res["search_throughput"] = search(space, thr, search_trials, seed=seed)
    res["search_latency"] = search(space_from_dict(dict(SEARCH_SPACE)), lat, search_trials,
                                   seed=seed)
    progress("Kraken co-design")
    res["kraken"] = kraken_codesign()
    return res


def kraken_codesign() -> list[dict[str, Any]]:
    """TTFT of gpt / parallel / kraken at each degree over link bandwidth x latency."""
    ev = Evaluator(BASE, KRAKEN, with_baseline=False)
    rows = []
    for tp in KRAKEN_DEGREES:
        for bw in KRAKEN_LINKS_GB_PER_S:
            for lat in KRAKEN_LATENCIES_US:
                ttft = {}
                for arch in ("gpt", "parallel", "kraken"):
                    r = ev.evaluate({"arch": arch, "tp": tp, "link_gb_per_s": bw,
                                     "link_latency_us": lat})
                    ttft[arch] = r["ttft_s"] if r["feasible"] else math.nan
                rows.append({"degree": tp, "link_gb_per_s": bw,
                             "device_gb_per_s": bw * 12, "link_latency_us": lat,
                             "ttft_gpt_s": ttft["gpt"], "ttft_parallel_s": ttft["parallel"],
                             "ttft_kraken_s": ttft["kraken"],
                             "kraken_reduction": 1 - ttft["kraken"] / ttft["gpt"],
                             "kraken_vs_parallel": 1 - ttft["kraken"] / ttft["parallel"]})
    return rows


# ---------------------------------------------------------------------------------- report
def _rel(rows: list[dict], key: str, ref: dict) -> list[float]:
    return [r[key] / ref[key] if r["feasible"] else math.nan for r in rows]


def _plots(res: dict[str, Any], out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, key, title in ((axes[0], "bandwidth", "memory bandwidth"),
                           (axes[1], "local", "local buffer per core"),
                           (axes[2], "global", "global buffer")):
        rows = res[key]
        ref = next(r for r in rows if r["feasible"])
        base_row = res["compute"][0]
        labels = [r["label"] for r in rows]
        for metric, style in (("ttft_s", "o-"), ("tpot_s", "s--")):
            ax.plot(labels, [r[metric] / base_row[metric] if r["feasible"] else math.nan
                             for r in rows], style, label=metric.replace("_s", ""))
        del ref
        ax.set_title(f"{title} (GPT-3 175B, TP 8, batch 8)")
        ax.set_ylabel("latency / A100's")
        ax.tick_params(axis="x", rotation=30)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "memory_and_buffers.png", dpi=110)
    plt.close(fig)
    names.append("memory_and_buffers.png")

    fig, ax = plt.subplots(figsize=(9, 4))
    rows = res["compute"]
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], _rel(rows, "ttft_s", rows[0]), 0.4, label="TTFT / A100")
    ax.bar([i + 0.2 for i in x], _rel(rows, "tpot_s", rows[0]), 0.4, label="TPOT / A100")
    ax.plot(list(x), _rel(rows, "die_area_mm2", rows[0]), "kD", label="die area / A100")
    ax.set_xticks(list(x), [r["label"] for r in rows], rotation=20, fontsize=8)
    ax.set_title("compute organisation at constant MACs per cycle (template model)")
    ax.axhline(1, color="grey", lw=0.8)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "compute_organisation.png", dpi=110)
    plt.close(fig)
    names.append("compute_organisation.png")

    for key, title in (("search_throughput", "throughput (tokens/s)"),
                       ("search_latency", "latency objective (1 / e2e s)")):
        s = res[key]
        fig, ax = plt.subplots(figsize=(7, 5))
        feas = [r for r in s["rows"] if r["feasible"]]
        bad = [r for r in s["rows"] if not r["feasible"]]
        ax.scatter([r["system_usd"] / 1e3 for r in feas], [r["perf"] for r in feas], s=12,
                   c=[r["die_area_mm2"] for r in feas], cmap="viridis", label="feasible")
        ax.scatter([r["system_usd"] / 1e3 for r in bad], [0] * len(bad), s=10, marker="x",
                   color="red", label=f"infeasible ({len(bad)})")
        front = sorted(s["front"], key=lambda r: r["system_usd"])
        ax.plot([r["system_usd"] / 1e3 for r in front], [r["perf"] for r in front], "k.-",
                lw=0.8, label="Pareto front (perf, $, area)")
        b = s["baseline"]
        ax.plot([b["system_usd"] / 1e3], [b["perf"]], "r*", ms=15, label="A100 x8")
        ax.set_xlabel("system cost (k$, model estimate)")
        ax.set_ylabel(title)
        ax.set_title(f"NSGA-II, {s['trials']} trials, seed {s['seed']} (colour: die mm^2)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        name = f"pareto_{key.split('_')[1]}.png"
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        names.append(name)

    fig, axes = plt.subplots(1, len(KRAKEN_LATENCIES_US), figsize=(14, 4), sharey=True)
    for ax, lat in zip(axes, KRAKEN_LATENCIES_US):
        for d in KRAKEN_DEGREES:
            rows = [r for r in res["kraken"] if r["degree"] == d and r["link_latency_us"] == lat]
            ax.plot([r["device_gb_per_s"] for r in rows],
                    [100 * r["kraken_reduction"] for r in rows], "o-", label=f"d = {d}")
        ax.set_xscale("log")
        ax.set_xlabel("interconnect GB/s per device (12 links)")
        ax.set_title(f"link latency {lat:g} us")
        ax.axhline(0, color="grey", lw=0.8)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("Kraken TTFT reduction vs standard block (%)")
    axes[0].legend()
    fig.suptitle("Kraken co-design: GPT-3 13B, prompt 2048, batch 1, TP = d (template model)")
    fig.tight_layout()
    fig.savefig(out / "kraken_codesign.png", dpi=110)
    plt.close(fig)
    names.append("kraken_codesign.png")
    return names


def _table(rows: list[dict], ref: dict, perf_ratio: bool = False) -> list[str]:
    head = "| design | TTFT s | TPOT ms | e2e s | die mm^2 | $/device | "
    head += "tp | batch | perf/$ vs A100 |" if perf_ratio else "TTFT / A100 | TPOT / A100 |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if not r["feasible"]:
            lines.append(f"| {r['label']} | rejected: {r['reason']} |" + " |" * 8)
            continue
        cells = [r["label"], f"{r['ttft_s']:.3f}", f"{1e3 * r['tpot_s']:.1f}",
                 f"{r['e2e_s']:.2f}", f"{r['die_area_mm2']:.0f}", f"{r['device_usd']:,.0f}"]
        if perf_ratio:
            cells += [str(r["tp"]), str(r["batch"]), f"{r['perf_per_usd_vs_base']:.2f}x"]
        else:
            cells += [f"{r['ttft_s'] / ref['ttft_s']:.2f}", f"{r['tpot_s'] / ref['tpot_s']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _best(s: dict) -> dict:
    feas = [r for r in s["rows"] if r["feasible"]]
    return max(feas, key=lambda r: r["perf_per_usd_vs_base"])


def _knobs(row: dict) -> str:
    parts = []
    for k, v in row.items():
        if k.startswith("knob_"):
            parts.append(f"{k[5:]}={v:.3g}" if isinstance(v, float) else f"{k[5:]}={v}")
    return ", ".join(parts)


def write_report(res: dict[str, Any], out: Path, command: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    plots = _plots(res, out)
    from ..hardware.cost import MEMORY_PRICE_SOURCES, MEMORY_USD_PER_GIB
    base = res["compute"][0]
    L = [f"# Design-space study (`{command}`)", "",
         "Base: 8x A100 80GB (NVSwitch), timed like every design by the template (tile) model "
         "(not the measured-kernel A100 calibration), with the trtllm host profile. Cost: "
         "krakenlm.hardware.cost (die area -> dies per wafer, Murphy yield, wafer price; memory "
         "$/GiB; packaging; board). Memory prices: " + "; ".join(
             f"{t} ${MEMORY_USD_PER_GIB[t]:g}/GiB ({MEMORY_PRICE_SOURCES[t]})"
             for t in ("HBM2e", "HBM3", "DDR5", "LPDDR5")) + ".", ""]
    sections = [("compute", "1. Compute organisation at constant MACs per cycle", False),
                ("bandwidth", "2. Memory bandwidth (capacity fixed at 80 GB)", False),
                ("local", "3a. Local buffer per core", False),
                ("global", "3b. Global buffer", False)]
    L += ["Experiments 1-3: GPT-3 175B, TP 8, batch 8, prompt 1024, gen 128.", ""]
    for key, title, _ in sections:
        L += [f"## {title}", "", f"Paper: {PAPER.get(key, PAPER['buffer'])}", ""]
        L += _table(res[key], base) + [""]
        L += [f"Ours: {_verdict(key, res)}", ""]
    for key, title, obj in (("latency", "4. Latency-oriented design", LATENCY),
                            ("throughput", "5. Throughput-oriented design", THROUGHPUT)):
        L += [f"## {title}", "", f"Objective: {obj.describe()}; tp and batch chosen per design.",
              "", f"Paper: {PAPER[key]}", ""]
        L += _table(res[key], res[key][0], perf_ratio=True) + [""]
        s = res[f"search_{key}"]
        best = _best(s)
        L += [f"NSGA-II search ({s['trials']} trials, seed {s['seed']}, objectives: perf, "
              f"system $, die area): best performance per $ **{best['perf_per_usd_vs_base']:.2f}x"
              f"** the A100 ({_knobs(best)}; tp {best['tp']}, batch {best['batch']}, die "
              f"{best['die_area_mm2']:.0f} mm^2, ${best['device_usd']:,.0f} per device); "
              f"{sum(not r['feasible'] for r in s['rows'])} trials rejected "
              f"({_reasons(s['rows'])}). Pareto front: {len(s['front'])} designs, "
              f"plot `pareto_{key}.png`.", ""]
        L += [f"Ours: {_verdict(key, res)}", ""]
    L += ["## 6. Kraken co-design (interconnect x architecture)", "",
          "GPT-3 13B, prompt 2048, batch 1, TTFT; Kraken degree d = TP; the standard block and "
          "Kraken at the same TP and interconnect; 12 links per device on a switch.", "",
          "| d | GB/s per device | link latency us | TTFT standard ms | TTFT Kraken ms | "
          "Kraken reduction | vs parallel |", "|---|---|---|---|---|---|---|"]
    for r in res["kraken"]:
        L.append(f"| {r['degree']} | {r['device_gb_per_s']:g} | {r['link_latency_us']:g} | "
                 f"{1e3 * r['ttft_gpt_s']:.1f} | {1e3 * r['ttft_kraken_s']:.1f} | "
                 f"{100 * r['kraken_reduction']:.1f} % | {100 * r['kraken_vs_parallel']:.1f} % |")
    L += ["", f"Ours: {_kraken_verdict(res['kraken'])}", ""]
    L += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    path = out / "report.md"
    write_text_atomically(path, "\n".join(L))
    rows = [dict(r) for key in ("compute", "bandwidth", "local", "global", "latency",
                                "throughput") for r in res[key]]
    cols = sorted({k for r in rows for k in r})
    write_csv_atomically(out / "experiments.csv", cols, rows)
    write_csv_atomically(out / "kraken_codesign.csv", list(res["kraken"][0]), res["kraken"])
    return path


def _reasons(rows: list[dict]) -> str:
    kinds: dict[str, int] = {}
    for r in rows:
        if not r["feasible"]:
            kind = ("reticle" if "reticle" in r["reason"] else "die edge" if "edge" in r["reason"]
                    else "parts" if "parts hold" in r["reason"] else "memory fit"
                    if "fit" in r["reason"] else "other")
            kinds[kind] = kinds.get(kind, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "none"


def _spread(rows: list[dict], key: str) -> tuple[float, float]:
    vals = [r[key] / rows[0][key] for r in rows if r["feasible"]]
    return min(vals), max(vals)


def _verdict(key: str, res: dict) -> str:
    rows = res[key]
    if key == "compute":
        t_lo, t_hi = _spread(rows, "ttft_s")
        d_lo, d_hi = _spread(rows, "tpot_s")
        a_lo, a_hi = _spread(rows, "die_area_mm2")
        return (f"TTFT spans {t_lo:.2f}-{t_hi:.2f}x the A100's, TPOT {d_lo:.2f}-{d_hi:.2f}x, die "
                f"area {a_lo:.2f}-{a_hi:.2f}x across the organisations.")
    if key == "bandwidth":
        first, last = rows[0], rows[-1]
        bw = BANDWIDTHS_GB_PER_S[-1] / BANDWIDTHS_GB_PER_S[0]
        return (f"{bw:.0f}x the bandwidth: TPOT {first['tpot_s'] / last['tpot_s']:.2f}x faster, "
                f"TTFT {first['ttft_s'] / last['ttft_s']:.2f}x.")
    if key in ("local", "global"):
        t_lo, t_hi = _spread(rows, "ttft_s")
        d_lo, d_hi = _spread(rows, "tpot_s")
        return (f"TTFT {t_lo:.3f}-{t_hi:.3f}x and TPOT {d_lo:.3f}-{d_hi:.3f}x the smallest "
                "buffer's over the feasible sizes.")
    best = _best(res[f"search_{key}"])
    hand = max((r for r in rows[1:] if r["feasible"]), key=lambda r: r["perf_per_usd_vs_base"],
               default=None)
    text = f"best hand-picked design {hand['perf_per_usd_vs_base']:.2f}x ({hand['label']}), " \
        if hand else ""
    text += f"search {best['perf_per_usd_vs_base']:.2f}x"
    if key == "throughput":
        text += (f" against the paper's {PAPER_BEST_PERF_PER_COST}x: "
                 f"{best['perf_per_usd_vs_base'] / PAPER_BEST_PERF_PER_COST:.2f} of it. See "
                 "docs/design-space.md for why the gap")
    return text + "."


def _kraken_verdict(rows: list[dict]) -> str:
    ok = [r for r in rows if not math.isnan(r["kraken_reduction"])]
    top = max(ok, key=lambda r: r["kraken_reduction"])
    low = min(ok, key=lambda r: r["kraken_reduction"])
    return (f"the reduction peaks at {100 * top['kraken_reduction']:.1f} % (d = {top['degree']}, "
            f"{top['device_gb_per_s']:g} GB/s per device, {top['link_latency_us']:g} us links) "
            f"and is smallest at {100 * low['kraken_reduction']:.1f} % (d = {low['degree']}, "
            f"{low['device_gb_per_s']:g} GB/s, {low['link_latency_us']:g} us).")
