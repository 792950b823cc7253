"""A directory written whole under a temporary name, then renamed into place.

Used by `export hf` and `import hf`: a kill or an error while writing leaves no half-written
output under the requested name (only the temporary directory, removed on any Python-level
failure). Replacing a non-empty directory (`--force`) moves the old one aside first and
deletes it only after the new one is in place.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..errors import KrakenError
from ..fileio import created_mode


def check_output_dir(out: Path, force: bool, what: str, source: Path | None = None) -> None:
    """Refuse early (before any expensive work) to overwrite something the user did not mean to."""
    if source is not None and source.exists():
        src, dst = source.resolve(), out.resolve()
        if dst == src or src.is_relative_to(dst):
            raise KrakenError(f"--out {out} would replace the model being read ({source}); "
                              "choose another directory")
    if out.exists() and not out.is_dir():
        raise KrakenError(f"--out {out} is a file; give a directory path for the {what}")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise KrakenError(f"--out {out} already exists and is not empty; choose another "
                          f"directory or pass --force to replace it with the {what}")


def fsync_tree(directory: Path) -> None:
    """Flush every file and the directory entries to disk before the rename publishes them."""
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    for path in [directory, *(p for p in directory.rglob("*") if p.is_dir())]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_directory_atomically(out: Path, fill: Callable[[Path], None], *, force: bool,
                               what: str, source: Path | None = None) -> Path:
    """Call `fill(tmp)` to write the directory's content, then make it `out` in one rename."""
    out = Path(out)
    check_output_dir(out, force, what, source)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
        tmp.chmod(created_mode(out, directory=True))  # not mkdtemp's 0700
    except OSError as exc:
        raise KrakenError(f"cannot write the {what} next to {out}: {exc.strerror or exc}; "
                          "choose a writable --out") from None
    old = None
    try:
        fill(tmp)
        fsync_tree(tmp)
        if out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        elif out.exists():
            old = out.with_name(f".{out.name}.replaced-{os.getpid()}")
            os.replace(out, old)
        os.replace(tmp, out)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not out.exists():
            os.replace(old, out)  # put the previous content back
        if isinstance(exc, OSError):
            raise KrakenError(f"writing the {what} to {out} failed: {exc.strerror or exc}; "
                              "nothing was changed (check free space and permissions)") from None
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return out
