"""`krakenlm sim serve`: replay a request trace through replicas of a serving engine
(krakenlm.serving). Registered on `sim` by cli/sim.py; parses, calls
`serving.command.serve_command`, prints."""

from __future__ import annotations

import json
import sys

import typer

from ._console import stdout_console
from ._console import table as _table
from .sim import sim_app


@sim_app.command("serve")
def serve_cmd(
    trace: str = typer.Option(..., "--trace", help="Request trace: an Azure 2023 CSV, a Mooncake JSONL (with prefix-block hash_ids), a Vidur-style CSV, or 'synthetic' (with --rate, --arrival, --cv, --requests, --lengths)."),
    model: str = typer.Option(..., "--model", help="Model preset (see `krakenlm models`) or a path to a config.json (Hugging Face or krakenlm)."),
    system: str = typer.Option(..., "--system", help="Hardware preset (see `krakenlm sim systems`) or a YAML file."),
    software: str = typer.Option("vllm", "--software", help="Serving software profile; its engine's scheduler is replayed (vllm: vLLM V1, vllm-v0: vLLM V0, trtllm: TensorRT-LLM in-flight batching)."),
    scheduler: str = typer.Option(None, "--scheduler", help="Replay this scheduler instead of the profile's own (vllm-v1, vllm-v0, trtllm)."),
    arch: str = typer.Option(None, "--arch", help="gpt | parallel | kraken: serve the model as this architecture (kraken: the parameter-matched Kraken with degree = tp)."),
    kraken_rule: str = typer.Option("engine", "--kraken-rule", help="With --arch kraken: engine or head-count (see `sim run`)."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree per replica."),
    replicas: int = typer.Option(1, "--replicas", help="Engine replicas (each with --tp devices)."),
    router: str = typer.Option("round-robin", "--router", help="round-robin or least-loaded (fewest running + waiting requests)."),
    rate_scale: float = typer.Option(1.0, "--rate-scale", help="Multiply the trace's request rate (arrival times divided by it)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the synthetic workload's RNG (the output is identical for a seed)."),
    arrival: str = typer.Option("poisson", "--arrival", help="Synthetic arrivals: poisson or gamma (with --cv)."),
    rate: float = typer.Option(None, "--rate", help="Synthetic arrival rate (requests per second)."),
    cv: float = typer.Option(1.0, "--cv", help="Coefficient of variation of gamma inter-arrival times."),
    requests: int = typer.Option(1000, "--requests", help="Synthetic requests."),
    lengths: str = typer.Option("fixed:512,128", "--lengths", help="Synthetic lengths: fixed:PROMPT,OUTPUT, trace:PATH (resampled) or lognormal:PROMPT_MEAN,OUTPUT_MEAN[,CV]."),
    max_num_batched_tokens: int = typer.Option(None, "--max-num-batched-tokens", help="Token budget per step (default: the engine's; V1: 8192 or 2048 by device, V0: max(context, 2048), TensorRT-LLM max_num_tokens 8192)."),
    max_num_seqs: int = typer.Option(None, "--max-num-seqs", help="Most running requests (default: the engine's; V1: 1024 or 256 by device, V0: 256, TensorRT-LLM max_batch_size 2048)."),
    block_size: int = typer.Option(None, "--block-size", help="Tokens per KV block (default: the engine's: vLLM 16, TensorRT-LLM 32)."),
    gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization", help="vLLM: share of device memory the engine may use (weights, activations, KV cache); TensorRT-LLM: its free_gpu_memory_fraction (share of what the model leaves)."),
    chunked_prefill: bool = typer.Option(None, "--chunked-prefill/--no-chunked-prefill", help="TensorRT-LLM: chunked context (default off; vLLM V1 always chunks, V0 never)."),
    capacity_policy: str = typer.Option("guaranteed-no-evict", "--capacity-policy", help="TensorRT-LLM: guaranteed-no-evict (default) or max-utilization."),
    prefix_caching: bool = typer.Option(None, "--prefix-caching/--no-prefix-caching", help="Prefix caching (default: the engine's: on in vLLM V1, off in V0)."),
    dtype: str = typer.Option("fp16", "--dtype", help="Weights and activations: fp16, bf16, fp8."),
    slo_ttft_s: float = typer.Option(None, "--slo-ttft-s", help="TTFT SLO in seconds (attainment and goodput)."),
    slo_tpot_s: float = typer.Option(None, "--slo-tpot-s", help="TPOT SLO in seconds (attainment and goodput)."),
    skip_long: bool = typer.Option(False, "--skip-long", help="Drop requests longer than the model's context (default: an error)."),
    capacity: bool = typer.Option(False, "--capacity", help="Search the largest request rate (a scale of the trace's) whose --slo-percentile TTFT and TPOT meet the SLOs, to 1 %; report the replay at that rate."),
    slo_percentile: int = typer.Option(99, "--slo-percentile", help="With --capacity: the percentile the SLOs bound (50, 90, 95 or 99)."),
    out: str = typer.Option(None, "--out", help="Directory for requests.csv, timeline.csv, summary.json and serve.png."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Replay a request trace through an engine's scheduler on the simulated hardware: TTFT,
    TPOT, ITL, E2E and queueing percentiles, throughput, SLO attainment and goodput, KV cache
    use, preemptions, $ per million tokens."""
    from ..serving.command import ServeOptions, serve_command

    options = ServeOptions(
        trace=trace, model=model, system=system, software=software, scheduler=scheduler,
        arch=arch, kraken_rule=kraken_rule, tp=tp, replicas=replicas, router=router,
        rate_scale=rate_scale, seed=seed, arrival=arrival, rate=rate, cv=cv,
        requests=requests, lengths=lengths, max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs, block_size=block_size, chunked_prefill=chunked_prefill,
        capacity_policy=capacity_policy,
        gpu_memory_utilization=gpu_memory_utilization, prefix_caching=prefix_caching,
        dtype=dtype, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s, skip_long=skip_long)
    if capacity:
        _capacity(options, slo_percentile, out, as_json)
        return
    report = serve_command(options, progress=_progress if sys.stderr.isatty() else None)
    if out:
        report.write(out)
    if report.summary["overloaded"]:
        from ..errors import warn
        s = report.summary
        warn(f"overloaded: the queue grows (mean wait {s['queue_first_fifth_mean_s']:.2f} s for the "
             f"first fifth of the requests, {s['queue_last_fifth_mean_s']:.2f} s for the last); "
             f"requests arrive at {s['offered_rate_per_s']:.2f}/s, {s['throughput']['requests_per_s']:.2f}/s"
             " are served, so the tails say how long the trace is, not how the system serves")
    if as_json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
        return
    _print(report, out)


def _capacity(options, percentile: int, out: str | None, as_json: bool) -> None:
    from ..serving.command import capacity_command

    def progress(row: dict) -> None:
        if sys.stderr.isatty():
            print(f"rate {row['rate_per_s']:.3f}/s: {'meets' if row['meets'] else 'misses'} the "
                  "SLOs", file=sys.stderr, flush=True)

    found = capacity_command(options, percentile, progress=progress)
    if out:
        found.report.write(out)
    if as_json:
        print(json.dumps(found.to_json(), indent=2, sort_keys=True))
        return
    console = stdout_console()
    t = _table(title=f"Capacity search: p{percentile} TTFT <= {found.slo_ttft_s} s, TPOT <= "
                     f"{found.slo_tpot_s} s")
    for col in ("rate /s", "scale", f"TTFT p{percentile} ms", f"TPOT p{percentile} ms",
                "overloaded", "meets"):
        t.add_column(col, justify="right")
    for row in sorted(found.evaluations, key=lambda r: r["rate_scale"]):
        t.add_row(f"{row['rate_per_s']:.3f}", f"{row['rate_scale']:.4g}",
                  _fmt(row[f"ttft_p{percentile}_s"]), _fmt(row[f"tpot_p{percentile}_s"]),
                  "yes" if row["overloaded"] else "", "yes" if row["meets"] else "no")
    console.print(t)
    console.print(f"capacity: {found.rate_per_s:.3f} requests/s ({found.rate_scale:.4g}x the "
                  f"trace's rate), goodput "
                  f"{found.report.summary['slo']['goodput_requests_per_s']:.3f} requests/s")
    _print(found.report, out)


def _progress(done: int, total: int) -> None:
    print(f"\r{done:,} / {total:,} requests routed", end="" if done < total else "\n",
          file=sys.stderr, flush=True)


def _fmt(value, scale: float = 1e3) -> str:
    return "-" if value is None else f"{value * scale:,.1f}"


def _print(report, out: str | None) -> None:
    s, setup = report.summary, report.setup
    console = stdout_console()
    t = _table(title=f"{setup['model']} ({setup['arch']}) on {setup['system']}, "
                     f"{setup['software']} ({setup['scheduler']}), TP {setup['tp']} x "
                     f"{setup['replicas']} replicas, trace {setup['trace']}: latency (ms)")
    for col in ("metric", "mean", "p50", "p90", "p95", "p99"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"),
                       ("e2e_s", "E2E"), ("queue_s", "queueing delay")):
        row = s[key]
        t.add_row(label, *(_fmt(row[k]) for k in ("mean", "p50", "p90", "p95", "p99")))
    console.print(t)
    tp = s["throughput"]
    console.print(f"{s['requests']:,} requests in {s['makespan_s']:,.1f} s: "
                  f"{tp['requests_per_s']:.2f} requests/s, {tp['output_tokens_per_s']:,.0f} "
                  f"output tokens/s, {tp['tokens_per_s']:,.0f} tokens/s "
                  f"({s['steps']:,} engine steps)")
    slo = s["slo"]
    if slo["ttft_s"] is not None or slo["tpot_s"] is not None:
        console.print(f"SLO (TTFT <= {slo['ttft_s']} s, TPOT <= {slo['tpot_s']} s): "
                      f"{slo['attainment']:.1%} of requests, goodput "
                      f"{slo['goodput_requests_per_s']:.2f} requests/s")
    kv = s["kv_cache"]
    console.print(f"KV cache: {setup['kv_cache']['blocks']:,} blocks of "
                  f"{setup['kv_cache']['block_size']} tokens per replica, mean use "
                  f"{kv['mean_used']:.1%}, peak {kv['max_used']:.1%}, {kv['preemptions']:,} "
                  f"preemptions, {kv['prefix_hit_tokens']:,} prompt tokens from the prefix cache")
    c = s["cost"]
    if c["usd_per_million_output_tokens"] is not None:
        console.print(f"cost: ${c['usd_per_million_output_tokens']:.3f} per million output "
                      f"tokens (${c['usd_per_million_tokens']:.3f} per million tokens; devices "
                      f"written off over {c['amortisation_years']:g} years)")
    console.print(f"replayed in {report.wall_s:.1f} s")
    if out:
        console.print(f"wrote {out}/requests.csv, timeline.csv, summary.json, serve.png")
