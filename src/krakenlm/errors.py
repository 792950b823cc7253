"""User-facing errors. The CLI prints their message on one line and exits with code 2.

Raise a `KrakenError` (or a subclass) for anything the user can fix: bad input, a config that
does not match a checkpoint, a model that does not fit. The message must name the problem and
what to do about it. Bugs stay ordinary exceptions and keep their tracebacks.
"""

import sys


# Every character str.splitlines() breaks a line at, and how a message shows it.
_LINE_BREAKS = str.maketrans({c: repr(c)[1:-1] for c in
                              "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"})


class KrakenError(Exception):
    """An error caused by the user's input, with a message that says how to fix it.

    The message is one line even when it quotes what the user wrote (a field name or a value
    holding a line break): line breaks are shown escaped, e.g. as `\\n`."""

    def __str__(self) -> str:
        return super().__str__().translate(_LINE_BREAKS)


class Interrupted(Exception):
    """Raised by a command that handled Ctrl-C itself (e.g. `train` saved a checkpoint); the
    message says what was kept and how to continue. The CLI prints it and exits with 130."""


def warn(message: str) -> None:
    """One `warning: ...` line on stderr: the input is plausible but suspicious, and the
    command goes on (the message says what it assumes and how to silence the doubt)."""
    print(f"warning: {message}", file=sys.stderr, flush=True)
