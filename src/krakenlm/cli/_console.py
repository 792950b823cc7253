"""Rich consoles for the CLI: tables on stdout, logs and progress on stderr."""

from __future__ import annotations

import sys

from rich.console import Console


def stdout_console() -> Console:
    # Piped output would otherwise be cut to 80 columns and truncate table cells.
    return Console(width=None if sys.stdout.isatty() else 160)


def stderr_console() -> Console:
    return Console(stderr=True)
