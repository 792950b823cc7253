"""The serving simulator's pure-decode step against public engine decode-progress logs.

    python benchmarks/serve_step_logs.py [--json docs/data/serve-step-logs.json]

Each entry of `serving/data/step_logs.json` (sources in `serving/data/SOURCES.md`, section
step_logs) is two consecutive `Decode batch` lines of an SGLang server with nothing queued and
no prefill between them: the measured step is N / X (mean running requests over the decode
throughput of the interval). The prediction is the step-time oracle's pure-decode step at that
batch and mean KV length (`serving.step_logs.predict`: `StepTimer.batch_s([], [T // N] * N)`,
the engine's software profile, decode CUDA graphs as the lines report). Printed per entry: the
measured and predicted step, their ratio and error, the predicted step at the same batch with
one KV token a request (what does not grow with the KV cache) and the predicted decode
attention (all layers); then the mean absolute and the mean signed error, and, for entries of
one setup and batch at different KV lengths, the measured and predicted step growth per KV
token. Nothing is fitted: the lines are scored only.
"""

from __future__ import annotations

import argparse
import json
from itertools import combinations
from pathlib import Path

from krakenlm.fileio import write_text_atomically
from krakenlm.models import get_preset
from krakenlm.serving.step_logs import (load_logs, predict, relative_error, timer_bounds,
                                        timer_for)

COMMAND = "python benchmarks/serve_step_logs.py --json docs/data/serve-step-logs.json"


def _setup(log) -> tuple:
    return (log.engine, log.engine_version, log.system, log.model, log.dtype, log.tp,
            log.cuda_graph)


def score() -> dict:
    """Every log's measured and predicted step, the overall errors and the KV slopes."""
    logs = load_logs()
    timers: dict[tuple, object] = {}
    rows = []
    for log in logs:
        key = _setup(log) + tuple(sorted(timer_bounds(log).items()))
        if key not in timers:  # one oracle per setup and tabulation (its build is the cost)
            timers[key] = timer_for(log)
        timer = timers[key]
        predicted = predict(log, timer)
        layers = get_preset(log.model).n_layers
        rows.append({
            "id": log.id, "system": log.system, "model": log.model, "tp": log.tp,
            "running_requests": log.running_requests, "kv_tokens": log.kv_tokens,
            "kv_per_request": log.kv_per_request, "cuda_graph": log.cuda_graph,
            "measured_step_s": log.measured_step_s, "predicted_step_s": predicted,
            "ratio": predicted / log.measured_step_s,
            "relative_error": relative_error(predicted, log),
            "predicted_kv1_step_s": timer.batch_s([], [1] * log.batch),
            "predicted_attention_s": layers * timer.decode_attention_s(log.batch,
                                                                       log.kv_per_request)})
    errors = [r["relative_error"] for r in rows]
    slopes = []
    for a, b in combinations(range(len(logs)), 2):
        la, lb = logs[a], logs[b]
        if _setup(la) != _setup(lb) or la.batch != lb.batch or la.kv_tokens == lb.kv_tokens:
            continue
        kv = lb.kv_tokens - la.kv_tokens
        slopes.append({
            "ids": [la.id, lb.id], "kv_tokens_added": kv,
            "measured_s_per_kv_token": (lb.measured_step_s - la.measured_step_s) / kv,
            "predicted_s_per_kv_token":
                (rows[b]["predicted_step_s"] - rows[a]["predicted_step_s"]) / kv})
    return {"command": COMMAND, "logs": rows,
            "mean_absolute_error": sum(abs(e) for e in errors) / len(errors),
            "mean_signed_error": sum(errors) / len(errors), "kv_slopes": slopes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the scores to this file")
    args = parser.parse_args()
    out = score()
    print(f"{'log':52s} {'N':>5s} {'KV/req':>6s} {'measured':>9s} {'predicted':>9s} "
          f"{'ratio':>6s} {'error':>7s} {'at KV 1':>8s} {'attention':>9s}")
    for r in out["logs"]:
        print(f"{r['id']:52s} {r['running_requests']:5g} {r['kv_per_request']:6d} "
              f"{1e3 * r['measured_step_s']:7.2f}ms {1e3 * r['predicted_step_s']:7.2f}ms "
              f"{r['ratio']:6.3f} {100 * r['relative_error']:+6.1f}% "
              f"{1e3 * r['predicted_kv1_step_s']:6.2f}ms {1e3 * r['predicted_attention_s']:7.3f}ms")
    print(f"{len(out['logs'])} logs: mean |error| {100 * out['mean_absolute_error']:.1f} %, "
          f"mean signed error {100 * out['mean_signed_error']:+.1f} % "
          "(positive: the simulator is slower than the engine)")
    for s in out["kv_slopes"]:
        print(f"step growth over {s['kv_tokens_added']:g} KV tokens ({s['ids'][0]} -> "
              f"{s['ids'][1]}): measured {1e9 * s['measured_s_per_kv_token']:.1f} ns, "
              f"predicted {1e9 * s['predicted_s_per_kv_token']:.1f} ns per KV token")
    if args.json:
        write_text_atomically(Path(args.json), json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
