"""What the MI300X FP16 rows (vLLM 0.6.1 built for ROCm, `llm_inference_bench_mi300x`) say about
where their missing time is, and which candidate mechanisms their shape rejects.

    python benchmarks/sim_mi300x_decompose.py [--out docs/data/sim-mi300x-decompose.md]

Input = output in every row, so a row's prefill and decode cannot be told apart by lengths;
what the rows do separate is batch, TP, model and length. The script prints, from the shipped
constants' predictions (as `sim validate` runs them; nothing is fitted on `vllm-v0` or on the
MI300X, so they are also the left-out predictions) and the measurements:

1. the time per added sequence (least squares over the scored batches >= 16 at one length) as
   an effective dense rate: the model's forward FLOPs of its 2 x length tokens per GPU over the
   measured slope, beside the same for the predicted slope;
2. batch 1's time per decode step (measured minus the predicted prefill, over the output
   tokens) and the weight bandwidth it implies (this rank's FP16 weights over the step);
3. KV capacity: vLLM's cache room per GPU (0.9 x 192 GiB minus this rank's weights and a 3 GB
   allowance for activations) against the scored rows' KV demand: the smallest room / demand
   among the scored rows, which would have to fall below 1 for waves or preemption to exist;
4. V0 prefill scheduling: without chunked prefill the scheduler admits prompts up to
   max_num_batched_tokens = max(max_model_len, 2048) tokens per step, so a batch's prefill runs
   in ceil(batch x length / that) steps: the predicted prefill run that way against run as one
   step, and the measured excess it would have to explain;
5. the 128-token oddity (batch 1, 128 tokens about as long as 256);
6. Llama-3 against Llama-2 at the same TP, batch and length (same 70B shape but vocabulary and
   max_model_len; the 8B has 1.19x the 7B's parameters and GQA 4).
Nothing is written to the simulator's constants.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections import defaultdict

import numpy as np

from krakenlm.fileio import write_text_atomically
from krakenlm.models import PRESETS
from krakenlm.simulator.constants.software import load_software
from krakenlm.simulator.measurements.harness import simulate_row_times
from krakenlm.simulator.measurements.models import load_rows, row_software
from krakenlm.simulator.memory import kv_cache_bytes, weight_params_per_device
from krakenlm.simulator.run import simulate

SOURCE = "llm_inference_bench_mi300x"
GIB = 2 ** 30
# vLLM's default gpu_memory_utilization and the 3 GB per GPU the source's ANOMALY rule allows
# for the context, activations and graph buffers (SOURCES.md, `llm_inference_bench`).
MEMORY_FRACTION, RESERVE_BYTES, DEVICE_BYTES = 0.9, 3e9, 192 * GIB
# vLLM V0 without chunked prefill: max_num_batched_tokens = max(max_model_len, 2048); the
# models' max_model_len is their context (Llama-2 4096, Llama-3 8192).
MIN_BATCHED_TOKENS = 2048


def scored_rows():
    return [r for r in load_rows() if r.source == SOURCE and not r.anomalous]


def predict(row, era: bool = True) -> tuple[float, float, float]:
    """(end-to-end, TTFT, TPOT) seconds of the row as `sim validate` runs it; `era=False`
    scores it without the ROCm decode-attention era (every KV read shared by its group)."""
    software = load_software(row_software(row))
    if not era:
        software = dataclasses.replace(software, attention=dataclasses.replace(
            software.attention, rocm_shared_kv_since=""))
    ttft, tpot = simulate_row_times(row, PRESETS[row.model], software)
    return ttft + (max(2, row.output) - 1) * tpot, ttft, tpot


def flops_per_sequence_per_gpu(model: str, tp: int, length: int) -> float:
    """Dense forward FLOPs (2 per weight) of one sequence's prompt and output tokens, per rank."""
    cfg = PRESETS[model]
    return 2.0 * weight_params_per_device(cfg, tp) * 2 * length


def weight_bytes_per_gpu(model: str, tp: int) -> float:
    return 2.0 * weight_params_per_device(PRESETS[model], tp)


def slope(points: list[tuple[int, float]]) -> float:
    b = np.array([p[0] for p in points], float)
    y = np.array([p[1] for p in points], float)
    return float(np.polyfit(b, y, 1)[0])


