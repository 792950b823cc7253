"""The Kraken TTFT study: the paper's inference grid on hardware we do not have, simulated.

Kraken paper setting: GPT-3 shapes 1.3B..175B (and a 65B shape), prompts of 128 and 2048
tokens, TP 4 and 8 with Kraken degree d = TP, batch 1, on 8x A100 with NVSwitch; baselines the
standard block (Megatron TP, two blocking all-reduces per layer) and the GPT-J/PaLM parallel
block (one). The paper reports a 35.6 % geometric-mean TTFT reduction with TensorRT-LLM.

Every configuration is simulated with the same hardware description, GPU kernel calibration
and software profile (default `trtllm`, the paper's runtime). The Kraken engines are
parameter-matched presets: by default the "engine rule" (heads of 128 or 64 that fused
attention runs, `kraken-<shape>-<d>way`), or the spec's head-count rule (`-hc`: heads of
314-453 dimensions, which engines run unfused). The report has the table per system, the
geometric means, a TTFT plot, a one-layer runtime breakdown in the paper's categories, and
optionally a sensitivity section: how far the geometric mean moves when the assumptions that
are not measured on the same hardware change (collective library, contention share, software
stack, head rule). Memory is not checked: like the paper's engines, configurations are timed
whether or not a deployment would hold them (175B at TP 4 does not fit in 80 GB devices).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..models import get_preset
from ..simulator import simulate
from ..simulator.constants.software import Collectives, SoftwareProfile, load_software
from .plots import plot_layer_breakdown, plot_ttft_grid

SHAPES = ("gpt3-1.3b", "gpt3-6.7b", "gpt3-13b", "gpt-65b", "gpt3-175b")
PROMPTS = (128, 2048)
DEGREES = (4, 8)
ARCHS = ("gpt", "parallel", "kraken")
SYSTEMS = ("a100-40gb-x8", "a100-80gb-x8", "h100-80gb-x8", "h200-x8", "b200-x8")
PAPER_GEOMEAN_REDUCTION_PCT = 35.6


@dataclass(frozen=True)
class TTFTRow:
    """One cell of the Kraken TTFT study (module docstring): the GPT-3 shape, prompt tokens and TP
    (Kraken degree d = TP), each architecture's simulated TTFT in seconds ("gpt", "parallel",
    "kraken"), one prefill layer's time per architecture and category (s), the system, each
    architecture's attention path, the nominal 80 % interval of each TTFT (Result.interval) and
    what the query extrapolates beyond. `kraken_reduction` is 1 - TTFT(kraken) / TTFT(gpt)."""
    shape: str
    prompt_tokens: int
    tp: int
    ttft_s: dict[str, float]  # by architecture
    layer_s: dict[str, dict[str, float]]  # one prefill layer, by architecture and category
    system: str = ""
    attention: dict[str, str] = field(default_factory=dict)  # attention path by architecture
    # the nominal 80 % interval of each TTFT (Result.interval), and what it extrapolates beyond
    ttft_interval_s: dict[str, list[float]] = field(default_factory=dict)
    extrapolation: str = ""

    @property
    def kraken_reduction(self) -> float:
        return 1 - self.ttft_s["kraken"] / self.ttft_s["gpt"]


def engines(shape: str, tp: int, rule: str = "engine") -> dict[str, object]:
    suffix = "-hc" if rule == "head-count" else ""
    return {"gpt": get_preset(shape), "parallel": get_preset(f"parallel-{shape}"),
            "kraken": get_preset(f"kraken-{shape}-{tp}way{suffix}")}


def run_grid(system: str = "a100-80gb-x8", batch: int = 1, shapes=SHAPES, prompts=PROMPTS,
             degrees=DEGREES, software: str | SoftwareProfile = "trtllm",
             kraken_rule: str = "engine", comm_core_share: float | None = None) -> list[TTFTRow]:
    rows = []
    for shape in shapes:
        for prompt in prompts:
            for tp in degrees:
                ttft, layers, paths, bands, beyond = {}, {}, {}, {}, ""
                for arch, config in engines(shape, tp, kraken_rule).items():
                    extra = {} if comm_core_share is None else {"comm_core_share": comm_core_share}
                    result = simulate(config, system, tp, batch, prompt, 1, check_memory=False,
                                      software=software, **extra)
                    ttft[arch] = result.ttft_s
                    layers[arch] = dict(result.layer_categories["prefill"])
                    paths[arch] = result.attention_path
                    if result.interval and "ttft_s" in result.interval:
                        bands[arch] = result.interval["ttft_s"]
                        beyond = result.interval["extrapolation"] or ""
                rows.append(TTFTRow(shape, prompt, tp, ttft, layers, system, paths, bands,
                                    beyond))
    return rows


def geomean_reduction(rows: list[TTFTRow], baseline: str = "gpt") -> float:
    ratios = [row.ttft_s["kraken"] / row.ttft_s[baseline] for row in rows]
    return 1 - math.exp(sum(map(math.log, ratios)) / len(ratios))


# ------------------------------------------------------------------------------ sensitivity
def _with_collectives(profile: SoftwareProfile, library: str) -> SoftwareProfile:
    return dataclasses.replace(profile, collectives=Collectives(
        all_reduce=library, custom_max_bytes=profile.collectives.custom_max_bytes))


def sensitivity(system: str, batch: int = 1, software: str = "trtllm", shapes=SHAPES,
                prompts=PROMPTS, degrees=DEGREES) -> list[dict[str, Any]]:
    """The geometric-mean reduction under alternative assumptions, one changed at a time."""
    base = load_software(software)
    variants: list[tuple[str, dict[str, Any]]] = [
        ("as calibrated", {}),
        ("NCCL all-reduce instead of the framework's", {"software": _with_collectives(base, "nccl")}),
        ("collective takes 5 % of the SMs (instead of 10 %)", {"core_share": 0.05}),
        ("collective takes 20 % of the SMs", {"core_share": 0.20}),
        ("no fitted host time per step (GPU time and launches only)",
         {"software": dataclasses.replace(base, host_systems={})}),
        ("vLLM (piecewise CUDA graphs, its kernels)", {"software": load_software("vllm")}),
        ("eager PyTorch (host-issued kernels)", {"software": load_software("eager")}),
        ("Kraken head-count rule (wide heads, unfused)", {"kraken_rule": "head-count"}),
    ]
    out = []
    for label, change in variants:
        rows = run_grid(system, batch, shapes, prompts, degrees,
                        software=change.get("software", base),
                        kraken_rule=change.get("kraken_rule", "engine"),
                        comm_core_share=change.get("core_share"))
        out.append({"variant": label, "geomean_reduction": geomean_reduction(rows),
                    "vs_parallel": geomean_reduction(rows, "parallel")})
    return out


# ---------------------------------------------------------------------------------- report
def write_report(rows: list[TTFTRow], out: Path, *, system: str, batch: int,
                 software: str = "trtllm", kraken_rule: str = "engine",
                 sensitivity_rows: dict[str, list[dict[str, Any]]] | None = None,
                 command: str | None = None) -> Path:
    """One report for rows of one or several systems (grouped by `row.system`)."""
    out.mkdir(parents=True, exist_ok=True)
    systems = list(dict.fromkeys(r.system or system for r in rows))
    by_system = {s: [r for r in rows if (r.system or system) == s] for s in systems}
    command = command or (f"krakenlm study ttft --system {system} --batch {batch} "
                          f"--software {software} --out {out}")
    lines = ["# Kraken TTFT study (simulated)", "",
             f"Batch {batch}, one generated token, software profile `{software}`, Kraken "
             f"engines by the {kraken_rule} rule. Command: `{command}`.", "",
             f"The Kraken paper reports a {PAPER_GEOMEAN_REDUCTION_PCT} % geometric-mean TTFT "
             "reduction with TensorRT-LLM on 8x A100 80GB.", "",
             "| system | configurations | Kraken vs standard (geomean) | Kraken vs parallel |",
             "|---|---:|---:|---:|"]
    for s, rs in by_system.items():
        lines.append(f"| {s} | {len(rs)} | **{100 * geomean_reduction(rs):.1f} %** | "
                     f"{100 * geomean_reduction(rs, 'parallel'):.1f} % |")
    lines.append("")
    for s, rs in by_system.items():
        stem = s.replace("/", "_")
        plot_ttft_grid(rs, out / f"ttft-{stem}.png", title=f"Simulated TTFT on {s}, batch {batch}")
        lines += [f"## {s}", "", f"![TTFT]({'ttft-' + stem}.png)", "",
                  "The 80 % interval of each TTFT comes from the leave-one-source-out residuals "
                  "of comparable public measurements (`Result.interval`); the three "
                  "architectures share it (same device, TP, batch and phase), so it bounds each "
                  "TTFT, not the reduction, whose error the three mostly share.", "",
                  "| model | prompt | TP = d | standard ms (80 % interval) | parallel ms | Kraken ms (80 % interval) | Kraken vs standard | Kraken vs parallel |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rs:
            t = {k: v * 1e3 for k, v in r.ttft_s.items()}

            def band(arch: str) -> str:
                b = r.ttft_interval_s.get(arch)
                return f" ({b[0] * 1e3:.1f}-{b[1] * 1e3:.1f})" if b else ""
            lines.append(f"| {r.shape} | {r.prompt_tokens} | {r.tp} | {t['gpt']:.2f}{band('gpt')} | "
                         f"{t['parallel']:.2f} | {t['kraken']:.2f}{band('kraken')} | "
                         f"{-100 * r.kraken_reduction:+.1f} % | "
                         f"{100 * (t['kraken'] / t['parallel'] - 1):+.1f} % |")
        beyond = sorted({r.extrapolation for r in rs if r.extrapolation})
        if beyond:
            lines += ["", "Extrapolated beyond the validated cases: " + "; ".join(beyond) + "."]
        unfused = sorted({p for r in rs for p in r.attention.values() if p != "fused"})
        if unfused:
            lines += ["", "Attention ran unfused in some engines: " + "; ".join(unfused) + "."]
        lines.append("")
    focus_rows = by_system[systems[0]]
    focus = max(focus_rows, key=lambda r: (r.shape == "gpt3-13b", r.prompt_tokens == 2048, r.tp))
    plot_layer_breakdown(focus.layer_s, out / "layer_breakdown.png",
                         title=f"One prefill layer on {systems[0]}: {focus.shape}, prompt "
                               f"{focus.prompt_tokens}, TP = d = {focus.tp}")
    lines += [f"## One layer ({systems[0]}, {focus.shape}, prompt {focus.prompt_tokens}, "
              f"TP = d = {focus.tp})", "", "![one layer](layer_breakdown.png)", "",
              "| category | " + " | ".join(ARCHS) + " |", "|---|" + "---:|" * len(ARCHS)]
    categories = sorted({c for layer in focus.layer_s.values() for c in layer})
    for c in categories:
        lines.append(f"| {c} | " + " | ".join(f"{1e3 * focus.layer_s[a].get(c, 0.0):.3f}"
                                             for a in ARCHS) + " |")
    if sensitivity_rows:
        names = list(sensitivity_rows)
        lines += ["", "## Sensitivity", "",
                  "Each line changes one assumption that is not measured on this hardware; the "
                  "range is how much the study's headline depends on them. Geometric-mean TTFT "
                  "reduction of Kraken over the standard block (over the parallel block in "
                  "parentheses).", "",
                  "| variant | " + " | ".join(names) + " |",
                  "|---|" + "---:|" * len(names)]
        variants = [v["variant"] for v in sensitivity_rows[names[0]]]
        by = {n: {v["variant"]: v for v in rs} for n, rs in sensitivity_rows.items()}
        for variant in variants:
            lines.append(f"| {variant} | " + " | ".join(
                f"{100 * by[n][variant]['geomean_reduction']:.1f} % "
                f"({100 * by[n][variant]['vs_parallel']:.1f} %)" for n in names) + " |")
        lines.append("| **range** | " + " | ".join(
            f"{100 * min(v['geomean_reduction'] for v in rs):.1f} % to "
            f"{100 * max(v['geomean_reduction'] for v in rs):.1f} %"
            for rs in sensitivity_rows.values()) + " |")
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    (out / "rows.json").write_text(json.dumps(
        {"batch": batch, "software": software, "kraken_rule": kraken_rule,
         "geomean_ttft_reduction": {s: geomean_reduction(rs) for s, rs in by_system.items()},
         "sensitivity": sensitivity_rows or {},
         "rows": [{"system": r.system or system, "shape": r.shape,
                   "prompt_tokens": r.prompt_tokens, "tp": r.tp, "ttft_s": r.ttft_s,
                   "attention": r.attention, "layer_s": r.layer_s,
                   "ttft_interval_s": r.ttft_interval_s,
                   "extrapolation": r.extrapolation or None} for r in rows]},
        indent=2) + "\n")
    return report


@dataclass
class StudyReport:
    """`krakenlm study ttft`: the report written and the grid's rows per system."""
    report: Path
    rows: list[TTFTRow]
    systems: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"report": str(self.report),
                "geomean_reduction_pct": {name: 100 * geomean_reduction(self._of(name))
                                          for name in self.systems}}

    def to_table(self) -> list[Any]:
        from ..console import Plain

        return [Plain(f"{name}: geometric-mean TTFT reduction of Kraken over the standard block "
                      f"{100 * geomean_reduction(rs):.1f} % ({len(rs)} configurations)")
                for name, rs in ((n, self._of(n)) for n in self.systems)]

    def _of(self, system: str) -> list[TTFTRow]:
        return [r for r in self.rows if r.system == system]


