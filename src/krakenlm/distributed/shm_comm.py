"""`SharedMemoryComm`: the model's communicator for ranks on one host, over a shared-memory
arena (`shm_arena.py`) instead of gloo's loopback TCP.

Why no helper thread: on a CPU the all-reduce is CPU work (a copy in, a sum out) on the cores
that compute. gloo's thread overlaps it with compute only by time-slicing the same core, and
adds thread switches, so with one core per rank it hides the waiting, not the cost. Here
`all_reduce_async` copies the tensor into this rank's slot and publishes it (the peers can sum
from then on), and `wait()` sums the ranks' slots. The peers publish at their own launch, so by
the time Kraken's attention is done and it waits, their data are normally there already:
nothing left to overlap but the sum itself, which needs this rank's core either way.
"""

from __future__ import annotations

import time

import torch

from ..models.comm import LocalComm, PendingReduce
from .comm import ASYNC, BLOCKING, CountingComm
from .shm_arena import SharedMemoryArena, _Collective


class _PendingSharedReduce:
    def __init__(self, comm: "SharedMemoryComm", op: _Collective):
        self._comm, self._op = comm, op

    def wait(self) -> torch.Tensor:
        return self._comm._complete(self._op)


class SharedMemoryComm(CountingComm):
    """Sum over the ranks attached to `arena` (CPU tensors; any floating dtype).

    Like `ProcessGroupComm`, the sum is written into the tensor handed over (the model always
    passes a fresh activation), which must not be modified until `wait()`. Communicators sharing
    an arena share its sequence of collectives, so every rank must make the same calls in the
    same order, whichever communicator they go through.

    `overlap=False` makes `all_reduce_async` complete before returning (the benchmark's "Kraken
    without overlap"). `blocked_s` is the wall time inside the calls (copying, summing and
    waiting); `peer_wait_s` only the part spent waiting for peers.
    """

    def __init__(self, arena: SharedMemoryArena, timeout_s: float | None = None,
                 overlap: bool = True):
        super().__init__()
        self.arena, self.timeout_s, self.overlap = arena, timeout_s, overlap
        self.peer_wait_s = 0.0

    def reset_stats(self) -> None:
        super().reset_stats()
        self.peer_wait_s = 0.0

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        self.counts[BLOCKING] += 1
        return self._timed(self._launch_and_complete, tensor.contiguous())

    def all_reduce_async(self, tensor: torch.Tensor) -> PendingReduce:
        self.counts[ASYNC] += 1
        tensor = tensor.contiguous()
        if not self.overlap:
            return LocalComm().all_reduce_async(self._timed(self._launch_and_complete, tensor))
        op = self._timed(self.arena.launch, tensor, self.timeout_s)
        return _PendingSharedReduce(self, op)

    def _complete(self, op: _Collective) -> torch.Tensor:
        return self._timed(self.arena.complete, op, self.timeout_s)

    def _launch_and_complete(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.arena.complete(self.arena.launch(tensor, self.timeout_s), self.timeout_s)

    def _timed(self, call, *args):
        start, waited_before = time.perf_counter(), self.arena.peer_wait_s
        try:
            return call(*args)
        finally:
            self.blocked_s += time.perf_counter() - start
            self.peer_wait_s += self.arena.peer_wait_s - waited_before
