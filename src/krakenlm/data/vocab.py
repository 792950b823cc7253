"""Which tokenizer a run uses: `--tokenizer gpt2|bpe-4k|bpe-8k`, and what a checkpoint records
of it (read back by `runtime.model_and_tokenizer.checkpoint_tokenizer`).

A checkpoint records its tokenizer in train_state.json (`{"name", "sha256"}`, and `eot_id` for
an imported one); a BPE's or an imported model's tokenizer.json is saved in the checkpoint
directory itself, so `eval`, `generate`, `lm-eval` and `export hf` encode and decode with exactly
the vocabulary the model was trained on, even after the cache is cleared. A checkpoint without
the record (older runs) used GPT-2.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import KrakenError
from .bpe import BPE_SIZES, load_or_train_bpe
from .json_tokenizer import HfTokenizer, JsonTokenizer
from .tokenizer import GPT2_VOCAB_SIZE, Tokenizer

DEFAULT_TOKENIZER = "gpt2"
TOKENIZER_NAMES = (DEFAULT_TOKENIZER, *BPE_SIZES)
TOKENIZER_FILE = "tokenizer.json"  # a BPE's or an imported tokenizer's file, in the checkpoint


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
    """What train_state.json records of the tokenizer (an imported one also its end-of-text
    id, which its tokenizer.json does not name)."""
    record = {"name": tokenizer.name, "sha256": getattr(tokenizer, "sha256", None)}
    if isinstance(tokenizer, HfTokenizer):
        record["eot_id"] = tokenizer.eot_id
    return record


def tokenizer_files(tokenizer) -> dict[str, bytes]:
    """The files a checkpoint carries for its tokenizer (none for GPT-2, which ships)."""
    if isinstance(tokenizer, JsonTokenizer):
        return {TOKENIZER_FILE: tokenizer.json_text.encode()}
    return {}


def prompt_ids(tokenizer, text: str) -> list[int]:
    """`text` as the start of a sequence: the ids the tokenizer puts first (a Llama
    tokenizer's BOS; nothing for GPT-2 and the BPEs), then the text's."""
    return [*tokenizer.start_ids, *tokenizer.encode(text)]


def check_tokenizer_fits(tokenizer, vocab_size: int, where: str, fix: str) -> None:
    """Refuse a tokenizer whose ids index past the model's embedding (an IndexError later,
    or silently wrong rows if the model were bigger than the tokenizer it was trained on)."""
    if tokenizer.vocab_size > vocab_size:
        raise KrakenError(f"{where}: the {tokenizer.name} tokenizer has {tokenizer.vocab_size:,} "
                          f"tokens but the model's vocabulary is {vocab_size:,} (config.json "
                          f"vocab_size); {fix}")
