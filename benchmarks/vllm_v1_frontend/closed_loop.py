"""A closed loop through vLLM V1's own server against the replay on the same stand-in GPU: does
the replay reproduce the client's TTFT?

    python benchmarks/vllm_v1_frontend/closed_loop.py [--envs DIR] [--json FILE]
        [--prompt TOKENS] [--token-s SECONDS] [--loops 1:30,10:200,...]
    python benchmarks/vllm_v1_frontend/closed_loop.py --from-json docs/data/vllm-v1-closed-loop.json

A client like `vllm bench serve --max-concurrency N` (`closed.py`: every request created at once,
a semaphore of N around each streaming request) sends 128-token prompts with 128 output tokens
(`ignore_eos`) to vLLM 0.19's server over the stand-in executor, whose steps take 11 ms + 25 us
a token (about a 70B model's on 8 H100s), at 1, 10, 25 and 50 in flight (`--prompt`,
`--token-s` and `--loops` change the prompt, the per-token time and the loops; 1 in flight is
always run first, it sets the front end's time). Then the replay serves
the same closed loops through vLLM V1's scheduler (serial steps: the stand-in does not schedule
asynchronously) with a step timer that charges the same GPU times plus the median host gap the
server's engine core left between its steps, client-side, with the profile's front end set from
this server (`request_s`: the client's TTFT at 1 in flight less its prefill step, the
prompt's way in included), twice: without the front end's own loop (each request handed over
request_s after its send, the replay until stop 51) and as the shipped `vllm` profile hands
requests over, through that loop (serving/frontend.py `FrontLoop`: handlers, then hand-overs,
one job at a time, with the times handover.py fitted to this server's bursts).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import handover  # noqa: E402  (this directory's: the server and the V0 harness's helpers)
from replay_stand_in import StandInTimer as V0StandInTimer  # noqa: E402  (the V0 harness's)
from krakenlm.fileio import write_text_atomically  # noqa: E402
from krakenlm.models import get_preset  # noqa: E402
from krakenlm.serving import replay  # noqa: E402
from krakenlm.serving.traces import Request, Trace  # noqa: E402
from krakenlm.serving.vllm_v1 import V1Options  # noqa: E402
from krakenlm.simulator.constants.software import load_software  # noqa: E402

ROOT = HERE.parent.parent
STEP = {"prefill_s": 0.011, "prefill_token_s": 2.5e-5, "decode_s": 0.011, "decode_seq_s": 2.5e-5}
PROMPT, OUTPUT = 128, 128
LOOPS = {1: 30, 10: 200, 25: 300, 50: 400}  # in flight -> requests


def fake_gpu(token_s: float) -> dict[str, float]:
    """The stand-in GPU's step times with `token_s` seconds a token (STEP's form)."""
    return dict(STEP, prefill_token_s=token_s, decode_seq_s=token_s)


def run_loop(env: Path, work: Path, n: int, count: int, prompt: int = PROMPT,
             step: dict = STEP, client_core: str = "0") -> dict:
    """One closed loop on a fresh server: each request's client TTFT, and the steps' host gaps.
    The client runs on `client_core` (0: beside the engine core; 1: beside the API server)."""
    log = work / f"c{n}.jsonl"
    log.write_text("")
    prompts = work / f"c{n}.prompts.json"
    prompts.write_text(json.dumps({"prompts": handover.v0.prompt_texts([prompt] * count),
                                   "max_tokens": [OUTPUT] * count}))
    proc = handover.serve(env, work, log, step)
    try:
        result = work / f"c{n}.result.json"
        done = subprocess.run(["taskset", "-c", client_core, str(env / "bin/python"),
                               str(HERE / "closed.py"),
                               str(handover.PORT), str(work / "model"), str(prompts), str(n),
                               str(result)], stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            handover.v0.fail(f"the closed-loop client failed; see {work}/server.log")
        r = json.loads(result.read_text())
        steps = [json.loads(line) for line in Path(str(log) + ".steps").read_text().splitlines()]
    finally:
        handover.v0.stop(proc)
    gaps = [b["t"] - (a["t"] + a["gpu_s"]) for a, b in zip(steps, steps[1:])]
    prefills = collections.Counter(s["prompt_tokens"] for s in steps if s["prompt_tokens"])
    return {"ttfts_s": [x["ttft"] for x in r["requests"]],
            "host_gap_s": statistics.median(g for g in gaps if 0 <= g <= 0.1),
            # how the engine core grouped the prompts: steps per number of prompt tokens
            "prefill_steps": {str(k): v for k, v in sorted(prefills.items())}}


class StandInTimer(V0StandInTimer):
    """The replay's step time as this stand-in GPU times a step (11 ms + 25 us a token, or
    `step`'s: its formula depends on the tokens only), plus one host gap after every step."""

    def __init__(self, gap_s: float, step: dict = STEP):
        super().__init__({"prefill": [gap_s, 0.0, 0], "decode": [gap_s, 0.0, 0]})
        self.step = step

    def step_s(self, tokens: int, sequences: int, logits: int, attention_s: float,
               prefill: bool, attention_bound: str | None = None, host: bool = True) -> float:
        gap_s = self.gaps["decode"][0]
        return self.step["prefill_s"] + self.step["prefill_token_s"] * tokens + \
            (gap_s if host else 0.0)


