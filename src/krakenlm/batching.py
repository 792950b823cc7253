"""Cutting a stream into lists of a fixed size (the last one shorter), read lazily: what
`itertools.batched` does from Python 3.12 on, as lists, for Python 3.11."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of `size` items of `items`, the last one with what is left (none
    when nothing is)."""
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
