"""The `krakenlm` command line. Each area registers its commands from its own module."""

from __future__ import annotations

import sys

import typer

try:  # typer < 0.2x re-exported click; newer releases vendor it as typer._click
    import click

    _ClickException, _Abort, _Exit = (click.ClickException, click.exceptions.Abort,
                                      click.exceptions.Exit)
except ModuleNotFoundError:
    from typer._click.exceptions import ClickException as _ClickException

    _Abort, _Exit = typer.Abort, typer.Exit

from ..errors import KrakenError

app = typer.Typer(
    name="krakenlm",
    help="Kraken (inherently parallel Transformers) and a hardware simulator for LLM inference.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Registration order is the order of `krakenlm --help`.
from . import models as _models  # noqa: E402,F401  (registers `models`)
from . import sim as _sim  # noqa: E402,F401  (registers `sim`)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors become one line on stderr and exit code 2, never a traceback."""
    command = typer.main.get_command(app)
    try:
        command.main(args=argv, prog_name="krakenlm", standalone_mode=False)
    except KrakenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except _Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except _ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except _Exit as exc:
        sys.exit(exc.exit_code)
