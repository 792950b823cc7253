"""A checkpoint's model together with the tokenizer it was trained (or imported) with.

Every command that feeds a checkpoint text or writes its tokenizer (`eval`, `generate`,
`lm-eval` and the lm-eval adapter, `export hf`, the demos) loads both here, so no path can pair
a model with another vocabulary's ids (e.g. GPT-2's ids fed to a bpe-4k or Llama model).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..data.vocab import checkpoint_tokenizer
from ..models.transformer import Transformer
from .checkpoint import load_model


def load_model_and_tokenizer(directory: str | Path, *, device: torch.device | str = "cpu",
                             expected_tokenizer: str | None = None) -> tuple[Transformer, object]:
    """(model, tokenizer) of a checkpoint. The tokenizer is read first (cheap, and checked to
    fit the model's vocabulary), so a mismatch is named before the weights are read;
    `expected_tokenizer` is a --tokenizer given on the command line, which must name it."""
    tokenizer = checkpoint_tokenizer(directory, expected=expected_tokenizer)
    return load_model(directory, device=device), tokenizer
