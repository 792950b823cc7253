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
