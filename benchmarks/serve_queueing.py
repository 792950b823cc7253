"""Queueing-theory checks of the serving replay: mean waits against M/D/1 and M/G/1.

    python benchmarks/serve_queueing.py [--requests 200000] [--json OUT.json]

Batching off (vLLM V1 with max_num_seqs 1), every request one output token, so a request's
service is its prompt's prefill step(s) and the engine is a single FIFO server. Poisson
arrivals at utilisation rho = lambda E[S]:

* M/D/1: every prompt 512 tokens (one step of S seconds): mean wait rho S / (2 (1 - rho));
* M/G/1: prompts log-normal (mean 512 tokens, CV 1; the output forced to one token; those beyond the 2,048-token context
  dropped, which thins the Poisson arrivals): Pollaczek-Khinchine lambda E[S^2] / (2 (1 - rho)),
  with S the oracle's prefill step of each request's prompt.

GPT-3 1.3B on one H100 (vllm profile). Prints the simulated and the theoretical mean wait and
their relative difference at rho 0.3, 0.6 and 0.9.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import numpy as np

from krakenlm.models import get_preset
from krakenlm.serving.replay import serve
from krakenlm.serving.step_time import StepTimer
from krakenlm.serving.traces import Trace, synthetic_trace
from krakenlm.serving.vllm_v1 import V1Options
from krakenlm.simulator import Simulator

MODEL, SYSTEM, BUDGET = "gpt3-1.3b", "h100-80gb-x8", 8192


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    config = get_preset(MODEL)
    oracle = StepTimer(Simulator(SYSTEM, "vllm"), config, 1, max_tokens=BUDGET, max_sequences=1)
    rows = []
    def one_token(trace: Trace) -> Trace:  # every request a single output token
        return replace(trace, requests=tuple(replace(r, output_tokens=1) for r in trace.requests))

    for kind, lengths in (("M/D/1", "fixed:512,1"), ("M/G/1", "lognormal:512,1,1.0")):
        probe = one_token(synthetic_trace(np.random.default_rng(args.seed), args.requests, 1.0,
                                          lengths))
        # prompts beyond the context are dropped: the rest still arrive as a Poisson process,
        # at the rate times the share kept
        prompts = np.array([r.prompt_tokens for r in probe.requests])
        kept = prompts[prompts <= config.context_len]
        service = {p: oracle.batch_s([(int(p), 0)], []) for p in np.unique(kept)}
        s = np.array([service[p] for p in kept])
        share = len(kept) / len(prompts)
        for rho in (0.3, 0.6, 0.9):
            rate = rho / s.mean() / share
            trace = one_token(synthetic_trace(np.random.default_rng(args.seed), args.requests,
                                              rate, lengths))
            report = serve(trace, config, SYSTEM, options=V1Options(BUDGET, 1), skip_long=True)
            wait = float(np.mean([r["queue_s"] for r in report.rows]))
            theory = rate * share * float((s ** 2).mean()) / (2 * (1 - rho))
            row = {"model": kind, "rho": rho, "requests": len(report.rows),
                   "mean_wait_s": wait, "theory_s": theory,
                   "difference_pct": round(100 * (wait / theory - 1), 2)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.json:
        from krakenlm.fileio import write_text_atomically
        write_text_atomically(args.json, json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
