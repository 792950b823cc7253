"""Files that matter are written whole and swapped in atomically; one writer at a time.

A temporary file in the target's directory (same filesystem, so the rename is atomic) is
written, flushed and fsynced, then renamed over the target: a kill at any instant leaves
either the old file or the new one, never a torn one, and a failed write removes its
temporary file.

`acquire_lock` takes an exclusive `flock` on a lock file that records its holder (pid, host,
start time, command line). The kernel drops the lock when the holder dies, even by SIGKILL, so
a lock file left by a killed process is simply taken over; a live holder is named.
"""

from __future__ import annotations

import csv
import errno
import fcntl
import io
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping


def umask() -> int:
    """The process's file-creation mask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def created_mode(path: Path, directory: bool = False) -> int:
    """The permissions a file (or `directory`) written over `path` keeps: the ones it has
    where it exists, else what `open` (`mkdir`) would give under the umask. A temporary file
    (`tempfile.mkstemp`, 0600) or directory (`mkdtemp`, 0700) renamed into place would
    otherwise leave a result only its owner can read."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        return (0o777 if directory else 0o666) & ~umask()


def write_text_atomically(path: str | Path, text: str,
                          check: Callable[[Path], None] | None = None) -> Path:
    """Write `text` to `path` atomically; `check(tmp)` may raise to keep the old file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = created_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
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


def write_bytes_atomically(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` atomically (a figure, any binary file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = created_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
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


def read_shipped_or_user_text(name_or_path: str, shipped: Mapping[str, Any], *, what: str,
                              file_what: str, error: type[Exception],
                              unknown: Callable[[str], str]) -> tuple[str, str]:
    """The text of a file the package ships under the name `name_or_path` (a key of `shipped`,
    whose values have `read_text`), else of the user's file at that path, and how a message
    names it (`"<what> <name>"` or the path). Neither raises `error` with the message
    `unknown` makes of the shipped names, comma-separated."""
    if name_or_path in shipped:
        return shipped[name_or_path].read_text(), f"{what} {name_or_path}"
    path = Path(name_or_path)
    if not path.is_file():
        raise error(unknown(", ".join(sorted(shipped))))
    return read_user_text(path, file_what, error), str(path)


# --------------------------------------------------------------------------------- locks
class LockBusy(Exception):
    """The lock is held by a live process; `holder` is what its lock file says (may be {})."""

    def __init__(self, path: Path, holder: dict):
        super().__init__(f"{path} is locked by {describe_holder(holder)}")
        self.path, self.holder = path, holder


def _host_name() -> str:
    import socket  # here, not at import: a command that takes no lock starts faster

    return socket.gethostname()


def describe_holder(holder: dict) -> str:
    """'pid 123 on host h, started 2025-01-01 12:00:00 UTC' from a lock file's record."""
    if not holder.get("pid"):
        return "a process its lock file does not name"
    text = f"pid {holder['pid']}"
    if holder.get("host") and holder["host"] != _host_name():
        text += f" on host {holder['host']}"
    if holder.get("started"):
        text += f", started {holder['started']}"
    return text


class HeldLock:
    """An exclusive lock, held until `release` (or the process's end)."""

    def __init__(self, path: Path, fd: int, previous: dict):
        self.path, self._fd = path, fd
        # What a holder that died without releasing left in the file ({} after a clean release).
        self.previous = previous

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)  # empty: released cleanly, nobody holds it
        except OSError:
            pass
        os.close(self._fd)  # closing the last descriptor drops the flock
        self._fd = None

    def __enter__(self) -> "HeldLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def read_holder(fd: int) -> dict:
    """What a lock file (open as `fd`) says of its holder ({} when empty or unreadable)."""
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", errors="replace")
        holder = json.loads(text) if text.strip() else {}
    except (OSError, ValueError):
        return {}  # being written right now, or not ours: nothing to name
    return holder if isinstance(holder, dict) else {}


def lock_holder(path: str | Path) -> dict | None:
    """What the live holder of the lock at `path` recorded (may be {}), or None when nobody
    holds it (or there is no lock file). Reads only: creates and writes nothing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        return read_holder(fd) if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else None
    finally:
        os.close(fd)  # drops the flock if this probe took it
    return None


def acquire_lock(path: str | Path, *, wait: bool = False,
                 on_wait: Callable[[dict], None] | None = None) -> HeldLock:
    """Lock `path` (created with its parents if missing) for this process and record who holds
    it. A lock held by a live process raises `LockBusy`, or with `wait` blocks until it is
    released (calling `on_wait(holder)` first). OSErrors (unwritable directory, a filesystem
    without flock) propagate to the caller, which decides whether to go on unlocked."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            holder = read_holder(fd)
            if not wait:
                raise LockBusy(path, holder) from None
            if on_wait is not None:
                on_wait(holder)
            fcntl.flock(fd, fcntl.LOCK_EX)
        previous = read_holder(fd)
        record = {"pid": os.getpid(), "host": _host_name(),
                  "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                  "command": " ".join(sys.argv)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return HeldLock(path, fd, previous)


# ------------------------------------------------------------------- wrapped I/O errors
_OS_ERROR_NUMBER = re.compile(r"\(os error (\d+)\)")


def os_error_from(exc: BaseException, filename: str | Path | None = None) -> OSError | None:
    """The OSError a library hid behind its own exception type, or None when there is none:
    safetensors reports a full disk as `SafetensorError: ... I/O error: No space left on device
    (os error 28)`; an OSError raised inside a callback may sit in the exception's chain."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError):
            return exc
        match = _OS_ERROR_NUMBER.search(str(exc))
        if match:
            number = int(match.group(1))
            return OSError(number, os.strerror(number), None if filename is None else str(filename))
        exc = exc.__cause__ or exc.__context__
    return None
