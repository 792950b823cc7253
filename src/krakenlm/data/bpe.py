"""A small byte-level BPE vocabulary trained on a corpus with Hugging Face `tokenizers`.

GPT-2's 50,304-token vocabulary makes the embedding most of a tiny model's parameters, and most
of its rows never occur in a small corpus. `bpe-4k` / `bpe-8k` are byte-level BPEs (GPT-2's
pre-tokenisation regex and byte alphabet, so any text round-trips) of 4,096 / 8,192 tokens,
trained on the *training split* only (validation documents never shape the vocabulary).

Cache: `<cache>/tokenizers/<corpus key>-bpe<size>-v<format>/tokenizer.json` (plus meta.json),
written atomically; the same corpus and size give the same file (training is deterministic).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import KrakenError
from ..fileio import write_text_atomically
from .tokenizer import END_OF_TEXT

BPE_FORMAT_VERSION = 1
BPE_SIZES = {"bpe-4k": 4096, "bpe-8k": 8192}  # both multiples of 64: the model's vocab as is
# Hub corpora are far larger than a BPE of a few thousand tokens needs: the vocabulary is
# learned from the first documents of the training split, up to this many characters.
MAX_TRAINING_CHARS = 200_000_000


def _tokenizers_module():
    try:
        import tokenizers
    except ImportError:
        raise KrakenError("the bpe-* tokenizers need Hugging Face tokenizers: "
                          "pip install tokenizers (a core dependency of krakenlm)") from None
    return tokenizers


class BpeTokenizer:
    """Same interface as the GPT-2 `Tokenizer`: encode/encode_batch/decode, `eot_id`,
    `vocab_size`, `name`; plus the JSON text and its sha256 that a checkpoint records."""

    def __init__(self, name: str, json_text: str) -> None:
        tokenizers = _tokenizers_module()
        self.name = name
        self.json_text = json_text
        self.sha256 = hashlib.sha256(json_text.encode()).hexdigest()
        try:
            self._tok = tokenizers.Tokenizer.from_str(json_text)
        except Exception as exc:  # tokenizers raises a bare Exception on a malformed file
            raise KrakenError(f"the {name} tokenizer file is not a valid tokenizer.json "
                              f"({exc}); delete it so that it is trained again") from None
        # Like GPT-2's: '<|endoftext|>' written inside a document is ordinary text.
        self._tok.encode_special_tokens = True
        eot = self._tok.token_to_id(END_OF_TEXT)
        if eot is None:
            raise KrakenError(f"the {name} tokenizer has no {END_OF_TEXT} token; delete its "
                              "file so that it is trained again")
        self.eot_id = eot
        self.vocab_size = self._tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)


def train_bpe_json(texts: Iterator[str], vocab_size: int) -> str:
    """The tokenizer.json of a byte-level BPE of `vocab_size` tokens learned from `texts`."""
    tokenizers = _tokenizers_module()
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
