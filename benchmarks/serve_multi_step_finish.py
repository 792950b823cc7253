"""When does vLLM 0.6.0's multi-step engine hand a finishing request to the client? The replay's
rule ("host": when the host next looks after the GPU finished the request's last step, else at
the round's end; `V0Engine._handed_out`) against two what-ifs (always at the round's end, the
rule before stop 49; at the end of the step of its last token), on the TPOT of the
`lambda_v060` 10- and 20-prompt bursts: an attribution, not a validation score.

    python benchmarks/serve_multi_step_finish.py [--json docs/data/serve-multi-step-finish.json]

Only requests that finish inside their first decode round tell the two rules apart: a request
with o output tokens whose last token is the (o - 1)-th step of a 10-step round waits the
round's other steps under the first rule, so its TPOT, (E2E - TTFT) / (o - 1), is about a round
/ (o - 1) instead of a step. The Llama-3-8B bursts hold such requests (3 and 6 output tokens),
so their TPOT p99 (over 10 or 20 requests, about the largest) is where the rules differ most;
the Mistral-7B and Llama-3-70B bursts have none shorter than 8 tokens and barely move.

Per run it prints the measured TPOT mean and p99, the replay's under each rule (client-side,
the engine's defaults with the run's flags, as `benchmarks/serve_validation.py`), and the
measured GPU step (the ITL mean over the round's 10 steps, the host being idle inside a
round). vLLM's code allows both outcomes: 0.6.1's `LLMEngine._process_model_outputs` hands a
request that finished in a step that is not the round's last to the client at once ("For
multi-step, do not create outputs each iteration ... Immediately process request outputs here
(if callback is given)", AmberLJC/vllm-0.6.1@5597260f `vllm/engine/llm_engine.py`; the
`AsyncLLMEngine` gives the callback whenever the asynchronous output processor is on), but a
step's outputs are processed inside the round only if the GPU has finished that step when the
host looks (`maybe_pythonize` skips a step whose CUDA event has not fired); otherwise they are
processed when the round's last step waits for them. Which one happens depends on how far the
host runs ahead of the GPU; the replay takes the profile's per-step host time
(`host.decode_step_s`, 1.5 ms, Vidur's) as the time the host takes to issue each step.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from krakenlm.fileio import write_text_atomically
from krakenlm.serving.validation import load_runs, replay_run, score
from krakenlm.serving.vllm_v0 import V0Engine

SOURCE = "lambda_v060"
RULES = ("host", "round_end", "own_step")


def replay(run, runs, rule: str) -> dict[str, float]:
    """The run's TPOT mean and p99 (s) under one rule (`V0Engine.finish_rule`)."""
    saved = V0Engine.finish_rule
    V0Engine.finish_rule = rule
    try:
        _, summary = replay_run(run, runs)
    finally:
        V0Engine.finish_rule = saved
    scores = score(run, summary)
    return {k: scores[f"tpot_{k}"]["predicted"] for k in ("mean", "p99")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None, help="write the table here (atomically)")
    args = ap.parse_args(argv)
    runs = {r.id: r for r in load_runs()[1]}
    rows = []
    for run in (r for r in runs.values() if r.source == SOURCE):
        if len(run.prompt_tokens) > 20:
            continue  # the 160-prompt bursts prefill for long; their short requests wait for that
        if run.served_before:
            print(f"error: run {run.id} replays earlier runs first", file=sys.stderr)
            return 2
        steps = run.engine_options["num_scheduler_steps"]
        row = {"run": run.id, "system": run.system, "model": run.model, "tp": run.tp,
               "prompts": len(run.prompt_tokens),
               "shortest_output": min(o for o in run.output_tokens if o > 1),
               "gpu_step_ms": 1e3 * run.measured["itl_s"]["mean"] / steps,
               "measured": {k: run.measured["tpot_s"][k] for k in ("mean", "p99")}}
        for rule in RULES:
            row[rule] = replay(run, runs, rule)
        rows.append(row)
    rows.sort(key=lambda r: (r["model"], r["system"], r["tp"], r["prompts"]))

    def err(r, rule, k):
        return r[rule][k] / r["measured"][k] - 1

    print("| run | shortest output | GPU step ms | TPOT p99 ms: measured | host (the model) "
          "| round end | own step | TPOT mean error: host | round end | own step |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['run']} | {r['shortest_output']} | {r['gpu_step_ms']:.1f} "
              f"| {1e3 * r['measured']['p99']:.1f} | {1e3 * r['host']['p99']:.1f} "
              f"| {1e3 * r['round_end']['p99']:.1f} | {1e3 * r['own_step']['p99']:.1f} "
              f"| {100 * err(r, 'host', 'mean'):+.1f} % | {100 * err(r, 'round_end', 'mean'):+.1f} % "
              f"| {100 * err(r, 'own_step', 'mean'):+.1f} % |")
    summary = {}
    for model in sorted({r["model"] for r in rows}):
        sel = [r for r in rows if r["model"] == model]
        summary[model] = {
            f"{rule}_{k}": float(np.median([abs(err(r, rule, k)) for r in sel]))
            for rule in RULES for k in ("mean", "p99")}
        print(f"{model} ({len(sel)} runs), median |error| TPOT mean / p99: " + ", ".join(
            f"{rule} {100 * summary[model][rule + '_mean']:.1f} / "
            f"{100 * summary[model][rule + '_p99']:.1f} %" for rule in RULES))
    if args.json:
        write_text_atomically(args.json, json.dumps(
            {"command": "python benchmarks/serve_multi_step_finish.py --json " + args.json,
             "runs": rows, "medians_by_model": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
