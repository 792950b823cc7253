"""Validation of the serving simulator against public serving runs (`serving/data/
serving_runs.json`, sources and rejected candidates in `serving/data/SOURCES.md`).

Each run states its engine, model, GPUs, tensor-parallel degree, arrival process (Poisson at a
rate, every request at once, or a closed loop of at most N requests in flight, sent at a rate
or all at once) and the prompt and output tokens of every request, in the order the client
sent them; `run_trace` rebuilds that workload (the arrival times drawn from a
seeded generator: the client's own draw is not recorded) and `replay_run` serves it with the
engine's default knobs. `score` compares a replay's summary with what the run measured: the
relative error of every metric both give. One constant is fitted on these runs, and only
leave-one-source-out: a server's host time scale (how much longer its CPU takes for the host
and front-end work the software profile times; `SoftwareProfile.host_time_scaled`), where a
run names its `server` and another source used the same machine. A run is replayed with the
scale fitted on the other sources' runs of its server (serving/host_fit.py ->
data/host_scales.json, `host_scale`), never on its own source's; every other constant is fitted
on none of them, so every score is a held-out one.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import KrakenError
from ..fileio import read_user_text
from ..simulator.constants.software import host_time_scaled, is_engine_version
from .kv_cache import PROFILE_CHARGES, with_accounting
from .routing import ROUTERS
from .traces import Request, Trace
from .vllm_v1 import V1Options

RUNS_FILE = Path(__file__).resolve().parent / "data" / "serving_runs.json"
HOST_SCALES_FILE = Path(__file__).resolve().parent / "data" / "host_scales.json"
# (summary section, statistic) pairs a run may state, in the order
METRICS = (("e2e_s", "mean"), ("e2e_s", "p99"), ("ttft_s", "mean"), ("ttft_s", "p90"),
           ("ttft_s", "p99"), ("tpot_s", "mean"), ("e2e_s", "p50"), ("ttft_s", "p50"),
           ("tpot_s", "p50"),
           ("tpot_s", "p99"), ("itl_s", "mean"), ("itl_s", "p50"), ("itl_s", "p99"),
           ("throughput", "requests_per_s"), ("throughput", "output_tokens_per_s"))
ARRIVALS = ("poisson", "burst", "concurrency")
PREFIX_BLOCK_TOKENS = 16  # vLLM's block: the granularity its prefix cache hashes prompts at
ID_STRIDE = 1 << 20  # prefix ids of prompt i: i * ID_STRIDE + block index
WARM_GAP_S = 3600.0


class ValidationDataError(KrakenError, ValueError):
    """A serving-runs file that cannot be used; the message names the run and the field."""


@dataclass(frozen=True)
class ServingRun:
    """One public serving run from data/serving_runs.json (module docstring; sources in
    data/SOURCES.md): id, source and where in it, model, system, engine, TP, the arrival process
    (poisson at `rate_per_s`, burst, or concurrency with at most `max_concurrency` in flight) and
    each request's prompt and output tokens in send order, the metrics measured ({section:
    {statistic: value}}, seconds or per second), the KV blocks the server logged and the measured
    capacity (requests/s; unused so far), the runs the same server served before this one and
    whether the client sent a test prompt first (both warm vLLM's prefix cache), the server's
    engine flags, and the per-request client TTFTs (seconds) when the source gives them."""
    id: str
    source: str
    locator: str
    model: str
    system: str
    software: str
    tp: int
    arrival: str
    rate_per_s: float | None
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    measured: dict[str, dict[str, float]]
    kv_blocks_logged: int | None = None
    capacity_per_s: float | None = None
    served_before: tuple[str, ...] = ()
    test_prompt_first: bool = False
    engine_options: dict[str, Any] | None = None
    ttfts_s: tuple[float, ...] | None = None
    max_concurrency: int | None = None  # arrival "concurrency": requests in flight at most
    # the KV sizing accounting of the run's engine version where it differs from its software
    # profile's (`kv_cache.PROFILE_CHARGES`; vLLM 0.8.3's V1 predates vllm-project/vllm#19312)
    profile_charges: str | None = None
    # engine replicas behind the server (vLLM's --data-parallel-size), each of `tp` devices, and
    # the router that spreads the requests over them (serving/routing.py)
    replicas: int = 1
    router: str = "least-loaded"
    # tokens the server adds to every prompt that the client's prompt counts leave out (vLLM's
    # random dataset counts --random-input-len less the tokenizer's special tokens, and the
    # server's tokenizer adds the BOS token: `run_trace` replays prompt + this)
    special_tokens_added: int = 0
    # the server's engine version where the replay needs it (vLLM V0's front end: 0.5.4 hands
    # requests over from a process of its own, `Frontend.at_version`; None: the profile's form)
    engine_version: str | None = None
    # the machine the run ran on, where a source says which and another source used it too
    # (e.g. LambdaLabs' A100 server of both its sweeps): the replay's host time scale is the
    # server's, fitted on the other sources' runs (`host_scale`); None: the profile's times
    server: str | None = None


def load_runs(path: Path | str = RUNS_FILE) -> tuple[dict[str, Any], tuple[ServingRun, ...]]:
    """The sources and runs of a serving-runs file, checked."""
    path = Path(path)
    try:
        data = json.loads(read_user_text(path, "serving runs file", ValidationDataError))
    except json.JSONDecodeError as e:
        raise ValidationDataError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    runs = []
    for i, r in enumerate(data.get("runs", [])):
        where = f"{path} run {r.get('id', i)}"
        try:
            run = ServingRun(
                id=str(r["id"]), source=str(r["source"]), locator=str(r["locator"]),
                model=str(r["model"]), system=str(r["system"]), software=str(r["software"]),
                tp=int(r["tp"]), arrival=str(r["arrival"]),
                rate_per_s=None if r["rate_per_s"] is None else float(r["rate_per_s"]),
                prompt_tokens=tuple(int(x) for x in r["prompt_tokens"]),
                output_tokens=tuple(int(x) for x in r["output_tokens"]),
                measured=r["measured"], kv_blocks_logged=r.get("kv_blocks_logged"),
                capacity_per_s=r.get("capacity_per_s"),
                served_before=tuple(r.get("served_before", ())),
                test_prompt_first=bool(r.get("test_prompt_first", False)),
                engine_options=r.get("engine_options"),
                ttfts_s=None if r.get("ttfts_s") is None
                else tuple(float(x) for x in r["ttfts_s"]),
                max_concurrency=None if r.get("max_concurrency") is None
                else int(r["max_concurrency"]),
                profile_charges=None if r.get("profile_charges") is None
                else str(r["profile_charges"]),
                replicas=int(r.get("replicas", 1)), router=str(r.get("router", "least-loaded")),
                special_tokens_added=int(r.get("special_tokens_added", 0)),
                engine_version=None if r.get("engine_version") is None
                else str(r["engine_version"]),
                server=None if r.get("server") is None else str(r["server"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ValidationDataError(f"{where}: missing or bad field ({e})") from None
        if run.special_tokens_added < 0:
            raise ValidationDataError(f"{where}: special_tokens_added must be at least 0")
        if run.engine_version is not None and not is_engine_version(run.engine_version):
            raise ValidationDataError(f"{where}: engine_version {run.engine_version!r} is not "
                                      "an engine version such as \"0.5.4\"")
        if run.replicas < 1 or run.router not in ROUTERS:
            raise ValidationDataError(f"{where}: replicas must be at least 1 and router one of "
                                      f"{', '.join(ROUTERS)}")
        if run.profile_charges is not None and run.profile_charges not in PROFILE_CHARGES:
            raise ValidationDataError(f"{where}: profile_charges {run.profile_charges!r} is "
                                      f"not one of {', '.join(PROFILE_CHARGES)}")
        if run.source not in data.get("sources", {}):
            raise ValidationDataError(f"{where}: source {run.source!r} is not described")
        if run.arrival not in ARRIVALS:
            raise ValidationDataError(f"{where}: arrival {run.arrival!r} is not one of "
                                      f"{', '.join(ARRIVALS)}")
        if run.arrival == "concurrency":
            if run.max_concurrency is None or run.max_concurrency < 1:
                raise ValidationDataError(f"{where}: a concurrency run needs max_concurrency, "
                                          "the client's requests in flight (at least 1)")
        elif run.max_concurrency is not None:
            raise ValidationDataError(f"{where}: max_concurrency needs arrival "
                                      "\"concurrency\"")
        elif (run.rate_per_s is None) != (run.arrival == "burst"):
            raise ValidationDataError(f"{where}: a Poisson run needs a rate, a burst none")
        if run.rate_per_s is not None and not run.rate_per_s > 0:
            raise ValidationDataError(f"{where}: rate_per_s must be positive")
        unknown = set(run.engine_options or {}) - {f.name for f in fields(V1Options)}
        if unknown:
            raise ValidationDataError(f"{where}: engine_options {', '.join(sorted(unknown))} "
                                      "are not engine knobs (serving/vllm_v1.py V1Options)")
        if not run.prompt_tokens or len(run.prompt_tokens) != len(run.output_tokens) or \
                min(run.prompt_tokens + run.output_tokens) < 1:
            raise ValidationDataError(f"{where}: prompt and output tokens must be equally "
                                      "many counts of at least 1")
        if run.ttfts_s is not None and (len(run.ttfts_s) != len(run.prompt_tokens)
                                        or min(run.ttfts_s) < 0):
            raise ValidationDataError(f"{where}: ttfts_s must hold one client TTFT of at least "
                                      "0 s per request, in the order sent")
        runs.append(run)
    if not runs:
        raise ValidationDataError(f"{path}: no runs")
    return data.get("sources", {}), tuple(runs)


def run_trace(run: ServingRun, runs: dict[str, ServingRun] | None = None,
              seed: int = 0) -> tuple[Trace, int]:
    """The run's workload, and the id of its first measured request.

    The requests come in the order sent, all at once (a burst) or with exponential gaps at the
    run's rate (the client sends the first at once); a concurrency run's requests come so (at
    its rate, or all at once without one) and `replay_run` holds each back until fewer than
    `max_concurrency` are in flight. Each prompt carries one prefix id per
    full `PREFIX_BLOCK_TOKENS` block, the same ids for the same prompt in every run of a
    source (the same dataset sampled with the same seed), so vLLM's prefix cache can be
    replayed: before the measured requests come the prompts the server processed earlier
    (`served_before`: runs of the same server before this one, each after its client's
    one-prompt test run of its first request, and this run's own test prompt), each with one
    output token, an hour before the measured ones start (the engine is idle again by then).
    In that order they also advance a round-robin router as the server's did: with two
    replicas, the test prompts decide which replica each earlier run's prompt i reached.
    Every prompt is the engine's count: the client's plus the run's `special_tokens_added`."""
    warm = []
    for other in run.served_before:
        if runs is None or other not in runs:
            raise ValidationDataError(f"run {run.id}: served_before names unknown run {other!r}")
        earlier = runs[other]
        added = earlier.special_tokens_added
        if earlier.test_prompt_first:  # that run's client sent its test prompt first too
            warm.append((0, earlier.prompt_tokens[0] + added))
        warm += [(i, p + added) for i, p in enumerate(earlier.prompt_tokens)]
    if run.test_prompt_first:
        warm.append((0, run.prompt_tokens[0] + run.special_tokens_added))
    n = len(run.prompt_tokens)
    if run.rate_per_s is None:
        arrivals = np.zeros(n)
    else:
        gaps = np.random.default_rng(seed).exponential(1.0 / run.rate_per_s, n)
        arrivals = np.concatenate(([0.0], np.cumsum(gaps[:-1])))
    start = WARM_GAP_S if warm else 0.0
    requests = [Request(k, 0.0, p, 1, _ids(i, p)) for k, (i, p) in enumerate(warm)]
    first = len(requests)
    extra = run.special_tokens_added
    requests += [Request(first + i, start + float(t), p + extra, o, _ids(i, p + extra))
                 for i, (t, p, o) in enumerate(zip(arrivals, run.prompt_tokens,
                                                   run.output_tokens))]
    return Trace(run.id, tuple(requests), PREFIX_BLOCK_TOKENS), first


def _ids(position: int, prompt_tokens: int) -> tuple[int, ...]:
    """Prefix ids of the prompt at `position` of a source's prompt list: one per full block."""
    return tuple(position * ID_STRIDE + k for k in range(prompt_tokens // PREFIX_BLOCK_TOKENS))


def load_host_scales(path: Path | str = HOST_SCALES_FILE) -> dict[str, dict[str, float]]:
    """Per server, per source left out, the host time scale fitted without that source
    (data/host_scales.json, written by `benchmarks/serve_host_fit.py`); {} without the file.
    Read once per version of the file (a validation replays hundreds of runs)."""
    path = Path(path)
    if not path.exists():
        return {}
    stat = path.stat()
    return {server: dict(by_source) for server, by_source in
            _read_host_scales(str(path.resolve()), stat.st_mtime_ns, stat.st_size).items()}


@functools.lru_cache(maxsize=8)
def _read_host_scales(path_text: str, mtime_ns: int, size: int) -> dict[str, dict[str, float]]:
    """`load_host_scales`'s parse of one version of the file (keyed by its path, mtime, size)."""
    path = Path(path_text)
    try:
        data = json.loads(read_user_text(path, "host scales file", ValidationDataError))
        scales = {str(server): {str(src): float(v) for src, v in fit["without"].items()}
                  for server, fit in data["servers"].items()}
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValidationDataError(f"{path}: not a host scales file ({e}); rewrite it with "
                                  "python benchmarks/serve_host_fit.py") from None
    for server, by_source in scales.items():
        for src, v in by_source.items():
            if not (v > 0 and np.isfinite(v)):
                raise ValidationDataError(f"{path}: server {server}, without {src}: scale {v} "
                                          "is not a positive number")
    return scales


def host_scale(run: ServingRun, scales: dict[str, dict[str, float]] | None = None) -> float:
    """The host time scale `run` is replayed with: its server's, fitted on the runs of the
    other sources on that server (`scales`, default `load_host_scales()`), never on the run's
    own source; 1 where the run names no server or none was fitted without its source."""
    if run.server is None:
        return 1.0
    scales = load_host_scales() if scales is None else scales
    return scales.get(run.server, {}).get(run.source, 1.0)


def replay_run(run: ServingRun, runs: dict[str, ServingRun] | None = None, seed: int = 0,
               client_side: bool = True, software=None, scale: float | None = None):
    """Serve the run's workload with the engine's defaults on the run's system; returns the
    report of the whole replay and the summary of the measured requests only (without the
    inter-token latencies, which the engine records for all requests together). The runs
    were timed by a client through the engine's API server, so the replay reports the
    client's times through the profile's front end (`client_side=False`: the engine's).
    A run's `engine_version` chooses its front end's form (`serve`'s).
    A run's `engine_options` (the server's flags, e.g. the max_model_len that sets vLLM V0's
    batched-token budget) replace those of the engine's defaults on the run's system; a
    concurrency run replays its client's closed loop (`serve`'s `max_concurrency`). A run's
    `profile_charges` sizes its KV cache with its engine version's accounting. `software`
    (a profile or its name) replaces the run's profile: a what-if of one of its constants.
    `scale`: the host time scale (`SoftwareProfile.host_time_scaled`); None: `host_scale`'s,
    the run's server's fitted without its source."""
    from ..hardware import load_system
    from ..models import get_preset
    from ..simulator import Simulator
    from .replay import default_options, scheduler_for, serve
    from .report import summarise

    trace, first = run_trace(run, runs, seed)
    config = get_preset(run.model)
    software = run.software if software is None else software
    software = host_time_scaled(software, host_scale(run) if scale is None else scale)
    options = None
    if run.engine_options:
        system = load_system(run.system)
        kind = scheduler_for(Simulator(system, software).profile.name, None)
        options = replace(default_options(kind, system, config), **run.engine_options)
    report = serve(trace, config, run.system, tp=run.tp, replicas=run.replicas,
                   router=run.router,
                   software=with_accounting(software, run.profile_charges),
                   model_name=run.model, client_side=client_side, options=options,
                   max_concurrency=run.max_concurrency, engine_version=run.engine_version)
    rows = [r for r in report.rows if r["id"] >= first]
    start = min(r["arrival_s"] for r in rows)
    arrivals = [r["arrival_s"] for r in rows]
    summary = summarise(rows, np.array([]), np.array([]),
                        duration_s=max(arrivals) - start,
                        makespan_s=max(r["finish_s"] for r in rows) - start,
                        slo_ttft_s=None, slo_tpot_s=None, preemptions=0,
                        kv_used=np.array([]), usd_per_s=0.0)
    return report, summary


def score(run: ServingRun, summary: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per metric the run measured: predicted, measured and the relative error
    |predicted - measured| / measured (and signed, `bias`)."""
    out = {}
    for section, stat in METRICS:
        measured = run.measured.get(section, {}).get(stat)
        predicted = (summary.get(section) or {}).get(stat)
        if measured is None or predicted is None or not measured:
            continue
        out[f"{section.removesuffix('_s')}_{stat}"] = {
            "predicted": float(predicted), "measured": float(measured),
            "error": abs(predicted - measured) / measured,
            "bias": (predicted - measured) / measured}
    return out


def medians(scores: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Median (and worst) relative error over the runs that measured each metric."""
    keys = sorted({k for s in scores for k in s})
    out = {}
    for k in keys:
        errors = [s[k]["error"] for s in scores if k in s]
        out[k] = {"median": float(np.median(errors)), "worst": float(max(errors)),
                  "runs": len(errors)}
    return out
