"""What vLLM 0.5.4's spread hand-over would do to the `lambda` runs: a what-if, not the model.

    python benchmarks/serve_v0_spread.py [--json FILE]

The measurement of vLLM V0's API server (benchmarks/vllm_v0_frontend/, docs/data/vllm-v0-frontend.json)
shows 0.6.0 handing a burst to the engine in one clump, which is the replay's model (serving/vllm_v0.py),
and 0.5.4 spreading it: in 0.5.4's completion handler every request's first part (parsing, tokenising,
logging) runs before any request's second part, which `merge_async_iterators` queues as a task of its own
(the RPC send over a new socket). So request i of a burst of N reaches the engine at

    v_i = sum over the burst of c1_j + (i + 1) x c2,   c1 = a1 + t x prompt tokens,

and the engine (a process of its own) starts on whatever has arrived. This fits a1, t and c2 by least
squares to the first (N c1 + c2) and last (N (c1 + c2)) arrivals of every 0.5.4 server's 160-request
bursts, replays each `lambda` run (vLLM 0.5.4 bursts) with those engine arrivals and no engine-loop
time, client-side as benchmarks/serve_validation.py does (the client sent every request at 0), and prints
the median |TTFT mean error| overall and per server beside the shipped clump model's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

import numpy as np

from krakenlm.fileio import write_text_atomically
from krakenlm.hardware import load_system
from krakenlm.models import get_preset
from krakenlm.serving.replay import default_options, scheduler_for, serve
from krakenlm.serving.traces import Trace
from krakenlm.serving.validation import load_runs, replay_run, run_trace, score
from krakenlm.simulator import Simulator
from krakenlm.simulator.constants.software import load_software

HARNESS = Path(__file__).resolve().parent.parent / "docs/data/vllm-v0-frontend.json"


def fit_stages(harness: dict, n: int = 160) -> tuple[float, float, float]:
    """(a1, t, c2) from 0.5.4's `n`-request bursts: first = N c1 + c2, last = N (c1 + c2)."""
    lengths = {name: fig["mean_prompt_tokens"] for name, fig in harness["medians"]["0.5.4"].items()}
    rows, values = [], []
    for name, figs in harness["reps"]["0.5.4"].items():
        for fig in figs:
            if fig["n"] != n:
                continue
            length = lengths[name]
            rows += [[n, n * length, 1.0], [n, n * length, n]]
            values += [fig["first_s"], fig["last_s"]]
    (a1, t, c2), *_ = np.linalg.lstsq(np.array(rows), np.array(values), rcond=None)
    return float(a1), float(t), float(c2)


def spread_arrivals(prompts: list[int], a1: float, t: float, c2: float) -> list[float]:
    """Engine arrival of each request of a burst sent at 0 (module docstring)."""
    first_parts = sum(a1 + t * p for p in prompts)
    return [first_parts + (i + 1) * c2 for i in range(len(prompts))]


def spread_ttft_error(run, by_id, stages) -> float:
    """The run's TTFT mean error with the spread hand-over (a burst run, no warm-up)."""
    no_loop = load_software(run.software)
    no_loop = dataclasses.replace(no_loop, frontend=dataclasses.replace(
        no_loop.frontend, engine_loop_request_s=0.0, engine_loop_token_s=0.0))
    trace, first = run_trace(run, by_id)
    arrivals = spread_arrivals([r.prompt_tokens for r in trace.requests], *stages)
    shifted = tuple(dataclasses.replace(r, arrival_s=a) for r, a in zip(trace.requests, arrivals))
    config, system = get_preset(run.model), load_system(run.system)
    kind = scheduler_for(Simulator(system, no_loop).profile.name, None)
    options = dataclasses.replace(default_options(kind, system, config), **run.engine_options)
    report = serve(Trace(trace.name, shifted, trace.hash_block_tokens), config, run.system,
                   tp=run.tp, software=no_loop, model_name=run.model, client_side=True,
                   options=options)
    ttft = float(np.mean([row["first_token_s"] for row in report.rows]))  # sent at 0
    measured = run.measured["ttft_s"]["mean"]
    return (ttft - measured) / measured


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    stages = fit_stages(json.loads(HARNESS.read_text()))
    print(f"0.5.4 stages: c1 = {stages[0]*1e3:.2f} ms + {stages[1]*1e6:.2f} us a prompt token, "
          f"c2 = {stages[2]*1e3:.2f} ms")
    _, runs = load_runs()
    by_id = {r.id: r for r in runs}
    rows = []
    for run in runs:
        if run.source != "lambda":
            continue
        clump = score(run, replay_run(run, by_id)[1])["ttft_mean"]["bias"]
        rows.append({"id": run.id, "server": run.system.split("-")[0], "clump": clump,
                     "spread": spread_ttft_error(run, by_id, stages)})
    out = {"stages": {"a1_s": stages[0], "per_prompt_token_s": stages[1], "c2_s": stages[2]},
           "median_abs_ttft_mean": {}, "rows": rows}
    for server in (None, "h100", "a100"):
        mine = [r for r in rows if server in (None, r["server"])]
        med = {form: statistics.median(abs(r[form]) for r in mine) for form in ("clump", "spread")}
        out["median_abs_ttft_mean"][server or "all"] = med
        print(f"{server or 'all'} ({len(mine)} runs): clump {100 * med['clump']:.1f} %, "
              f"spread {100 * med['spread']:.1f} %")
    if args.json:
        out["command"] = f"python benchmarks/serve_v0_spread.py --json {args.json}"
        write_text_atomically(args.json, json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
