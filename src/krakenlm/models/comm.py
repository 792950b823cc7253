"""The communication interface the model is written against.

The model's forward pass calls `all_reduce` / `all_reduce_async` exactly where the
architecture needs cross-device traffic. On one device every sub-layer is local, so these are
identities; `krakenlm.distributed` provides the torch.distributed implementation. Writing the
model once against this interface is what makes the sharded runtime exact by construction.
"""

from __future__ import annotations

from typing import Protocol

import torch


class PendingReduce(Protocol):
    def wait(self) -> torch.Tensor: ...


class Communicator(Protocol):
    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over all ranks (blocking); returns the summed tensor."""
        ...

    def all_reduce_async(self, tensor: torch.Tensor) -> PendingReduce:
        """Start summing `tensor` over all ranks; `.wait()` returns the sum."""
        ...


class _Ready:
    def __init__(self, tensor: torch.Tensor):
        self._tensor = tensor

    def wait(self) -> torch.Tensor:
        return self._tensor


class LocalComm:
    """World size 1: every reduction is over local data only, so it is the identity."""

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def all_reduce_async(self, tensor: torch.Tensor) -> PendingReduce:
        return _Ready(tensor)
