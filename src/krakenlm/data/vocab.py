"""Which tokenizer a run uses: `--tokenizer gpt2|bpe-4k|bpe-8k`, and the one a checkpoint
recorded.

A checkpoint records its tokenizer in train_state.json (`{"name", "sha256"}`); a BPE's
tokenizer.json is saved in the checkpoint directory itself, so `eval`, `generate` and `lm-eval`
decode with exactly the vocabulary the model was trained on, even after the cache is cleared.
A checkpoint without the record (older runs) used GPT-2.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..errors import KrakenError
from .bpe import BPE_SIZES, BpeTokenizer, load_or_train_bpe
from .tokenizer import GPT2_VOCAB_SIZE, Tokenizer

DEFAULT_TOKENIZER = "gpt2"
TOKENIZER_NAMES = (DEFAULT_TOKENIZER, *BPE_SIZES)
TOKENIZER_FILE = "tokenizer.json"  # a BPE's file, inside each checkpoint directory


def check_tokenizer_name(name: str) -> str:
    if name not in TOKENIZER_NAMES:
        raise KrakenError(f"unknown tokenizer {name!r}; use one of {', '.join(TOKENIZER_NAMES)}")
    return name


def nominal_vocab_size(name: str) -> int:
    """The tokenizer's size before it is trained (a BPE may come out smaller on a tiny corpus)."""
    return GPT2_VOCAB_SIZE if check_tokenizer_name(name) == DEFAULT_TOKENIZER else BPE_SIZES[name]


def padded_vocab_size(n_tokens: int) -> int:
    return (n_tokens + 63) // 64 * 64  # a multiple of 64, as the Kraken runs pad GPT-2's


def model_config_for_tokenizer(config, name: str):
    """`config` with the vocabulary of tokenizer `name` (padded to a multiple of 64). With GPT-2
    a config that already holds its 50,257 tokens is kept as it is (nothing changes for the
    existing presets and Hugging Face configs)."""
    need = padded_vocab_size(nominal_vocab_size(name))
    if name == DEFAULT_TOKENIZER and config.vocab_size >= GPT2_VOCAB_SIZE:
        return config
    return config if config.vocab_size == need else config.replace(vocab_size=need)


def get_tokenizer(name: str, spec=None, cache_root: Path | None = None, *, progress: bool = True):
    """The tokenizer `name`; a BPE is the one of corpus `spec` (trained on first use)."""
    if check_tokenizer_name(name) == DEFAULT_TOKENIZER:
        return Tokenizer()
    if spec is None or cache_root is None:
        raise ValueError("a BPE tokenizer belongs to a corpus: pass spec and cache_root")
    return load_or_train_bpe(name, spec, cache_root, progress=progress)


def tokenizer_record(tokenizer) -> dict:
    """What train_state.json records of the tokenizer."""
    return {"name": tokenizer.name, "sha256": getattr(tokenizer, "sha256", None)}


def tokenizer_files(tokenizer) -> dict[str, bytes]:
    """The files a checkpoint carries for its tokenizer (none for GPT-2, which ships)."""
    if isinstance(tokenizer, BpeTokenizer):
        return {TOKENIZER_FILE: tokenizer.json_text.encode()}
    return {}


def checkpoint_tokenizer(directory: str | Path, expected: str | None = None):
    """The tokenizer a checkpoint was trained with; `expected` (a --tokenizer given on the
    command line) must name it."""
    from ..training import checkpoint as ckpt

    found = ckpt.current_checkpoint(directory)
    state = ckpt.read_train_state(found) or {}
    record = state.get("tokenizer") or {"name": DEFAULT_TOKENIZER, "sha256": None}
    name = record.get("name", DEFAULT_TOKENIZER)
    if expected is not None and check_tokenizer_name(expected) != name:
        raise KrakenError(f"--tokenizer {expected} does not match the checkpoint {found}, which "
                          f"was trained with {name}; drop --tokenizer (the checkpoint's is used) "
                          f"or pass --tokenizer {name}")
    if name == DEFAULT_TOKENIZER:
        return Tokenizer()
    path = found / TOKENIZER_FILE
    if not path.is_file():
        raise KrakenError(f"checkpoint {found} was trained with {name} but holds no "
                          f"{TOKENIZER_FILE}; copy the run's whole checkpoint directory")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise KrakenError(f"{path} is not UTF-8 text, so not the tokenizer this checkpoint was "
                          "trained with; restore it from the run's checkpoint") from None
    if record.get("sha256") and hashlib.sha256(text.encode()).hexdigest() != record["sha256"]:
        raise KrakenError(f"{path} is not the tokenizer this checkpoint was trained with (its "
                          f"sha256 differs from the one in train_state.json); restore it")
    return BpeTokenizer(name, text)


