"""User-facing errors. The CLI prints their message on one line and exits with code 2.

Raise a `KrakenError` (or a subclass) for anything the user can fix: bad input, a config that
does not match a checkpoint, a model that does not fit. The message must name the problem and
what to do about it. Bugs stay ordinary exceptions and keep their tracebacks.
"""

import sys


class KrakenError(Exception):
    """An error caused by the user's input, with a message that says how to fix it."""


class Interrupted(Exception):
    """Raised by a command that handled Ctrl-C itself (e.g. `train` saved a checkpoint); the
    message says what was kept and how to continue. The CLI prints it and exits with 130."""


def warn(message: str) -> None:
    """One `warning: ...` line on stderr: the input is plausible but suspicious, and the
    command goes on (the message says what it assumes and how to silence the doubt)."""
    print(f"warning: {message}", file=sys.stderr, flush=True)
