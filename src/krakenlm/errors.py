"""User-facing errors. The CLI prints their message on one line and exits with code 2.

Raise a `KrakenError` (or a subclass) for anything the user can fix: bad input, a config that
does not match a checkpoint, a model that does not fit. The message must name the problem and
what to do about it. Bugs stay ordinary exceptions and keep their tracebacks. Input that is
plausible but suspicious gets one `warning: ...` line on stderr (`warn`) and the work goes on.
"""

from __future__ import annotations

import signal
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
    """Raised by a command that handled Ctrl-C (or SIGTERM, SIGHUP) itself (e.g. `train` saved
    a checkpoint); the message says what was kept and how to continue. The CLI prints it and
    exits with 128 + the signal's number: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP."""

    def __init__(self, message: str, signum: int = signal.SIGINT):
        super().__init__(message)
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


def warn(message: str) -> None:
    """One `warning: ...` line on stderr: the input is plausible, but worth a second look."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


def check_seed(seed: int, bits: int = 64, flag: str = "--seed") -> int:
    """`seed` if the random number generator behind `flag` takes it: torch's and numpy's
    generators take 0 .. 2**64 - 1 (`bits=64`), optuna's samplers (numpy's legacy RandomState)
    0 .. 2**32 - 1 (`bits=32`). Anything else would be a ValueError deep in the library."""
    if not 0 <= seed < 2**bits:
        raise KrakenError(f"{flag} must be a whole number from 0 to 2**{bits} - 1, got {seed}")
    return seed
