"""torch.distributed implementations of the model's communicator (`models/comm.py`).

`ProcessGroupComm` sums over the process group; `NoOpComm` keeps every reduction local (the
`--comm off` baseline of the benchmark: same compute, no traffic, wrong numbers). Both count the
collectives they are asked for, by kind, so tests can check 2L / L / L per forward pass, and
`ProcessGroupComm` adds up the wall time a rank spends blocked in them.
"""

from __future__ import annotations

import re
import time
from collections import Counter

import torch
import torch.distributed as dist

from ..errors import KrakenError
from ..models.comm import LocalComm, PendingReduce

BLOCKING = "all_reduce"
ASYNC = "all_reduce_async"


class PeerError(KrakenError):
    """A collective failed because another rank died, stopped responding or never joined."""


def short_reason(exc: BaseException) -> str:
    """The first line of a c10d/gloo error without its source location and boilerplate."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    line = re.sub(r"^\[[^\]]*\.(cpp|cc|h):\d+\]\s*", "", line)
    return line.split(" This is typically caused")[0].rstrip(". ")


def peer_failure(what: str, detail: str, timeout_s: float | None) -> PeerError:
    limit = f" (timeout {timeout_s:g} s)" if timeout_s else ""
    return PeerError(f"{what} failed{limit}: {detail}. Another rank failed, was killed or never "
                     "joined; look for its error above, check that every rank was started, and "
                     "raise --timeout if ranks are just slow")


def peer_error(exc: BaseException, what: str, timeout_s: float | None) -> PeerError:
    return peer_failure(what, short_reason(exc), timeout_s)


class CountingComm:
    """Counts collectives by kind; subclasses do the reduction. `blocked_s` is measured on CPU
    (gloo); with NCCL the calls return before the GPU has reduced, so it means little there."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.blocked_s = 0.0  # wall time spent inside blocking calls and waits

    def reset_stats(self) -> None:
        self.counts.clear()
        self.blocked_s = 0.0


class NoOpComm(LocalComm, CountingComm):
    """Every collective becomes a local no-op: what the run costs without communication."""

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        self.counts[BLOCKING] += 1
        return super().all_reduce(tensor)

    def all_reduce_async(self, tensor: torch.Tensor) -> PendingReduce:
        self.counts[ASYNC] += 1
        return super().all_reduce_async(tensor)


class _PendingWork:
    def __init__(self, comm: "ProcessGroupComm", work, tensor: torch.Tensor):
        self._comm, self._work, self._tensor = comm, work, tensor

    def wait(self) -> torch.Tensor:
        start = time.perf_counter()
        try:
            self._work.wait()
        except RuntimeError as exc:  # DistError and gloo's errors are RuntimeErrors
            raise peer_error(exc, "an asynchronous all-reduce", self._comm.timeout_s) from None
        finally:
            self._comm.blocked_s += time.perf_counter() - start
        return self._tensor


class ProcessGroupComm(CountingComm):
    """Sum over a torch.distributed process group (gloo on CPU, NCCL on CUDA).

    Reductions are in place on the tensor the model hands over; the model always passes a fresh
    activation, and this runtime is for inference (no autograd through collectives).
    """

    def __init__(self, group: dist.ProcessGroup | None = None, timeout_s: float | None = None):
        super().__init__()
        self.group = group
        self.timeout_s = timeout_s

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        self.counts[BLOCKING] += 1
        tensor = tensor.contiguous()
        start = time.perf_counter()
        try:
            dist.all_reduce(tensor, group=self.group)
        except RuntimeError as exc:
            raise peer_error(exc, "an all-reduce", self.timeout_s) from None
        finally:
            self.blocked_s += time.perf_counter() - start
        return tensor

    def all_reduce_async(self, tensor: torch.Tensor) -> _PendingWork:
        """Launch the sum and return at once: gloo runs it on its own thread, NCCL on its
        stream, so the caller's next compute (Kraken's attention) overlaps it."""
        self.counts[ASYNC] += 1
        tensor = tensor.contiguous()
        try:
            work = dist.all_reduce(tensor, group=self.group, async_op=True)
        except RuntimeError as exc:
            raise peer_error(exc, "an asynchronous all-reduce", self.timeout_s) from None
        return _PendingWork(self, work, tensor)


class BlockingComm(ProcessGroupComm):
    """`all_reduce_async` reduces at once, before returning: Kraken without its overlap, so the
    benchmark can show how much of the communication the overlap hides."""

    def all_reduce_async(self, tensor: torch.Tensor) -> PendingReduce:
        reduced = super().all_reduce_async(tensor).wait()  # launched and waited for at once
        return LocalComm().all_reduce_async(reduced)
