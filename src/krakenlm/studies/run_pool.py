"""Trainings in worker processes that stop together with the process that started them.

`study compare --jobs N` and the demo train N runs at once in spawned worker processes. When
that parent process gets Ctrl-C, SIGTERM or SIGHUP, `StoppingPool` sends SIGTERM to every worker:
a worker that is training saves its last completed step and stops (training/signals.py), an idle
one starts nothing more, and the parent reports once all of them are done. Workers ignore the
terminal's Ctrl-C themselves (the parent forwards it), and on Linux a worker whose parent dies,
even by SIGKILL, gets SIGTERM too: no training is left running without its study.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import threading
from concurrent.futures import Future, ProcessPoolExecutor

from ..training.signals import STOP_SIGNALS

_stop_event = None  # in a worker: set by the parent when the pool stops


def _note_stop(signum, frame) -> None:
    """A worker between trainings: finish what it does (an evaluation), start nothing new."""


def _die_with_parent(parent_pid: int) -> None:
    """Linux: SIGTERM this worker when its parent dies (PR_SET_PDEATHSIG)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before the call
        os.kill(os.getpid(), signal.SIGTERM)


def _init_worker(event, parent_pid: int) -> None:
    global _stop_event
    _stop_event = event
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides and forwards
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _note_stop)
    _die_with_parent(parent_pid)


def stop_requested() -> bool:
    """In a worker: the pool is stopping (a task that has not started should not)."""
    return _stop_event is not None and _stop_event.is_set()


class StoppingPool:
    """A spawn-context process pool whose workers stop when this process gets a stop signal or
    calls `stop()`; `signum` is the signal received (None if none)."""

    def __init__(self, jobs: int):
        self.jobs = jobs
        self.signum: int | None = None
        self.stopped = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StoppingPool":
        # spawn, not fork: a forked child would inherit this process's torch thread pools.
        context = multiprocessing.get_context("spawn")
        self._event = context.Event()
        self._pool = ProcessPoolExecutor(self.jobs, mp_context=context, initializer=_init_worker,
                                         initargs=(self._event, os.getpid()))
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                previous = signal.getsignal(signum)
                if previous not in (signal.SIG_IGN, None):
                    self._previous[signum] = previous
                    signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        try:
            if exc[0] is not None:
                self.stop()  # an error here (or a bug): the workers save and stop too
            self._pool.shutdown(wait=True, cancel_futures=True)
        finally:
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)

    def submit(self, fn, *args) -> Future:
        return self._pool.submit(fn, *args)

    def _on_signal(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum = signum
        self.stop()

    def stop(self) -> None:
        """Tell every worker to stop: training ones save first, idle ones start nothing new."""
        if self.stopped:
            return
        self.stopped = True
        self._event.set()
        for child in multiprocessing.active_children():
            try:
                os.kill(child.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
