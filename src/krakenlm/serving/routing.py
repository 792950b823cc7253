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
* vllm-dp: vLLM V1's own data-parallel load balancer (`--data-parallel-size N` behind one API
  server; vllm-project/vllm `vllm/v1/engine/core_client.py`,
  `DPLBAsyncMPClient.get_core_engine_for_request`): the lowest 4 x waiting + running, ties to
  the first engine, from the counts the DP coordinator last published, each raised by one
  waiting request for every request the client sent to that engine since ("Increment local
  waiting count for better balancing between stats updates"). Which counts the coordinator
  publishes depends on the release (`dp_counts_published`):
  - before 0.14.0 every DP engine ran `DPEngineCoreProc`, whose busy loop sends the engine's
    waiting and running counts to the coordinator when they change
    (`_maybe_publish_request_counts`), and the coordinator publishes them every 100 ms
    (`DP_STATS_PERIOD_S`; `vllm/v1/engine/coordinator.py`, `min_stats_update_interval_ms`);
  - from 0.14.0 (vllm-project/vllm#30739, "Support online dense model DP without overhead") a
    dense model's DP engines run the plain `EngineCoreProc` ("Non-MoE DP ranks are completely
    independent, so treat like DP=1", `run_engine_core`), which never sends its counts: only
    `DPEngineCoreProc.run_busy_loop` calls `_maybe_publish_request_counts`. The coordinator
    then republishes its initial counts, all zero, every 5 s (`wait_for = ... if
    stats_changed else 5000`; `DP_REPUBLISH_S`), and the front end balances on its own
    increments since the last of them: a load-blind alternation between the engines, reset to
    the first engine every 5 s. Read in the 0.14.0, 0.15.0 and 0.19.0 wheels (PyPI).
  Stateful (`DPLoadBalancer`): the counts are read (or reset) at the first arrival of each
  publication period, the engines advanced to it.

A replica here is anything with `index`, `outstanding`, `outstanding_tokens()`,
`cached_tokens(request)` and `advance(t)` (serving.cluster.Replica)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..errors import KrakenError
from ..simulator.kernels.gpu.allreduce_routes import version_tuple
from .traces import Request

ROUTERS = ("round-robin", "least-loaded", "prefix-affinity", "jsq-tokens", "vllm-dp")
DP_STATS_PERIOD_S = 0.1  # the DP coordinator publishes the engines' counts this often (s)
DP_REPUBLISH_S = 5.0  # and its unchanged counts this often (s): a dense model's, from 0.14.0
DENSE_DP_UNPUBLISHED_SINCE = "0.14.0"  # the first release whose dense DP engines send no counts


class RoutingError(KrakenError, ValueError):
    """An unknown router."""


def check_router(router: str) -> None:
    if router not in ROUTERS:
        raise RoutingError(f"--router {router!r} is not one of {', '.join(ROUTERS)}")


def waiting_running(replica: Any) -> tuple[int, int]:
    """The waiting and running requests of an engine, summed over a replica's engines, or of
    a disaggregated decode replica (its requests not yet admitted count as waiting)."""
    pending = len(getattr(replica, "pending", ()))
    replica = getattr(replica, "replica", replica)
    engines = getattr(replica, "engines", None) or (replica,)
    return (pending + sum(len(e.waiting) for e in engines),
            sum(len(e.running) for e in engines))


def dp_counts_published(engine_version: str | None) -> bool:
    """Whether a vLLM V1 server of `engine_version` publishes its dense model's DP engines'
    request counts to the load balancer (the module docstring): only before 0.14.0. No
    version: a current release, which does not."""
    return bool(engine_version) and \
        version_tuple(engine_version) < version_tuple(DENSE_DP_UNPUBLISHED_SINCE)


class DPLoadBalancer:
    """The `vllm-dp` router over `replicas` (the module docstring): its counts persist from one
    request to the next, so one balancer routes one replay. `published`: the coordinator
    publishes the engines' counts every 100 ms (releases before 0.14.0), else zeros every 5 s
    (`dp_counts_published`)."""

    def __init__(self, replicas: Sequence[Any], published: bool = False):
        self.replicas, self.published = list(replicas), published
        self.period_s = DP_STATS_PERIOD_S if published else DP_REPUBLISH_S
        self._period: int | None = None
        self._counts: list[list[int]] = []

    def choose(self, request: Request) -> Any:
        for r in self.replicas:
            r.advance(request.arrival_s)
        period = math.floor(request.arrival_s / self.period_s)
        if period != self._period:  # a new publication of the engines' counts
            self._period = period
            self._counts = [list(waiting_running(r)) if self.published else [0, 0]
                            for r in self.replicas]
        counts = self._counts
        best = min(range(len(counts)), key=lambda i: (4 * counts[i][0] + counts[i][1], i))
        counts[best][0] += 1
        return self.replicas[best]


class Router:
    """The router of one replay: `choose(request, k)` for the k-th request (0-based)."""

    def __init__(self, replicas: Sequence[Any], router: str,
                 engine_version: str | None = None):
        check_router(router)
        self.replicas, self.router = replicas, router
        self._dp = DPLoadBalancer(replicas, dp_counts_published(engine_version)) \
            if router == "vllm-dp" else None

    def choose(self, request: Request, k: int) -> Any:
        if self._dp is not None:
            return self._dp.choose(request)
        return choose(self.replicas, request, self.router, k)


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
