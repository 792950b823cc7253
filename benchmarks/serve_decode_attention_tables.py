"""How much of the `datacrunch` and `llmk8s` decode-step gap the decode-attention model's error
against its own measured tables explains.

    python benchmarks/serve_decode_attention_tables.py [--json docs/data/serve-decode-attention-tables.json]

Part 1, the model against its tables: the generation-attention rows of the table each run's
simulator times its decode attention with (SGLang 0.5.14 on H200 for `datacrunch`, vLLM 0.14.0
on A100-SXM 80GB for `llmk8s`: aiconfigurator-core's tables; the kernel and version are what
the tables say, not what the servers ran) at the runs' per-GPU shape (Llama-3.3-70B: 64 query
and 8 KV heads over TP 4 or 8, head_dim 128, bf16 KV), batch 8-512 and 256-4096 cached
tokens, measured and predicted by the fitted form under the tables' harness conditions, with
the cost per cached token.

Part 2, at the runs' conditions: the batch and KV length of each Poisson run (rate x measured
mean E2E, Little's law; KV = mean prompt + half the mean output; E2E of llmk8s = its saved
TTFT + TPOT x (output - 1), its client prints no E2E) and, for the bursts, the step-weighted
running batch and KV of all requests started at once. The table's and the model's latency at
that (batch, KV) are interpolated the same way (bilinear in batch and KV between the table's
power-of-two grid points), their difference times the layers is what a model that matched its
tables would add per step, set against the step's measured excess (ITL p50 or TPOT mean minus
the simulator's pure-decode step at that batch, `StepTimer.batch_s`). Nothing is fitted.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from krakenlm.fileio import write_text_atomically
from krakenlm.hardware import load_system
from krakenlm.models import get_preset
from krakenlm.serving.step_time import StepTimer
from krakenlm.serving.validation import load_runs
from krakenlm.simulator import Simulator
from krakenlm.simulator.constants import gpu_kernels as gpu_store
from krakenlm.simulator.measurements import harness
from krakenlm.simulator.measurements.kernel_tables import attention_datasets
from krakenlm.simulator.measurements.split import fit_half

# source -> (system whose table and calibration the simulator uses, framework)
TABLES = {"datacrunch": ("h200-x8", "sglang"), "llmk8s": ("a100-80gb-x8", "vllm")}
BATCHES = (8, 16, 32, 64, 128, 256, 512)
KV_LENS = (256, 512, 1024, 2048, 4096)
HEAD_DIM = 128


def table_grid(preset: str, framework: str, heads: int, kv_heads: int) -> dict:
    """Measured and predicted (harness conditions) latency of the bf16 generation rows at one
    per-GPU head shape, keyed by (batch, kv_len), with the fit/held-out half of each row."""
    cal = next(c for c in gpu_store.shipped() if c.meta.get("system") == preset)
    ds = next(d for d in attention_datasets(load_system(preset), framework, None)
              if d.family == "generation_attention" and d.variant == "bf16")
    e = cal.entry(framework, "generation_attention", "bf16")
    predicted = e.kernel.predict(ds.setting, ds.cols, e.params, e.structure,
                                 harness.conditions(ds.source, ds.family, e.harness))
    half = fit_half(ds.keys)
    c = ds.cols
    kv = np.asarray(c["isl"]) + np.asarray(c["step"])
    rows = {}
    for i in np.where((c["heads"] == heads) & (c["kv_heads"] == kv_heads)
                      & (c["head_dim"] == HEAD_DIM))[0]:
        rows[(int(c["batch"][i]), int(kv[i]))] = (float(ds.latency_s[i]), float(predicted[i]),
                                                  bool(half[i]))
    return {"form": e.kernel.name, "structure": str(e.structure), "version": ds.version,
            "held_out_mape_pct": e.fit.get("mape_held_out_pct"), "rows": rows}


def bilinear(rows: dict, batch: float, kv: float, which: int) -> float:
    """Latency at (batch, kv) from the four surrounding power-of-two grid rows, linear in batch
    and in kv (attention is about linear in both at these sizes)."""
    def bracket(x: float) -> tuple[int, int, float]:
        lo = 2 ** int(np.floor(np.log2(x)))
        hi = lo * 2
        return lo, hi, (x - lo) / (hi - lo)

    smallest = min(b for b, _ in rows)

    def at(b: int, k: int) -> float:
        """A grid row; one the table lacks (memory) from half the batch, doubled: at these
        batches the latency is about proportional to the batch."""
        if (b, k) in rows:
            return rows[(b, k)][which]
        if b // 2 < smallest:
            raise KeyError(f"no table row at batch {b} or below, KV {k}")
        return 2.0 * at(b // 2, k)
    b0, b1, u = bracket(batch)
    k0, k1, v = bracket(kv)
    corners = (((b0, k0), (1 - u) * (1 - v)), ((b0, k1), (1 - u) * v),
               ((b1, k0), u * (1 - v)), ((b1, k1), u * v))
    return sum(w * at(*corner) for corner, w in corners if w > 0)


def conditions(run) -> tuple[float, float, float]:
    """(running batch, mean KV of a decoding request, measured step) of a run."""
    p, o = np.asarray(run.prompt_tokens, float), np.asarray(run.output_tokens, float)
    m = run.measured
    if run.source == "datacrunch":
        step = m["itl_s"]["p50"]
        e2e = m["e2e_s"]["mean"]
    else:
        step = m["tpot_s"]["mean"]
        e2e = float(np.mean(np.asarray(run.ttfts_s) + step * np.maximum(o - 1, 0)))
    if run.arrival == "poisson":
        return run.rate_per_s * e2e, float(p.mean() + o.mean() / 2), step
    # all at once: every request decodes from step 1 to its output length; average over the
    # steps of what is running (the decode phase only)
    steps = np.arange(1, int(o.max()) + 1)
    running = (o[None, :] >= steps[:, None])
    batch = running.sum(axis=1)
    kv = (running * (p[None, :] + steps[:, None])).sum(axis=1) / np.maximum(batch, 1)
    w = batch / batch.sum()  # each request-step counts once
    return float((batch * w).sum()), float((kv * w).sum()), step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    _, runs = load_runs()
    out = {"command": "python benchmarks/serve_decode_attention_tables.py --json "
                      "docs/data/serve-decode-attention-tables.json", "tables": {}, "runs": []}
    for source, (preset, fw) in TABLES.items():
        # datacrunch: the Poisson runs up to 8 requests/s (at 16 the server queued, and its
        # bursts ran what its KV pool admitted, not every request at once); llmk8s: all four
        # (200 requests, all of which fit its KV pool at once)
        chosen = [r for r in runs if r.source == source and (
            source == "llmk8s" or (r.arrival == "poisson" and r.rate_per_s <= 8))]
        model = get_preset(chosen[0].model)
        tp = chosen[0].tp
        heads, kv_heads = model.n_heads // tp, model.n_kv_heads // tp
        grid = table_grid(preset, fw, heads, kv_heads)
        print(f"\n{source}: table {fw} {grid['version']} on {preset}, heads {heads}, KV heads "
              f"{kv_heads}, head_dim {HEAD_DIM}; form {grid['form']} {grid['structure']}, "
              f"held-out MAPE {grid['held_out_mape_pct']} %")
        print(f"{'batch':>6s} {'KV':>5s} {'half':>5s} {'table us':>9s} {'model us':>9s} "
              f"{'error':>7s} {'table ns/KV tok':>16s} {'model ns/KV tok':>16s}")
        shape_rows, errors = [], []
        for b in BATCHES:
            for k in KV_LENS:
                if (b, k) not in grid["rows"]:
                    continue
                t, mdl, fit = grid["rows"][(b, k)]
                errors.append(mdl / t - 1)
                shape_rows.append({"batch": b, "kv_len": k, "half": "fit" if fit else "held_out",
                                   "table_s": t, "model_s": mdl})
                print(f"{b:6d} {k:5d} {'fit' if fit else 'held':>5s} {1e6 * t:9.2f} "
                      f"{1e6 * mdl:9.2f} {100 * (mdl / t - 1):+6.1f}% {1e9 * t / (b * k):16.3f} "
                      f"{1e9 * mdl / (b * k):16.3f}")
        errors = np.asarray(errors)
        all_err = np.asarray([m / t - 1 for t, m, _ in grid["rows"].values()])
        print(f"these {len(errors)} shapes: MAPE {100 * np.mean(np.abs(errors)):.1f} %, signed "
              f"mean {100 * errors.mean():+.1f} %; every row of this head shape "
              f"({len(all_err)}): MAPE {100 * np.mean(np.abs(all_err)):.1f} %, signed mean "
              f"{100 * all_err.mean():+.1f} %")
        out["tables"][source] = {"preset": preset, "framework": fw, "version": grid["version"],
                                 "heads": heads, "kv_heads": kv_heads, "form": grid["form"],
                                 "rows": shape_rows}

        sim = Simulator(chosen[0].system, chosen[0].software, dtype="fp16")
        timer = StepTimer(sim, model, tp, max_tokens=8192, max_sequences=512,
                          max_context=8192)
        print(f"{'run':>34s} {'batch':>6s} {'KV':>5s} {'step meas.':>10s} {'step sim.':>9s} "
              f"{'excess ms':>9s} {'attn sim. ms':>12s} {'table-model ms':>14s} {'explained':>9s}")
        for run in chosen:
            batch, kv, measured = conditions(run)
            step = timer.batch_s([], [int(round(kv))] * int(round(batch)))
            attention = timer.decode_attention_s(int(round(batch)), kv) * model.n_layers
            b = max(batch, BATCHES[0])
            t = bilinear(grid["rows"], b, kv, 0)
            mdl = bilinear(grid["rows"], b, kv, 1)
            gap = attention * (t / mdl - 1)  # what matching the table would add per step
            excess = measured - step
            out["runs"].append({"id": run.id, "source": source, "batch": batch, "kv_tokens": kv,
                                "measured_step_s": measured, "simulated_step_s": step,
                                "excess_s": excess, "simulated_attention_s": attention,
                                "table_over_model": t / mdl, "table_minus_model_s": gap})
            print(f"{run.id:>34s} {batch:6.0f} {kv:5.0f} {1e3 * measured:8.1f}ms "
                  f"{1e3 * step:7.1f}ms {1e3 * excess:9.2f} {1e3 * attention:12.2f} "
                  f"{1e3 * gap:+14.2f} {100 * gap / excess:+8.0f}%")
    if args.json:
        write_text_atomically(Path(args.json), json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