def replay_loop(n: int, count: int, gap_s: float, request_s: float,
                front_loop: bool = True, prompt: int = PROMPT,
                step: dict = STEP) -> list[float]:
    """The replay's client TTFTs of the same closed loop (module docstring), through the
    profile's front-end loop or (`front_loop` False) without it."""
    profile = load_software("vllm")
    no_loop = {} if front_loop else {"front_loop_request_s": 0.0, "front_loop_token_s": 0.0,
                                     "front_loop_send_s": 0.0}
    profile = dataclasses.replace(profile, frontend=dataclasses.replace(
        profile.frontend, request_s=request_s, per_prompt_token_s=0.0, **no_loop))
    trace = Trace("closed", tuple(Request(i, 0.0, prompt, OUTPUT) for i in range(count)))
    timer = StandInTimer(gap_s, step)
    original = replay._step_timer
    replay._step_timer = lambda *args, **kwargs: timer
    try:
        report = replay.serve(trace, get_preset("llama3-8b"), "h100-80gb-x8", software=profile,
                              tp=1, model_name="stand-in", client_side=True,
                              options=V1Options(8192, 1024, async_scheduling=False),
                              max_concurrency=n)
    finally:
        replay._step_timer = original
    return [r["ttft_s"] for r in report.rows]


def stats(ttfts: list[float]) -> dict[str, float]:
    t = np.array(ttfts)
    return {"mean_s": float(t.mean()), "p50_s": float(np.median(t)), "p99_s": float(np.percentile(t, 99))}


def compare(loops: dict, prompt: int = PROMPT, step: dict = STEP) -> dict:
    """Per loop: the server's TTFT statistics and the replay's, without the front end's loop
    and as shipped."""
    one = loops["1"]
    gap = one["host_gap_s"]
    request_s = float(np.mean(one["ttfts_s"])) - (step["prefill_s"] + step["prefill_token_s"] *
                                                  prompt + gap)
    out = {"request_s": request_s, "loops": {}}
    for n, loop in loops.items():
        count = len(loop["ttfts_s"])
        args = (int(n), count, loop["host_gap_s"], request_s)
        out["loops"][n] = {
            "server": stats(loop["ttfts_s"]),
            "replay_without_loop": stats(replay_loop(*args, front_loop=False, prompt=prompt,
                                                     step=step)),
            "replay": stats(replay_loop(*args, prompt=prompt, step=step))}
    return out