def section_rates(rows, pred) -> list[str]:
    out = ["## 1. Time per added sequence as an effective dense rate", "",
           ("| model | TP | length | batches | measured s / sequence | predicted s / sequence | "
           "ratio | effective TFLOP/s per GPU, measured | predicted |"),
           "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    groups: dict[tuple, list] = defaultdict(list)
    for r in rows:
        if r.batch >= 16:
            groups[(r.model, r.tp, r.prompt)].append(r)
    for (model, tp, length), rs in sorted(groups.items()):
        if length not in (128, 512) or len(rs) < 3:
            continue
        rs.sort(key=lambda r: r.batch)
        m = slope([(r.batch, r.measured_s) for r in rs])
        p = slope([(r.batch, pred[id(r)][0]) for r in rs])
        f = flops_per_sequence_per_gpu(model, tp, length)
        out.append(f"| {model} | {tp} | {length} | {rs[0].batch}-{rs[-1].batch} | {m:.4f} | "
                   f"{p:.4f} | {m / p:.2f} | {f / m / 1e12:.0f} | {f / p / 1e12:.0f} |")
    return out + [""]


def section_batch1(rows, pred) -> list[str]:
    out = ["## 2. Batch 1: time per decode step", "",
           ("| model | TP | length | measured ms / step | predicted TPOT ms | excess ms | "
            "implied weight stream TB/s |"), "|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (r.model, r.tp, r.prompt)):
        if r.batch != 1 or r.prompt < 1024:
            continue
        _, ttft, tpot = pred[id(r)]
        step = (r.measured_s - ttft) / (r.output - 1)
        out.append(f"| {r.model} | {r.tp} | {r.prompt} | {step * 1e3:.2f} | {tpot * 1e3:.2f} | "
                   f"{(step - tpot) * 1e3:.2f} | "
                   f"{weight_bytes_per_gpu(r.model, r.tp) / step / 1e12:.2f} |")
    return out + [""]


def kv_room_bytes(model: str, tp: int) -> float:
    return MEMORY_FRACTION * DEVICE_BYTES - RESERVE_BYTES - weight_bytes_per_gpu(model, tp)


def section_capacity(rows, pred) -> list[str]:
    out = ["## 3. KV capacity (waves, preemption)", "",
           ("| model | TP | KV room per GPU GB | largest scored KV demand per GPU GB | room / demand | "
           "its row (batch, length) | its measured / predicted |"),
           "|---|---:|---:|---:|---:|---|---:|"]
    groups: dict[tuple, list] = defaultdict(list)
    for r in rows:
        groups[(r.model, r.tp)].append(r)
    for (model, tp), rs in sorted(groups.items()):
        room = kv_room_bytes(model, tp)
        demand = {id(r): kv_cache_bytes(PRESETS[model], tp, r.batch, r.prompt + r.output, "fp16")
                  for r in rs}
        worst = max(rs, key=lambda r: demand[id(r)])
        out.append(f"| {model} | {tp} | {room / 1e9:.1f} | {demand[id(worst)] / 1e9:.1f} | "
                   f"{room / demand[id(worst)]:.2f} | {worst.batch}, {worst.prompt} | "
                   f"{worst.measured_s / pred[id(worst)][0]:.2f} |")
    small = [r for r in rows if kv_cache_bytes(PRESETS[r.model], r.tp, r.batch,
                                               r.prompt + r.output, "fp16")
             < 0.1 * kv_room_bytes(r.model, r.tp)]
    ratios = [r.measured_s / pred[id(r)][0] for r in small]
    out += ["", (f"Rows whose KV demand is under 10 % of the room: {len(small)}, measured / "
                 f"predicted median {np.median(ratios):.2f} (range {min(ratios):.2f}-"
                 f"{max(ratios):.2f})."), ""]
    return out


def section_prefill_steps(rows, pred) -> list[str]:
    out = ["## 4. V0 prefill in steps of max_num_batched_tokens", "",
           ("| model | TP | batch | length | steps | predicted prefill, one step s | in steps s | "
            "added s | measured excess s |"), "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (r.model, r.tp, r.batch, r.prompt)):
        if r.tp not in (1, 8) or r.batch not in (64, 256) or r.prompt not in (128, 1024):
            continue
        cfg = PRESETS[r.model]
        budget = max(cfg.context_len, MIN_BATCHED_TOKENS)
        per_step = max(1, budget // r.prompt)
        steps = math.ceil(r.batch / per_step)
        software = load_software(row_software(r))
        one = pred[id(r)][1]
        chunk = simulate(cfg, r.system, r.tp, per_step, r.prompt, 1, dtype="fp16",
                         software=software, check_memory=False, check_context=False,
                         model_name=r.model)
        last = r.batch - per_step * (steps - 1)
        tail = chunk if last == per_step else simulate(
            cfg, r.system, r.tp, last, r.prompt, 1, dtype="fp16", software=software,
            check_memory=False, check_context=False, model_name=r.model)
        split = chunk.ttft_s * (steps - 1) + tail.ttft_s
        out.append(f"| {r.model} | {r.tp} | {r.batch} | {r.prompt} | {steps} | {one:.2f} | "
                   f"{split:.2f} | {split - one:+.2f} | {r.measured_s - pred[id(r)][0]:.1f} |")
    return out + [""]


def section_oddity(rows) -> list[str]:
    out = ["## 5. Batch 1 at 128 tokens", "",
           "| model | TP | 128 tokens s | 256 tokens s | 512 tokens s | 128 / 256 |",
           "|---|---:|---:|---:|---:|---:|"]
    t = {(r.model, r.tp, r.prompt): r.measured_s for r in rows if r.batch == 1}
    for model, tp in sorted({(m, p) for m, p, _ in t}):
        a, b, c = (t.get((model, tp, n), math.nan) for n in (128, 256, 512))
        out.append(f"| {model} | {tp} | {a:.2f} | {b:.2f} | {c:.2f} | {a / b:.2f} |")
    return out + [""]


def section_llama3(rows, pred) -> list[str]:
    out = ["## 6. Llama-3 against Llama-2 at the same TP, batch and length", "",
           "| pair | TP | batch | length | measured ratio | predicted ratio | KV per GPU GB |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    by = {(r.model, r.tp, r.batch, r.prompt): r for r in rows}
    for new, old in (("llama3-70b", "llama2-70b"), ("llama3-8b", "llama2-7b")):
        for (model, tp, batch, length), r in sorted(by.items()):
            o = by.get((old, tp, batch, length))
            if model != new or o is None or length not in (128, 2048) or batch not in (1, 16, 64,
                                                                                      256):
                continue
            kv = kv_cache_bytes(PRESETS[model], tp, batch, 2 * length, "fp16") / 1e9
            out.append(f"| {new} / {old} | {tp} | {batch} | {length} | "
                       f"{r.measured_s / o.measured_s:.2f} | "
                       f"{pred[id(r)][0] / pred[id(o)][0]:.2f} | {kv:.1f} |")
    return out + [""]


def section_era(rows, pred) -> list[str]:
    out = ["## 7. The ROCm decode-attention era on each model", "",
           "| model | GQA group | rows | MAPE with the era | signed | without | signed |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for model in sorted({r.model for r in rows}):
        rs = [r for r in rows if r.model == model]
        cfg = PRESETS[model]
        group = cfg.n_heads // (cfg.n_kv_heads or cfg.n_heads)
        with_era = [pred[id(r)][0] / r.measured_s - 1 for r in rs]
        without = [predict(r, era=False)[0] / r.measured_s - 1 for r in rs]
        out.append(f"| {model} | {group} | {len(rs)} | "
                   f"{100 * np.mean(np.abs(with_era)):.1f} % | {100 * np.mean(with_era):+.1f} % | "
                   f"{100 * np.mean(np.abs(without)):.1f} % | {100 * np.mean(without):+.1f} % |")
    return out + [""]


def report() -> str:
    rows = scored_rows()
    pred = {id(r): predict(r) for r in rows}
    err = [pred[id(r)][0] / r.measured_s - 1 for r in rows]
    head = [f"# `{SOURCE}`: where the missing time is", "",
            ("`python benchmarks/sim_mi300x_decompose.py --out docs/data/sim-mi300x-decompose.md`"
             " (shipped constants, as `sim validate` scores the rows)."), "",
            (f"{len(rows)} scored rows: MAPE {100 * np.mean(np.abs(err)):.1f} %, signed "
             f"{100 * np.mean(err):+.1f} %, measured / predicted median "
             f"{np.median([r.measured_s / pred[id(r)][0] for r in rows]):.2f}."), ""]
    return "\n".join(head + section_rates(rows, pred) + section_batch1(rows, pred)
                     + section_capacity(rows, pred) + section_prefill_steps(rows, pred)
                     + section_oddity(rows) + section_llama3(rows, pred)
                     + section_era(rows, pred))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the Markdown here (default: print it)")
    args = ap.parse_args()
    text = report()
    if args.out:
        write_text_atomically(args.out, text)
    else:
        print(text)


if __name__ == "__main__":
    main()
