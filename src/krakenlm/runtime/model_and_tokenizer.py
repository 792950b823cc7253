"""A checkpoint's model together with the tokenizer it was trained (or imported) with.

The tokenizer is the one train_state.json records (`data/vocab.py` writes the record): GPT-2's,
or the BPE's or imported tokenizer's tokenizer.json saved in the checkpoint directory, checked
against the record's sha256. Every command that feeds a checkpoint text or writes its tokenizer
(`eval`, `generate`, `lm-eval` and the lm-eval adapter, `export hf`, the demos) loads both here,
so no path can pair a model with another vocabulary's ids (e.g. GPT-2's ids fed to a bpe-4k or
Llama model).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from ..data.bpe import BPE_SIZES, BpeTokenizer
from ..data.json_tokenizer import HF_TOKENIZER, HfTokenizer
from ..data.tokenizer import Tokenizer
from ..data.vocab import (DEFAULT_TOKENIZER, TOKENIZER_FILE, TOKENIZER_NAMES, check_tokenizer_fits,
                          check_tokenizer_name)
from ..errors import KrakenError
from ..models.transformer import Transformer
from . import checkpoint as ckpt


def load_model_and_tokenizer(directory: str | Path, *, device: torch.device | str = "cpu",
                             expected_tokenizer: str | None = None) -> tuple[Transformer, object]:
    """(model, tokenizer) of a checkpoint. The tokenizer is read first (cheap, and checked to
    fit the model's vocabulary), so a mismatch is named before the weights are read;
    `expected_tokenizer` is a --tokenizer given on the command line, which must name it."""
    tokenizer = checkpoint_tokenizer(directory, expected=expected_tokenizer)
    return ckpt.load_model(directory, device=device), tokenizer


def _describe(name: str) -> str:
    return ("was imported with its Hugging Face tokenizer (hf)" if name == HF_TOKENIZER
            else f"was trained with {name}")


def checkpoint_tokenizer(directory: str | Path, expected: str | None = None):
    """The tokenizer a checkpoint was trained (or imported) with, checked to fit the model's
    vocabulary; `expected` (a --tokenizer given on the command line) must name it."""
    found = ckpt.current_checkpoint(directory)
    state = ckpt.read_train_state(found) or {}
    recorded = state.get("tokenizer") if isinstance(state, dict) else None
    record = recorded or {"name": DEFAULT_TOKENIZER, "sha256": None}
    name = record.get("name", DEFAULT_TOKENIZER) if isinstance(record, dict) else None
    if not isinstance(name, str):
        raise KrakenError(f"checkpoint {found}: the tokenizer record in train_state.json "
                          f"({record!r}) is not {{\"name\": ..., \"sha256\": ...}}; restore it")
    if expected is not None and check_tokenizer_name(expected) != name:
        keep = "" if name == HF_TOKENIZER else f" or pass --tokenizer {name}"
        raise KrakenError(f"--tokenizer {expected} does not match the checkpoint {found}, which "
                          f"{_describe(name)}; drop --tokenizer (the checkpoint's is used){keep}")
    tokenizer = _recorded_tokenizer(found, record, name)
    if recorded:
        fix = "restore the checkpoint's config.json and tokenizer file"
    else:
        fix = ("a checkpoint that records no tokenizer is read with GPT-2's; save it with a "
               "train_state.json tokenizer record (as `krakenlm train` and `import hf` do)")
    check_tokenizer_fits(tokenizer, ckpt.load_config(found).vocab_size, f"checkpoint {found}",
                         fix)
    return tokenizer


def _recorded_tokenizer(found: Path, record: dict, name: str):
    if name == DEFAULT_TOKENIZER:
        return Tokenizer()
    if name != HF_TOKENIZER and name not in BPE_SIZES:
        raise KrakenError(f"checkpoint {found} records the tokenizer {name!r}, which this "
                          f"krakenlm does not know ({', '.join((*TOKENIZER_NAMES, HF_TOKENIZER))}"
                          "); was train_state.json edited, or written by a newer krakenlm?")
    path = found / TOKENIZER_FILE
    if not path.is_file():
        raise KrakenError(f"checkpoint {found} {_describe(name)} but holds no "
                          f"{TOKENIZER_FILE}; copy the run's whole checkpoint directory")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise KrakenError(f"{path} is not UTF-8 text: it is not the tokenizer this checkpoint "
                          "was saved with; restore it") from None
    if record.get("sha256") and hashlib.sha256(text.encode()).hexdigest() != record["sha256"]:
        raise KrakenError(f"{path} is not the tokenizer this checkpoint was trained with (its "
                          f"sha256 differs from the one in train_state.json); restore it")
    if name == HF_TOKENIZER:
        fix = "restore the checkpoint's train_state.json and tokenizer.json"
        return HfTokenizer(text, record.get("eot_id"), fix=fix, path=path)
    return BpeTokenizer(name, text)
