"""`serve`: a trace replayed through replicas of an engine (the Python API `krakenlm sim serve`
calls).

    from krakenlm.models import get_preset
    from krakenlm.serving.replay import serve
    from krakenlm.serving.traces import read_trace

    report = serve(read_trace("../shared/data/traces/azure2023_conv.csv"),
                   get_preset("llama2-70b"), "h100-80gb-x8", software="vllm", tp=4,
                   replicas=2, slo_ttft_s=2.0, slo_tpot_s=0.1)
    report.summary["ttft_s"]["p99"], report.summary["slo"]["goodput_requests_per_s"]
    report.write("runs/serve")      # requests.csv, timeline.csv, summary.json, serve.png

Routing: round-robin; least-loaded (the replica with the fewest outstanding requests, running
+ waiting, when the request arrives; ties to the lowest index); prefix-affinity (the replica
whose prefix cache holds the longest run of the request's prefix blocks, then least-loaded;
least-loaded for a request without block ids). The replay is
deterministic: no randomness beyond the trace's own (synthetic traces take a seeded RNG).
"""

from __future__ import annotations

import functools
import gc
import heapq
import math
import time
from collections.abc import Callable
from dataclasses import replace
from itertools import compress

import numpy as np

from ..errors import KrakenError, warn
from ..hardware import load_system
from ..hardware.cost import system_cost
from ..hardware.schema import System
from ..models import ModelConfig
from ..simulator import Simulator
from ..simulator.constants.software import SoftwareError, SoftwareProfile, load_software
from .frontend import FrontLoop, apply_frontend, front_loop_arrivals
from .kv_cache import KVCacheError, kv_cache_software, size_kv_cache
from .packing import packed_array
from .report import AMORTISATION_YEARS, RequestColumns, ServeReport, summarise, timeline
from .routing import DPLoadBalancer, dp_counts_published
from .sglang import POLICIES as SGLANG_POLICIES
from .sglang import POOL_SIZED, SGLangEngine, max_running_requests
from .step_time import StepTimer
from .traces import Trace
from .trtllm import POLICIES, TRTEngine
from .v1_counted import CountedV1Engine
from .vllm_v0 import (MULTI_STEP_SINCE, PREEMPTION_MODES, V0_CHUNKED_BUDGET, V0_LONG_CONTEXT,
                      V0Engine)
from .vllm_v1 import Seq, V1Engine, V1Options

ROUTERS = ("round-robin", "least-loaded", "prefix-affinity", "vllm-dp")
# software profile -> the scheduler its engine runs
SCHEDULERS = {"vllm": "vllm-v1", "vllm-v0": "vllm-v0", "trtllm": "trtllm", "sglang": "sglang"}
ENGINES = {"vllm-v1": V1Engine, "vllm-v0": V0Engine, "trtllm": TRTEngine,
           "sglang": SGLangEngine}
# `serve` runs vLLM V1 with its decoding requests as counters (the same replay, faster; the
# cluster keeps V1Engine: its token-weighted router reads every request between steps)
REPLAY_ENGINES = {**ENGINES, "vllm-v1": CountedV1Engine}
SECONDS_PER_YEAR = 365.25 * 24 * 3600


class ServeError(KrakenError, ValueError):
    """A serving replay that cannot run as asked; the message says why and what to do."""


class ReplayStopped(ServeError):
    """A replay given up early (`serve`'s `stop_after_ttft_misses`)."""


STOP_CHECK_EVERY = 64  # arrivals between two counts of the TTFT SLO misses


def _ttft_misses(pending: list[Seq], misses: int, engines: list,
                 slo_ttft_s: float) -> tuple[int, list[Seq]]:
    """Add the pending requests now known to miss the TTFT SLO: their first token came after
    it, or it has not come and their replica's clock is already past it (a first token still
    to come ends a later step). Returns the count and the requests still undecided."""
    left = []
    for s in pending:
        first = s.first_token_s
        if not math.isnan(first):  # decided
            misses += first - s.req.arrival_s > slo_ttft_s
        elif engines[s.replica].now - s.req.arrival_s > slo_ttft_s:
            misses += 1
        else:
            left.append(s)
    return misses, left


def scheduler_for(profile_name: str, scheduler: str | None) -> str:
    """The scheduler a software profile's engine runs (vLLM V1 and V0, TensorRT-LLM, SGLang)."""
    if scheduler is not None:
        if scheduler not in ENGINES:
            raise ServeError(f"--scheduler {scheduler!r} is not one of "
                             f"{', '.join(ENGINES)}")
        if SCHEDULERS.get(profile_name) != scheduler:
            warn(f"software {profile_name} runs its own scheduler; replaying it with "
                 f"{scheduler}'s policy on {profile_name}'s kernels and host costs")
        return scheduler
    if profile_name not in SCHEDULERS:
        raise ServeError(f"no scheduler model for software {profile_name!r} yet (modelled: "
                         f"{', '.join(SCHEDULERS)}); use --software vllm, or --scheduler "
                         "vllm-v1 to replay it with vLLM V1's policy on its kernels")
    return SCHEDULERS[profile_name]


