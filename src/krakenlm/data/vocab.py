"""Which tokenizer a run uses: `--tokenizer gpt2|bpe-4k|bpe-8k`, and the one a checkpoint
recorded.

A checkpoint records its tokenizer in train_state.json (`{"name", "sha256"}`, and `eot_id` for
an imported one); a BPE's or an imported model's tokenizer.json is saved in the checkpoint
directory itself, so `eval`, `generate`, `lm-eval` and `export hf` encode and decode with exactly
the vocabulary the model was trained on, even after the cache is cleared. A checkpoint without
the record (older runs) used GPT-2.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..errors import KrakenError
from .bpe import BPE_SIZES, BpeTokenizer, load_or_train_bpe
from .json_tokenizer import HF_TOKENIZER, HfTokenizer, JsonTokenizer
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


def _describe(name: str) -> str:
    return ("was imported with its Hugging Face tokenizer (hf)" if name == HF_TOKENIZER
            else f"was trained with {name}")


def checkpoint_tokenizer(directory: str | Path, expected: str | None = None):
    """The tokenizer a checkpoint was trained (or imported) with, checked to fit the model's
    vocabulary; `expected` (a --tokenizer given on the command line) must name it."""
    from ..training import checkpoint as ckpt

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
