"""AdamW with the spec's parameter grouping, and the learning-rate schedule."""

from __future__ import annotations

import math

import torch

from ..models.transformer import Transformer


def build_optimizer(model: Transformer, *, lr: float, weight_decay: float,
                    betas: tuple[float, float]) -> torch.optim.AdamW:
    """Decay on matrices and embeddings only; norms and biases are not decayed."""
    decay_names = model.decay_parameter_names()
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (decay if name in decay_names else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    # The fused kernel exists for CPU and CUDA and is several times faster than the loop.
    return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=True)


def learning_rate(step: int, *, peak_lr: float, warmup_steps: int, max_steps: int,
                  min_lr_ratio: float = 0.1) -> float:
    """Linear warm-up to peak_lr, then cosine decay to peak_lr * min_lr_ratio at max_steps.

    `step` counts optimizer steps from 0; the first step uses a small but non-zero rate.
    """
    min_lr = peak_lr * min_lr_ratio
    if warmup_steps > 0 and step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    if step >= max_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, max_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (peak_lr - min_lr)