def run_study(out: Path, systems: list[str] | None = None, batch: int = 1,
              software: str = "trtllm", kraken_rule: str = "engine",
              with_sensitivity: bool = False, command: str | None = None,
              console=None) -> StudyReport:
    """The grid on every system (`["all"]`: SYSTEMS; default a100-80gb-x8), optionally its
    sensitivity, and the report in `out`. `console` (a rich Console on stderr) shows a status
    line per system."""
    from contextlib import nullcontext

    from ..errors import KrakenError
    from ..simulator.run import KRAKEN_RULES

    if batch < 1:
        raise KrakenError(f"--batch must be at least 1, got {batch}")
    if kraken_rule not in KRAKEN_RULES:
        raise KrakenError(f"--kraken-rule {kraken_rule!r}: use one of {', '.join(KRAKEN_RULES)}")
    systems = list(SYSTEMS) if systems == ["all"] else (systems or ["a100-80gb-x8"])
    status = console.status if console is not None else (lambda _: nullcontext())
    rows = []
    for name in systems:
        with status(f"simulating the grid on {name}..."):
            rows += run_grid(name, batch, software=software, kraken_rule=kraken_rule)
    sens = None
    if with_sensitivity:
        sens = {}
        for name in systems:
            with status(f"sensitivity on {name}..."):
                sens[name] = sensitivity(name, batch, software)
    report = write_report(rows, out, system=systems[0], batch=batch, software=software,
                          kraken_rule=kraken_rule, sensitivity_rows=sens, command=command)
    return StudyReport(report, rows, systems)
