"""The `krakenlm` command line. Each area registers its commands from its own module."""

from __future__ import annotations

import errno
import gc
import sys

import typer

from ..errors import Interrupted, KrakenError
from ._invoked import invoked_only

app = typer.Typer(
    name="krakenlm",
    help="Kraken (inherently parallel Transformers) and a hardware simulator for LLM inference.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Help text is plain text: rich markup would take "[cluster]" in an install hint or a
    # "[default: 2]" for a style tag and silently drop it. Every sub-command inherits this.
    rich_markup_mode=None,
)


@app.callback()
def _root() -> None:
    """Kraken (inherently parallel Transformers) and a hardware simulator for LLM inference."""


# True while `main` runs the process's own command line (argv None: the console script), whose
# process ends with the command; False when `main(argv)` is called from other Python code
_process_ends_with_command = False


def imported_for_good() -> None:
    """Called by a short command once it has imported what it runs. When the process ends with
    the command, every object alive now (the imported modules, their classes and constants,
    which live until exit) is moved out of the cycle collector's reach (`gc.freeze`): its
    passes during the command and the full collection at interpreter exit no longer traverse
    them, only what the command itself creates, which is collected as before. callgrind: -45 M
    instructions (4 %) of a cold `sim run`. Called from other Python code (`main(argv)`), it
    does nothing: that process's heap is not ours to freeze."""
    if _process_ends_with_command:
        gc.freeze()


# Registration order is the order of `krakenlm --help`.
from . import models as _models  # noqa: E402,F401  (registers `models`)
from . import train as _train  # noqa: E402,F401  (registers `train`, `eval`)
from . import generate as _generate  # noqa: E402,F401  (registers `generate`)
from . import lm_eval as _lm_eval  # noqa: E402,F401  (registers `lm-eval`)
from . import study as _study  # noqa: E402,F401  (registers `study`, `demo`)
from . import sim as _sim  # noqa: E402,F401  (registers `sim`)
from . import sim_design as _sim_design  # noqa: E402,F401  (registers `sim knobs/explore/search`)
from . import sim_serve as _sim_serve  # noqa: E402,F401  (registers `sim serve`)
from . import bench as _bench  # noqa: E402,F401  (registers `bench tp`)
from . import hf as _hf  # noqa: E402,F401  (registers `export hf`, `import hf`)


# Filesystem errors are the user's environment, not a bug: name the path and what to do.
_FILESYSTEM_ADVICE = {
    errno.ENOSPC: "free some space or write somewhere else (e.g. another --out)",
    errno.EDQUOT: "free some space or write somewhere else (e.g. another --out)",
    errno.EROFS: "the filesystem is read-only; write somewhere else (e.g. another --out)",
    errno.EACCES: "check its permissions or write somewhere else (e.g. another --out)",
    errno.EPERM: "check its permissions or write somewhere else (e.g. another --out)",
    errno.ENOENT: "check the path",
    errno.ENOTDIR: "a part of the path is a file, not a directory; check the path",
    errno.EISDIR: "it is a directory where a file was expected; check the path",
    errno.EEXIST: "it is in the way of a directory to be created there; check the path",
}


def _filesystem_error(exc: OSError) -> str | None:
    advice = _FILESYSTEM_ADVICE.get(exc.errno or -1)
    if advice is None:
        return None
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}: {advice}"


def _usage_error(exc) -> str:
    """typer draws usage errors as a boxed panel with the usage line; one line says it all."""
    command = exc.ctx.command_path if exc.ctx is not None else "krakenlm"
    return f"{exc.format_message()} (see `{command} --help`)"


def _click_exceptions():
    """typer >= 0.22 vendors click as `typer._click`; older ones use click itself."""
    try:
        from typer._click import exceptions
    except ImportError:
        from click import exceptions
    return exceptions


