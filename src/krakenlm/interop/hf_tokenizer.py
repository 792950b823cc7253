"""A Hugging Face model directory's own tokenizer, which `import hf` carries into the run.

Read in this order:
- `tokenizer.json` (the fast tokenizer; any model: Llama, Mistral, GPT-2, ...), read by
  Hugging Face `tokenizers` (a core dependency);
- `vocab.json` + `merges.txt` (GPT-2-style slow files): rebuilt as the byte-level BPE they
  describe, with the special tokens tokenizer_config.json names;
- no tokenizer files: a model with GPT-2's vocabulary size gets GPT-2's tokenizer, with a
  warning; any other vocabulary is refused (its ids would mean nothing in GPT-2's).
A SentencePiece-only directory (`tokenizer.model`) is refused with how to write its
tokenizer.json (the conversion needs transformers and sentencepiece, which krakenlm does not).

The end-of-text id is the tokenizer's end-of-sequence token (tokenizer_config.json or
special_tokens_map.json `eos_token`, else generation_config.json or config.json
`eos_token_id`), else its beginning-of-sequence one. GPT-2's own vocabulary is recognised and
recorded as `gpt2` (no file to carry). The tokenizer must fit the model's vocabulary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..data.json_tokenizer import HfTokenizer, JsonTokenizer, tokenizers_module
from ..data.tokenizer import END_OF_TEXT_ID, GPT2_VOCAB_SIZE, Tokenizer, gpt2_data_dir
from ..data.vocab import check_tokenizer_fits, padded_vocab_size
from ..errors import KrakenError

# a model with no tokenizer files and one of these vocabulary sizes is taken to be GPT-2's
GPT2_VOCAB_SIZES = range(GPT2_VOCAB_SIZE, padded_vocab_size(GPT2_VOCAB_SIZE) + 1)
SENTENCEPIECE_FILES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
SPECIAL_KEYS = ("eos_token", "bos_token", "unk_token", "pad_token")
GPT2_PROBE = "Hello, world! It's 2024 -- naïve café, 日本語 \n\n  x's 'll  \t end"


@dataclass(frozen=True)
class DirTokenizer:
    """The tokenizer found in a Hugging Face checkpoint directory: the tokenizer object (GPT-2's, or
    an HfTokenizer read from tokenizer.json), how it was found ("read from <file(s)>" or
    "assumed: no tokenizer files") and a warning to print when the choice is a guess."""
    tokenizer: object  # data.tokenizer.Tokenizer (GPT-2) or data.json_tokenizer.HfTokenizer
    source: str  # "read from <file(s)>", or "assumed: no tokenizer files"
    warning: str | None = None


def _json_object(path: Path) -> dict:
    """A tokenizer side file as a dict ({} when absent), or a one-line error."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise KrakenError(f"{path} is not UTF-8 text; restore the model's tokenizer files") \
            from None
    except json.JSONDecodeError as exc:
        raise KrakenError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}); restore "
                          "the model's tokenizer files") from None
    if not isinstance(data, dict):
        raise KrakenError(f"{path} must hold a JSON object; restore the model's tokenizer files")
    return data


def _token_text(value) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _token_id(value) -> int | None:
    """An `eos_token_id` of config.json: an id, or a list of them (the first is the one)."""
    if isinstance(value, list) and value:
        value = value[0]
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def end_of_text(hf_dir: Path, config_data: dict) -> str | int | None:
    """The end-of-text token (a string) or id the directory names, eos before bos."""
    side = [_json_object(hf_dir / "tokenizer_config.json"),
            _json_object(hf_dir / "special_tokens_map.json")]
    model = [_json_object(hf_dir / "generation_config.json"), config_data]
    for kind in ("eos", "bos"):
        for data in side:
            token = _token_text(data.get(f"{kind}_token"))
            if token is not None:
                return token
        for data in model:
            token_id = _token_id(data.get(f"{kind}_token_id"))
            if token_id is not None:
                return token_id
    return None


def _special_tokens(hf_dir: Path) -> tuple[list[str], dict[int, str]]:
    """The named special tokens, and tokenizer_config.json's added tokens by id."""
    config = _json_object(hf_dir / "tokenizer_config.json")
    names = [_json_object(hf_dir / "special_tokens_map.json").get(k) for k in SPECIAL_KEYS]
    names += [config.get(k) for k in SPECIAL_KEYS]
    added = {}
    for key, value in (config.get("added_tokens_decoder") or {}).items():
        token = _token_text(value)
        if token is not None and str(key).isdigit():
            added[int(key)] = token
    return [t for t in map(_token_text, names) if t is not None], added


