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
from ..simulator.constants.software import load_software
from .capacity import Capacity, find_capacity, ttft_misses_deciding
from .replay import SCHEDULERS, default_options, serve, throughput_bound_per_s
from .report import ServeReport
from .traces import Trace, read_trace, scale_rate, synthetic_trace

SYNTHETIC = "synthetic"


@dataclass(frozen=True)
class ServeOptions:
    trace: str
    model: str
    system: str
    software: str = "vllm"
    scheduler: str | None = None
    arch: str | None = None
    kraken_rule: str = "engine"
    tp: int = 1
    replicas: int = 1
    router: str = "round-robin"
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
    chunked_prefill: bool | None = None  # TensorRT-LLM only (None: its default, off)
    capacity_policy: str = "guaranteed-no-evict"  # TensorRT-LLM only
    schedule_policy: str = "lpm"  # SGLang only
    dtype: str = "fp16"
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    skip_long: bool = False


def serve_command(o: ServeOptions,
                  progress: Callable[[int, int], None] | None = None) -> ServeReport:
    trace, config, label, system, options = _setup(o)
    report = serve(trace, config, system, software=o.software, tp=o.tp, replicas=o.replicas,
                   router=o.router, options=options, scheduler=o.scheduler, dtype=o.dtype,
                   model_name=label, slo_ttft_s=o.slo_ttft_s, slo_tpot_s=o.slo_tpot_s,
                   skip_long=o.skip_long, progress=progress)
    report.setup.update({"seed": o.seed, "rate_scale": o.rate_scale})
    return report


def capacity_command(o: ServeOptions, percentile: int = 99,
                     progress: Callable[[dict], None] | None = None) -> Capacity:
    """The largest rate scale of the trace (times `o.rate_scale`) meeting the SLOs."""
    trace, config, label, system, options = _setup(o)
    if o.skip_long:  # drop once, warn once
        trace = _without_long(trace, config)
    stop = ttft_misses_deciding(len(trace.requests), percentile) \
        if o.slo_ttft_s is not None else None

    def replay(scale: float) -> ServeReport:
        report = serve(scale_rate(trace, scale), config, system, software=o.software, tp=o.tp,
                       replicas=o.replicas, router=o.router, options=options,
                       scheduler=o.scheduler, dtype=o.dtype, model_name=label,
                       slo_ttft_s=o.slo_ttft_s, slo_tpot_s=o.slo_tpot_s,
                       skip_long=False, stop_after_ttft_misses=stop)
        report.setup.update({"seed": o.seed, "rate_scale": o.rate_scale * scale})
        return report

    base = trace.rate_per_s()
    start = 1.0
    if o.slo_ttft_s is not None or o.slo_tpot_s is not None:
        bound = throughput_bound_per_s(trace, config, system, software=o.software, tp=o.tp,
                                       replicas=o.replicas, options=options,
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


def _setup(o: ServeOptions):
    from .replay import ServeError

    rng = np.random.default_rng(o.seed)
    if o.trace == SYNTHETIC:
        if o.rate is None:
            raise ServeError("--trace synthetic needs --rate (requests per second)")
        trace = synthetic_trace(rng, o.requests, o.rate, o.lengths, o.arrival, o.cv)
    else:
        trace = read_trace(o.trace)
    trace = scale_rate(trace, o.rate_scale)
    name, original = resolve_model(o.model)
    config = arch_variant(original, o.arch, o.tp, o.kraken_rule)
    label = name if o.arch in (None, original.arch) else f"{name} as {o.arch}"
    system = load_system(o.system)
    # the engine whose defaults apply (`serve` checks the choice and says what is wrong)
    kind = o.scheduler or SCHEDULERS.get(load_software(o.software).name, "vllm-v1")
    defaults = default_options(kind, system, config)
    options = replace(defaults,
                      max_num_batched_tokens=o.max_num_batched_tokens
                      or defaults.max_num_batched_tokens,
                      max_num_seqs=o.max_num_seqs or defaults.max_num_seqs,
                      block_size=o.block_size or defaults.block_size,
                      gpu_memory_utilization=o.gpu_memory_utilization,
                      enable_prefix_caching=defaults.enable_prefix_caching
                      if o.prefix_caching is None else o.prefix_caching,
                      chunked_prefill=defaults.chunked_prefill
                      if o.chunked_prefill is None or kind != "trtllm" else o.chunked_prefill,
                      capacity_policy=o.capacity_policy,
                      schedule_policy=o.schedule_policy)
    return trace, config, label, system, options
