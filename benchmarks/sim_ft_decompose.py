"""Where the FasterTransformer rows' missing time would have to be: each row's prediction split
into components, and how much one component alone would have to grow to meet the measurement.

    python benchmarks/sim_ft_decompose.py [--source fastertransformer_gpt] [--out FILE.md]

For every (model, prompt / output) of the source it prints, at the smallest and the largest
batch: measured and predicted end-to-end time, the predicted prefill (TTFT) and decode parts,
and the factor by which the prefill alone, the decode alone, the decode attention alone or the
prefill GEMMs alone would have to grow to close the gap. Per setup it also prints the excess at
batch 1 per decode step and the excess per added sequence (least squares over the batches),
the two numbers a candidate mechanism has to reproduce. Nothing is fitted or written to the
simulator's constants; the predictions are the shipped constants' (as `sim validate` runs them).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import defaultdict

import numpy as np

from krakenlm.fileio import write_text_atomically
from krakenlm.models import PRESETS
from krakenlm.simulator.constants.software import load_software
from krakenlm.simulator.measurements.harness import engine_era, row_results, simulate_row_times
from krakenlm.simulator.measurements.models import load_rows, row_software
from krakenlm.simulator.run import resolve_model, simulate

# GPT-20B (48 heads of 128, 44 layers, FFN 24576, vocabulary 51200), FP16, top_p 0.9, the same
# 8x A100-80GB SuperPod node: "Performance of GPT-20B", NVIDIA/FasterTransformer@07fdd2fc6aa46f961f304d5f3791efad016e38a3
# docs/gpt_guide.md, latency ms at TP 1 / 2 / 4 / 8. Not a scored source (no preset; SOURCES.md):
# a check of the same engine on one more model, with the shape built from the table's header.
GPT20B_MS = {(1, 128, 20): (566, 362, 254, 217), (64, 128, 20): (2157, 1379, 832, 634),
             (1, 80, 200): (5609, 3532, 2438, 2053), (64, 80, 200): (8290, 6003, 3815, 3173),
             (64, 20, 8): (452, 314, 200, 169)}


def decompose(row) -> dict:
    """Measured and predicted seconds of one end-to-end row, by phase and component."""
    _, config = resolve_model(row.model)
    software = load_software(row_software(row))
    main, _ = row_results(row, config, software)
    ttft, tpot = simulate_row_times(row, config, software)
    steps = max(2, row.output) - 1
    decode = steps * tpot
    # the decode categories are summed over the simulated steps: rescale to the row's steps
    simulated = sum(main.decode.categories.values()) or 1.0
    share = decode / simulated
    prefill_total = sum(main.prefill.categories.values()) or 1.0
    return {"measured": row.measured_s, "predicted": ttft + decode, "prefill": ttft,
            "decode": decode,
            "decode_attention": main.decode.categories.get("attention", 0.0) * share,
            "prefill_gemm": main.prefill.categories.get("GEMM", 0.0) * ttft / prefill_total}


def needed(d: dict, part: str) -> float:
    """Factor by which component `part` alone would have to grow to meet the measurement."""
    gap = d["measured"] - d["predicted"]
    return (d[part] + gap) / d[part] if d[part] > 0 else float("nan")


def report(source: str) -> str:
    rows = [r for r in load_rows() if r.source == source and r.metric == "e2e"
            and not r.anomalous]
    setups: dict[tuple, list] = defaultdict(list)
    for r in rows:
        setups[(r.model, r.tp, r.prompt, r.output)].append((r.batch, decompose(r)))
    lines = [f"Source `{source}`: {len(rows)} end-to-end rows, shipped constants.", "",
             ("| model | TP | in / out | batch | measured ms | predicted ms | prefill ms | "
             "decode ms | x prefill | x decode | x decode attention | x prefill GEMM |"),
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    summary = ["", ("| model | TP | in / out | excess at batch 1 per decode step ms | "
               "excess per added sequence ms |"), "|---|---:|---|---:|---:|"]
    for (model, tp, prompt, output), points in sorted(setups.items()):
        points.sort()
        for batch, d in (points[0], points[-1]):
            lines.append(
                f"| {model} | {tp} | {prompt} / {output} | {batch} | {d['measured'] * 1e3:.1f} | "
                f"{d['predicted'] * 1e3:.1f} | {d['prefill'] * 1e3:.1f} | "
                f"{d['decode'] * 1e3:.1f} | {needed(d, 'prefill'):.2f} | "
                f"{needed(d, 'decode'):.2f} | {needed(d, 'decode_attention'):.2f} | "
                f"{needed(d, 'prefill_gemm'):.2f} |")
        batches = np.array([b for b, _ in points], float)
        excess = np.array([d["measured"] - d["predicted"] for _, d in points])
        slope = np.polyfit(batches, excess, 1)[0] if len(points) > 2 else float("nan")
        first_batch, first = points[0]
        per_step = (first["measured"] - first["predicted"]) / max(1, output) \
            if first_batch == 1 else float("nan")
        summary.append(f"| {model} | {tp} | {prompt} / {output} | {per_step * 1e3:.2f} | "
                       f"{slope * 1e3:.2f} |")
    return "\n".join(lines + summary) + "\n"


def gpt20b_report() -> str:
    """The GPT-20B table against the simulator (FasterTransformer's era: NCCL all-reduce)."""
    config = dataclasses.replace(PRESETS["gpt3-6.7b"], n_layers=44, d_model=6144, n_heads=48,
                                 ffn_dim=24576, vocab_size=51200)
    software = engine_era(load_software("trtllm"), "", "fastertransformer")
    lines = ["", ("GPT-20B (FasterTransformer gpt_guide, not a scored source): measured / "
             "predicted ms, signed error"), "",
             "| batch | in / out | TP 1 | TP 2 | TP 4 | TP 8 |", "|---:|---|---|---|---|---|"]
    for (batch, prompt, output), measured in GPT20B_MS.items():
        cells = []
        for tp, ms in zip((1, 2, 4, 8), measured):
            r = simulate(config, "a100-80gb-x8", tp, batch, prompt, output, dtype="fp16",
                         software=software, check_memory=False, check_context=False,
                         model_name="ft-gpt-20b")
            cells.append(f"{ms} / {r.e2e_s * 1e3:.0f} ({(r.e2e_s * 1e3 - ms) / ms * 100:+.1f} %)")
        lines.append(f"| {batch} | {prompt} / {output} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="fastertransformer_gpt")
    ap.add_argument("--out", help="also write the tables to this Markdown file")
    args = ap.parse_args()
    text = report(args.source)
    if args.source == "fastertransformer_gpt":
        text += gpt20b_report()
    print(text, end="")
    if args.out:
        write_text_atomically(args.out, text)


if __name__ == "__main__":
    main()
