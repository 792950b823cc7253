"""The `krakenlm` command line. Each area registers its commands from its own module."""

from __future__ import annotations

import sys

import typer

from ..errors import KrakenError

app = typer.Typer(
    name="krakenlm",
    help="Kraken (inherently parallel Transformers) and a hardware simulator for LLM inference.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Kraken (inherently parallel Transformers) and a hardware simulator for LLM inference."""


# Registration order is the order of `krakenlm --help`.
from . import models as _models  # noqa: E402,F401  (registers `models`)
from . import train as _train  # noqa: E402,F401  (registers `train`, `eval`)
from . import generate as _generate  # noqa: E402,F401  (registers `generate`)
from . import lm_eval as _lm_eval  # noqa: E402,F401  (registers `lm-eval`)
from . import study as _study  # noqa: E402,F401  (registers `study`, `demo`)
from . import sim as _sim  # noqa: E402,F401  (registers `sim`)
from . import bench as _bench  # noqa: E402,F401  (registers `bench tp`)
from . import hf as _hf  # noqa: E402,F401  (registers `export hf`, `import hf`)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors become one line on stderr and exit code 2, never a traceback.

    Usage errors (unknown option, bad value) are reported by typer itself, also with exit 2.
    """
    try:
        app(args=argv, prog_name="krakenlm")
    except KrakenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
