"""Where the FasterTransformer rows' missing time would have to be: each row's prediction split
into components, and how much one component alone would have to grow to meet the measurement.

    python benchmarks/sim_ft_decompose.py [--source fastertransformer_gpt] [--out FILE.md]

For every (model, prompt / output) of the source it prints, at the smallest and the largest
batch: measured and predicted end-to-end time, the predicted prefill (TTFT) and decode parts,
and the factor by which the prefill alone, the decode alone, the decode attention alone or the
prefill GEMMs alone would have to grow to close the gap. Per setup it also prints the excess at
batch 1 per decode step and the excess per added sequence (least squares over the batches),
the two numbers a candidate mechanism has to reproduce. Then it asks where each added
sequence's time goes: per prompt token (the context phase), per decode step (sampling, the
per-sequence host work of a step) or per decode step and context token (decode attention),
by least squares over the setups (`attribute`): exactly, two terms at a time, on the scored
tables (whose two setups move prompt and output together), and with every set of terms on the
GPT-20B table's five single-GPU setups, which move them apart. Nothing is fitted or written to
the simulator's constants; the predictions are the shipped constants' (as `sim validate` runs
them).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import defaultdict

import numpy as np

from krakenlm.fileio import write_text_atomically
from krakenlm.hardware import load_system
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
GPT20B = dataclasses.replace(PRESETS["gpt3-6.7b"], n_layers=44, d_model=6144, n_heads=48,
                             ffn_dim=24576, vocab_size=51200)
# The same table's single-GPU column, every batch up to 64 of its five setups (prompt, output):
# five prompt / output pairs at one model, the only part of the guide that moves the prompt and
# the output independently (the scored tables move them together: 128 / 8 and 512 / 32).
GPT20B_TP1_MS = {(20, 8): {1: 225, 2: 225, 4: 228, 8: 239, 16: 268, 32: 331, 64: 452},
                 (60, 20): {1: 560, 2: 562, 4: 582, 8: 635, 16: 748, 32: 933, 64: 1352},
                 (128, 20): {1: 566, 2: 580, 4: 629, 8: 740, 16: 931, 32: 1335, 64: 2157},
                 (80, 200): {1: 5609, 2: 5588, 4: 5661, 8: 5838, 16: 6167, 32: 6864, 64: 8290},
                 (200, 200): {1: 5648, 2: 5686, 4: 5830, 8: 6146, 16: 6815, 32: 8111,
                              64: 10766}}
# Where a candidate mechanism puts each added sequence's time, per (prompt, output):
# the context phase per prompt token; sampling and per-sequence host work per decode step
# (the top-p sort, the finished-flag copy); decode attention per step and context token.
TERMS = {"per prompt token": lambda p, o: p,
         "per decode step": lambda p, o: max(1, o - 1),
         "per step and context token": lambda p, o: max(1, o - 1) * (p + o / 2)}


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
    slopes: dict[tuple, dict] = defaultdict(dict)
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
        slopes[(model, tp)][(prompt, output)] = slope
    return "\n".join(lines + summary + scored_attribution(slopes)) + "\n"


def attribute(excess: dict[tuple[int, int], float], terms: tuple[str, ...]
              ) -> tuple[np.ndarray, float]:
    """Least-squares coefficients (s per unit of each of `terms`) that carry the excess per
    added sequence (s) of each (prompt, output) setup, and the rms residual (s)."""
    setups = sorted(excess)
    a = np.array([[TERMS[t](p, o) for t in terms] for p, o in setups], float)
    y = np.array([excess[k] for k in setups])
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    return coef, float(np.sqrt(np.mean((a @ coef - y) ** 2)))


def kv_read_s(config, tp: int) -> float:
    """Seconds to read one context token's K and V (fp16, every layer, this rank's heads) at the
    A100's memory bandwidth: the scale a decode-attention excess is compared with."""
    bw = load_system("a100-80gb-x8").device.memory.bandwidth_bytes_per_s
    return 2 * config.n_layers * config.d_model * 2 / tp / bw


def prefill_per_token_s(config, tp: int, prompt: int, attention: str = "fused") -> float:
    """The modelled context phase per added sequence and prompt token (batch 1 -> 64), on the
    FasterTransformer era of the `trtllm` profile; `attention="unfused"`: QK^T, softmax and PV
    as separate kernels, the context path of FasterTransformer's GPT (what the era runs since
    `attention.context_fused` exists), "fused" the same era with a flash-style context kernel."""
    software = engine_era(load_software("trtllm"), "", "fastertransformer")
    if attention == "fused":
        software = dataclasses.replace(software, attention=dataclasses.replace(
            software.attention, context_fused=True))
    ttft = [simulate(config, "a100-80gb-x8", tp, b, prompt, 1, dtype="fp16", software=software,
                     check_memory=False, check_context=False, attention=attention).ttft_s
            for b in (1, 64)]
    return (ttft[1] - ttft[0]) / 63 / prompt


def per_element(excess: dict[tuple[int, int], float], config, tp: int) -> float:
    """The per-prompt-token term (with decode attention beside it) per layer and hidden element
    of one rank: what stays constant if the excess is work on the context phase's activations."""
    coef, _ = attribute(excess, ("per prompt token", "per step and context token"))
    return float(coef[0]) / (config.n_layers * config.d_model / tp)


