"""Files that matter are written whole and swapped in atomically.

A temporary file in the target's directory (same filesystem, so the rename is atomic) is
written, flushed and fsynced, then renamed over the target: a kill at any instant leaves
either the old file or the new one, never a torn one, and a failed write removes its
temporary file.
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterable


def write_text_atomically(path: str | Path, text: str,
                          check: Callable[[Path], None] | None = None) -> Path:
    """Write `text` to `path` atomically; `check(tmp)` may raise to keep the old file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if check is not None:
            check(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_csv_atomically(path: str | Path, fieldnames: Iterable[str],
                         rows: Iterable[dict]) -> Path:
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=list(fieldnames))
    writer.writeheader()
    writer.writerows(rows)
    return write_text_atomically(path, buffer.getvalue())


def read_user_text(path: str | Path, what: str, error: type[Exception] | None = None) -> str:
    """The text of a file the user named, decoded as UTF-8 (the encoding every text input of
    krakenlm is written in). A binary or differently encoded file raises `error` (a
    KrakenError subclass; KrakenError by default) naming `what` and the first bad byte, not a
    UnicodeDecodeError traceback."""
    from .errors import KrakenError

    path = Path(path)
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise (error or KrakenError)(
            f"{what} {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start}): is it a binary file? Give a text file saved as UTF-8") from None
