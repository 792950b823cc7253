"""Rich consoles for the CLI (tables on stdout, logs and progress on stderr) and the printing of
a report: its JSON with `--json`, its tables and lines otherwise (krakenlm.console)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..console import Plain, Report, stderr_console, stdout_console, table, table_of

__all__ = ["print_report", "stderr_console", "stdout_console", "table", "table_of"]


def print_report(report: Report, as_json: bool = False, *,
                 json_default: Callable[[Any], Any] | None = None) -> None:
    """Print `report.to_json()` as indented JSON, or the items of `report.to_table()`."""
    if as_json:
        print(json.dumps(report.to_json(), indent=2, default=json_default))
        return
    console = None
    for item in report.to_table():
        if isinstance(item, Plain):
            print(item)
            continue
        console = console or stdout_console()
        console.print(item)
