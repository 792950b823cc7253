"""vLLM 0.5.4's spread hand-over against the clump of 0.5.5 and later, on the `lambda` runs.

    python benchmarks/serve_v0_spread.py [--json docs/data/serve-v0-spread.json]

vLLM 0.5.4's front-end process runs every request's handler before any request's send to the
engine, and the engine starts on the first request that arrives (serving/frontend.py
`front_loop_arrivals`, `frontend.front_loop_*`; measured with 0.5.4's own server code by
benchmarks/vllm_v0_frontend/run.py). From 0.5.5 one proxy task forwards the sends after the
handlers, so a burst reaches the engine in one clump, the engine-loop form
(`frontend.engine_loop_*`, serving/vllm_v0.py). The `lambda` runs (vLLM 0.5.4 bursts of 10, 20
and 160 prompts, TP 1-8, one H100 and one A100 server) name their engine version, so the
replay takes the spread form; this replays each run both ways, client-side as
benchmarks/serve_validation.py does, and prints the median |TTFT mean error| overall and per
server. The clump column is how the replay served these runs at stop 50. Both forms replay
with the profile's own host times (no server's host time scale, `replay_run(scale=1.0)`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics

from krakenlm.fileio import write_text_atomically
from krakenlm.serving.validation import load_runs, replay_run, score


def ttft_errors(run, by_id) -> dict[str, float]:
    """The run's signed TTFT mean error in the spread form (its own engine version) and in
    the clump form (no engine version)."""
    clump = dataclasses.replace(run, engine_version=None)
    return {form: score(r, replay_run(r, by_id, scale=1.0)[1])["ttft_mean"]["bias"]
            for form, r in (("spread", run), ("clump", clump))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    _, runs = load_runs()
    by_id = {r.id: r for r in runs}
    rows = [{"id": r.id, "server": r.system.split("-")[0], **ttft_errors(r, by_id)}
            for r in runs if r.source == "lambda"]
    out = {"median_abs_ttft_mean": {}, "rows": rows}
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
