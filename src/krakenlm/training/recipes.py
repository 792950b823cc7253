"""The paper's training runs as named recipes: `krakenlm train --recipe kraken-125m-2way`.

Every Kraken preset of the spec's table and its GPT-2 baseline, with the authors' OpenWebText
recipe (spec, "Training recipe used"): GPT-2 BPE, about 0.5M tokens per optimizer step for 300k
steps (~147B tokens), AdamW (0.9, 0.95) with weight decay 0.1 on matrices and embeddings,
2,000 warm-up steps then cosine decay to a tenth of the peak, peak LR 2.5e-4 at 125M and
1.5e-4 above, gradient clipping 1.0, bf16, data parallel only.

What the spec leaves open is chosen here and said so: the 0.5M tokens are 480 sequences of
1,024 (491,520 tokens, nanoGPT's OpenWebText setting); the micro-batch per GPU is at most 12
sequences at 125M (nanoGPT's setting on an A100 40GB), 6 at 350M and 4 at 760M (scaled down
with the activations; not measured here, lower it with --batch-size if a GPU runs out of memory),
and the gradient accumulation makes up the rest for the world size actually launched, so the
tokens per step never depend on the number of GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import KrakenError
from ..models import get_preset

SEQUENCES_PER_STEP = 480  # x 1,024 tokens = 491,520 tokens per optimizer step
SEQ_LEN = 1024


@dataclass(frozen=True)
class Recipe:
    """A named training recipe of the paper (module docstring: the sources of every number): the
    model preset, peak LR, the largest micro-batch per GPU (sequences), the corpus, optimizer
    steps and warm-up steps, the final LR as a fraction of the peak (cosine decay), AdamW's
    weight decay and betas, gradient clipping (max norm), precision, torch.compile, and the
    intervals in steps of evaluation, checkpoints and logging (eval_batches: batches per
    evaluation). Every step is SEQUENCES_PER_STEP sequences of SEQ_LEN tokens whatever the world
    size (`split`)."""
    name: str
    preset: str
    peak_lr: float
    max_micro_batch: int  # sequences per GPU per micro-batch (see the module docstring)
    data: str = "openwebtext"
    max_steps: int = 300_000
    warmup_steps: int = 2_000
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    precision: str = "bf16"
    compile: bool = True
    eval_interval: int = 1_000
    eval_batches: int = 200
    checkpoint_interval: int = 1_000
    log_interval: int = 10

    @property
    def tokens_per_step(self) -> int:
        return SEQUENCES_PER_STEP * SEQ_LEN

    @property
    def total_tokens(self) -> int:
        return self.tokens_per_step * self.max_steps

    def split(self, world_size: int) -> tuple[int, int]:
        """(micro-batch, gradient accumulation) per rank that keep 480 sequences per step."""
        if world_size < 1 or SEQUENCES_PER_STEP % world_size:
            raise KrakenError(
                f"recipe {self.name} keeps {SEQUENCES_PER_STEP} sequences per step, which "
                f"{world_size} processes cannot share evenly; launch a number of GPUs that "
                f"divides {SEQUENCES_PER_STEP} (1, 2, 4, 8, 16, 24, 32, 40, 48, ...)")
        per_rank = SEQUENCES_PER_STEP // world_size
        micro = max(m for m in range(1, min(per_rank, self.max_micro_batch) + 1)
                    if per_rank % m == 0)
        return micro, per_rank // micro

    def train_options(self, world_size: int) -> dict[str, Any]:
        """The `TrainConfig` fields this recipe sets for `world_size` data-parallel ranks."""
        micro, accum = self.split(world_size)
        return {"data": self.data, "max_steps": self.max_steps, "batch_size": micro,
                "grad_accum": accum, "seq_len": SEQ_LEN, "peak_lr": self.peak_lr,
                "min_lr_ratio": self.min_lr_ratio, "warmup_steps": self.warmup_steps,
                "weight_decay": self.weight_decay, "betas": self.betas,
                "grad_clip": self.grad_clip, "precision": self.precision,
                "compile": self.compile, "eval_interval": self.eval_interval,
                "eval_batches": self.eval_batches,
                "checkpoint_interval": self.checkpoint_interval,
                "log_interval": self.log_interval}

    def train_flops(self) -> float:
        """Matmul FLOPs of the whole run: 3x the forward (forward + backward), attention over
        the average causal context of half a sequence."""
        config = get_preset(self.preset)
        return 3.0 * config.forward_flops_per_token(SEQ_LEN // 2) * self.total_tokens

    def gpu_hours(self, peak_flops_per_s: float = 312e12, mfu: float = 0.40) -> float:
        """GPU-hours at a model-FLOPs utilisation `mfu` of a GPU's dense bf16 peak (A100: 312
        TFLOP/s). The MFU is an assumption, not a measurement: give the one your cluster gets."""
        return self.train_flops() / (peak_flops_per_s * mfu) / 3600.0


def _recipes() -> dict[str, Recipe]:
    small, large = 2.5e-4, 1.5e-4  # the spec's peak LRs: 125M, and the larger models
    entries = [
        # (preset, peak LR, micro-batch on an A100 40GB)
        ("kraken-125m-2way", small, 12), ("kraken-125m-4way", small, 12),
        ("kraken-125m-6way", small, 12), ("gpt2-124m", small, 12),
        ("kraken-350m-2way", large, 6), ("kraken-350m-4way", large, 6), ("gpt2-350m", large, 6),
        ("kraken-760m-4way", large, 4), ("gpt2-774m", large, 4),
    ]
    return {preset: Recipe(preset, preset, lr, micro) for preset, lr, micro in entries}


RECIPES = _recipes()


def get_recipe(name: str) -> Recipe:
    try:
        return RECIPES[name]
    except KeyError:
        raise KrakenError(f"unknown recipe {name!r}; the recipes are {', '.join(RECIPES)} "
                          "(`krakenlm train --list-recipes`)") from None
