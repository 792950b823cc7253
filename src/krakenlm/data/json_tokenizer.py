"""Tokenizers stored as a Hugging Face `tokenizers` tokenizer.json, behind the interface of the
GPT-2 `Tokenizer` (encode/encode_batch/decode, `eot_id`, `vocab_size`, `name`, `start_ids`).

Two kinds: the small BPEs krakenlm trains (`bpe.BpeTokenizer`, `bpe-4k`/`bpe-8k`) and an
imported Hugging Face model's own tokenizer (`HfTokenizer`, recorded as `hf`). A checkpoint
saves the JSON text in its directory and records its sha256, so the ids never change under the
model.
"""

from __future__ import annotations

import hashlib

from ..errors import KrakenError

HF_TOKENIZER = "hf"  # the record name of an imported model's own tokenizer


def tokenizers_module():
    try:
        import tokenizers
    except ImportError:
        raise KrakenError("krakenlm's tokenizer files need Hugging Face tokenizers: "
                          "pip install tokenizers (a core dependency of krakenlm)") from None
    return tokenizers


class JsonTokenizer:
    """A tokenizer.json. Text is encoded without the tokenizer's special-token template and
    with special tokens written in the text read as ordinary text (like GPT-2's
    `encode_ordinary`): a corpus document cannot smuggle in an end-of-text. `start_ids` are
    the ids the tokenizer's template puts before a text (Llama's BOS; none for GPT-2-style
    byte-level BPEs), for the places where a sequence begins (a prompt, an lm-eval context)."""

    eot_id: int

    def __init__(self, name: str, json_text: str, *, fix: str, path=None) -> None:
        tokenizers = tokenizers_module()
        self.name = name
        self.json_text = json_text
        self.sha256 = hashlib.sha256(json_text.encode()).hexdigest()
        try:
            self._tok = tokenizers.Tokenizer.from_str(json_text)
        except Exception as exc:  # tokenizers raises a bare Exception on a malformed file
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            what = path or f"the {name} tokenizer file"
            raise KrakenError(f"{what} is not a valid tokenizer.json ({first}); {fix}") from None
        self._tok.encode_special_tokens = True
        # ids need not be contiguous (added tokens): the model must hold the largest one
        self.vocab_size = max(self.vocabulary().values(), default=-1) + 1
        self.start_ids = self._template_start_ids()

    def _template_start_ids(self) -> tuple[int, ...]:
        plain = self._tok.encode("a", add_special_tokens=False).ids
        full = self._tok.encode("a", add_special_tokens=True).ids
        for i in range(len(full) - len(plain) + 1):
            if full[i:i + len(plain)] == plain:
                return tuple(full[:i])
        return ()

    @property
    def corpus_tag(self) -> str:
        """What names a corpus prepared with this tokenizer in the cache (with the corpus's key)."""
        return f"{self.name}-{self.sha256[:12]}"

    def vocabulary(self) -> dict[str, int]:
        """Token -> id, added tokens included."""
        return self._tok.get_vocab(with_added_tokens=True)

    def token_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(token_id)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)


class HfTokenizer(JsonTokenizer):
    """An imported Hugging Face model's tokenizer.json. Its end-of-text (`eot`: a token or an
    id) is the model's end-of-sequence token, else its beginning-of-sequence one, which
    tokenizer.json itself does not name: the checkpoint records its id."""

    def __init__(self, json_text: str, eot: int | str, *,
                 fix: str = "restore the model's tokenizer files", path=None) -> None:
        super().__init__(HF_TOKENIZER, json_text, fix=fix, path=path)
        eot_id = self.token_id(eot) if isinstance(eot, str) else eot
        if isinstance(eot_id, bool) or not isinstance(eot_id, int) or \
                not 0 <= eot_id < self.vocab_size:
            raise KrakenError(f"the end-of-text token {eot!r} is not in this "
                              f"{self.vocab_size:,}-token tokenizer; {fix}")
        self.eot_id = eot_id

    @property
    def corpus_tag(self) -> str:
        # one tokenizer.json can serve models with different end-of-sequence tokens (a base
        # model and its instruct variant): the separator written between documents differs
        return f"{super().corpus_tag}-eot{self.eot_id}"