def v0_chunks_by_default(config: ModelConfig) -> bool:
    """vLLM V0 turns chunked prefill on when the flag is left unset and max_model_len (here
    the model's context) exceeds 32,768 tokens, "to avoid OOM errors in the initial memory
    profiling phase" (vllm-project/vllm@001999d2 `vllm/engine/arg_utils.py`
    `EngineArgs.create_engine_config`: `use_long_context = max_model_len > 32768`, on CUDA
    without sliding window, speculative decoding, LoRA or prompt adapters, with the warning
    "Chunked prefill is enabled by default for models with max_model_len > 32K"; 0.5.x
    releases also required prefix caching off, the replay's V0 default)."""
    return config.context_len > V0_LONG_CONTEXT


def default_options(scheduler: str, system: System, config: ModelConfig,
                    chunked_prefill: bool | None = None) -> V1Options:
    """The engine's own defaults on this device (vllm_v1 / vllm_v0 give the sources);
    `chunked_prefill` True: vLLM V0's with `--enable-chunked-prefill` (its budget is
    `V0_CHUNKED_BUDGET`), read by no other engine; None: V0's default, which turns chunked
    prefill on past a 32K context (`v0_chunks_by_default`)."""
    if scheduler == "vllm-v0":
        if chunked_prefill is None:
            chunked_prefill = v0_chunks_by_default(config)
        if chunked_prefill:
            return V1Options(V0_CHUNKED_BUDGET, 256, enable_prefix_caching=False,
                             chunked_prefill=True)
        return V1Options(max(config.context_len, 2048), 256, enable_prefix_caching=False,
                         chunked_prefill=False)
    if scheduler == "trtllm":
        return V1Options(8192, 2048, 32, 0.9, enable_prefix_caching=False,
                         chunked_prefill=False)
    if scheduler == "sglang":  # chunked_prefill_size by device memory (serving/sglang.py)
        gib = system.device.memory.capacity_bytes / 2**30
        chunk = 2048 if gib < 35 else 8192 if gib < 160 else 16384
        return V1Options(chunk, POOL_SIZED, 16, 0.9)  # max_running_requests: pool_sized_options
    return V1Options.defaults_for(system.device.name, system.device.memory.capacity_bytes)


def pool_sized_options(opt: V1Options, kind: str, sizing, config: ModelConfig) -> V1Options:
    """SGLang's options with `max_num_seqs` left to the engine (`POOL_SIZED`) sized as SGLang
    sizes `max_running_requests` from the KV pool; other options unchanged."""
    if kind != "sglang" or opt.max_num_seqs != POOL_SIZED:
        return opt
    return replace(opt, max_num_seqs=max_running_requests(sizing.blocks * sizing.block_size,
                                                          config.context_len))


def _check_requests(trace: Trace, config: ModelConfig, blocks: int, block_size: int,
                    skip_long: bool, model_name: str) -> tuple[Trace, int]:
    """The trace without the requests longer than the model's context (with `skip_long`; else
    an error naming them), checked against the KV cache, and its longest request (prompt +
    output tokens). A request fits when its prompt and all but its last output token fit the
    context: prompt + output <= context + 1. One pass reads the requests' lengths; the drop
    and the largest are taken from those sums."""
    requests = trace.requests
    totals = [r.prompt_tokens + r.output_tokens for r in requests]
    limit = config.context_len + 1
    fits = [t <= limit for t in totals]
    dropped = len(fits) - sum(fits)
    if dropped and not skip_long:
        too_long = [r for r, ok in zip(requests, fits) if not ok]
        worst = max(too_long, key=lambda r: r.prompt_tokens + r.output_tokens)
        raise ServeError(
            f"{dropped} of {len(requests)} requests of {trace.name} exceed "
            f"{model_name}'s context of {config.context_len} tokens (the longest: "
            f"{worst.prompt_tokens} + {worst.output_tokens}); pass --skip-long to drop them "
            "(an engine rejects them) or pick a model with a longer context")
    if dropped:
        warn(f"dropped {dropped} of {len(requests)} requests longer than "
             f"{model_name}'s context of {config.context_len} tokens")
        keep = tuple(compress(requests, fits))
        if not keep:
            raise ServeError(f"every request of {trace.name} exceeds {model_name}'s context")
        trace = Trace(trace.name, keep, trace.hash_block_tokens)
        totals = list(compress(totals, fits))
    largest = max(totals)
    if math.ceil(largest / block_size) > blocks:
        raise KVCacheError(f"a request of {largest} tokens needs {math.ceil(largest / block_size)}"
                           f" KV blocks but the cache holds {blocks}; use a larger --tp or "
                           "--gpu-memory-utilization, or a system with more memory")
    return trace, largest


