"""`krakenlm sim serve`: replay a request trace through replicas of a serving engine
(krakenlm.serving), or search the largest rate meeting SLOs (`--capacity`). Registered by
cli/__init__.py; parses, calls `serving.command.serve_command` / `capacity_command`, prints
the report."""

from __future__ import annotations

import sys

import typer

from ._console import print_report
from .sim import sim_app


@sim_app.command("serve", help="Replay a trace through an engine's scheduler, or find its "
                 "capacity. docs/serving.md.")
def serve_cmd(
    trace: str = typer.Option(..., "--trace", help="Request trace: an Azure 2023 CSV, a Mooncake JSONL (with prefix-block hash_ids), a Vidur-style CSV, or 'synthetic' (with --rate, --arrival, --cv, --requests, --lengths)."),
    model: str = typer.Option(..., "--model", help="Model preset (see `krakenlm models`) or a path to a config.json (Hugging Face or krakenlm)."),
    system: str = typer.Option(None, "--system", help="Hardware preset (see `krakenlm sim systems`) or a YAML file (not needed when --replicas names pools)."),
    software: str = typer.Option("vllm", "--software", help="Serving software profile; its engine's scheduler is replayed (vllm: vLLM V1, vllm-v0: vLLM V0, trtllm: TensorRT-LLM in-flight batching, sglang: SGLang)."),
    scheduler: str = typer.Option(None, "--scheduler", help="Replay this scheduler instead of the profile's own (vllm-v1, vllm-v0, trtllm, sglang)."),
    arch: str = typer.Option(None, "--arch", help="gpt | parallel | kraken: serve the model as this architecture (kraken: the parameter-matched Kraken with degree = tp)."),
    kraken_rule: str = typer.Option("engine", "--kraken-rule", help="With --arch kraken: engine or head-count (see `sim run`)."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree per replica."),
    pp: int = typer.Option(1, "--pp", help="Pipeline-parallel stages per replica (pp batches in flight, as vLLM's virtual engines)."),
    replicas: str = typer.Option("1", "--replicas", help="Engine replicas (each with --tp x --pp devices of --system), or pools SYSTEM[:tpN][:ppN][:COUNT],... (heterogeneous replicas, e.g. h100-80gb-x8:tp4:2,a100-80gb-x8:tp8:1)."),
    router: str = typer.Option("round-robin", "--router", help="round-robin, least-loaded (fewest running + waiting requests), prefix-affinity (longest cached prefix of the request's blocks, then least-loaded), jsq-tokens (fewest outstanding prefill + decode tokens) or vllm-dp (vLLM V1's data-parallel balancer: lowest 4 x waiting + running from counts published every 100 ms, plus the requests sent since)."),
    prefill_replicas: str = typer.Option(None, "--prefill-replicas", help="Disaggregated serving: prefill instances (a count of --system/--tp/--pp instances, or pools); needs --decode-replicas."),
    decode_replicas: str = typer.Option(None, "--decode-replicas", help="Disaggregated serving: decode instances (a count or pools), fed by the KV transfer."),
    pd_search: int = typer.Option(None, "--pd-search", help="Search every P:D split of this many --system/--tp/--pp instances (and as many aggregated replicas): capacity under the SLOs per device and per $."),
    network_gbps: float = typer.Option(None, "--network-gbps", help="Inter-node network per device and direction, Gb/s (KV transfers and pipeline sends between nodes; default: the system's interconnect.inter_node from its hardware YAML, else 400 Gb/s with a warning)."),
    rate_scale: float = typer.Option(1.0, "--rate-scale", help="Multiply the trace's request rate (arrival times divided by it)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the synthetic workload's RNG (the output is identical for a seed)."),
    arrival: str = typer.Option("poisson", "--arrival", help="Synthetic arrivals: poisson or gamma (with --cv)."),
    rate: float = typer.Option(None, "--rate", help="Synthetic arrival rate (requests per second)."),
    cv: float = typer.Option(1.0, "--cv", help="Coefficient of variation of gamma inter-arrival times."),
    requests: int = typer.Option(1000, "--requests", help="Synthetic requests."),
    lengths: str = typer.Option("fixed:512,128", "--lengths", help="Synthetic lengths: fixed:PROMPT,OUTPUT, trace:PATH (resampled) or lognormal:PROMPT_MEAN,OUTPUT_MEAN[,CV]."),
    max_num_batched_tokens: int = typer.Option(None, "--max-num-batched-tokens", help="Token budget per step (default: the engine's; V1: 8192 or 2048 by device, V0: max(context, 2048), TensorRT-LLM max_num_tokens 8192, SGLang chunked_prefill_size 2048 / 8192 / 16384 by device memory)."),
    max_num_seqs: int = typer.Option(None, "--max-num-seqs", help="Most running requests (default: the engine's; V1: 1024 or 256 by device, V0: 256, TensorRT-LLM max_batch_size 2048, SGLang max_running_requests sized from its KV pool)."),
    block_size: int = typer.Option(None, "--block-size", help="Tokens per KV block (default: the engine's: vLLM and SGLang 16, TensorRT-LLM 32)."),
    gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization", help="vLLM: share of device memory the engine may use (weights, activations, KV cache); TensorRT-LLM: its free_gpu_memory_fraction (share of what the model leaves); SGLang: its mem_fraction_static (share of the memory free before the weights that holds the weights and the KV cache)."),
    chunked_prefill: bool = typer.Option(None, "--chunked-prefill/--no-chunked-prefill", help="TensorRT-LLM: chunked context; vLLM V0: --enable-chunked-prefill (its budget 512 tokens unless --max-num-batched-tokens). Default off for both (vLLM V0 turns it on by itself for a context above 32K, as vLLM does); vLLM V1 always chunks."),
    capacity_policy: str = typer.Option("guaranteed-no-evict", "--capacity-policy", help="TensorRT-LLM: guaranteed-no-evict (default) or max-utilization."),
    preemption_mode: str = typer.Option("recompute", "--preemption-mode", help="vLLM V0: recompute (default) or swap (KV blocks to host memory over the hardware YAML's host link, resumed without recompute)."),
    swap_space: float = typer.Option(4.0, "--swap-space", help="vLLM V0 with --preemption-mode swap: CPU swap space in GiB per GPU (vLLM's default 4)."),
    num_scheduler_steps: int = typer.Option(1, "--num-scheduler-steps", help="vLLM V0 (0.6.x): forward steps per scheduler call (multi-step scheduling: decode rounds of N steps, tokens streamed once per round; host constants of 0.6.0). Default 1."),
    cuda_graph_max: int = typer.Option(None, "--cuda-graph-max", help="The largest CUDA graph the engine captures: vLLM V1's --max-cudagraph-capture-size (tokens a step; default min(2 x max_num_seqs, 512)), SGLang's --cuda-graph-max-bs (decode batch; default 256 or 512 by GPU memory and TP); a larger step runs without a graph. 0: no CUDA graphs, every kernel issued from the host (vLLM --enforce-eager, SGLang --disable-cuda-graph; any engine)."),
    async_scheduling: bool = typer.Option(None, "--async-scheduling/--no-async-scheduling", help="vLLM V1: asynchronous scheduling, a step's batch fixed as the step before it starts, so a request that arrives during a step joins the step after next (default on, as in vLLM since 0.14; --no-async-scheduling for vLLM 0.10-0.13's default)."),
    schedule_policy: str = typer.Option("lpm", "--schedule-policy", help="SGLang: lpm (longest prefix match first, the default) or fcfs."),
    prefix_caching: bool = typer.Option(None, "--prefix-caching/--no-prefix-caching", help="Prefix caching, TensorRT-LLM's KV block reuse (default: on in vLLM V1 and SGLang, its radix cache; off in V0 and TensorRT-LLM)."),
    dtype: str = typer.Option("fp16", "--dtype", help="Weights and activations: fp16, bf16, fp8."),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="KV cache storage as the engines spell it: auto (the profile's: the model dtype, or its FP8 policy), fp8 / fp8_e4m3 / fp8_e5m2 (one byte a value; vLLM, SGLang, TensorRT-LLM's FP8 KV cache), bf16 / bfloat16, fp16 / float16. Sets the KV block's bytes and the KV bytes attention reads."),
    slo_ttft_s: float = typer.Option(None, "--slo-ttft-s", help="TTFT SLO in seconds (attainment and goodput)."),
    slo_tpot_s: float = typer.Option(None, "--slo-tpot-s", help="TPOT SLO in seconds (attainment and goodput)."),
    skip_long: bool = typer.Option(False, "--skip-long", help="Drop requests longer than the model's context (default: an error)."),
    client_side: bool = typer.Option(False, "--client-side", help="Report TTFT, TPOT and E2E as a client measures them through the engine's API server: the software profile's frontend section (a fixed time per request, a time per prompt token on its way in, a time per output token of each stream, and the API server's work per request on its event loop, vLLM V1's own or V0's engine loop; docs/serving.md). Default: the engine's own times."),
    max_concurrency: int = typer.Option(None, "--max-concurrency", help="A closed-loop client (vLLM's benchmark_serving.py / SGLang's bench_serving --max-concurrency N): at most N requests in flight, each sent at its arrival or when an earlier one finishes (as the client sees it with --client-side). One pool of replicas; not with --capacity."),
    engine_version: str = typer.Option(None, "--engine-version", help="The server's engine version where the software profile's front end depends on it (with --client-side): vLLM 0.5.4's OpenAI server hands requests to the engine from a process of its own, spread over a burst's way in (frontend.front_loop_*), other V0 versions on the engine's loop. With --router vllm-dp it also sets vLLM's data-parallel balancer: before 0.14 it balances on the engines' published counts, from 0.14 (and by default) blind to their load. Default: the form the profile gives every version (vLLM V1: its API server's loop; vLLM V0: the engine's loop)."),
    host_time_scale: float = typer.Option(1.0, "--host-time-scale", help="The server's CPU: its host and front-end work (the software profile's host and frontend times: scheduling, input preparation, output processing, the API server's per-request work) takes this many times the profile's. 1 (default): as the profile times them; LambdaLabs' A100 server fits about 1.4 (docs/serving.md \"Stop 54\", fitted leaving each source out)."),
    capacity: bool = typer.Option(False, "--capacity", help="Search the largest request rate (a scale of the trace's) whose --slo-percentile TTFT and TPOT meet the SLOs, to 1 %; report the replay at that rate."),
    slo_percentile: int = typer.Option(99, "--slo-percentile", help="With --capacity: the percentile the SLOs bound (50, 90, 95 or 99)."),
    out: str = typer.Option(None, "--out", help="Directory for requests.csv, timeline.csv, summary.json and serve.png."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    print_report(_run(dict(locals())), as_json)


def _run(given: dict):
    """The report of one `sim serve`: the replay, or the capacity search and its replay."""
    from ..serving.command import ServeOptions, capacity_command, pd_search_command, serve_command

    options = ServeOptions(**{k: v for k, v in given.items()
                              if k in ServeOptions.__dataclass_fields__})
    tty = sys.stderr.isatty()
    if given["pd_search"] is not None:
        return pd_search_command(options, given["pd_search"], given["slo_percentile"],
                                 progress=_split if tty else None)
    if given["capacity"]:
        shown = capacity_command(options, given["slo_percentile"],
                                 progress=_searched if tty else None)
        report = shown.report
    else:
        shown = report = serve_command(options, progress=_routed if tty else None)
    if given["out"]:
        report.write(given["out"])
    _warn_if_overloaded(report.summary)
    return shown


def _warn_if_overloaded(s: dict) -> None:
    if s["overloaded"]:
        from ..errors import warn
        warn(f"overloaded: the queue grows (mean wait {s['queue_first_fifth_mean_s']:.2f} s for "
             f"the first fifth of the requests, {s['queue_last_fifth_mean_s']:.2f} s for the "
             f"last); requests arrive at {s['offered_rate_per_s']:.2f}/s, "
             f"{s['throughput']['requests_per_s']:.2f}/s are served, so the tails say how long "
             "the trace is, not how the system serves")


def _routed(done: int, total: int) -> None:
    print(f"\r{done:,} / {total:,} requests routed", end="" if done < total else "\n",
          file=sys.stderr, flush=True)


def _split(name: str) -> None:
    print(f"P:D {name}: searching its capacity", file=sys.stderr, flush=True)


def _searched(row: dict) -> None:
    print(f"rate {row['rate_per_s']:.3f}/s: {'meets' if row['meets'] else 'misses'} the SLOs",
          file=sys.stderr, flush=True)


@sim_app.command("serve-search")
def serve_search_cmd(
    space: str = typer.Option(..., "--space", help="Configuration space YAML: the fixed `sim serve` options (trace, model, rate, requests, lengths, seed, slo_ttft_s, ...) and `space:` with lists of tp, replicas, max_num_batched_tokens (the prefill chunk), max_num_seqs, system, arch."),
    processes: int = typer.Option(1, "--processes", help="Local worker processes."),
    backend: str = typer.Option("local", "--backend", help="local or dask (pip install 'krakenlm[cluster]')."),
    address: str = typer.Option(None, "--address", help="Dask scheduler address (default: a local cluster)."),
    chunk: int = typer.Option(1, "--chunk", help="Configurations per unit of work sent to a worker."),
    top: int = typer.Option(10, "--top", help="Configurations to print."),
    out: str = typer.Option(None, "--out", help="Directory for configs.csv (every configuration), front.csv (goodput or capacity against $/hour) and search.png."),
    objective: str = typer.Option("goodput", "--objective", help="goodput: replay each configuration at the space's rate, rank by goodput per $; capacity: search each configuration's capacity under the SLOs (as sim serve --capacity, ~10 replays each), rank by capacity per $."),
    slo_percentile: int = typer.Option(99, "--slo-percentile", help="With --objective capacity: the percentile the SLOs bound (50, 90, 95 or 99)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Replay a trace on every configuration of a space (TP x replicas x chunk x max_num_seqs x
    GPU x architecture) and rank them by goodput per $, or by capacity under the SLOs per $.
    docs/serving.md."""
    from ..serving.config_search import load_space
    from ..studies.serving_search import search_configs

    print_report(search_configs(load_space(space), processes=processes, backend=backend,
                                address=address, chunk=chunk, top=top, out=out,
                                progress=sys.stderr.isatty(), objective=objective,
                                percentile=slo_percentile), as_json)
