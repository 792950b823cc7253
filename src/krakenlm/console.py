"""Rich consoles for the CLI: tables on stdout, logs and progress on stderr."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


# rich is imported on first use: a `--json` run never draws a table, and its import is ~30 ms
# of the CLI's start-up.
def stdout_console() -> "Console":
    from rich.console import Console

    # Piped output would otherwise be cut to 80 columns and truncate table cells.
    return Console(width=None if sys.stdout.isatty() else 160)


def stderr_console() -> "Console":
    from rich.console import Console

    return Console(stderr=True)


def table(*args, **kwargs):
    """A rich Table, imported on first use (see above)."""
    from rich.table import Table

    return Table(*args, **kwargs)