def _prepare(trace: Trace, config: ModelConfig, system: System | str, *, software: str,
             tp: int, replicas: int, router: str, options: V1Options | None,
             scheduler: str | None, dtype: str, model_name: str, slo_ttft_s: float | None,
             slo_tpot_s: float | None, skip_long: bool, kv_cache_dtype: str = "auto"):
    """Check a replay's setup and build what it runs on: (system, simulator, scheduler,
    options, KV sizing, the trace without dropped requests, step-time oracle, seconds spent
    tabulating it)."""
    system = load_system(system) if isinstance(system, str) else system
    if replicas < 1:
        raise ServeError(f"--replicas must be at least 1, got {replicas}")
    if tp < 1 or tp > system.device_count:
        raise ServeError(f"--tp {tp} must be between 1 and the {system.device_count} devices "
                         f"of {system.name}")
    if router not in ROUTERS:
        raise ServeError(f"--router {router!r} is not one of {', '.join(ROUTERS)}")
    for name, slo in (("--slo-ttft-s", slo_ttft_s), ("--slo-tpot-s", slo_tpot_s)):
        if slo is not None and not (math.isfinite(slo) and slo > 0):
            raise ServeError(f"{name} must be a positive number of seconds, got {slo}")
    if not trace.requests:
        raise ServeError(f"trace {trace.name} holds no requests")
    sim = session(system, kv_cache_software(software, kv_cache_dtype), dtype)
    kind = scheduler_for(sim.profile.name, scheduler)
    opt = options or default_options(kind, system, config)
    pool_sized = kind == "sglang" and opt.max_num_seqs == POOL_SIZED
    for name, value in (("--max-num-batched-tokens", opt.max_num_batched_tokens),
                        ("--max-num-seqs", 1 if pool_sized else opt.max_num_seqs)):
        if value < 1:
            raise ServeError(f"{name} must be at least 1, got {value}")
    if opt.schedule_policy not in SGLANG_POLICIES:
        raise ServeError(f"--schedule-policy {opt.schedule_policy!r} is not one of "
                         f"{', '.join(SGLANG_POLICIES)}")
    if opt.capacity_policy not in POLICIES:
        raise ServeError(f"--capacity-policy {opt.capacity_policy!r} is not one of "
                         f"{', '.join(POLICIES)}")
    _check_swap(opt, kind, system)
    if opt.async_scheduling and kind != "vllm-v1":
        raise ServeError(f"async_scheduling is vLLM V1's (0.10 and later); the {kind} scheduler "
                         "has no such mode: set it false or use the vllm-v1 scheduler")
    if _check_multi_step(opt, kind):  # the host constants of the first version that has it
        sim = session(system, replace(sim.profile, host=sim.profile.host.at_version(
            MULTI_STEP_SINCE)), dtype)
    sizing = size_kv_cache(sim, config, tp, block_size=opt.block_size,
                           gpu_memory_utilization=opt.gpu_memory_utilization,
                           max_num_batched_tokens=opt.max_num_batched_tokens,
                           model_name=model_name, of_free_memory=kind == "trtllm",
                           max_num_seqs=opt.max_num_seqs)
    opt = pool_sized_options(opt, kind, sizing, config)
    trace, longest = _check_requests(trace, config, sizing.blocks, opt.block_size, skip_long,
                                     model_name)
    chunks = kind in ("vllm-v1", "sglang") or (kind in ("trtllm", "vllm-v0")
                                                and opt.chunked_prefill)
    longest_pass = longest - 1  # its prompt and all but its last output token
    if not chunks and longest_pass > opt.max_num_batched_tokens:
        raise ServeError(
            f"{kind} without chunked prefill runs a prompt in one step, and a request of "
            f"{longest_pass} tokens (with its recomputed output) exceeds "
            f"--max-num-batched-tokens {opt.max_num_batched_tokens}; raise it"
            + (" or pass --chunked-prefill" if kind in ("trtllm", "vllm-v0") else ""))
    built = time.perf_counter()
    sim = serial_session(cuda_graph_session(sim, opt), opt, kind)
    timer = _step_timer(sim, config, tp, opt.max_num_batched_tokens, opt.max_num_seqs,
                        max(longest, opt.max_num_batched_tokens), opt.cuda_graph_max)
    built = time.perf_counter() - built
    return system, sim, kind, opt, sizing, trace, timer, built


def _check_multi_step(opt: V1Options, kind: str) -> bool:
    """Whether the replay runs vLLM V0's multi-step rounds (`--num-scheduler-steps` > 1), an
    error where vLLM refuses it or the replay does not model it."""
    steps = opt.num_scheduler_steps
    if steps < 1:
        raise ServeError(f"--num-scheduler-steps must be at least 1, got {steps}")
    if steps == 1:
        return False
    if kind != "vllm-v0":
        raise ServeError(f"--num-scheduler-steps {steps} is vLLM V0's multi-step scheduling "
                         f"(0.6.x); the {kind} scheduler has none: use --software vllm-v0 or "
                         "drop it")
    if opt.chunked_prefill:
        raise ServeError("vLLM refuses chunked prefill with multi-step scheduling (\"Chunked "
                         "prefill is not supported with multi-step\"): pass "
                         "--no-chunked-prefill (vLLM V0 turns it on by itself past a 32K "
                         "context) or drop --num-scheduler-steps")
    if opt.preemption_mode == "swap":
        raise ServeError("--preemption-mode swap with --num-scheduler-steps > 1 is not modelled"
                         "; use --preemption-mode recompute")
    return True


def _check_swap(opt: V1Options, kind: str, system: System) -> None:
    """Swap preemption needs vLLM V0, a host link in the hardware YAML and some swap space."""
    if opt.preemption_mode not in PREEMPTION_MODES:
        raise ServeError(f"--preemption-mode {opt.preemption_mode!r} is not one of "
                         f"{', '.join(PREEMPTION_MODES)}")
    if opt.preemption_mode != "swap":
        return
    if kind != "vllm-v0":
        raise ServeError(f"--preemption-mode swap is vLLM V0's (the {kind} scheduler preempts "
                         "by recompute); use --software vllm-v0 or --scheduler vllm-v0")
    if system.device.host_link_bandwidth_bytes_per_s is None:
        raise ServeError(f"--preemption-mode swap needs the host link of {system.name}: add "
                         "device.host_link_bandwidth_bytes_per_s to its hardware YAML")
    if not (math.isfinite(opt.swap_space_gib) and opt.swap_space_gib > 0):
        raise ServeError(f"--swap-space must be a positive number of GiB, got "
                         f"{opt.swap_space_gib}")


