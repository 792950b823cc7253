"""The main job behind `make demo`: a small, honest end-to-end run on the embedded corpus.

1. Train gpt-tiny and kraken-tiny-2way on Shakespeare at the same token budget, evaluate both
   on two held-out plays, write report.md with a loss-curve plot and a perplexity table.
2. Generate from both trained checkpoints on 2 processes (Megatron TP for GPT, one sub-layer
   per rank for Kraken) and check the tokens equal single-device generation; the measured
   TTFTs go into the report.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import KrakenError
from ..training.trainer import TrainConfig
from .compare import RunSpec, run_comparison

DEMO_NOTES = (
    "Produced by `krakenlm demo` (`make demo`): gpt-tiny and its parameter-matched Kraken "
    "(2 sub-layers per layer) trained from scratch on the embedded Shakespeare corpus with the "
    "same data order, token budget and schedule, then evaluated on two held-out plays. "
    "A couple of minutes of CPU training is far from convergence; the point is the pipeline "
    "and the side-by-side comparison, see docs/results.md for longer runs.")

RUNS = {"gpt": RunSpec("gpt-tiny", 1), "kraken": RunSpec("kraken-tiny-2way", 1)}


def run_demo(out: Path, *, max_steps: int = 150, world_size: int = 2) -> Path:
    from ..distributed.demo import run_tp_demo

    template = TrainConfig(out_dir=out, max_steps=max_steps, batch_size=16, seq_len=256,
                           peak_lr=2e-3, warmup_steps=max(1, max_steps // 10),
                           eval_interval=max(1, max_steps // 5), eval_batches=25,
                           checkpoint_interval=max(1, max_steps // 5))
    report = run_comparison(list(RUNS.values()), template, out,
                            title="krakenlm demo: gpt-tiny vs kraken-tiny-2way", notes=DEMO_NOTES)
    tp = run_tp_demo({arch: out / spec.name for arch, spec in RUNS.items()},
                     world_size=world_size)
    with report.open("a") as f:
        f.write(f"\n## The trained models on {world_size} processes\n\n```\n{tp.text()}\n```\n")
    print(tp.text())
    if not tp.ok:
        raise KrakenError(f"sharded generation differs from single-device generation; see {report}")
    return report
