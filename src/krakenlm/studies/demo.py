"""The main job behind `make demo`: a small, honest end-to-end run on the embedded corpus."""

from __future__ import annotations

from pathlib import Path

from ..training.trainer import TrainConfig
from .compare import RunSpec, run_comparison

DEMO_NOTES = (
    "Produced by `krakenlm demo` (`make demo`): gpt-tiny and its parameter-matched Kraken "
    "(2 sub-layers per layer) trained from scratch on the embedded Shakespeare corpus with the "
    "same data order, token budget and schedule, then evaluated on two held-out plays. "
    "A couple of minutes of CPU training is far from convergence; the point is the pipeline "
    "and the side-by-side comparison, see docs/results.md for longer runs.")


def run_demo(out: Path, *, max_steps: int = 150) -> Path:
    template = TrainConfig(out_dir=out, max_steps=max_steps, batch_size=16, seq_len=256,
                           peak_lr=2e-3, warmup_steps=max(1, max_steps // 10),
                           eval_interval=max(1, max_steps // 5), eval_batches=25,
                           checkpoint_interval=max(1, max_steps // 5))
    specs = [RunSpec("gpt-tiny", 1), RunSpec("kraken-tiny-2way", 1)]
    return run_comparison(specs, template, out, title="krakenlm demo: gpt-tiny vs kraken-tiny-2way",
                          notes=DEMO_NOTES)