def scored_attribution(slopes: dict) -> list[str]:
    """The scored tables' two setups per model, solved exactly for two terms at a time."""
    pairs = (("per prompt token", "per step and context token"),
             ("per decode step", "per step and context token"))
    lines = ["", ("Excess per added sequence split exactly between two terms (two setups per "
             "model: 128 / 8 and 512 / 32 move prompt and output together)"), "",
             ("| model | TP | per prompt token us | + per step and context token us | "
              "or: per decode step us | + per step and context token us | KV read per "
              "context token us | modelled prefill per prompt token us (512) | unfused "
              "context attention adds us | per prompt token, layer and hidden element per "
              "rank 1e-10 s |"), "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (model, tp), excess in sorted(slopes.items()):
        if len(excess) < 2:
            continue
        cells = []
        for terms in pairs:
            coef, _ = attribute(excess, terms)
            cells += [f"{c * 1e6:.2f}" for c in coef]
        config = resolve_model(model)[1]
        fused = prefill_per_token_s(config, tp, 512)
        unfused = prefill_per_token_s(config, tp, 512, "unfused")
        lines.append(f"| {model} | {tp} | " + " | ".join(cells)
                     + f" | {kv_read_s(config, tp) * 1e6:.3f} | {fused * 1e6:.2f} | "
                     f"{(unfused - fused) * 1e6:.2f} | "
                     f"{per_element(excess, config, tp) * 1e10:.2f} |")
    return lines


def simulate_20b(tp: int, batch: int, prompt: int, output: int):
    return simulate(GPT20B, "a100-80gb-x8", tp, batch, prompt, output, dtype="fp16",
                    software=engine_era(load_software("trtllm"), "", "fastertransformer"),
                    check_memory=False, check_context=False, model_name="ft-gpt-20b")


def gpt20b_excess() -> dict[tuple[int, int], float]:
    """The GPT-20B single-GPU excess per added sequence (s) of each (prompt, output) setup: the
    slope of (measured - predicted) over batch 1-64."""
    excess = {}
    for (prompt, output), measured in GPT20B_TP1_MS.items():
        batches = sorted(measured)
        gap = [measured[b] * 1e-3 - simulate_20b(1, b, prompt, output).e2e_s for b in batches]
        excess[(prompt, output)] = float(np.polyfit(batches, gap, 1)[0])
    return excess


def gpt20b_attribution() -> str:
    """Which candidate term carries the GPT-20B single-GPU excess per added sequence, fitted by
    every subset of TERMS, and all three refitted with each setup left out."""
    excess = gpt20b_excess()
    lines = ["", "GPT-20B, one GPU: excess per added sequence (slope over batch 1-64), ms", "",
             "| in / out | " + " | ".join(f"{p} / {o}" for p, o in sorted(excess)) + " |",
             "|---|" + "---:|" * len(excess),
             "| ms | " + " | ".join(f"{excess[k] * 1e3:.2f}" for k in sorted(excess)) + " |",
             "", ("Fitted by each set of candidate terms (us per unit; rms residual over the "
                  "five setups):"), "", "| terms | coefficients us | rms residual ms |", "|---|---|---:|"]
    names = tuple(TERMS)
    subsets = [(t,) for t in names] + [(a, b) for i, a in enumerate(names)
                                       for b in names[i + 1:]] + [names]
    for terms in subsets:
        coef, rms = attribute(excess, terms)
        lines.append(f"| {' + '.join(terms)} | "
                     + ", ".join(f"{c * 1e6:.3f}" for c in coef) + f" | {rms * 1e3:.2f} |")
    held = [attribute({k: v for k, v in excess.items() if k != out}, names)[0]
            for out in sorted(excess)]
    lines.append("\nAll three terms, refitted with each setup left out in turn (us): "
                 + "; ".join(f"{t} {min(c[i] for c in held) * 1e6:.3f} to "
                             f"{max(c[i] for c in held) * 1e6:.3f}"
                             for i, t in enumerate(names)))
    fused = [prefill_per_token_s(GPT20B, 1, p) for p in (20, 200)]
    unfused = [prefill_per_token_s(GPT20B, 1, p, "unfused") for p in (20, 200)]
    lines.append(f"\nPer prompt token, layer and hidden element: "
                 f"{per_element(excess, GPT20B, 1) * 1e10:.2f}e-10 s")
    lines.append(f"\nKV read per context token at the memory bandwidth: "
                 f"{kv_read_s(GPT20B, 1) * 1e6:.3f} us; modelled prefill per prompt token "
                 f"{fused[0] * 1e6:.1f} / {fused[1] * 1e6:.1f} us at prompt 20 / 200 (unfused "
                 f"context attention adds {(unfused[0] - fused[0]) * 1e6:.2f} / "
                 f"{(unfused[1] - fused[1]) * 1e6:.2f} us)")
    return "\n".join(lines) + "\n"


def gpt20b_report() -> str:
    """The GPT-20B table against the simulator (FasterTransformer's era: NCCL all-reduce)."""
    lines = ["", ("GPT-20B (FasterTransformer gpt_guide, not a scored source): measured / "
             "predicted ms, signed error"), "",
             "| batch | in / out | TP 1 | TP 2 | TP 4 | TP 8 |", "|---:|---|---|---|---|---|"]
    for (batch, prompt, output), measured in GPT20B_MS.items():
        cells = []
        for tp, ms in zip((1, 2, 4, 8), measured):
            r = simulate_20b(tp, batch, prompt, output)
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
        text += gpt20b_report() + gpt20b_attribution()
    print(text, end="")
    if args.out:
        write_text_atomically(args.out, text)


if __name__ == "__main__":
    main()
