"""Validation loss and perplexity over a prepared split."""

from __future__ import annotations

import math

import numpy as np
import torch
from tqdm import tqdm

from ..data.batches import evaluation_batches
from ..errors import KrakenError
from ..models.transformer import Transformer
from ..runtime.precision import autocast


@torch.no_grad()
def evaluate(model: Transformer, tokens: np.ndarray, *, batch_size: int = 8,
             seq_len: int | None = None, max_batches: int | None = None,
             autocast_dtype: torch.dtype | None = None, progress: bool = False) -> dict:
    """Mean next-token loss over consecutive windows of the split, and its perplexity.

    The windows are the same on every call, so numbers from different runs compare directly.
    """
    if batch_size < 1:
        raise KrakenError(f"--batch-size must be >= 1, got {batch_size}")
    if max_batches is not None and max_batches < 1:
        raise KrakenError(f"--max-batches must be >= 1, got {max_batches}")
    was_training = model.training
    model.eval()
    device = model.tok_emb.weight.device
    seq_len = seq_len or model.config.context_len
    total_loss, total_tokens = 0.0, 0
    batches = evaluation_batches(tokens, batch_size, seq_len, max_batches)
    for x, y in tqdm(batches, desc="evaluating", unit="batch", disable=not progress, leave=False):
        x, y = x.to(device), y.to(device)
        with autocast(device, autocast_dtype):
            loss = model(x, y)
        total_loss += loss.item() * y.numel()
        total_tokens += y.numel()
    model.train(was_training)
    mean = total_loss / total_tokens
    if not math.isfinite(mean):
        raise KrakenError(f"the evaluation loss is {mean} (not finite): the model's outputs "
                          "overflow; evaluate with --precision fp32, or use an earlier "
                          "checkpoint if its weights are broken")
    # exp overflows above ~709: such a model predicts nothing, its perplexity is infinite.
    perplexity = math.exp(mean) if mean < 700 else math.inf
    return {"loss": mean, "perplexity": perplexity, "tokens": total_tokens}
