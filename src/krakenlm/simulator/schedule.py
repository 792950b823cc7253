"""Two streams per device: compute and communication, with a contention model.

Each stream runs its operators in program order; an operator also waits for the operators it
names as dependencies. So a blocking all-reduce (the next op needs its result) stalls compute,
while Kraken's all-reduce, needed only by the FFN, runs beside norm, QKV, attention and the
output projection.

Contention model (documented, deliberately simple): while a collective runs it occupies
  * `comm_core_share` of the cores (NCCL/RCCL run their channels as kernels on the SMs/CUs:
    8-16 of the A100's 108 SMs for a 4-8 GPU all-reduce, ~10 %), and
  * a share of memory bandwidth equal to its own local traffic (what it sends, receives and
    reduces; collectives.memory_traffic_bytes) divided by its duration.
A compute-bound operator running beside it progresses at (1 - core share) of its speed, a
memory-bound one at (1 - bandwidth share); the collective itself is not slowed (its kernels have
their SMs and its links are its own). Progress is integrated piecewise between events, so an
operator that overlaps a collective only partly is slowed only for that part.

The time of every instant is attributed to one category, so the categories add up to the wall
time: the compute op running then (a GEMM that overlaps a collective counts as "GEMM overlapped
with AllReduce"), or "exposed AllReduce" / "exposed AllGather" when only communication runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

COMM_CORE_SHARE = 0.10


@dataclass(frozen=True)
class TimedOp:
    """An operator ready to schedule (module docstring): name, category, stream ("compute" or
    "comm"), its time in seconds alone on an idle device, which resource bounds a compute op
    (what a running collective's contention slows), the operators it waits for, and, for a
    collective, the fraction of memory bandwidth it takes while running."""
    name: str
    category: str
    stream: str  # "compute" or "comm"
    time_s: float  # alone on an idle device
    bound: str = "compute"  # compute ops: which resource a collective's contention slows
    deps: tuple[str, ...] = ()
    memory_share: float = 0.0  # comm ops: fraction of memory bandwidth taken while running


@dataclass
class Schedule:
    """The result of scheduling one graph on the two streams (module docstring): the wall time in
    seconds, each operator's (start, end) in seconds, and the wall time attributed per category
    (the categories add up to `total_s`)."""
    total_s: float
    spans: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (start, end)
    categories: dict[str, float] = field(default_factory=dict)


def _slowdown(op: TimedOp, comm: TimedOp | None, core_share: float) -> float:
    if comm is None or op.stream != "compute":
        return 1.0
    share = core_share if op.bound == "compute" else comm.memory_share
    return 1.0 / max(1.0 - min(share, 0.95), 0.05)


_ALONE = {"compute": 1.0}  # progress rate of compute with no collective running


def schedule(ops: list[TimedOp], core_share: float = COMM_CORE_SHARE) -> Schedule:
    queues = {"compute": [o for o in ops if o.stream == "compute"],
              "comm": [o for o in ops if o.stream == "comm"]}
    names = {o.name for o in ops}
    done: dict[str, float] = {}
    running: dict[str, list] = {}  # stream -> [op, remaining isolated seconds, start]
    spans: dict[str, tuple[float, float]] = {}
    categories: dict[str, float] = {}
    t = 0.0

    def ready(op: TimedOp) -> bool:
        return all(d in done or d not in names for d in op.deps)

    while queues["compute"] or queues["comm"] or running:
        for stream in ("comm", "compute"):  # launch comm first: it is posted as soon as ready
            if stream not in running and queues[stream] and ready(queues[stream][0]):
                op = queues[stream].pop(0)
                running[stream] = [op, op.time_s, t]
        if not running:
            raise RuntimeError("schedule deadlock: an operator waits for one that never runs")
        comm = running.get("comm", [None])[0]
        # compute alone runs at its isolated speed (_slowdown 1): most of a graph's events
        rates = {s: 1.0 / _slowdown(r[0], comm, core_share) for s, r in running.items()} \
            if comm is not None else _ALONE
        dt = min(r[1] / rates[s] for s, r in running.items())
        # Attribute [t, t + dt) to one category.
        if "compute" in running:
            cop = running["compute"][0]
            cat = cop.category
            if cat == "GEMM" and comm is not None:
                cat = "GEMM overlapped with AllReduce"
        else:
            cat = "exposed " + comm.category
        categories[cat] = categories.get(cat, 0.0) + dt
        t += dt
        for s in list(running):
            op, remaining, start = running[s]
            remaining -= dt * rates[s]
            if remaining <= 1e-15 + 1e-12 * op.time_s:
                done[op.name] = t
                spans[op.name] = (start, t)
                del running[s]
            else:
                running[s][1] = remaining
    return Schedule(t, spans, categories)
