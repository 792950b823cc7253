"""A small byte-level BPE vocabulary trained on a corpus with Hugging Face `tokenizers`.

GPT-2's 50,304-token vocabulary makes the embedding most of a tiny model's parameters, and most
of its rows never occur in a small corpus. `bpe-4k` / `bpe-8k` are byte-level BPEs (GPT-2's
pre-tokenisation regex and byte alphabet, so any text round-trips) of 4,096 / 8,192 tokens,
trained on the *training split* only (validation documents never shape the vocabulary).

Cache: `<cache>/tokenizers/<corpus key>-bpe<size>-v<format>/tokenizer.json` (plus meta.json),
written atomically; the same corpus and size give the same file (training is deterministic).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import KrakenError
from ..fileio import write_text_atomically
from .json_tokenizer import JsonTokenizer, tokenizers_module
from .tokenizer import END_OF_TEXT

BPE_FORMAT_VERSION = 1
BPE_SIZES = {"bpe-4k": 4096, "bpe-8k": 8192}  # both multiples of 64: the model's vocab as is
# Hub corpora are far larger than a BPE of a few thousand tokens needs: the vocabulary is
# learned from the first documents of the training split, up to this many characters.
MAX_TRAINING_CHARS = 200_000_000


class BpeTokenizer(JsonTokenizer):
    """A `bpe-4k`/`bpe-8k` vocabulary: a tokenizer.json whose `<|endoftext|>` separates
    documents; it puts nothing before a text (`start_ids` is empty, as with GPT-2)."""

    def __init__(self, name: str, json_text: str) -> None:
        super().__init__(name, json_text, fix="delete it so that it is trained again")
        eot = self.token_id(END_OF_TEXT)
        if eot is None:
            raise KrakenError(f"the {name} tokenizer has no {END_OF_TEXT} token; delete its "
                              "file so that it is trained again")
        self.eot_id = eot


def train_bpe_json(texts: Iterator[str], vocab_size: int) -> str:
    """The tokenizer.json of a byte-level BPE of `vocab_size` tokens learned from `texts`."""
    tokenizers = tokenizers_module()
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[END_OF_TEXT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok.to_str(pretty=False)


def _capped(texts: Iterator[str], max_chars: int) -> Iterator[str]:
    total = 0
    for text in texts:
        if total >= max_chars:
            return
        total += len(text)
        yield text


def bpe_cache_dir(cache_root: Path, corpus_key: str, vocab_size: int) -> Path:
    return cache_root / "tokenizers" / f"{corpus_key}-bpe{vocab_size}-v{BPE_FORMAT_VERSION}"


def load_or_train_bpe(name: str, spec, cache_root: Path, *, progress: bool = True) -> BpeTokenizer:
    """The `name` BPE of corpus `spec` (a prepare.CorpusSpec), trained on its training split
    the first time and read from the cache afterwards."""
    if name not in BPE_SIZES:
        raise KrakenError(f"unknown BPE tokenizer {name!r}; use one of {', '.join(BPE_SIZES)}")
    vocab_size = BPE_SIZES[name]
    directory = bpe_cache_dir(cache_root, spec.key, vocab_size)
    path = directory / "tokenizer.json"
    if path.is_file():
        return BpeTokenizer(name, path.read_text(encoding="utf-8"))
    train_docs = (text for i, text in enumerate(spec.documents()) if not spec.is_validation(i))
    if progress:
        from tqdm import tqdm
        train_docs = tqdm(train_docs, desc=f"training {name} on {spec.key}", unit="doc")
    started = time.perf_counter()
    json_text = train_bpe_json(_capped(train_docs, MAX_TRAINING_CHARS), vocab_size)
    seconds = time.perf_counter() - started
    tokenizer = BpeTokenizer(name, json_text)
    meta = {"format_version": BPE_FORMAT_VERSION, "name": name, "corpus": spec.key,
            "requested_vocab_size": vocab_size, "vocab_size": tokenizer.vocab_size,
            "trained_on": "training split only", "train_seconds": round(seconds, 2),
            "sha256": tokenizer.sha256}
    write_text_atomically(directory / "meta.json", json.dumps(meta, indent=2) + "\n")
    # tokenizer.json last: its presence means the entry is complete.
    write_text_atomically(path, json_text)
    return tokenizer
