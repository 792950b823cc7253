"""Routers of a serving cluster: which replica takes an arriving request.

* round-robin: replica k mod n for the k-th request.
* least-loaded: the fewest outstanding requests (running + waiting) when the request arrives;
  ties to the lowest index (vLLM production-stack's and SGLang's router fall back to this).
* prefix-affinity: the replica whose prefix cache holds the longest run of the request's
  prefix blocks, then least-loaded (least-loaded for a request without block ids).
* jsq-tokens: token-weighted join-the-shortest-queue: the fewest outstanding *tokens*, the
  prompt tokens not yet computed plus the output tokens not yet generated of every request
  the replica holds, counting the arriving request's own prompt against the replica's cached
  prefix; ties to the lowest index. A request count treats a 4k-token prompt like a 40-token
  one; the token count is the work left. Dynamo's KV router scores a worker the same way,
  by its potential prefill blocks (input tokens minus the cached overlap) plus its active
  decode blocks, and picks the lowest (wxsms/dynamo@80e7bafd
  `docs/design_docs/router_design.md`, "Potential Active Blocks" / "Potential New Prefill
  Blocks"); we count tokens instead of blocks and weight prefill and decode tokens alike.
  Heterogeneous replicas need no weights: a faster replica drains its tokens sooner and so
  is chosen more often.

A replica here is anything with `index`, `outstanding`, `outstanding_tokens()`,
`cached_tokens(request)` and `advance(t)` (serving.cluster.Replica)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import KrakenError
from .traces import Request

ROUTERS = ("round-robin", "least-loaded", "prefix-affinity", "jsq-tokens")


class RoutingError(KrakenError, ValueError):
    """An unknown router."""


def check_router(router: str) -> None:
    if router not in ROUTERS:
        raise RoutingError(f"--router {router!r} is not one of {', '.join(ROUTERS)}")


def choose(replicas: Sequence[Any], request: Request, router: str, k: int) -> Any:
    """The replica that takes the k-th request (0-based) arriving at `request.arrival_s`;
    every replica a load-based router compares is first advanced to that time."""
    if router == "round-robin":
        r = replicas[k % len(replicas)]
        r.advance(request.arrival_s)
        return r
    for r in replicas:
        r.advance(request.arrival_s)
    if router == "jsq-tokens":
        return min(replicas, key=lambda r: (
            r.outstanding_tokens() + request.prompt_tokens - r.cached_tokens(request)
            + request.output_tokens, r.index))
    if router == "prefix-affinity" and request.hash_ids:
        return min(replicas, key=lambda r: (-r.cached_tokens(request), r.outstanding, r.index))
    return min(replicas, key=lambda r: (r.outstanding, r.index))
