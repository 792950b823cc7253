"""`serve_command`: what `krakenlm sim serve` asks for, from its option values (strings and
numbers) to a `ServeReport`: the trace (a file, or a synthetic workload from a seeded RNG),
the rate scale, the model (a preset or a config.json, as another architecture if asked), then
`replay.serve`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ..hardware import load_system
from ..simulator import arch_variant, resolve_model
from ..simulator.constants.software import host_time_scaled, load_software
from .capacity import Capacity, find_capacity, ttft_misses_deciding
from .cluster import PoolSpec, is_pool_spec, parse_pools, pools_network, serve_cluster
from .disagg import PDSearch, pd_search, serve_disaggregated
from .kv_cache import kv_cache_software
from .replay import SCHEDULERS, default_options, serve, throughput_bound_per_s
from .report import ServeReport
from .routing import check_router
from .traces import Trace, read_trace, scale_rate, synthetic_trace

SYNTHETIC = "synthetic"


@dataclass(frozen=True)
class ServeOptions:
    """The options of `krakenlm sim serve`, as serve_command takes them: the trace (a file or
    "synthetic", then `arrival`, `rate` in requests/s, `cv`, `requests` and `lengths` describe
    it), the model, system, software profile, scheduler and architecture, the deployment (tp, pp,
    replicas or pools, router, disaggregated prefill/decode pools, network Gb/s), the rate scale
    and seed, the engine knobs (None: the engine's defaults for the device; swap_space in GiB per
    GPU), the dtypes, SLOs in seconds, and how the client is modelled (client_side: through the
    software profile's front end; max_concurrency: a closed loop)."""
    trace: str
    model: str
    system: str | None
    software: str = "vllm"
    scheduler: str | None = None
    arch: str | None = None
    kraken_rule: str = "engine"
    tp: int = 1
    replicas: int | str = 1  # a count, or pools SYSTEM[:tpN][:ppN][:COUNT],... (cluster.py)
    router: str = "round-robin"
    pp: int = 1
    # disaggregated prefill/decode: counts (of --system/--tp/--pp instances) or pools
    prefill_replicas: str | None = None
    decode_replicas: str | None = None
    network_gbps: float | None = None  # None: the systems' hardware YAML, else 400
    rate_scale: float = 1.0
    seed: int = 0
    # synthetic workloads (--trace synthetic)
    arrival: str = "poisson"
    rate: float | None = None
    cv: float = 1.0
    requests: int = 1000
    lengths: str = "fixed:512,128"
    # engine knobs (None: vLLM's defaults for the device)
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    block_size: int | None = None  # None: the engine's (vLLM 16, TensorRT-LLM 32)
    gpu_memory_utilization: float = 0.9
    prefix_caching: bool | None = None  # None: the engine's default
    chunked_prefill: bool | None = None  # TensorRT-LLM and vLLM V0 (None: their default: off;
    # V0 turns it on past a 32K context, replay.v0_chunks_by_default)
    capacity_policy: str = "guaranteed-no-evict"  # TensorRT-LLM only
    schedule_policy: str = "lpm"  # SGLang only
    preemption_mode: str = "recompute"  # vLLM V0 only: recompute or swap
    swap_space: float = 4.0  # vLLM V0 only: CPU swap space, GiB per GPU
    num_scheduler_steps: int = 1  # vLLM V0 only: multi-step scheduling (vllm_v0.py)
    async_scheduling: bool | None = None  # vLLM V1 only (None: its default, on since 0.14)
    cuda_graph_max: int | None = None  # the engine's largest CUDA graph; 0: none (V1Options)
    dtype: str = "fp16"
    kv_cache_dtype: str = "auto"  # the engine's --kv-cache-dtype (kv_cache.KV_CACHE_DTYPES)
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    skip_long: bool = False
    client_side: bool = False  # times through the software profile's front end (frontend.py)
    max_concurrency: int | None = None  # a closed-loop client (replay.serve's max_concurrency)
    engine_version: str | None = None  # the server's engine version (replay.serve's)
    # the server's CPU: its host and front-end work takes this many times the profile's
    # (`SoftwareProfile.host_time_scaled`); 1: the profile's times
    host_time_scale: float = 1.0


def _check_client_side(o: ServeOptions, pd_search: bool = False) -> None:
    """--client-side is modelled on one pool of replicas; say so for other setups, and warn
    when the profile has no front-end constants to add."""
    from ..errors import warn
    from ..simulator.constants.software import Frontend, is_engine_version, load_software
    from .replay import ServeError

    if o.engine_version is not None and not is_engine_version(o.engine_version):
        raise ServeError(f"--engine-version {o.engine_version!r} is not an engine version "
                         "such as 0.5.4")
    if not o.client_side:
        if o.engine_version is not None and o.router != "vllm-dp":
            warn("--engine-version chooses the front end's form of a --client-side replay and "
                 "the vllm-dp balancer's counts; without either it changes nothing")
        return
    if _is_cluster(o) or pd_search:
        raise ServeError("--client-side is modelled on one pool of replicas (--replicas N, "
                         "--pp 1, no disaggregation) only; drop it for this setup")
    if load_software(o.software).frontend == Frontend():
        warn(f"software {o.software} has no front-end constants (its profile's frontend "
             "section is 0): --client-side reports the engine's times")


def _check_max_concurrency(o: ServeOptions, mode: str | None = None) -> None:
    """--max-concurrency: at least 1, on one pool of replicas, and not with a rate search."""
    from .replay import ServeError

    if o.max_concurrency is None:
        return
    if o.max_concurrency < 1:
        raise ServeError(f"--max-concurrency must be at least 1, got {o.max_concurrency}")
    if mode is not None:
        raise ServeError(f"--max-concurrency cannot be combined with {mode} (a closed loop "
                         "sets its own load); drop one of them")
    if _is_cluster(o):
        raise ServeError("--max-concurrency is modelled on one pool of replicas (--replicas N, "
                         "--pp 1, no disaggregation) only; drop it for this setup")


def serve_command(o: ServeOptions,
                  progress: Callable[[int, int], None] | None = None) -> ServeReport:
    check_router(o.router)
    _check_client_side(o)
    _check_max_concurrency(o)
    if _is_cluster(o):
        replay, trace = _cluster_replay(o, progress)
        report = replay(trace, o.skip_long)
        report.setup.update({"seed": o.seed, "rate_scale": o.rate_scale})
        return report
    trace, config, label, system, options = _setup(o)
    report = serve(trace, config, system, software=_software(o), tp=o.tp,
                   replicas=int(o.replicas),
                   router=o.router, options=options, scheduler=o.scheduler, dtype=o.dtype,
                   model_name=label, slo_ttft_s=o.slo_ttft_s, slo_tpot_s=o.slo_tpot_s,
                   skip_long=o.skip_long, progress=progress, client_side=o.client_side,
                   max_concurrency=o.max_concurrency, engine_version=o.engine_version)
    report.setup.update({"seed": o.seed, "rate_scale": o.rate_scale})
    if o.max_concurrency is not None:
        report.setup["max_concurrency"] = o.max_concurrency
    return report


def capacity_command(o: ServeOptions, percentile: int = 99,
                     progress: Callable[[dict], None] | None = None) -> Capacity:
    """The largest rate scale of the trace (times `o.rate_scale`) meeting the SLOs."""
    check_router(o.router)
    _check_client_side(o)
    _check_max_concurrency(o, "--capacity")
    if _is_cluster(o):
        cluster_replay, trace = _cluster_replay(o, None)

        def scaled(scale: float) -> ServeReport:
            report = cluster_replay(scale_rate(trace, scale), False)
            report.setup.update({"seed": o.seed, "rate_scale": o.rate_scale * scale})
            return report

        if o.skip_long:
            trace = _without_long(trace, _model(o)[0](_first_tp(o)))
        return find_capacity(scaled, trace.rate_per_s(), slo_ttft_s=o.slo_ttft_s,
                             slo_tpot_s=o.slo_tpot_s, percentile=percentile, progress=progress)
    trace, config, label, system, options = _setup(o)
    software = _software(o)
    if o.skip_long:  # drop once, warn once
        trace = _without_long(trace, config)
    stop = ttft_misses_deciding(len(trace.requests), percentile) \
        if o.slo_ttft_s is not None else None

    def replay(scale: float) -> ServeReport:
        report = serve(scale_rate(trace, scale), config, system, software=software, tp=o.tp,
                       replicas=int(o.replicas), router=o.router, options=options,
                       scheduler=o.scheduler, dtype=o.dtype, model_name=label,
                       slo_ttft_s=o.slo_ttft_s, slo_tpot_s=o.slo_tpot_s,
                       skip_long=False, stop_after_ttft_misses=stop,
                       client_side=o.client_side, engine_version=o.engine_version)
        report.setup.update({"seed": o.seed, "rate_scale": o.rate_scale * scale})
        return report

    base = trace.rate_per_s()
    start = 1.0
    if o.slo_ttft_s is not None or o.slo_tpot_s is not None:
        bound = throughput_bound_per_s(trace, config, system, software=software, tp=o.tp,
                                       replicas=int(o.replicas), options=options,
                                       scheduler=o.scheduler, dtype=o.dtype, model_name=label)
        if math.isfinite(base) and base > 0:
            start = bound / base
    return find_capacity(replay, base, slo_ttft_s=o.slo_ttft_s,
                         slo_tpot_s=o.slo_tpot_s, percentile=percentile, progress=progress,
                         start_scale=start)


def _without_long(trace: Trace, config) -> Trace:
    from ..errors import warn

    keep = tuple(r for r in trace.requests
                 if r.prompt_tokens + r.output_tokens - 1 <= config.context_len)
    if len(keep) < len(trace.requests):
        warn(f"dropped {len(trace.requests) - len(keep)} of {len(trace.requests)} requests "
             f"longer than the model's context of {config.context_len} tokens")
    return Trace(trace.name, keep, trace.hash_block_tokens) if keep else trace


def _software(o: ServeOptions):
    """The software profile: its name, or the profile with the KV cache dtype and the host
    time scale asked for."""
    software = kv_cache_software(o.software, o.kv_cache_dtype)
    scale = o.host_time_scale
    if scale == 1.0:
        return software
    from .replay import ServeError
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ServeError(f"--host-time-scale {scale} must be a positive number (how many times "
                         "the profile's host and front-end times the server's CPU takes; 1: as "
                         "the profile times them)")
    return host_time_scaled(software, float(scale))


def _is_cluster(o: ServeOptions) -> bool:
    """Whether the replay needs the cluster layer (pools, PP, token-weighted routing or
    disaggregation) rather than `replay.serve`'s identical replicas."""
    return (is_pool_spec(str(o.replicas)) or o.pp != 1 or o.router == "jsq-tokens"
            or o.prefill_replicas is not None or o.decode_replicas is not None)


def _pools(o: ServeOptions, text: str | int, option: str) -> tuple[PoolSpec, ...]:
    """Pools from a pool spec, or `text` replicas of --system/--tp/--pp."""
    from .replay import ServeError

    if is_pool_spec(str(text)):
        return parse_pools(str(text), option)
    count = int(text)
    if count < 1:
        raise ServeError(f"{option} must be at least 1, got {count}")
    if o.system is None:
        raise ServeError(f"{option} {count} needs --system (or pools: {option} "
                         "SYSTEM:tpN:COUNT,...)")
    if o.pp < 1:
        raise ServeError(f"--pp must be at least 1, got {o.pp}")
    return (PoolSpec(o.system, o.tp, o.pp, count),)


def _model(o: ServeOptions):
    """The model for a TP degree (Kraken's degree follows the TP), and its label."""
    name, original = resolve_model(o.model)
    label = name if o.arch in (None, original.arch) else f"{name} as {o.arch}"
    return (lambda tp: arch_variant(original, o.arch, tp, o.kraken_rule)), label


def _first_tp(o: ServeOptions) -> int:
    spec = o.prefill_replicas if o.prefill_replicas is not None else o.replicas
    return _pools(o, spec, "--replicas")[0].tp


def _overrides(o: ServeOptions) -> dict:
    """The engine knobs the user gave (each pool keeps its device's defaults for the rest)."""
    from .replay import ServeError

    if o.preemption_mode != "recompute":
        raise ServeError(f"--preemption-mode {o.preemption_mode} is modelled on one pool of "
                         "replicas (--replicas N) only; drop it for clusters and "
                         "disaggregated serving")
    if o.num_scheduler_steps != 1:
        raise ServeError(f"--num-scheduler-steps {o.num_scheduler_steps} is modelled on one "
                         "pool of replicas (--replicas N) only; drop it for clusters and "
                         "disaggregated serving")
    given = {"max_num_batched_tokens": o.max_num_batched_tokens,
             "max_num_seqs": o.max_num_seqs, "block_size": o.block_size,
             "enable_prefix_caching": o.prefix_caching, "chunked_prefill": o.chunked_prefill,
             "async_scheduling": o.async_scheduling, "cuda_graph_max": o.cuda_graph_max}
    out = {k: v for k, v in given.items() if v is not None}
    out.update(gpu_memory_utilization=o.gpu_memory_utilization,
               capacity_policy=o.capacity_policy, schedule_policy=o.schedule_policy)
    return out


def _cluster_replay(o: ServeOptions, progress):
    """(replay(trace, skip_long) -> ServeReport, the trace) for a cluster or a
    disaggregated setup; every option is checked before anything is tabulated."""
    from .replay import ServeError

    if (o.prefill_replicas is None) != (o.decode_replicas is None):
        raise ServeError("disaggregated serving needs both --prefill-replicas and "
                         "--decode-replicas")
    if o.prefill_replicas is not None:
        prefill = _pools(o, o.prefill_replicas, "--prefill-replicas")
        decode = _pools(o, o.decode_replicas, "--decode-replicas")
        network = pools_network(prefill + decode, o.network_gbps)
    else:
        pools = _pools(o, o.replicas, "--replicas")
        network = pools_network(pools, o.network_gbps)
    check_router(o.router)
    model, label = _model(o)
    trace = _trace(o)
    common = {"software": _software(o), "router": o.router, "overrides": _overrides(o),
              "scheduler": o.scheduler, "dtype": o.dtype, "model_name": label,
              "slo_ttft_s": o.slo_ttft_s, "slo_tpot_s": o.slo_tpot_s, "network": network,
              "progress": progress, "engine_version": o.engine_version}
    if o.prefill_replicas is not None:
        return (lambda tr, skip: serve_disaggregated(tr, model, prefill, decode,
                                                     skip_long=skip, **common)), trace
    return (lambda tr, skip: serve_cluster(tr, model, pools, skip_long=skip, **common)), trace


def pd_search_command(o: ServeOptions, instances: int, percentile: int = 99,
                      progress: Callable[[str], None] | None = None) -> PDSearch:
    """Every P:D split of `instances` instances of --system/--tp/--pp (`disagg.pd_search`)."""
    from .replay import ServeError

    if o.slo_ttft_s is None and o.slo_tpot_s is None:
        raise ServeError("--pd-search needs an SLO: give --slo-ttft-s and/or --slo-tpot-s")
    _check_client_side(o, pd_search=True)
    _check_max_concurrency(o, "--pd-search")
    (instance,) = _pools(o, 1, "--pd-search")
    check_router(o.router)
    model, label = _model(o)
    trace = _trace(o)
    if o.skip_long:
        trace = _without_long(trace, model(instance.tp))
    return pd_search(trace, model, instance, instances, percentile=percentile,
                     slo_ttft_s=o.slo_ttft_s, slo_tpot_s=o.slo_tpot_s, progress=progress,
                     software=_software(o), router=o.router, overrides=_overrides(o),
                     scheduler=o.scheduler, dtype=o.dtype, model_name=label,
                     network=pools_network([instance], o.network_gbps),
                     engine_version=o.engine_version)


# synthetic traces kept for the process, by their options: a configuration search replays
# the same seeded trace for every configuration (a Trace and its Requests are frozen)
_SYNTHETIC_TRACES: dict[tuple, Trace] = {}
SYNTHETIC_CACHE_SIZE = 4


def _trace(o: ServeOptions) -> Trace:
    from .replay import ServeError

    if o.trace == SYNTHETIC:
        if o.rate is None:
            raise ServeError("--trace synthetic needs --rate (requests per second)")
        key = (o.seed, o.requests, o.rate, o.lengths, o.arrival, o.cv)
        trace = _SYNTHETIC_TRACES.get(key)
        if trace is None:
            trace = synthetic_trace(np.random.default_rng(o.seed), o.requests, o.rate,
                                    o.lengths, o.arrival, o.cv)
            if not o.lengths.startswith("trace:"):  # a file read could change in between
                if len(_SYNTHETIC_TRACES) >= SYNTHETIC_CACHE_SIZE:
                    del _SYNTHETIC_TRACES[next(iter(_SYNTHETIC_TRACES))]
                _SYNTHETIC_TRACES[key] = trace
    else:
        trace = read_trace(o.trace)
    return scale_rate(trace, o.rate_scale)


def _setup(o: ServeOptions):
    from .replay import ServeError

    if o.system is None:
        raise ServeError("give --system (or pools in --replicas SYSTEM:tpN:COUNT,...)")
    trace = _trace(o)
    name, original = resolve_model(o.model)
    config = arch_variant(original, o.arch, o.tp, o.kraken_rule)
    label = name if o.arch in (None, original.arch) else f"{name} as {o.arch}"
    system = load_system(o.system)
    # the engine whose defaults apply (`serve` checks the choice and says what is wrong)
    kind = o.scheduler or SCHEDULERS.get(load_software(o.software).name, "vllm-v1")
    chunks = o.chunked_prefill if kind in ("trtllm", "vllm-v0") else None
    if o.async_scheduling and kind != "vllm-v1":
        raise ServeError(f"--async-scheduling is vLLM V1's (0.10 and later); the {kind} "
                         "scheduler has no such mode: drop it or use --software vllm")
    defaults = default_options(kind, system, config, chunks)
    if kind == "vllm-v0" and chunks is None and defaults.chunked_prefill \
            and o.num_scheduler_steps == 1:  # with multi-step, serve's error says it
        from ..errors import warn
        warn(f"vLLM V0 turns chunked prefill on by itself for a context above 32K ({label}: "
             f"{config.context_len} tokens), budget {defaults.max_num_batched_tokens} tokens; "
             "--no-chunked-prefill replays it without")
    options = replace(defaults,
                      max_num_batched_tokens=o.max_num_batched_tokens
                      or defaults.max_num_batched_tokens,
                      max_num_seqs=o.max_num_seqs or defaults.max_num_seqs,
                      block_size=o.block_size or defaults.block_size,
                      gpu_memory_utilization=o.gpu_memory_utilization,
                      enable_prefix_caching=defaults.enable_prefix_caching
                      if o.prefix_caching is None else o.prefix_caching,
                      chunked_prefill=defaults.chunked_prefill if chunks is None else chunks,
                      capacity_policy=o.capacity_policy,
                      schedule_policy=o.schedule_policy,
                      preemption_mode=o.preemption_mode, swap_space_gib=o.swap_space,
                      num_scheduler_steps=o.num_scheduler_steps,
                      async_scheduling=defaults.async_scheduling if o.async_scheduling is None
                      else o.async_scheduling, cuda_graph_max=o.cuda_graph_max)
    return trace, config, label, system, options
