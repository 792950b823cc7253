"""Batches of token windows from a prepared split.

Training batches are a pure function of (seed, step, slot), where the slot numbers the
micro-batches of one optimizer step across all ranks (micro_step * world_size + rank). So:
  * resuming from a checkpoint at step s replays exactly the batches an uninterrupted run would
    have seen, with no sampler state to save;
  * N data-parallel ranks see exactly the data one process sees with N-fold gradient
    accumulation (a test checks that the two give the same weights).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from ..errors import KrakenError


def _windows(tokens: np.ndarray, starts: np.ndarray, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows = np.stack([tokens[s:s + seq_len + 1] for s in starts]).astype(np.int64)
    data = torch.from_numpy(rows)
    return data[:, :-1], data[:, 1:]


def check_long_enough(tokens: np.ndarray, seq_len: int, what: str) -> None:
    if len(tokens) < seq_len + 1:
        raise KrakenError(f"the {what} split has {len(tokens)} tokens, fewer than one window of "
                          f"{seq_len + 1}; use a larger corpus or a model with a shorter context")


def training_batch(tokens: np.ndarray, batch_size: int, seq_len: int, *, seed: int, step: int,
                   slot: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows (inputs, next-token targets), each [batch_size, seq_len]."""
    check_long_enough(tokens, seq_len, "training")
    rng = np.random.default_rng([seed, step, slot])
    starts = rng.integers(0, len(tokens) - seq_len, size=batch_size)
    return _windows(tokens, starts, seq_len)


def evaluation_batches(tokens: np.ndarray, batch_size: int, seq_len: int,
                       max_batches: int | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Consecutive non-overlapping windows from the start of the split: the same every time."""
    check_long_enough(tokens, seq_len, "validation")
    starts = np.arange(0, len(tokens) - seq_len, seq_len)
    n_batches = (len(starts) + batch_size - 1) // batch_size
    if max_batches is not None:
        n_batches = min(n_batches, max_batches)
    for i in range(n_batches):
        yield _windows(tokens, starts[i * batch_size:(i + 1) * batch_size], seq_len)
