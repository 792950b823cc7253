"""A serving cluster: pools of replicas, each pool on its own system with its own TP and PP
(heterogeneous replicas: A100 and H100 pools), a router in front (serving.routing).

    from krakenlm.serving.cluster import parse_pools, serve_cluster

    report = serve_cluster(trace, get_preset("llama2-70b"),
                           parse_pools("h100-80gb-x8:tp4:2,a100-80gb-x8:tp8:1"),
                           router="jsq-tokens", slo_ttft_s=2.0, slo_tpot_s=0.1)

Pool syntax (`--replicas`): comma-separated pools `SYSTEM[:tpN][:ppN][:COUNT]` (COUNT
replicas of N-way TP and N-way PP on SYSTEM, a preset or a YAML file; defaults tp1, pp1, 1).
Each pool has its own step-time oracle (its system's kernels, its TP and stage layers), its
own engine defaults for its device and its own KV sizing (on one stage's devices); the cost
adds up each pool's devices at its system's price. A replica of a `pp`-stage pool is `pp`
virtual engines (serving.pipeline). Devices are placed in order, pool by pool, a replica
never straddling a node when it fits in one: `placements` gives each replica's node.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..hardware import load_system
from ..hardware.cost import system_cost
from ..hardware.schema import DTYPE_BYTES, System
from ..models import ModelConfig
from ..simulator import Simulator
from .kv_cache import KVSizing, size_kv_cache
from .pipeline import PipelineTimer, activation_bytes_per_device, stage_config
from .replay import (
    ENGINES,
    SECONDS_PER_YEAR,
    ServeError,
    _check_requests,
    _rows,
    _step_timer,
    cuda_graph_session,
    default_options,
    engine_summary,
    pool_sized_options,
    scheduler_for,
    serial_session,
    session,
)
from .report import AMORTISATION_YEARS, ServeReport, timeline
from .routing import Router, check_router
from .traces import Request, Trace
from .transfer import Network, resolve_network, send_s
from .vllm_v1 import Seq

_FIELD = re.compile(r"^(tp|pp|x)?(\d+)$")


@dataclass(frozen=True)
class PoolSpec:
    """`count` replicas of `tp`-way tensor and `pp`-way pipeline parallelism on `system`."""
    system: str
    tp: int = 1
    pp: int = 1
    count: int = 1

    @property
    def label(self) -> str:
        return f"{self.system}:tp{self.tp}" + (f":pp{self.pp}" if self.pp > 1 else "") + \
            f":{self.count}"


def parse_pools(spec: str, option: str = "--replicas") -> tuple[PoolSpec, ...]:
    """Pools from `SYSTEM[:tpN][:ppN][:COUNT],...` (see the module docstring)."""
    pools = []
    for item in spec.split(","):
        parts = [p.strip() for p in item.strip().split(":")]
        if not parts[0]:
            raise ServeError(f"{option} {spec!r}: a pool without a system; write "
                             "SYSTEM[:tpN][:ppN][:COUNT], e.g. h100-80gb-x8:tp4:2")
        given: dict[str, int] = {}
        for p in parts[1:]:
            m = _FIELD.match(p)
            if not m:
                raise ServeError(f"{option} {spec!r}: {p!r} is not tpN, ppN or a replica count "
                                 "(write SYSTEM[:tpN][:ppN][:COUNT], e.g. h100-80gb-x8:tp4:2)")
            key = {"tp": "tp", "pp": "pp", "x": "count", None: "count"}[m.group(1)]
            if key in given:
                raise ServeError(f"{option} {spec!r}: pool {item.strip()!r} gives {key} twice")
            value = int(m.group(2))
            if value < 1:
                raise ServeError(f"{option} {spec!r}: {key} must be at least 1, got {value}")
            given[key] = value
        pools.append(PoolSpec(parts[0], **given))
    return tuple(pools)


def is_pool_spec(text: str) -> bool:
    """Whether `--replicas` names pools (else it is a replica count)."""
    return re.fullmatch(r"\s*[+-]?\d+\s*", text) is None


class Replica:
    """One replica: `pp` virtual engines (one when pp = 1) sharing its devices."""

    def __init__(self, engines: list, index: int, pool: int, node: int):
        self.engines, self.index, self.pool, self.node = engines, index, pool, node

    @property
    def outstanding(self) -> int:
        return sum(e.outstanding for e in self.engines)

    def outstanding_tokens(self) -> int:
        """Prompt tokens not yet computed plus output tokens not yet generated, over the
        requests the replica holds."""
        return sum(s.prompt + s.output - s.computed
                   for e in self.engines for q in (e.running, e.waiting) for s in q)

    def cached_tokens(self, request: Request) -> int:
        return max(e.pool.hit_ids(request.hash_ids, request.prompt_tokens) * e.pool.hash_tokens
                   for e in self.engines) if request.hash_ids else 0

    def advance(self, until: float) -> None:
        for e in self.engines:
            e.advance(until)

    def engine_for(self) -> object:
        """The virtual engine a new request goes to: the fewest unfinished requests (vLLM V0's
        `min_cost_scheduler`), ties to the first."""
        return min(self.engines, key=lambda e: e.outstanding)

    def add(self, seq: Seq) -> None:
        engine = self.engine_for()
        engine.hold_for_schedule(seq.req.arrival_s)  # vLLM V1's asynchronous scheduling
        engine.add(seq)


@dataclass
class BuiltPool:
    """One pool of a cluster, ready to serve: its spec (system, tp, pp, count), the system and
    simulator session, the scheduler kind (vllm-v1, trtllm, ...) and its options (sized for the
    pool's KV cache), the model config of one pipeline stage, the KV sizing of one stage's
    devices, the step timer (a PipelineTimer when pp > 1), the price per device-second (the
    template system cost / devices / a 3-year amortisation, report.AMORTISATION_YEARS) and the
    wall time spent building the step timer (s)."""
    spec: PoolSpec
    system: System
    sim: Simulator
    kind: str
    options: object
    config: ModelConfig
    sizing: KVSizing  # on one stage's devices, before the split over virtual engines
    timer: object
    usd_per_device_s: float
    build_s: float

    @property
    def blocks_per_engine(self) -> int:
        return self.sizing.blocks // self.spec.pp

    @property
    def devices(self) -> int:
        return self.spec.tp * self.spec.pp * self.spec.count


def build_pool(spec: PoolSpec, model: ModelConfig | Callable[[int], ModelConfig], *,
               software: str, scheduler: str | None, overrides: dict, dtype: str,
               model_name: str, max_context: int, network: Network,
               systems: dict[str, System]) -> BuiltPool:
    """A pool's session, engine options, KV sizing and step-time oracle."""
    system = systems.get(spec.system) or load_system(spec.system)
    systems[spec.system] = system
    if spec.tp > system.device_count:
        raise ServeError(f"pool {spec.label}: tp {spec.tp} exceeds the {system.device_count} "
                         f"devices of {system.name}")
    config = model(spec.tp) if callable(model) else model
    if spec.pp > config.n_layers:
        raise ServeError(f"pool {spec.label}: pp {spec.pp} exceeds {model_name}'s "
                         f"{config.n_layers} layers")
    stage = stage_config(config, spec.pp)
    sim = session(system, software, dtype)
    kind = scheduler_for(sim.profile.name, scheduler)
    options = replace(default_options(kind, system, config, overrides.get("chunked_prefill")
                                      if kind == "vllm-v0" else None), **overrides)
    if options.async_scheduling and kind != "vllm-v1":
        raise ServeError(f"pool {spec.label}: --async-scheduling is vLLM V1's; the {kind} "
                         "scheduler has no such mode: drop it")
    sizing = size_kv_cache(sim, stage, spec.tp, block_size=options.block_size,
                           gpu_memory_utilization=options.gpu_memory_utilization,
                           max_num_batched_tokens=options.max_num_batched_tokens,
                           model_name=model_name, of_free_memory=kind == "trtllm",
                           max_num_seqs=options.max_num_seqs)
    options = pool_sized_options(options, kind, sizing, stage)
    if sizing.blocks // spec.pp < 1:
        raise ServeError(f"pool {spec.label}: {sizing.blocks} KV blocks cannot be split over "
                         f"{spec.pp} virtual engines; use a smaller pp")
    started = time.perf_counter()
    sim = serial_session(cuda_graph_session(sim, options, f"pool {spec.label}"), options, kind)
    timer = _step_timer(sim, stage, spec.tp, options.max_num_batched_tokens,
                        options.max_num_seqs, max(max_context, options.max_num_batched_tokens),
                        options.cuda_graph_max)
    if spec.pp > 1:
        bpv = DTYPE_BYTES[sim.precision("all_reduce")]
        per_node = system.device_count
        # a stage boundary inside a node sends over its links, across nodes over the network
        cross = spec.tp * spec.pp > per_node
        link = network.interconnect() if cross else system.interconnect
        timer = PipelineTimer(timer, spec.pp, lambda tokens: send_s(
            activation_bytes_per_device(tokens, config, spec.tp, bpv), link))
    usd = system_cost(system).system_usd / system.device_count / \
        (AMORTISATION_YEARS * SECONDS_PER_YEAR)
    return BuiltPool(spec, system, sim, kind, options, stage, sizing, timer, usd,
                     time.perf_counter() - started)


def placements(pools: Sequence[BuiltPool]) -> list[int]:
    """The node of each replica, pool by pool (a node per system; a replica that fits in a
    node never straddles two; one larger than a node gets -1: it spans nodes)."""
    used: dict[str, int] = {}
    nodes = []
    for p in pools:
        per_node, size = p.system.device_count, p.spec.tp * p.spec.pp
        for _ in range(p.spec.count):
            start = used.get(p.system.name, 0)
            if size > per_node:
                nodes.append(-1)
                start = math.ceil(start / per_node) * per_node
            else:
                if start // per_node != (start + size - 1) // per_node:
                    start = (start // per_node + 1) * per_node
                nodes.append(start // per_node)
            used[p.system.name] = start + size
    return nodes


def build_replicas(pools: Sequence[BuiltPool], trace: Trace, first_index: int = 0,
                   nodes: Sequence[int] | None = None) -> list[Replica]:
    nodes = nodes if nodes is not None else placements(pools)
    replicas: list[Replica] = []
    for j, p in enumerate(pools):
        for _ in range(p.spec.count):
            index = first_index + len(replicas)
            engines = [ENGINES[p.kind](p.timer, p.options, p.blocks_per_engine,
                                       trace.hash_block_tokens, index) for _ in range(p.spec.pp)]
            replicas.append(Replica(engines, index, j, nodes[len(replicas)]))
    return replicas


def pools_network(pools: Sequence[PoolSpec], gbps: float | None = None) -> Network:
    """The network between the nodes of `pools`' systems (`transfer.resolve_network`):
    `gbps` if given, else their hardware YAML's, else the default."""
    return resolve_network({s.system: load_system(s.system) for s in pools}.values(), gbps)


def build_pools(pools: Sequence[PoolSpec], trace: Trace,
                model: ModelConfig | Callable[[int], ModelConfig], *, software: str,
                scheduler: str | None, overrides: dict, dtype: str, model_name: str,
                skip_long: bool, network: Network) -> tuple[list[BuiltPool], Trace]:
    """Every pool built, and the trace checked against each pool's cache and context."""
    if not pools:
        raise ServeError("a cluster needs at least one pool of replicas")
    if not trace.requests:
        raise ServeError(f"trace {trace.name} holds no requests")
    longest = max(r.prompt_tokens + r.output_tokens for r in trace.requests)
    systems: dict[str, System] = {}
    built = [build_pool(s, model, software=software, scheduler=scheduler, overrides=overrides,
                        dtype=dtype, model_name=model_name, max_context=longest,
                        network=network, systems=systems) for s in pools]
    for p in built:
        trace, _ = _check_requests(trace, p.config, p.blocks_per_engine, p.options.block_size,
                                   skip_long, model_name)
    return built, trace


def check_slos(slo_ttft_s: float | None, slo_tpot_s: float | None) -> None:
    for name, slo in (("--slo-ttft-s", slo_ttft_s), ("--slo-tpot-s", slo_tpot_s)):
        if slo is not None and not (math.isfinite(slo) and slo > 0):
            raise ServeError(f"{name} must be a positive number of seconds, got {slo}")


def start_replay(router: str, slo_ttft_s: float | None, slo_tpot_s: float | None) -> float:
    """Check the router and the SLOs of a cluster replay; the wall-clock time it starts at."""
    started = time.perf_counter()
    check_router(router)
    check_slos(slo_ttft_s, slo_tpot_s)
    return started


def dispatch(replicas: Sequence[Replica], trace: Trace, router: str,
             progress: Callable[[int, int], None] | None, *,
             prefill_only: bool = False, engine_version: str | None = None) -> list[Seq]:
    """Route every request of `trace` in arrival order to a replica chosen by `router` and run
    the replicas to the end; `prefill_only`: each request is replayed for its first token only
    (the router still sees its whole output); `engine_version`: the server's, for the vllm-dp
    balancer (routing.dp_counts_published). The requests' sequences, in trace order."""
    seqs = []
    total = len(trace.requests)
    route = Router(replicas, router, engine_version)
    for k, req in enumerate(trace.requests):
        r = route.choose(req, k)
        seq = Seq(replace(req, output_tokens=1) if prefill_only else req, r.index)
        r.add(seq)
        seqs.append(seq)
        if progress is not None and (k + 1) % 1000 == 0:
            progress(k + 1, total)
    for r in replicas:
        r.advance(math.inf)
    return seqs


def serve_cluster(trace: Trace, model: ModelConfig | Callable[[int], ModelConfig],
                  pools: Sequence[PoolSpec], *, software: str = "vllm",
                  router: str = "round-robin", overrides: dict | None = None,
                  scheduler: str | None = None, dtype: str = "fp16", model_name: str = "model",
                  slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
                  skip_long: bool = False, network: Network | None = None,
                  progress: Callable[[int, int], None] | None = None,
                  engine_version: str | None = None) -> ServeReport:
    """Replay `trace` through every pool's replicas behind `router` (`engine_version`: the
    server's, for the vllm-dp balancer)."""
    started = start_replay(router, slo_ttft_s, slo_tpot_s)
    network = network or pools_network(pools)
    built, trace = build_pools(pools, trace, model, software=software, scheduler=scheduler,
                               overrides=overrides or {}, dtype=dtype, model_name=model_name,
                               skip_long=skip_long, network=network)
    replicas = build_replicas(built, trace)
    seqs = dispatch(replicas, trace, router, progress, engine_version=engine_version)
    total = len(trace.requests)
    if progress is not None:
        progress(total, total)
    return cluster_report(trace, built, replicas, _rows(seqs)[0], seqs,
                          router=router, model_name=model_name, dtype=dtype,
                          slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s, started=started,
                          extra_setup={"network": network.describe()})


def cluster_report(trace: Trace, built: Sequence[BuiltPool], replicas: Sequence[Replica],
                   rows: list[dict], seqs: Sequence[Seq], *, router: str, model_name: str,
                   dtype: str, slo_ttft_s: float | None, slo_tpot_s: float | None,
                   started: float, extra_setup: dict | None = None) -> ServeReport:
    """The report of a cluster replay: `summarise` over every engine, the cost of every pool."""
    stuck = [s for s in seqs if s.finish_s != s.finish_s]
    if stuck:  # cannot happen when every request fits the cache; a guard, not a result
        raise ServeError(f"{len(stuck)} requests never finished")
    engines = [e for r in replicas for e in r.engines]
    start = trace.requests[0].arrival_s
    makespan = max(r["finish_s"] for r in rows) - start
    usd_per_s = sum(p.usd_per_device_s * p.devices for p in built)
    summary, itl = engine_summary(rows, engines, trace, makespan_s=makespan, slo_ttft_s=slo_ttft_s,
                                  slo_tpot_s=slo_tpot_s, usd_per_s=usd_per_s)
    summary["requests_per_replica"] = [sum(1 for s in seqs if s.replica == r.index)
                                       for r in replicas]
    first = built[0]
    pools = [{"pool": p.spec.label, "system": p.system.name, "tp": p.spec.tp, "pp": p.spec.pp,
              "replicas": p.spec.count, "scheduler": p.kind, "devices": p.devices,
              "options": dict(p.options.__dict__), "kv_cache": p.sizing.to_dict(),
              "blocks_per_virtual_engine": p.blocks_per_engine} for p in built]
    setup = {"trace": trace.name, "model": model_name, "arch": first.config.arch,
             "system": " + ".join(p.spec.label for p in built),
             "software": first.sim.profile.name, "scheduler": first.kind,
             "tp": "/".join(str(p.spec.tp) for p in built) if len(built) > 1 else first.spec.tp,
             "replicas": len(replicas), "router": router, "dtype": dtype,
             "kv_cache_dtype": first.sim.precision("kv_cache"),
             "options": dict(first.options.__dict__), "kv_cache": first.sizing.to_dict(),
             "devices": sum(p.devices for p in built), "pools": pools, **(extra_setup or {})}
    return ServeReport(setup, rows, summary, timeline(engines, makespan), itl,
                       wall_s=time.perf_counter() - started,
                       build_s=sum(p.build_s for p in built))