def byte_level_bpe_json(hf_dir: Path) -> str:
    """vocab.json + merges.txt (GPT-2's slow-tokenizer files) as the equivalent tokenizer.json:
    byte-level pre-tokenisation and decoding, the special tokens kept whole, BOS put first when
    tokenizer_config.json says `add_bos_token`."""
    tokenizers = tokenizers_module()
    from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors

    config = _json_object(hf_dir / "tokenizer_config.json")
    try:
        bpe = models.BPE.from_file(str(hf_dir / "vocab.json"), str(hf_dir / "merges.txt"))
    except Exception as exc:  # tokenizers raises a bare Exception on malformed files
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise KrakenError(f"{hf_dir}: vocab.json and merges.txt are not a BPE vocabulary "
                          f"({first}); restore the model's tokenizer files") from None
    tok = tokenizers.Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(
        add_prefix_space=bool(config.get("add_prefix_space", False)))
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    names, added = _special_tokens(hf_dir)
    # tokens already in vocab.json keep their ids; added ones must follow it in order
    tok.add_special_tokens([AddedToken(t, special=True) for t in dict.fromkeys(names)
                            if tok.token_to_id(t) is not None])
    for token_id in sorted(added):
        if tok.token_to_id(added[token_id]) == token_id:
            continue
        if token_id != tok.get_vocab_size():
            raise KrakenError(f"{hf_dir}/tokenizer_config.json adds the token "
                              f"{added[token_id]!r} as id {token_id}, which does not follow "
                              "vocab.json; save the tokenizer with tokenizer.json "
                              "(tokenizer.save_pretrained with a fast tokenizer)")
        tok.add_special_tokens([AddedToken(added[token_id], special=True)])
    bos = _token_text(config.get("bos_token"))
    if config.get("add_bos_token") and bos is not None and tok.token_to_id(bos) is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
            special_tokens=[(bos, tok.token_to_id(bos))])
    return tok.to_str()


@lru_cache(maxsize=1)
def _gpt2_vocab_and_merges() -> tuple[dict[str, int], list[str]]:
    data = gpt2_data_dir()
    vocab = json.loads((data / "encoder.json").read_text(encoding="utf-8"))
    merges = [line for line in (data / "vocab.bpe").read_text(encoding="utf-8").splitlines()
              if line and not line.startswith("#version")]
    return vocab, merges


def is_gpt2(tokenizer: JsonTokenizer) -> bool:
    """Whether the tokenizer is GPT-2's own: its vocabulary, merges, end-of-text and ids."""
    if tokenizer.vocab_size != GPT2_VOCAB_SIZE or tokenizer.eot_id != END_OF_TEXT_ID \
            or tokenizer.start_ids:
        return False
    vocab, merges = _gpt2_vocab_and_merges()
    if tokenizer.vocabulary() != vocab:
        return False
    model = json.loads(tokenizer.json_text).get("model") or {}
    theirs = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    return theirs == merges and tokenizer.encode(GPT2_PROBE) == Tokenizer().encode(GPT2_PROBE)


def read_hf_tokenizer(hf_dir: Path, config_data: dict, vocab_size: int) -> DirTokenizer:
    """The tokenizer of the model in `hf_dir` (config.json's content `config_data`, a model of
    `vocab_size` tokens), checked to fit the model, or a one-line error."""
    hf_dir = Path(hf_dir)
    if (hf_dir / "tokenizer.json").is_file():
        path = hf_dir / "tokenizer.json"
        try:
            json_text, source = path.read_text(encoding="utf-8"), "read from tokenizer.json"
        except UnicodeDecodeError:
            raise KrakenError(f"{path} is not UTF-8 text; restore the model's tokenizer "
                              "files") from None
    elif (hf_dir / "vocab.json").is_file() and (hf_dir / "merges.txt").is_file():
        json_text, source = byte_level_bpe_json(hf_dir), "read from vocab.json and merges.txt"
    elif (hf_dir / "vocab.json").is_file() or (hf_dir / "merges.txt").is_file():
        have, missing = (("vocab.json", "merges.txt") if (hf_dir / "vocab.json").is_file()
                         else ("merges.txt", "vocab.json"))
        raise KrakenError(f"{hf_dir} has {have} but no {missing}; copy the model's whole "
                          "tokenizer (tokenizer.json, or vocab.json and merges.txt)")
    elif any((hf_dir / name).is_file() for name in SENTENCEPIECE_FILES):
        raise KrakenError(
            f"{hf_dir} has only a SentencePiece tokenizer model; krakenlm reads tokenizer.json: "
            "write it with transformers (AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR), "
            "which needs sentencepiece) and import again")
    elif vocab_size in GPT2_VOCAB_SIZES:
        return DirTokenizer(Tokenizer(), "assumed: no tokenizer files", warning=(
            f"{hf_dir} has no tokenizer files; its vocabulary of {vocab_size:,} tokens is "
            "GPT-2's size, so GPT-2's tokenizer is used (add the model's tokenizer files and "
            "import again if it was trained with another)"))
    else:
        raise KrakenError(f"{hf_dir} has no tokenizer files (tokenizer.json, or vocab.json and "
                          f"merges.txt) and its vocabulary of {vocab_size:,} tokens is not "
                          "GPT-2's; add the model's tokenizer files "
                          "(tokenizer.save_pretrained(DIR)) and import again")
    eot = end_of_text(hf_dir, config_data)
    fix = f"the tokenizer files in {hf_dir} are damaged or not this model's"
    path = hf_dir / "tokenizer.json" if source.endswith("tokenizer.json") else None
    if eot is None:
        raise KrakenError(f"{hf_dir}: the tokenizer names no end-of-sequence or "
                          "beginning-of-sequence token (eos_token in tokenizer_config.json, or "
                          "eos_token_id in config.json); add one and import again")
    tokenizer = HfTokenizer(json_text, eot, fix=fix, path=path)
    if is_gpt2(tokenizer):
        tokenizer = Tokenizer()
    check_tokenizer_fits(tokenizer, vocab_size, str(hf_dir),
                         "the tokenizer files belong to another model; copy this model's")
    return DirTokenizer(tokenizer, source)
