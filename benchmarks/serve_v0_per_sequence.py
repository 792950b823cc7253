"""Whether one per-sequence host cost of vLLM V0 can explain both V0 serving sources: a what-if
of the `vllm-v0` profile's `host.per_sequence_s`, not a fit.

    python benchmarks/serve_v0_per_sequence.py [--per-sequence-ms 0.1,0.2,0.3,0.4]
                                               [--json docs/data/serve-v0-per-sequence.json]

`vllm_pr6883` (V0 of July 2024 with chunked prefill, 10 requests/s of 550 + 150 tokens on one
H100) is 5-16x faster in the replay than measured; vLLM's v0.6.0 blog says the v0.5.3 server
spent 62 % of its time on host work for that model and GPU. A larger per-sequence cost per step
is the obvious candidate. This script replays, client-side as `serve_validation.py` does (arrival
seed 0), the `vllm_pr6883` runs and the `lambda` runs at TP 1 (vLLM 0.5.4 bursts of 10, 20 and
160 prompts on the H100 and A100 80GB servers, without chunked prefill) with the profile's
per-sequence cost replaced by each value of the grid (0.1 ms is the shipped one, vLLM #6913),
and prints the TTFT and TPOT mean errors of each run. A value that fits one source and breaks the
other is not a mechanism both share. Every replay uses the profile's own host times (no
server's host time scale, `replay_run(scale=1.0)`), as when this study was made.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from krakenlm.fileio import write_text_atomically
from krakenlm.serving.validation import load_runs, replay_run, score
from krakenlm.simulator.constants.software import load_software

SOURCES = ("vllm_pr6883", "lambda")


def measured_load(runs_by_id: dict, profile) -> list[dict]:
    """For each `vllm_pr6883` run: the requests its server held at once by Little's law (rate x
    (TTFT + (output - 1) x TPOT), from the measured means) and the step-time oracle's step at
    that many decodes (KV at prompt + half the output), alone and with the rest of the
    chunked-prefill budget as one prompt chunk: whether the replay's short TPOT is only the
    queue's feedback or also a short step."""
    from krakenlm.models import get_preset
    from krakenlm.serving.step_time import StepTimer
    from krakenlm.simulator import Simulator

    out = []
    for run in (r for r in runs_by_id.values() if r.source == "vllm_pr6883"):
        ttft, tpot = run.measured["ttft_s"]["mean"], run.measured["tpot_s"]["mean"]
        output, prompt = run.output_tokens[0], run.prompt_tokens[0]
        n = round(run.rate_per_s * (ttft + (output - 1) * tpot))
        budget = run.engine_options["max_num_batched_tokens"]
        timer = StepTimer(Simulator(run.system, profile), get_preset(run.model), run.tp,
                          max_tokens=budget, max_sequences=max(n, 1),
                          max_context=prompt + output)
        kv = [prompt + output // 2] * n
        out.append({"run": run.id, "requests_in_flight": n, "chunk_tokens": budget - n,
                    "decode_step_s": timer.batch_s([], kv),
                    "mixed_step_s": timer.batch_s([(budget - n, 0)], kv, logits=n),
                    "measured_tpot_s": tpot})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-sequence-ms", default="0.1,0.2,0.3,0.4")
    ap.add_argument("--json", default=None, help="write the table here (atomically)")
    args = ap.parse_args(argv)
    try:
        grid_ms = [float(x) for x in args.per_sequence_ms.split(",")]
    except ValueError:
        print(f"error: --per-sequence-ms {args.per_sequence_ms!r} is not a comma-separated list "
              "of milliseconds", file=sys.stderr)
        return 2
    if not grid_ms or min(grid_ms) < 0:
        print("error: --per-sequence-ms needs values of at least 0", file=sys.stderr)
        return 2
    runs_by_id = {r.id: r for r in load_runs()[1]}
    runs = [r for r in runs_by_id.values() if r.source in SOURCES and r.tp == 1]
    profile = load_software("vllm-v0")
    table = []
    for ms in grid_ms:
        what_if = dataclasses.replace(profile, host=dataclasses.replace(
            profile.host, per_sequence_s=ms / 1000))
        for run in runs:
            _, summary = replay_run(run, runs_by_id, seed=0, software=what_if, scale=1.0)
            scores = score(run, summary)
            row = {"per_sequence_ms": ms, "run": run.id, "source": run.source}
            for metric in ("ttft_mean", "tpot_mean"):
                row[f"{metric}_signed_pct"] = round(100 * scores[metric]["bias"], 1)
            table.append(row)
            print(f"{ms:5.2f} ms  {run.id:46s} TTFT mean {row['ttft_mean_signed_pct']:+7.1f} %"
                  f"   TPOT mean {row['tpot_mean_signed_pct']:+7.1f} %")
    load = measured_load(runs_by_id, profile)
    for row in load:
        print(f"{row['run']}: {row['requests_in_flight']:.0f} requests in flight by Little's law;"
              f" the oracle's step there: {1e3 * row['decode_step_s']:.1f} ms of decodes alone,"
              f" {1e3 * row['mixed_step_s']:.1f} ms with a {row['chunk_tokens']}-token prompt "
              f"chunk (measured TPOT {1e3 * row['measured_tpot_s']:.2f} ms)")
    if args.json:
        command = "python benchmarks/serve_v0_per_sequence.py --per-sequence-ms " + \
            ",".join(f"{x:g}" for x in grid_ms) + f" --json {args.json}"
        write_text_atomically(args.json, json.dumps({"command": command, "seed": 0,
                                                     "rows": table, "measured_load": load},
                                                    indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