def _keep_option_names_whole() -> None:
    """typer draws `--help` as a rich table whose columns all shrink on a narrow terminal, so a
    long option name came out as `--checkpoint-int…` at 80 columns. Every column but the last
    (the help text, which wraps) is made unbreakable: rich then narrows only the help text,
    whose longest words are folded onto the next line instead of cut.
    Applied only when help is asked for (importing typer's rich layer costs 0.2 s)."""
    try:
        from typer import rich_utils
    except ImportError:  # typer without rich: click's plain help never truncates
        return
    table = rich_utils.Table
    if getattr(table, "keeps_names_whole", False):
        return

    class NamesWholeTable(table):
        keeps_names_whole = True

        def add_row(self, *renderables, **kwargs):
            super().add_row(*renderables, **kwargs)
            for column in self.columns[:-1]:
                column.no_wrap = True
            self.columns[-1].overflow = "fold"  # a word longer than the column breaks, not cut

    rich_utils.Table = NamesWholeTable


def _refuse_repeated_options() -> None:
    """click keeps the last value of an option given twice (`--tp 8 ... --tp 4`) without a word;
    here the second value is a usage error naming both. Options declared repeatable (list
    options, click's "append" action) are not affected; the ones declared repeatable only to
    catch a repetition say so through `train.one_value`. Installed once, on click's option
    parser (typer vendors click as `typer._click`; older ones use click itself)."""
    try:
        from typer._click import parser
        from typer._click.globals import get_current_context
    except ImportError:
        from click import get_current_context, parser
    option = getattr(parser, "_Option", None) or getattr(parser, "Option", None)
    if option is None or getattr(option, "refuses_repeats", False):
        return
    store = option.process

    def process(self, value, state) -> None:
        if self.action == "store" and self.dest in state.opts:
            flag = (self._long_opts or self._short_opts)[0]
            raise _click_exceptions().UsageError(
                f"{flag} was given 2 times ({state.opts[self.dest]}, {value}); give it once",
                ctx=get_current_context(silent=True))  # parsing runs inside the command's context
        store(self, value, state)

    option.process = process
    option.refuses_repeats = True


def main(argv: list[str] | None = None) -> None:
    """Entry point: every failure the user can fix is one line on stderr and exit code 2, never a
    traceback: `KrakenError`s, usage errors (unknown option, bad value), filesystem errors
    (full, read-only, missing paths) and running out of memory.

    Ctrl-C exits with 130 and one line; a command that owns its interruption (`train` saves a
    checkpoint first, on SIGTERM and SIGHUP too) raises `Interrupted` with what it did, and the
    exit code is 128 + the signal's number (143 for SIGTERM, 129 for SIGHUP).
    """
    global _process_ends_with_command
    _process_ends_with_command = argv is None
    click = _click_exceptions()
    _refuse_repeated_options()
    if "--help" in (sys.argv[1:] if argv is None else argv):
        _keep_option_names_whole()
    try:
        # standalone_mode=False: usage errors and Ctrl-C come back here instead of being
        # printed by typer (a multi-line panel, or nothing at all for Ctrl-C).
        # Only the invoked command is built (cli/_invoked.py): the others cost start-up time.
        invoked = invoked_only(app, sys.argv[1:] if argv is None else argv)
        code = invoked(args=argv, prog_name="krakenlm", standalone_mode=False)
    except KrakenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except Interrupted as exc:
        how = "" if exc.signal_name == "SIGINT" else f" ({exc.signal_name})"
        print(f"interrupted{how}: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except click.NoArgsIsHelpError as exc:
        exc.show()  # a bare `krakenlm sim`: the help is the answer
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        print(f"error: {_usage_error(exc)}", file=sys.stderr)
        sys.exit(2)
    except click.ClickException as exc:
        print(f"error: {exc.format_message()}", file=sys.stderr)
        sys.exit(2)
    except typer.Abort:  # end of input at a prompt
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except MemoryError:
        print("error: out of memory; use a smaller model, batch or sequence length, or a machine "
              "with more memory", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:
        message = _filesystem_error(exc)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
    if code == 130:  # typer's answer to Ctrl-C (KeyboardInterrupt) in non-standalone mode
        print("interrupted (Ctrl-C)", file=sys.stderr)
    # `typer.Exit(code)` from a command comes back as its code; a finished command as None.
    sys.exit(code if isinstance(code, int) else 0)
