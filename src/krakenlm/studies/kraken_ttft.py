"""The Kraken TTFT study: the paper's inference grid on hardware we do not have, simulated.

Kraken paper setting: GPT-3 shapes 1.3B..175B (and a 65B shape), prompts of 128 and 2048
tokens, TP 4 and 8 with Kraken degree d = TP, batch 1, on 8x A100 with NVSwitch; baselines the
standard block (Megatron TP, two blocking all-reduces per layer) and the GPT-J/PaLM parallel
block (one). The paper reports a 35.6 % geometric-mean TTFT reduction with TensorRT-LLM.

Every configuration is simulated with the same hardware description and calibration; the
Kraken engines are the parameter-matched `kraken-<shape>-<d>way` presets (spec rule). The
report has the table, the geometric mean, a TTFT plot and a one-layer runtime breakdown in the
paper's categories (GEMM, GEMM overlapped with AllReduce, attention, LayerNorm, exposed
AllReduce, ...). Memory is not checked: like the paper's engines, configurations are timed
whether or not a deployment would hold them (175B at TP 4 does not fit in 80 GB devices).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..models import get_preset
from ..simulator import simulate
from .plots import plot_layer_breakdown, plot_ttft_grid

SHAPES = ("gpt3-1.3b", "gpt3-6.7b", "gpt3-13b", "gpt-65b", "gpt3-175b")
PROMPTS = (128, 2048)
DEGREES = (4, 8)
ARCHS = ("gpt", "parallel", "kraken")
PAPER_GEOMEAN_REDUCTION_PCT = 35.6


@dataclass(frozen=True)
class TTFTRow:
    shape: str
    prompt_tokens: int
    tp: int
    ttft_s: dict[str, float]  # by architecture
    layer_s: dict[str, dict[str, float]]  # one prefill layer, by architecture and category

    @property
    def kraken_reduction(self) -> float:
        return 1 - self.ttft_s["kraken"] / self.ttft_s["gpt"]


def engines(shape: str, tp: int) -> dict[str, object]:
    standard = get_preset(shape)
    return {"gpt": standard, "parallel": get_preset(f"parallel-{shape}"),
            "kraken": get_preset(f"kraken-{shape}-{tp}way")}


def run_grid(system: str = "a100-80gb-x8", batch: int = 1, shapes=SHAPES, prompts=PROMPTS,
             degrees=DEGREES) -> list[TTFTRow]:
    rows = []
    for shape in shapes:
        for prompt in prompts:
            for tp in degrees:
                ttft, layers = {}, {}
                for arch, config in engines(shape, tp).items():
                    result = simulate(config, system, tp, batch, prompt, 1, check_memory=False)
                    ttft[arch] = result.ttft_s
                    layers[arch] = dict(result.layer_categories["prefill"])
                rows.append(TTFTRow(shape, prompt, tp, ttft, layers))
    return rows


def geomean_reduction(rows: list[TTFTRow]) -> float:
    ratios = [row.ttft_s["kraken"] / row.ttft_s["gpt"] for row in rows]
    return 1 - math.exp(sum(map(math.log, ratios)) / len(ratios))


def write_report(rows: list[TTFTRow], out: Path, *, system: str, batch: int) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    plot_ttft_grid(rows, out / "ttft.png", title=f"Simulated TTFT on {system}, batch {batch}")
    focus = max(rows, key=lambda r: (r.shape == "gpt3-13b", r.prompt_tokens == 2048, r.tp))
    plot_layer_breakdown(focus.layer_s, out / "layer_breakdown.png",
                         title=f"One prefill layer: {focus.shape}, prompt {focus.prompt_tokens}, "
                               f"TP = d = {focus.tp}")
    reduction = geomean_reduction(rows)
    lines = [
        "# Kraken TTFT study (simulated)", "",
        f"System `{system}`, batch {batch}, one generated token. Command: `krakenlm study ttft "
        f"--system {system} --batch {batch} --out {out}`.", "",
        f"Geometric-mean TTFT reduction of Kraken over the standard block: **{100 * reduction:.1f} %** "
        f"(the Kraken paper reports {PAPER_GEOMEAN_REDUCTION_PCT} % with TensorRT-LLM on 8x A100).",
        "", "![TTFT](ttft.png)", "", "![one layer](layer_breakdown.png)", "",
        "| model | prompt | TP = d | standard ms | parallel ms | Kraken ms | Kraken vs standard | Kraken vs parallel |",
        "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        t = {k: v * 1e3 for k, v in r.ttft_s.items()}
        lines.append(f"| {r.shape} | {r.prompt_tokens} | {r.tp} | {t['gpt']:.2f} | "
                     f"{t['parallel']:.2f} | {t['kraken']:.2f} | "
                     f"{-100 * r.kraken_reduction:+.1f} % | "
                     f"{100 * (t['kraken'] / t['parallel'] - 1):+.1f} % |")
    lines += ["", "Where the time goes in one prefill layer of the configuration plotted above "
              "(ms, per device):", "",
              "| category | " + " | ".join(ARCHS) + " |", "|---|" + "---:|" * len(ARCHS)]
    categories = sorted({c for layer in focus.layer_s.values() for c in layer})
    for c in categories:
        lines.append(f"| {c} | " + " | ".join(f"{1e3 * focus.layer_s[a].get(c, 0.0):.3f}"
                                             for a in ARCHS) + " |")
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    (out / "rows.json").write_text(json.dumps(
        {"system": system, "batch": batch, "geomean_ttft_reduction": reduction,
         "rows": [{"shape": r.shape, "prompt_tokens": r.prompt_tokens, "tp": r.tp,
                   "ttft_s": r.ttft_s, "layer_s": r.layer_s} for r in rows]}, indent=2) + "\n")
    return report
