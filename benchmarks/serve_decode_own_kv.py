"""What the `llmk8s` replay leaves out by timing a decode step's attention at the batch's mean KV
length: FlashAttention-2's split-KV decode with each running request's own length.

    python benchmarks/serve_decode_own_kv.py [--json docs/data/serve-decode-own-kv.json]

The simulator times a step's decode attention at (batch, mean KV) (`StepTimer.batch_s`). vLLM
0.8.3 on A100 decodes with FlashAttention-2's varlen split-KV kernel (the fitted form
`generation/flash-splitkv`, structure `fa2_swap`), which fixes one split count per launch from
the longest sequence (`set_params_splitkv(..., max_seqlen_k, ...)` in flash_api.cpp) and gives
each CTA ceil(ceil(own_len / block_n) / splits) key blocks of its own sequence
(`n_blocks_per_split` in flash_fwd_kernel.h). With 1 KV head per GPU (TP 8) a batch of up to
~170 sequences is one wave of CTAs on an A100 (108 SMs x 2), so the step waits for the
longest sequence's CTA, not the mean one's. ShareGPT lengths are skewed (llmk8s: mean prompt
213, up to ~1000 tokens, outputs up to ~800), so that costs more than the mean KV says.

Here the fitted form's formula (attention.py `split_time`) is evaluated both ways with the
simulator's own constants (the vLLM A100 entry, serving conditions, the A100-40GB device):
`mean` exactly as the form (checked equal to its `predict`), `own` with per-CTA chunks from
each request's KV, splits from the longest, the CTAs list-scheduled on the slots in launch
order; the bandwidth term reads the same total bytes either way. Running sets: for Poisson
runs Little's law (rate x mean E2E, E2E = saved TTFT + TPOT x (output - 1)) requests drawn in
proportion to their decode time, each at a uniform point of its decode; for the burst every
step of all 200 requests started at once. Nothing is fitted; the replay is not changed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from krakenlm.fileio import write_text_atomically
from krakenlm.hardware import load_system
from krakenlm.hardware.schema import DTYPE_BYTES
from krakenlm.models import get_preset
from krakenlm.serving.validation import load_runs
from krakenlm.simulator.constants import gpu_kernels as gpu_store
from krakenlm.simulator.kernels.base import SERVING, Setting
from krakenlm.simulator.kernels.gpu.attention import (
    DECODE_BLOCK,
    SPLIT_Q_ROWS,
    kv_bandwidth,
    splitkv_count,
)
from krakenlm.simulator.kernels.numerics import smooth_max

CALIBRATION = "a100-80gb-x8"  # whose fitted vLLM entry the A100-40GB simulator borrows
SAMPLES = 200  # running sets drawn per Poisson run
HEAD_DIM = 128


def launch_s(setting: Setting, p: dict, structure, kv_lens, kv_heads: int, group: int,
             own: bool) -> float:
    """One decode launch over `kv_lens` (one per sequence): `split_time` of attention.py with
    the chunk of the mean length (own False) or of each sequence's own length, splits from the
    longest (own True)."""
    L = np.asarray(kv_lens, float)
    dev = setting.dev
    nbytes = DTYPE_BYTES[setting.variant]
    sms = dev.core_count
    slots = sms * structure.ctas_per_sm
    tiles = len(L) * kv_heads * np.ceil(group / SPLIT_Q_ROWS)
    splits = float(splitkv_count(slots, tiles, L.max() if own else L.mean())[0])
    if group == 1 and not structure.split_mha:
        splits = 1.0
    items = tiles * splits
    if own:
        chunks = np.ceil(np.ceil(L / splits) / DECODE_BLOCK) * DECODE_BLOCK
        cta_s = p["item_s"] + chunks * HEAD_DIM * 2 * nbytes / p["sm_bandwidth"]
        finish = np.zeros(int(slots))
        for d in np.repeat(cta_s, int(kv_heads * np.ceil(group / SPLIT_Q_ROWS) * splits)):
            finish[np.argmin(finish)] += d  # the next CTA takes the first free slot
        exec_s = finish.max() + items * group * p["head_s"] / sms
    else:
        chunk = np.ceil(np.ceil(L.mean() / splits) / DECODE_BLOCK) * DECODE_BLOCK
        cta_s = p["item_s"] + chunk * HEAD_DIM * 2 * nbytes / p["sm_bandwidth"]
        exec_s = np.ceil(items / slots) * cta_s + items * group * p["head_s"] / sms
    kv = kv_heads * L.sum() * HEAD_DIM * 2 * nbytes
    bandwidth = float(kv_bandwidth(dev, kv, p, SERVING))
    t = p["floor_s"] + (p["multiblock_s"] if splits > 1 else 0.0) + float(
        smooth_max(exec_s, kv / bandwidth, p["overlap_exponent"]))
    if structure.fa2_swap and group > 1 and len(L) >= 2 and kv_heads >= 2:
        t += p["swap_copy_s"]
    return t


def running_sets(run, rng) -> list[tuple[np.ndarray, float]]:
    """(KV lengths of a running set, its weight) of a run, the weights summing to 1."""
    prompt, out = np.asarray(run.prompt_tokens, float), np.asarray(run.output_tokens, float)
    tpot = run.measured["tpot_s"]["mean"]
    if run.arrival == "poisson":
        e2e = float(np.mean(np.asarray(run.ttfts_s) + tpot * np.maximum(out - 1, 0)))
        batch = max(int(round(run.rate_per_s * e2e)), 1)
        sets = []
        for _ in range(SAMPLES):
            i = rng.choice(len(prompt), batch, p=out / out.sum())
            sets.append((prompt[i] + rng.uniform(0, 1, batch) * out[i], 1.0 / SAMPLES))
        return sets
    sets = []
    for step in range(1, int(out.max()) + 1):
        running = out >= step
        sets.append((prompt[running] + step, float(running.sum())))
    total = sum(w for _, w in sets)
    return [(kv, w / total) for kv, w in sets]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    _, runs = load_runs()
    runs = [r for r in runs if r.source == "llmk8s"]
    model = get_preset(runs[0].model)
    tp = runs[0].tp
    kv_heads, group = model.n_kv_heads // tp, model.n_heads // model.n_kv_heads
    cal = next(c for c in gpu_store.shipped() if c.meta.get("system") == CALIBRATION)
    e = cal.entry("vllm", "generation_attention", "bf16")
    setting = Setting(load_system(runs[0].system), "vllm", "bf16",
                      cal.frameworks.get("vllm", {}).get("version", ""))
    rng = np.random.default_rng(0)
    out = {"command": "python benchmarks/serve_decode_own_kv.py --json "
                      "docs/data/serve-decode-own-kv.json", "form": e.kernel.name,
           "structure": str(e.structure), "runs": []}
    print(f"form {e.kernel.name} {e.structure}; {model.n_layers} layers, {kv_heads} KV head(s) "
          f"per GPU, group {group}")
    print(f"{'run':>26s} {'batch':>6s} {'mean KV':>8s} {'attention, mean KV':>19s} "
          f"{'own KVs':>8s} {'difference':>11s}")
    for run in runs:
        sets = running_sets(run, rng)
        mean_s = sum(w * launch_s(setting, e.params, e.structure, kv, kv_heads, group, False)
                     for kv, w in sets) * model.n_layers
        own_s = sum(w * launch_s(setting, e.params, e.structure, kv, kv_heads, group, True)
                    for kv, w in sets) * model.n_layers
        batch = sum(w * len(kv) for kv, w in sets)
        kv_mean = sum(w * len(kv) * kv.mean() for kv, w in sets) / batch
        out["runs"].append({"id": run.id, "batch": batch, "kv_tokens": kv_mean,
                            "attention_mean_kv_s": mean_s, "attention_own_kv_s": own_s})
        print(f"{run.id:>26s} {batch:6.0f} {kv_mean:8.0f} {1e3 * mean_s:16.2f} ms "
              f"{1e3 * own_s:5.2f} ms {1e3 * (own_s - mean_s):+8.2f} ms")
    if args.json:
        write_text_atomically(Path(args.json), json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