def throughput_bound_per_s(trace: Trace, config: ModelConfig, system: System | str, *,
                           software: str = "vllm", tp: int = 1, replicas: int = 1,
                           options: V1Options | None = None, scheduler: str | None = None,
                           dtype: str = "fp16", model_name: str = "model",
                           skip_long: bool = False, kv_cache_dtype: str = "auto") -> float:
    """The static throughput bound: requests per second the replicas could finish at most on
    this trace's mean lengths. Every request needs `output` decode steps; a replica runs at
    most B = min(max_num_seqs, KV blocks / blocks of a mean request) of them per step, each
    step at least the oracle's pure-decode step of B sequences at the mean KV length, and
    prefill only adds time. So rate <= replicas x B / (mean output x that step). The capacity
    search starts from it (`capacity.find_capacity`'s `start_scale`)."""
    _, _, _, opt, sizing, trace, timer, _ = _prepare(
        trace, config, system, software=software, tp=tp, replicas=replicas,
        router="round-robin", options=options, scheduler=scheduler, dtype=dtype,
        model_name=model_name, slo_ttft_s=None, slo_tpot_s=None, skip_long=skip_long,
        kv_cache_dtype=kv_cache_dtype)
    prompt = float(np.mean([r.prompt_tokens for r in trace.requests]))
    output = float(np.mean([r.output_tokens for r in trace.requests]))
    per_request = math.ceil((prompt + output) / opt.block_size)
    batch = max(1, min(opt.max_num_seqs, sizing.blocks // per_request))
    step = timer.step_s(batch, batch, batch,
                        timer.decode_attention_s(batch, prompt + output / 2), False)
    return replicas * batch / (output * step)



def engine_series(engines) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The inter-token latencies as runs (values, weights, counts: `V1Engine.itl_runs`)
    and the KV use over time of every engine, in engine order: what `summarise` reads of a
    replay."""
    if len(engines) == 1:  # nothing to concatenate (a copy of ~10^6 runs at 10^5 requests)
        return (*engines[0].itl_runs(), np.array(engines[0].timeline.kv_used))
    parts = [e.itl_runs() for e in engines]
    values, weights, counts = (np.concatenate([p[i] for p in parts]) for i in range(3))
    kv_used = np.concatenate([np.array(e.timeline.kv_used) for e in engines])
    return values, weights, counts, kv_used


def engine_summary(rows: list[dict], engines, trace: Trace, *, makespan_s: float,
                   slo_ttft_s: float | None, slo_tpot_s: float | None,
                   usd_per_s: float, columns: RequestColumns | None = None,
                   ) -> tuple[dict, tuple[np.ndarray, np.ndarray]]:
    """`summarise` over the rows (and their `columns` when built with them) and every
    engine's series, with the engines' preemptions and step count, and the inter-token
    latencies as runs (values, counts: `ServeReport.itl_runs`): what a single-pool replay and
    a cluster replay both report."""
    itl, weights, counts, kv_used = engine_series(engines)
    summary = summarise(rows, itl, weights, duration_s=trace.duration_s, makespan_s=makespan_s,
                        slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s,
                        preemptions=sum(e.preemptions for e in engines), kv_used=kv_used,
                        usd_per_s=usd_per_s, itl_counts=counts, columns=columns)
    summary["steps"] = sum(e.steps for e in engines)
    return summary, (itl, counts)


def _without_cycle_collector(replay: Callable) -> Callable:
    """Run `replay` with Python's cycle collector off (back on afterwards if it was on). A
    replay allocates requests, rows and per-step lists that stay alive until it returns and
    form no reference cycles (`gc.collect()` after a replay whose step-time oracle was
    already built finds none; a first one's build leaves a few hundred objects, collected
    after it), so the collector's passes over them free nothing: pure cost, growing with the
    live objects (callgrind: 3.2 % of a 10^4-request replay's instructions, ~5 % of the CPU
    time of a 10^5-request one). Reference counting frees everything as before."""
    @functools.wraps(replay)
    def run(*args, **kwargs):
        if not gc.isenabled():
            return replay(*args, **kwargs)
        gc.disable()
        try:
            return replay(*args, **kwargs)
        finally:
            gc.enable()
    return run


@_without_cycle_collector
def serve(trace: Trace, config: ModelConfig, system: System | str, *, software: str = "vllm",
          tp: int = 1, replicas: int = 1, router: str = "round-robin",
          options: V1Options | None = None, scheduler: str | None = None, dtype: str = "fp16",
          model_name: str = "model", slo_ttft_s: float | None = None,
          slo_tpot_s: float | None = None, skip_long: bool = False,
          progress: Callable[[int, int], None] | None = None,
          stop_after_ttft_misses: int | None = None, client_side: bool = False,
          kv_cache_dtype: str = "auto", max_concurrency: int | None = None,
          engine_version: str | None = None) -> ServeReport:
    """Replay `trace` (see the module docstring). `stop_after_ttft_misses` (with
    `slo_ttft_s`): give up, raising `ReplayStopped`, once that many requests are known to
    miss the TTFT SLO (their first token came later, or they have waited longer already);
    a capacity probe then fails without replaying the rest of a diverging queue.
    `client_side`: report first tokens and finishes as a client sees them through the
    software profile's front end (serving/frontend.py); otherwise as the engine emits them.
    With `client_side` a request reaches the engine its prompt's way in
    (`frontend.per_prompt_token_s` a prompt token) after the client sent it, and its row's
    arrival stays the send.
    A vLLM V0 profile's `frontend.engine_loop_request_s` and `engine_loop_token_s` (the API
    server's work per request and per prompt token on the engine's own event loop,
    serving/vllm_v0.py) hold the engine's steps back too,
    so with `client_side` the engine's timeline changes, not only the reported times.
    `engine_version` (e.g. "0.5.4"): the server's engine version, which chooses the front
    end's form (`Frontend.at_version`): for the versions of its `front_loop_*` fields (vLLM
    V1's API server, every version; vLLM 0.5.4's front-end process) a request reaches the
    engine when its hand-over on the front end's event loop ends (serving/frontend.py
    `front_loop_arrivals`; in a closed loop `FrontLoop`, run with the client's sends and the
    engines in time order), without holding the engine's steps, instead of the engine-loop
    form. None: the form a profile gives every version (V1's loop; V0's engine loop).
    `kv_cache_dtype`: the engine's --kv-cache-dtype (`kv_cache.KV_CACHE_DTYPES`; "auto": the
    profile's).
    `max_concurrency`: a closed-loop client (vLLM's `benchmark_serving.py` and SGLang's
    `bench_serving` with `--max-concurrency N`: a semaphore of N around each request): at most
    N requests in flight, each request sent at its trace arrival or, when N are in flight
    then, when the earliest of them has finished as the client sees it (the engine's finish
    plus the front end's fixed `request_s` with `client_side`), in trace order; its row's
    arrival is when it was sent (the client times TTFT and E2E from there)."""
    started = time.perf_counter()
    if max_concurrency is not None and max_concurrency < 1:
        raise ServeError(f"max_concurrency {max_concurrency} must be at least 1 (requests in "
                         "flight at once); leave it out for an open-loop replay")
    prep = _prepare(trace, config, system, software=software, tp=tp, replicas=replicas,
                    router=router, options=options, scheduler=scheduler, dtype=dtype,
                    model_name=model_name, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s,
                    skip_long=skip_long, kv_cache_dtype=kv_cache_dtype)
    system, sim, kind, opt, sizing, trace, timer, built = prep
    engines = [REPLAY_ENGINES[kind](timer, opt, sizing.blocks, trace.hash_block_tokens, i)
               for i in range(replicas)]
    frontend = sim.profile.frontend.at_version(engine_version)
    front_loop = client_side and frontend.front_loop(engine_version)
    if front_loop and kind not in ("vllm-v0", "vllm-v1"):
        raise ServeError(f"software profile {sim.profile.name!r} hands requests over through "
                         "its front end's own event loop (frontend.front_loop_*), which only "
                         f"vLLM's engines (scheduler vllm-v0 or vllm-v1) run, not {kind}; set "
                         "them to 0 or use one of those schedulers")
    loop_request_s = frontend.engine_loop_request_s if client_side else 0.0
    loop_token_s = frontend.engine_loop_token_s if client_side else 0.0
    if loop_request_s or loop_token_s:  # vllm_v0.py: the API server's work on the engine's loop
        if kind != "vllm-v0":
            raise ServeError(f"software profile {sim.profile.name!r} sets "
                             "frontend.engine_loop_request_s / engine_loop_token_s, which only "
                             f"a vLLM V0 engine (scheduler vllm-v0) runs, not {kind}; set them "
                             "to 0 or use --scheduler vllm-v0")
        for e in engines:
            e.loop_request_s, e.loop_token_s = loop_request_s, loop_token_s
    if opt.preemption_mode == "swap":  # vllm_v0.py: swap space per GPU, one TP shard's blocks
        cpu_blocks = int(opt.swap_space_gib * 2**30 // sizing.bytes_per_block)
        for e in engines:
            e.enable_swap(sizing.bytes_per_block, system.device.host_link_bandwidth_bytes_per_s,
                          cpu_blocks)
    seqs = []
    total = len(trace.requests)
    watch = stop_after_ttft_misses is not None and slo_ttft_s is not None
    pending: list[Seq] = []  # requests whose TTFT SLO outcome is not known yet
    misses = 0
    lag_s = frontend.after_engine_s() if client_side else 0.0
    if max_concurrency and client_side and frontend.per_stream_token_s:
        warn("max_concurrency frees a client's slot at the engine's finish plus the front "
             "end's request_s; the profile's per_stream_token_s delay is not fed back")
    loop = _ClosedLoop(engines, max_concurrency, lag_s) if max_concurrency else None
    # a closed loop through the front end's own event loop: each send's handler and send run
    # there as the client sends (frontend.FrontLoop), the requests reach the engine as they end
    floop = FrontLoop(frontend) if front_loop and loop is not None else None
    balancer = DPLoadBalancer(engines, dp_counts_published(engine_version)) \
        if router == "vllm-dp" else None
    way_in_s = frontend.per_prompt_token_s if client_side else 0.0
    sent_s: list[float] = []  # when the client sent each request (its row's arrival)
    requests, order = trace.requests, None
    if front_loop and loop is None:  # the engine meets the requests as their sends there end
        sent = [r.arrival_s + way_in_s * r.prompt_tokens for r in requests]
        engine_s = front_loop_arrivals(sent, [r.prompt_tokens for r in requests], frontend)
        order = sorted(range(total), key=lambda i: engine_s[i])
        requests = [replace(requests[i], arrival_s=engine_s[i]) for i in order]
        sent_s = [trace.requests[i].arrival_s for i in order]
    elif way_in_s and loop is None:  # the engine meets the requests as their way in ends
        order = sorted(range(total), key=lambda i: requests[i].arrival_s
                       + way_in_s * requests[i].prompt_tokens)
        requests = [requests[i] for i in order]
    admitted: list[int] = []  # the send index of each request in `seqs`

    def admit(k: int, req) -> None:
        """Route the k-th request sent, which reaches the engine at req.arrival_s, and add it."""
        nonlocal misses, pending
        if router == "round-robin":
            engine = engines[k % replicas]
            engine.advance(req.arrival_s)
        else:
            for e in engines:
                e.advance(req.arrival_s)
            if balancer is not None:
                engine = balancer.choose(req)
            elif router == "prefix-affinity" and req.hash_ids:
                engine = min(engines, key=lambda e: (
                    -e.pool.hit_ids(req.hash_ids, req.prompt_tokens), e.outstanding, e.index))
            else:
                engine = min(engines, key=lambda e: (e.outstanding, e.index))
        engine.hold_for_schedule(req.arrival_s)
        seq = Seq(req, engine.index)
        engine.add(seq)
        seqs.append(seq)
        admitted.append(k)
        if loop is not None:
            loop.in_flight.append(seq)
        if watch:
            pending.append(seq)
            if (k + 1) % STOP_CHECK_EVERY == 0 or k + 1 == total:
                misses, pending = _ttft_misses(pending, misses, engines, slo_ttft_s)
                if misses >= stop_after_ttft_misses:
                    raise ReplayStopped(f"stopped after {k + 1} of {total} requests: {misses} "
                                        f"already miss the TTFT SLO of {slo_ttft_s} s")

    if floop is not None:
        def release(until_s: float) -> int:
            """Hand the engine every request whose send on the front end's loop ended, of the
            jobs that became ready by `until_s` (no send comes before then)."""
            done = floop.release(until_s)
            for (k, req), arrival_s in done:
                admit(k, replace(req, arrival_s=arrival_s))
            return len(done)
        loop.release, loop.front_next_s = release, floop.next_ready_s
    for k, req in enumerate(requests):
        if loop is not None:
            req = loop.send(req, k)
        if floop is not None:  # to the front end's loop after its way in
            sent_s.append(req.arrival_s)
            floop.submit(req.arrival_s + way_in_s * req.prompt_tokens, req.prompt_tokens, (k, req))
            release(req.arrival_s)
        else:
            if not front_loop:
                sent_s.append(req.arrival_s)
            if way_in_s and not front_loop:  # the server tokenises the prompt before the engine sees it
                req = replace(req, arrival_s=req.arrival_s + way_in_s * req.prompt_tokens)
            admit(k, req)
        if progress is not None and (k + 1) % 1000 == 0:
            progress(k + 1, total)
    if floop is not None:
        release(math.inf)
        # admitted as their ways through the front end's loop ended: back in send order
        seqs = [seq for _, seq in sorted(zip(admitted, seqs), key=lambda pair: pair[0])]
    for e in engines:
        e.advance(math.inf)
    # the requests that never finished are the ones still queued or running
    stuck = sum(e.outstanding for e in engines)
    if stuck:  # cannot happen when every request fits the cache; a guard, not a result
        raise ServeError(f"{stuck} requests never finished (the KV cache of "
                         f"{sizing.blocks} blocks cannot hold them)")
    if progress is not None:
        progress(total, total)
    if order is not None:  # back in trace order
        back = [0] * total
        for position, i in enumerate(order):
            back[i] = position
        seqs, sent_s = [seqs[j] for j in back], [sent_s[j] for j in back]
    if client_side:
        first, finish = apply_frontend(seqs, engines, frontend)
        rows, columns = _rows(seqs, first.tolist(), finish.tolist(),
                              sent_s if way_in_s or front_loop else None)
    else:
        rows, columns = _rows(seqs)
    start = trace.requests[0].arrival_s
    makespan = float(columns.finish_s.max()) - start
    gpus = tp * replicas
    usd_per_s = system_cost(system).system_usd / system.device_count * gpus / \
        (AMORTISATION_YEARS * SECONDS_PER_YEAR)
    summary, itl = engine_summary(rows, engines, trace, makespan_s=makespan, slo_ttft_s=slo_ttft_s,
                                  slo_tpot_s=slo_tpot_s, usd_per_s=usd_per_s, columns=columns)
    if opt.preemption_mode == "swap":
        summary["swapped_blocks"] = sum(e.swapped_blocks_total for e in engines)
    setup = {"trace": trace.name, "model": model_name, "arch": config.arch,
             "system": system.name, "software": sim.profile.name, "scheduler": kind,
             "tp": tp, "replicas": replicas, "router": router, "dtype": dtype,
             "kv_cache_dtype": sim.precision("kv_cache"), "options": dict(opt.__dict__),
             "kv_cache": sizing.to_dict(), "devices": gpus}
    if client_side:
        setup["client_side"] = {"request_s": frontend.request_s,
                                "per_prompt_token_s": frontend.per_prompt_token_s,
                                "per_stream_token_s": frontend.per_stream_token_s}
        if loop_request_s or loop_token_s:
            setup["client_side"]["engine_loop_request_s"] = loop_request_s
            setup["client_side"]["engine_loop_token_s"] = loop_token_s
        if front_loop:
            setup["client_side"].update(
                engine_version=engine_version,
                front_loop_request_s=frontend.front_loop_request_s,
                front_loop_token_s=frontend.front_loop_token_s,
                front_loop_send_s=frontend.front_loop_send_s)
    return ServeReport(setup, rows, summary, timeline(engines, makespan), itl,
                       wall_s=time.perf_counter() - started, build_s=built)


class _ClosedLoop:
    """The client's semaphore of `serve(max_concurrency=N)`: request k >= N takes the slot
    that the (k - N + 1)-th finish (in time order) of the requests sent before it frees, as
    the client sees that finish (engine finish + `lag_s`). A finish is known once every busy
    engine's clock has passed it; until then the engine furthest behind runs to its next
    finish, or to the end of its step in flight at the earliest finish known, so that no
    replica runs past a send time by more than that step (as an arrival finds it)."""

    def __init__(self, engines: list, n: int, lag_s: float):
        self.engines, self.n, self.lag_s = engines, n, lag_s
        self.in_flight: list[Seq] = []  # sent, not yet seen finished
        self.freed: list[float] = []  # client-side finish times not yet taken, a heap
        # with the front end's own loop (`serve`): hands the engine the requests whose way
        # through that loop ends by a time no send precedes; returns how many
        self.release: Callable[[float], int] | None = None
        self.front_next_s: Callable[[], float] | None = None  # when its next job becomes ready

    def send(self, req, k: int):
        """`req` as the client sends it: at its arrival, or later when a slot frees then."""
        if k < self.n:
            return req
        free_s = self._next_free_s()
        return replace(req, arrival_s=free_s) if free_s > req.arrival_s else req

    def _next_free_s(self) -> float:
        freed, lag = self.freed, self.lag_s
        while True:
            done = [s for s in self.in_flight if s.finish_s == s.finish_s]
            if done:
                for s in done:
                    heapq.heappush(freed, s.finish_s + lag)
                self.in_flight = [s for s in self.in_flight if s.finish_s != s.finish_s]
            busy = [e for e in self.engines if e.outstanding]
            if self.release is not None:
                # the next send comes no earlier than a known client-side finish or than the
                # earliest finish a busy engine can still make: what the front end's loop hands
                # over by then goes to the engines first
                bound = min(freed[0] if freed else math.inf,
                            min((e.now for e in busy), default=math.inf) + lag)
                if self.release(bound):
                    continue
            if freed and all(freed[0] <= e.now + lag for e in busy):
                return heapq.heappop(freed)
            engine = min(busy, key=lambda e: e.now) if busy else None
            before = (engine.now, engine.outstanding) if engine else None
            if engine is not None:  # no further than the step in flight at the best candidate
                until = freed[0] - lag if freed else math.inf
                if self.front_next_s is not None:  # nor past a job of the front end's loop
                    until = min(until, self.front_next_s())
                engine.advance(until, stop_at_finish=True)
            if engine is None or (engine.now, engine.outstanding) == before:
                raise ServeError("closed-loop replay: no request in flight can finish to free "
                                 "a slot (the KV cache cannot hold them)")


_TIMERS: dict[tuple, StepTimer] = {}
TIMER_CACHE_SIZE = 8
_SESSIONS: dict[tuple, Simulator] = {}
SESSION_CACHE_SIZE = 8


def session(system: System, software: SoftwareProfile | str | None,
            dtype: str) -> Simulator:
    """The simulator session of a system, software profile and dtype, kept for the process:
    a configuration search's replays that differ only in their engine knobs (token budget,
    max_num_seqs, replicas) or model build their step-time oracles on one session, whose
    operator timings (`OpTimer`'s memo) are then computed once instead of once per replay
    (a larger token budget or batch still times its new grid points). A session's answers
    do not depend on what it was asked before, so the replays are the same."""
    profile = software if isinstance(software, SoftwareProfile) else load_software(software)
    if profile.attention.kv_append != "in_place":
        # the step-time oracle tabulates decode attention over a KV cache written in place
        # (step_time.py), as every serving engine modelled here writes it
        raise ServeError(f"software {profile.name} appends to the KV cache by copying it "
                         f"(attention.kv_append: {profile.attention.kv_append}), which the "
                         "serving replay does not model; set kv_append: in_place in the profile")
    key = (repr(system), repr(profile), dtype)  # a profile file edited in between is another
    sim = _SESSIONS.get(key)
    if sim is None:
        if len(_SESSIONS) >= SESSION_CACHE_SIZE:
            del _SESSIONS[next(iter(_SESSIONS))]
        sim = _SESSIONS[key] = Simulator(system, profile, dtype=dtype)
    return sim


def _step_timer(sim: Simulator, config: ModelConfig, tp: int, max_tokens: int,
                max_sequences: int, max_context: int,
                capture_max: int | None = None) -> StepTimer:
    """The step-time oracle of a setup, kept for the process (a sweep over rates or seeds
    tabulates it once): keyed by everything its tables depend on."""
    key = (repr(sim.system), repr(sim.profile), sim.dtype, repr(config), tp, max_tokens,
           max_sequences, max_context, capture_max)
    timer = _TIMERS.get(key)
    if timer is None:
        if len(_TIMERS) >= TIMER_CACHE_SIZE:
            del _TIMERS[next(iter(_TIMERS))]
        timer = _TIMERS[key] = StepTimer(sim, config, tp, max_tokens=max_tokens,
                                         max_sequences=max_sequences, max_context=max_context,
                                         capture_max=capture_max)
    return timer


def cuda_graph_session(sim: Simulator, opt: V1Options, label: str = "") -> Simulator:
    """The session the engine's capture-size knob (`V1Options.cuda_graph_max`) leaves: the
    same one when not given or above 0 (the step-time oracle reads it,
    `Graphs.largest_captured`), one whose profile replays no CUDA graph at 0 (vLLM
    `--enforce-eager`, SGLang `--disable-cuda-graph`; `SoftwareProfile.without_cuda_graphs`:
    every kernel issued from the host, at the profile's eager rate where it names one). An
    error where the engine has no such knob or the value is out of range
    (`SoftwareProfile.check_cuda_graph_max`)."""
    n = opt.cuda_graph_max
    if n is None:
        return sim
    try:
        sim.profile.check_cuda_graph_max(n)
    except SoftwareError as e:
        raise ServeError(f"{label}: {e}" if label else str(e)) from None
    if n == 0:
        return session(sim.system, sim.profile.without_cuda_graphs(), sim.dtype)
    return sim


def serial_session(sim: Simulator, opt: V1Options, kind: str) -> Simulator:
    """The session of a vLLM V1 engine that steps serially (`opt.async_scheduling` off: V1
    0.8-0.13 by default, `--no-async-scheduling` later): its engine core schedules a step,
    waits for it, then takes its output (`EngineCore.step`), so the profile's per-step host
    work adds to the GPU's time instead of running beside it (`Host.step_overlaps_gpu`
    false); the same session otherwise."""
    if kind != "vllm-v1" or opt.async_scheduling or not sim.profile.host.step_overlaps_gpu:
        return sim
    profile = sim.profile.with_hosts(lambda h: replace(h, step_overlaps_gpu=False))
    return session(sim.system, profile, sim.dtype)


def _rows(seqs: list[Seq], first_token_s: list[float] | None = None,
          finish_s: list[float] | None = None,
          sent_s: list[float] | None = None) -> tuple[list[dict], RequestColumns]:
    """Every request's row, with its first token and finish as reported (the engine's unless
    given: the client's through the front end) and its arrival (the engine's unless `sent_s`
    gives when the client sent it), and the `RequestColumns` the summary reads,
    in one pass: each value is computed once and kept in its column as it goes into its row,
    so the summary reads no row back. The one definition of a request row (single pools,
    clusters and disaggregated serving all build theirs here)."""
    if first_token_s is None:
        first_token_s = [s.first_token_s for s in seqs]
    if finish_s is None:
        finish_s = [s.finish_s for s in seqs]
    rows: list[dict] = []
    arrivals: list[float] = []
    queues: list[float] = []
    ttfts: list[float] = []
    e2es: list[float] = []
    tpots: list[float] = []
    has_tpot: list[bool] = []
    output_total = prompt_total = cached_total = 0
    if sent_s is None:
        sent_s = [s.req.arrival_s for s in seqs]
    for s, first, finish, arrival in zip(seqs, first_token_s, finish_s, sent_s):
        req = s.req
        output = s.output
        queue = s.first_scheduled_s - arrival
        ttft = first - arrival
        e2e = finish - arrival
        if output > 1:
            tpot = (finish - first) / (output - 1)
            tpots.append(tpot)
            has_tpot.append(True)
        else:
            tpot = None
            has_tpot.append(False)
        rows.append({"id": req.id, "replica": s.replica, "arrival_s": arrival,
                     "queue_s": queue, "first_token_s": first, "finish_s": finish,
                     "ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "prompt_tokens": s.prompt,
                     "output_tokens": output, "cached_tokens": s.cached_tokens,
                     "preemptions": s.preemptions})
        arrivals.append(arrival)
        queues.append(queue)
        ttfts.append(ttft)
        e2es.append(e2e)
        output_total += output
        prompt_total += s.prompt
        cached_total += s.cached_tokens
    n = len(rows)  # lists of Python floats read by `packed_array` (no type discovery per value)
    columns = RequestColumns(packed_array(arrivals, float), packed_array(queues, float),
                             packed_array(ttfts, float), packed_array(e2es, float),
                             packed_array(finish_s, float), packed_array(tpots, float),
                             np.fromiter(has_tpot, bool, n), output_total, prompt_total,
                             cached_total)
    return rows, columns
