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

With `--seeds N`, every point is replayed on N independent arrival and length sequences
(seeds `--seed` .. `--seed` + N - 1): the difference is then that of the pooled mean wait
against the pooled theory, with a 95 % interval from the spread of the N per-seed differences
(Student's t on N - 1 degrees of freedom). Near saturation the waits of one run are so
correlated that a run's mean has a sampling error of a few per cent even at 200,000 requests
(at rho 0.9 the autocorrelation of successive waits decays over ~1 / (1 - rho)^2 requests);
independent seeds shrink it as 1 / sqrt(N) and let the interval show it.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import numpy as np
from scipy import stats

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
    parser.add_argument("--seeds", type=int, default=1,
                        help="independent replays per point (seeds SEED .. SEED + N - 1)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    config = get_preset(MODEL)
    oracle = StepTimer(Simulator(SYSTEM, "vllm"), config, 1, max_tokens=BUDGET, max_sequences=1)
    rows = []
    for kind, lengths in (("M/D/1", "fixed:512,1"), ("M/G/1", "lognormal:512,1,1.0")):
        for rho in (0.3, 0.6, 0.9):
            runs = [one_run(config, oracle, lengths, rho, args.requests, seed)
                    for seed in range(args.seed, args.seed + args.seeds)]
            wait = float(np.mean([w for w, _, _ in runs]))
            theory = float(np.mean([t for _, t, _ in runs]))
            row = {"model": kind, "rho": rho, "requests": sum(n for _, _, n in runs),
                   "seeds": args.seeds, "mean_wait_s": wait, "theory_s": theory,
                   "difference_pct": round(100 * (wait / theory - 1), 2)}
            if args.seeds > 1:
                per_seed = np.array([100 * (w / t - 1) for w, t, _ in runs])
                half = float(stats.t.ppf(0.975, args.seeds - 1) * per_seed.std(ddof=1)
                             / np.sqrt(args.seeds))
                row["difference_95ci_pct"] = [round(row["difference_pct"] - half, 2),
                                              round(row["difference_pct"] + half, 2)]
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.json:
        from krakenlm.fileio import write_text_atomically
        write_text_atomically(args.json, json.dumps(rows, indent=2) + "\n")


def one_token(trace: Trace) -> Trace:
    """The trace with every request's output forced to a single token."""
    return replace(trace, requests=tuple(replace(r, output_tokens=1) for r in trace.requests))


def one_run(config, oracle: StepTimer, lengths: str, rho: float, requests: int,
            seed: int) -> tuple[float, float, int]:
    """(simulated mean wait, theoretical mean wait, requests served) of one replay at
    utilisation `rho` on the arrivals and lengths of `seed`."""
    probe = one_token(synthetic_trace(np.random.default_rng(seed), requests, 1.0, lengths))
    # prompts beyond the context are dropped: the rest still arrive as a Poisson process,
    # at the rate times the share kept
    prompts = np.array([r.prompt_tokens for r in probe.requests])
    kept = prompts[prompts <= config.context_len]
    service = {p: oracle.batch_s([(int(p), 0)], []) for p in np.unique(kept)}
    s = np.array([service[p] for p in kept])
    share = len(kept) / len(prompts)
    rate = rho / s.mean() / share
    trace = one_token(synthetic_trace(np.random.default_rng(seed), requests, rate, lengths))
    report = serve(trace, config, SYSTEM, options=V1Options(BUDGET, 1), skip_long=True)
    wait = float(np.mean([r["queue_s"] for r in report.rows]))
    theory = rate * share * float((s ** 2).mean()) / (2 * (1 - rho))
    return wait, theory, len(report.rows)


if __name__ == "__main__":
    main()
