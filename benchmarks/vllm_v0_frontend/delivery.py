"""Whether a burst's first tokens wait for vLLM 0.5.4's front end: its own server's client TTFTs
against the engine's first tokens, with and without the front-loop delivery rule.

    python benchmarks/vllm_v0_frontend/delivery.py [--envs DIR] [--reps 3] [--json FILE]
    python benchmarks/vllm_v0_frontend/delivery.py --from-json docs/data/vllm-v0-delivery.json

vLLM 0.5.4's front-end process runs every request's handler and then its send to the engine
process as jobs of one event loop, in the order they became ready (serving/frontend.py); the
engine starts on the first request that arrives. A first token the engine makes while that loop
still has sends queued reaches the client only when the loop gets to it, behind them. This runs
0.5.4's own server over the stand-in GPU of run.py (same flags and bursts; `--envs` as there),
logs each step of the engine (start, stand-in GPU time, prompts in it) and each request's
arrival at the engine, and compares, per burst, the client's mean TTFT with

* the engine's: each request's first token at the end of the step that prefilled it (the
  engine prefills in arrival order, so the k-th arrival's prompt is in the step that holds the
  k-th prompt), timed from the burst's send;
* the same through the front end's loop (`through_front_loop`), with the loop's jobs as the
  shipped profile's constants (`vllm-v0` `frontend.front_loop_*`) schedule the burst's prompts.

The shipped constants were fitted on run.py's arrivals, not on these TTFTs; nothing is fitted
here. Medians over `--reps` fresh servers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run  # noqa: E402  (benchmarks/vllm_v0_frontend/run.py: the server, the client, the bursts)
from krakenlm.fileio import write_text_atomically  # noqa: E402
from krakenlm.serving.frontend import front_loop_schedule  # noqa: E402
from krakenlm.simulator.constants.software import load_software  # noqa: E402

VERSION = "0.5.4"
DECODE_SEQ_S = run.STEP.get("decode_seq_s", 2e-5)  # fake_executor.step_s's default


def host_gaps(steps_of_bursts: list[list[dict]]) -> dict[str, list[float]]:
    """The engine's host time between its steps: [fixed, per sequence, steps] of the gap
    between a logged step's end and the next step's start, by least squares over the bursts'
    steps, for prefill steps (per prompt) and decode steps (per sequence, from the stand-in's
    decode time); gaps over 0.1 s (between bursts) left out."""
    rows: dict[str, list[tuple[int, float]]] = {"prefill": [], "decode": []}
    for steps in steps_of_bursts:
        for step, following in zip(steps, steps[1:]):
            gap = following["t"] - (step["t"] + step["gpu_s"])
            if not 0 <= gap <= 0.1:
                continue
            if step["prompts"]:
                rows["prefill"].append((step["prompts"], gap))
            else:
                seqs = round((step["gpu_s"] - run.STEP["decode_s"]) / DECODE_SEQ_S)
                rows["decode"].append((seqs, gap))
    out = {}
    for kind, pairs in rows.items():
        x = np.array([[1.0, n] for n, _ in pairs])
        (fixed, per), *_ = np.linalg.lstsq(x, np.array([g for _, g in pairs]), rcond=None)
        out[kind] = [float(fixed), float(per), len(pairs)]
    return out


def first_token_s(steps: list[dict], arrivals: int) -> list[float]:
    """The end of the step that prefilled each of the first `arrivals` requests to arrive
    (steps: {"t", "gpu_s", "prompts"}, times from the burst's send, in order)."""
    ends = []
    for step in steps:
        ends += [step["t"] + step["gpu_s"]] * step["prompts"]
    return ends[:arrivals]


def through_front_loop(times_s: np.ndarray, ready_s: np.ndarray,
                       done_s: np.ndarray) -> np.ndarray:
    """When tokens the engine hands out at `times_s` reach the client if each waits, on the
    front end's loop, for every job that became ready before it (jobs in the order served,
    ready at `ready_s`, ended at `done_s`)."""
    k = np.searchsorted(ready_s, times_s, side="right") - 1
    busy = np.where(k >= 0, done_s[np.maximum(k, 0)], -np.inf)
    return np.maximum(times_s, busy)


def predict(burst: dict, prompts: list[int]) -> dict[str, float]:
    """The engine's and the front-loop rule's mean TTFT of one logged burst (module
    docstring); `prompts`: the burst's prompt tokens in send order."""
    engine = np.array(first_token_s(burst["steps"], len(burst["ttfts_s"])))
    front = load_software("vllm-v0").frontend.at_version(VERSION)
    _, ready, done = front_loop_schedule([0.0] * len(prompts), prompts, front)
    return {"engine_s": float(engine.mean()),
            "through_front_loop_s": float(through_front_loop(engine, ready, done).mean()),
            "client_s": float(np.mean(burst["ttfts_s"]))}


def one_server(env: Path, work: Path, sets: dict) -> dict[str, dict]:
    """Every burst of `sets` on a fresh 0.5.4 server: arrivals, the steps that prefilled
    prompts and the client's TTFTs, and (under "host_gaps") the engine's host time between
    steps over all its bursts (`host_gaps`)."""
    log = work / "arrivals.jsonl"
    steps_log = Path(str(log) + ".steps")
    steps_log.write_text("")
    out, every_step = {}, []
    for name, r, t0, end in run.burst_runs(env, work, sets, log):
        steps = [json.loads(line) for line in steps_log.read_text().splitlines()]
        steps = [{"t": s["t"] - t0, "gpu_s": s["gpu_s"], "prompts": s["prompts"]}
                 for s in steps if t0 <= s["t"] < end]
        every_step.append(steps)
        out[name] = {"arrivals_s": run.arrivals(log, t0, end).tolist(),
                     "steps": [s for s in steps if s["prompts"]],  # the prefill steps
                     "ttfts_s": run.streamed_ttfts(r)}
    out["host_gaps"] = host_gaps(every_step)
    return out


def table(raw: list[dict], lengths: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    """Per burst, the medians over the servers of `predict`."""
    out = {}
    for name in lengths:
        figs = [predict(server[name], lengths[name]) for server in raw]
        out[name] = {k: statistics.median(f[k] for f in figs) for k in figs[0]}
    return out


def pooled_gaps(raw: list[dict]) -> dict[str, list[float]]:
    """The servers' host-gap lines, each coefficient the median over the servers, with the
    steps they rest on in all."""
    return {kind: [statistics.median(server["host_gaps"][kind][i] for server in raw)
                   for i in (0, 1)] + [sum(server["host_gaps"][kind][2] for server in raw)]
            for kind in ("prefill", "decode")}


def report(medians: dict[str, dict[str, float]]) -> None:
    print(f"vLLM {VERSION}'s own server, mean TTFT of each burst (ms; median over servers):")
    print(f"{'burst':12s} {'client':>8s} {'engine':>8s} {'err':>7s} {'+front loop':>11s} {'err':>7s}")
    for name, f in medians.items():
        c = f["client_s"]
        print(f"{name:12s} {c*1e3:8.1f} {f['engine_s']*1e3:8.1f} "
              f"{100*(f['engine_s']/c-1):+6.1f}% {f['through_front_loop_s']*1e3:11.1f} "
              f"{100*(f['through_front_loop_s']/c-1):+6.1f}%")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", default="/tmp/krakenlm-vllm-v0",
                    help="the directory setup.sh built (its vllm-0.5.4/ is used)")
    ap.add_argument("--reps", type=int, default=3, help="fresh servers")
    ap.add_argument("--json", help="write the logged bursts and the comparison here")
    ap.add_argument("--from-json", help="compare the bursts of an earlier --json file again")
    args = ap.parse_args(argv)
    lengths = {name: list(p) for name, (p, _) in run.bursts().items()}
    if args.from_json:
        try:
            raw = json.loads(Path(args.from_json).read_text())["servers"]
            report(table(raw, lengths))
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            run.fail(f"{args.from_json}: not a file this script wrote ({e})")
        return
    if args.reps < 1:
        run.fail(f"--reps {args.reps}: at least one server")
    env = run.environment(args.envs, VERSION)
    work = Path(tempfile.mkdtemp(prefix="vllm-v0-delivery-"))
    sets = run.burst_files(work)
    raw = []
    for rep in range(args.reps):
        raw.append(one_server(env, work, sets))
        print(f"server {rep + 1}/{args.reps} done", file=sys.stderr)
    medians = table(raw, lengths)
    report(medians)
    if args.json:
        out = {"command": "python benchmarks/vllm_v0_frontend/delivery.py" +
               (f" --reps {args.reps}" if args.reps != 3 else "") + f" --json {args.json}",
               "cpu": run.cpu_name(), "fake_gpu": run.STEP, "server_flags": run.FLAGS,
               "medians": medians, "host_gaps": pooled_gaps(raw), "servers": raw}
        write_text_atomically(args.json, json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