def parse_loops(text: str) -> dict[int, int]:
    """`--loops` ("10:200,25:300": in flight:requests) with 1 in flight first."""
    try:
        loops = {int(a): int(b) for a, b in (item.split(":") for item in text.split(","))}
    except ValueError:
        handover.v0.fail(f"--loops {text!r}: not in-flight:requests pairs like 10:200,25:300")
    if any(n < 1 or c < n for n, c in loops.items()):
        handover.v0.fail(f"--loops {text!r}: each needs at least 1 in flight and as many requests")
    return {1: loops.pop(1, LOOPS[1]), **loops}


def report(result: dict) -> None:
    print(f"front end from 1 in flight: request_s {result['request_s']*1e3:.1f} ms")
    print(f"{'in flight':>9s}  {'server TTFT mean/p50/p99':>24s}  {'without loop':>14s}  "
          f"{'error':>7s}  {'shipped':>14s}  {'error':>7s}")
    for n, row in result["loops"].items():
        cells = ["/".join(f"{row[k][s]*1e3:.0f}" for s in ("mean_s", "p50_s", "p99_s"))
                 for k in ("server", "replay_without_loop", "replay")]
        errors = [100 * (row[k]["mean_s"] / row["server"]["mean_s"] - 1)
                  for k in ("replay_without_loop", "replay")]
        print(f"{n:>9s}  {cells[0]:>24s}  {cells[1]:>14s}  {errors[0]:+6.1f}%  {cells[2]:>14s}  "
              f"{errors[1]:+6.1f}% (ms)")


def main(argv: list[str] | None = None) -> None:
    ap = handover.arg_parser(__doc__)
    ap.add_argument("--json")
    ap.add_argument("--from-json", help="compare the loops of an earlier --json file again")
    ap.add_argument("--prompt", type=int, default=PROMPT, help="prompt tokens of every request")
    ap.add_argument("--token-s", type=float, default=STEP["prefill_token_s"],
                    help="the stand-in GPU's seconds a token (prompt and decode alike)")
    ap.add_argument("--loops", default=",".join(f"{n}:{c}" for n, c in LOOPS.items()),
                    help="in-flight:requests pairs")
    args = ap.parse_args(argv)
    if args.from_json:
        try:
            data = json.loads(Path(args.from_json).read_text())
            loops, step, prompt = data["loops"], data["fake_gpu"], data.get("prompt", PROMPT)
        except (OSError, ValueError, KeyError, TypeError) as e:
            handover.v0.fail(f"{args.from_json}: not a file this script wrote ({e})")
        report(compare(loops, prompt, step))
        return
    if args.prompt < 1 or not args.token_s > 0:
        handover.v0.fail("--prompt must be at least 1 and --token-s above 0")
    plan, step = parse_loops(args.loops), fake_gpu(args.token_s)
    env = handover.environment(args.envs)
    work = Path(tempfile.mkdtemp(prefix="vllm-v1-closed-"))
    loops = {}
    for n, count in plan.items():
        loops[str(n)] = run_loop(env, work, n, count, args.prompt, step)
        print(f"{n} in flight done", file=sys.stderr)
        time.sleep(2)
    result = compare(loops, args.prompt, step)
    report(result)
    if args.json:
        named = (("--prompt", args.prompt), ("--token-s", args.token_s), ("--loops", args.loops))
        command = "python benchmarks/vllm_v1_frontend/closed_loop.py" + "".join(
            f" {flag} {value}" for flag, value in named if argv_has(argv, flag)) + \
            f" --json {args.json}"
        write_text_atomically(args.json, json.dumps(
            {"command": command, "cpu": handover.v0.cpu_name(), "vllm": handover.VERSION,
             "fake_gpu": step, "prompt": args.prompt, "server_flags": handover.FLAGS,
             "comparison": result, "loops": loops}, indent=1) + "\n")


def argv_has(argv: list[str] | None, flag: str) -> bool:
    """Whether the command line named `flag` (so the recorded command repeats it)."""
    return any(a == flag or a.startswith(flag + "=") for a in (sys.argv[1:] if argv is None
                                                                else argv))

if __name__ == "__main__":
    main()
