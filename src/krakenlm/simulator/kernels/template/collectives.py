"""All-reduce, reduce-scatter and all-gather, with the algorithm chosen by the topology.

Each algorithm is a number of sequential *steps* and the bytes the busiest link of a device
carries over the whole collective; the time is

    min over protocols p of  (sqrt(A) + sqrt(B))^2,
    A = steps * (link latency + p.latency_s),
    B = wire bytes / (per-device bandwidth of the algorithm * p.efficiency),

the time of a collective pipelined in chunks of the optimal size (a chunk pays the latency,
the pipeline fills once): A + B + 2 sqrt(AB), between the alpha-beta sum and twice it, and
smooth in the message size as measured curves are. Protocols model what NCCL/RCCL do (LL,
LL128, Simple: lower latency for lower bandwidth); their (latency, efficiency) pairs are fitted
constants (calibration), not hardware facts. With a single ideal protocol the formula is the
pipelined alpha-beta model.

Algorithms per topology (n devices, S bytes per device):
* fully_connected: direct. Reduce-scatter sends S/n to each of the n-1 peers at once, over the
  links dedicated to that peer; 1 step. All-reduce = reduce-scatter + all-gather: 2 steps.
  (The original used ring formulas here, which overstate the latency by n-1 times.)
* switch: direct through the switch: (n-1)/n * S leaves each device's port per phase; 1 step
  of 2 hops. With in-switch reduction (NVLS), an all-reduce sends S and receives S once.
* ring: ring algorithm, 2(n-1) steps of S/n each way round a bidirectional ring; a double
  binary tree (2 log2 n steps, full S per step) wins for small messages; the faster is used.
* torus2d: ring reduce-scatter along one axis then the other, all-gather in reverse.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ....hardware.schema import Interconnect

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")


@dataclass(frozen=True)
class Protocol:
    """One protocol of the collective library (NCCL/RCCL LL, LL128, Simple): the latency it adds per
    step (seconds) and the fraction (<= 1) of the algorithm's bandwidth it reaches. Fitted
    constants (constants/template.py), not hardware facts; the default is the ideal protocol."""
    latency_s: float = 0.0
    efficiency: float = 1.0


IDEAL = (Protocol(),)


@dataclass(frozen=True)
class Plan:
    """One algorithm for a collective on a topology (module docstring): its name ("direct", "ring",
    "tree", "switch-reduce", "torus2d-ring"), the number of sequential steps (each pays the
    latency), the bytes through a device's busiest links summed over the steps, and the
    per-device bandwidth (bytes/s) those bytes flow through."""
    algorithm: str
    steps: int
    wire_bytes: float  # bytes through a device's links, summed over steps
    bandwidth_bytes_per_s: float  # the device bandwidth those bytes flow through


def _ring_plan(kind: str, n: int, size: float, link_bw: float, links: int) -> Plan:
    # Bidirectional ring: half of the device's links go each way, data split over both ways.
    bw = link_bw * links
    phases = 2 if kind == "all_reduce" else 1
    return Plan("ring", phases * (n - 1), phases * (n - 1) / n * size, bw)


def _tree_plan(n: int, size: float, link_bw: float, links: int) -> Plan:
    # Double binary tree (all-reduce only): reduce up, broadcast down, log2 n levels each; the
    # full message crosses a device's links on the way up and again on the way down.
    depth = max(1, math.ceil(math.log2(n)))
    return Plan("tree", 2 * depth, 2 * size, link_bw * links)


def plan_collective(kind: str, ic: Interconnect, size_bytes: float, n: int | None = None) -> list[Plan]:
    """The candidate algorithms for this topology (the cheapest is used)."""
    if kind not in COLLECTIVES:
        raise ValueError(f"unknown collective {kind!r}")
    n = ic.device_count if n is None else n
    link_bw, links = ic.link_bandwidth_bytes_per_s, ic.links_per_device
    phases = 2 if kind == "all_reduce" else 1
    topo = ic.topology
    if topo == "fully_connected":
        # links are spread evenly over the peers of the full system; a group of n uses its share
        per_peer = link_bw * (links // (ic.device_count - 1))
        return [Plan("direct", phases, phases * (n - 1) / n * size_bytes, per_peer * (n - 1))]
    if topo == "switch":
        port = link_bw * links
        if kind == "all_reduce" and ic.in_switch_reduction:
            return [Plan("switch-reduce", 2, size_bytes, port)]
        return [Plan("direct", phases, phases * (n - 1) / n * size_bytes, port)]
    if topo == "ring":
        plans = [_ring_plan(kind, n, size_bytes, link_bw, links)]
        if kind == "all_reduce" and n > 2:
            plans.append(_tree_plan(n, size_bytes, link_bw, links))
        return plans
    if topo == "torus2d":
        a, b = ic.torus_shape
        per_axis = link_bw * links / 2  # half the links along each axis
        steps = phases * ((a - 1) + (b - 1))
        wire = phases * ((a - 1) / a * size_bytes + (b - 1) / b * size_bytes / a)
        return [Plan("torus2d-ring", steps, wire, per_axis)]
    raise ValueError(f"unknown topology {topo!r}")


@functools.lru_cache(maxsize=65536)
def collective_time(kind: str, ic: Interconnect, size_bytes: float, n: int | None = None,
                    protocols: tuple[Protocol, ...] = IDEAL) -> tuple[float, str]:
    """(seconds, algorithm) of a collective over `n` devices (default: all) of `size_bytes`
    per device. A single device needs no communication."""
    n = ic.device_count if n is None else n
    if n <= 1 or size_bytes <= 0:
        return 0.0, "none"
    best = (math.inf, "none")
    for plan in plan_collective(kind, ic, size_bytes, n):
        for p in protocols:
            latency = plan.steps * (ic.link_latency_s + p.latency_s)
            transfer = plan.wire_bytes / (plan.bandwidth_bytes_per_s * p.efficiency)
            t = (math.sqrt(latency) + math.sqrt(transfer)) ** 2
            if t < best[0]:
                best = (t, plan.algorithm)
    return best


def memory_traffic_bytes(kind: str, size_bytes: float, n: int) -> float:
    """Local memory bytes a collective reads and writes on each device (for contention):
    every byte sent is read once, every byte received is written once, reductions read the
    local operand too."""
    if n <= 1:
        return 0.0
    moved = (n - 1) / n * size_bytes
    if kind == "all_reduce":
        return 2 * moved * 2 + moved  # RS + AG send/receive, plus the local reduction reads
    return 2 * moved + (moved if kind == "reduce_scatter" else 0.0)
