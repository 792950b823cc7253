"""Stop training cleanly on Ctrl-C (SIGINT), SIGTERM and SIGHUP.

`kill`, `timeout`, `docker stop`, Kubernetes and SLURM time limits send SIGTERM; closing the
terminal sends SIGHUP. All three end a training the way Ctrl-C does: the last completed step is
saved and the command exits with 128 + the signal's number (130, 143, 129) and one line.

While `StopSignals` is installed, a signal either raises `StopRequested` at once (while the
setup or a step's forward and backward passes run, which leave nothing half-done) or is held
until the step is complete: the optimizer update, the metrics row, an evaluation and a save are
never cut in half. Under torchrun every rank holds it and the ranks agree at the end of each step
(one all-reduce of a flag), so all of them stop after the same step. After the first stop, further
signals are ignored so that the final save completes (SIGKILL still ends it at once; the previous
checkpoint then stays current). A signal the process was told to ignore (SIGHUP under `nohup`,
SIGINT in a background job) stays ignored.
"""

from __future__ import annotations

import contextlib
import signal
import threading

import torch
import torch.distributed as dist

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopRequested(KeyboardInterrupt):
    """A stop signal arrived: a KeyboardInterrupt, so that everything that already cleans up
    after Ctrl-C (temporary files, half-written saves) does the same for SIGTERM and SIGHUP."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    def __reduce__(self):  # pickled from a study's worker process to its parent
        return (StopRequested, (self.signum,))


def signal_of(exc: BaseException) -> int:
    """The signal behind a KeyboardInterrupt: its own, or SIGINT (Python's Ctrl-C)."""
    return getattr(exc, "signum", signal.SIGINT)


class StopSignals:
    """Install the handlers (`with StopSignals() as stop:`); outside the main thread, or for
    ignored signals, nothing is installed."""

    def __init__(self) -> None:
        self.received: int | None = None  # the first signal held (not raised) so far
        self._raised = False
        self._holding = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                previous = signal.getsignal(signum)
                if previous in (signal.SIG_IGN, None):
                    continue
                self._previous[signum] = previous
                signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        if self._raised:
            return  # stopping already: let the final save finish
        if self._holding:
            if self.received is None:
                self.received = signum
            return
        self._raised = True
        raise StopRequested(signum)

    @contextlib.contextmanager
    def holding(self):
        """Hold signals inside the block (they are raised by `check`)."""
        before, self._holding = self._holding, True
        try:
            yield
        finally:
            self._holding = before

    @contextlib.contextmanager
    def released(self):
        """Raise signals at once inside the block (one held before it is raised at its start)."""
        before, self._holding = self._holding, False
        try:
            self.check()
            yield
        finally:
            self._holding = before

    def check(self, world_size: int = 1, device: torch.device | None = None) -> None:
        """Raise `StopRequested` if a signal was held; under torchrun, on every rank if any rank
        holds one (a collective: call it at the same point on every rank)."""
        signum = self.received or 0
        if world_size > 1:
            flag = torch.tensor([signum], dtype=torch.int64, device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            signum = int(flag.item())
        if signum and not self._raised:
            self._raised = True
            raise StopRequested(signum)

    @property
    def stopping(self) -> bool:
        return self._raised
