"""Reading the public-log files of `serving/data` (`kv_cache_logs.json`, `step_logs.json`):
one JSON object whose `logs` is a non-empty list of entries, each an object with an `id` and
the file's required fields. What each entry means is checked by its own module
(`kv_logs.py`, `step_logs.py`); this only reads the list."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import KrakenError
from ..fileio import read_user_text


def read_log_entries(path: Path, what: str, error: type[KrakenError],
                     fields: tuple[str, ...]) -> list[tuple[str, dict]]:
    """(name, entry) for every entry of the file's `logs`, the name its `id` (or `#i`). Raises
    `error` with one line naming the file (and the entry) for a file that cannot be read or is
    not JSON, a missing or empty `logs`, an entry that lacks one of `fields`, and an id given
    twice."""
    try:
        data = json.loads(read_user_text(path, what, error))
    except json.JSONDecodeError as e:
        raise error(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    entries = data.get("logs") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise error(f"{path}: needs a non-empty list 'logs'")
    out, seen = [], set()
    for i, entry in enumerate(entries):
        name = entry.get("id", f"#{i}") if isinstance(entry, dict) else f"#{i}"
        missing = [f for f in fields if not isinstance(entry, dict) or f not in entry]
        if missing:
            raise error(f"{path}: log {name} lacks {', '.join(missing)}")
        if name in seen:
            raise error(f"{path}: log {name} appears twice")
        seen.add(name)
        out.append((name, entry))
    return out
