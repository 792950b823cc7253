"""Rich output shared by the CLI and the report objects it prints: consoles (tables on stdout,
logs and progress on stderr), tables, and what a report is.

A report is what one command computes, kept apart from how the CLI shows it:

* `to_json()`: the object the command prints with `--json`;
* `to_table()`: the items it prints otherwise, in order: rich renderables (tables), `str` lines
  (printed through rich, as `console.print(text)` does) and `Plain` lines (written as they are:
  paths and messages that rich would wrap at its width or read as markup).

rich is imported on first use: a `--json` run never draws a table, and its import is ~30 ms of
the CLI's start-up.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


class Report(Protocol):
    def to_json(self) -> Any: ...

    def to_table(self) -> list[Any]: ...


class Plain(str):
    """A line printed as it is (`print`), not through rich."""


def stdout_console() -> Console:
    from rich.console import Console

    # Piped output would otherwise be cut to 80 columns and truncate table cells.
    return Console(width=None if sys.stdout.isatty() else 160)


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def table(*args, **kwargs) -> Table:
    """A rich Table, imported on first use (see above)."""
    from rich.table import Table

    return Table(*args, **kwargs)


def table_of(title: str, columns: Iterable[str], left: Iterable[str] = (), **kwargs) -> Table:
    """A table with these columns: the ones named in `left` left-justified, the others (numbers)
    right-justified."""
    out = table(title=title)
    left = set(left)
    for column in columns:
        out.add_column(column, justify="left" if column in left else "right", **kwargs)
    return out
