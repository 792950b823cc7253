"""The host's time per step inside vLLM 0.6.0's multi-step rounds, against the batch: the source of
the `vllm-v0` profile's `host.multi_step_host_seq_s` (VMH).

    python benchmarks/vllm_v0_frontend/multi_step_host.py [--envs DIR] [--reps 3] [--json FILE]
    python benchmarks/vllm_v0_frontend/multi_step_host.py --from-json docs/data/vllm-v0-multi-step-host.json

vLLM 0.6.0 runs a multi-step round (`--num-scheduler-steps 10`) one engine step at a time: the
scheduler only at the round's start, but at every step the engine's loop, and in the model
runner the forward pass's launch, then the asynchronous output processor (`_process_model_outputs`: each sequence's token appended,
detokenised, its stop conditions checked) and the pythonizing of the earlier steps' outputs,
and only then the sampler's launch (vllm/worker/multi_step_model_runner.py of the 0.6.0 wheel:
`execute_model` -> `_async_process_outputs`; vllm/worker/model_runner.py: the callback runs
"right before sampler"). The host does not wait for the GPU inside a round (`wait_previous_step`
makes the stream wait on a CUDA event), so a step cannot be shorter than the host's work for it,
which grows with the batch; its part from the forward pass's launch to the sampler's is measured
here. This runs 0.6.0's own OpenAI server with LambdaLabs' flags and
`--num-scheduler-steps 10 --max-num-seqs 256` over the stand-in GPU of fake_executor.py, which
follows the runner's order in a round, with a GPU step of 0.5 ms (so the host sets the pace;
the engine process on core 0, the front end and the client on core 1),
and sends bursts of N requests of 32 prompt tokens and 120 output tokens (N = 10 to 256). Per
step it logs the launch and the host's time from the forward pass's launch to the sampler's;
a round's later steps (not its first, which schedules) run the batch the round started with,
and the time from one launch to the next is the step.

A second set of servers runs the same bursts with a GPU step of 12 ms: the host's work then
hides behind the GPU (the step is the GPU's time) up to the batch where it no longer fits.
They give the host's time to the sampler's launch per sequence, by least squares through the
origin over their later steps (`host_to_sampler_per_seq_s`, 34.3 us: the shipped floor until
stop 56). The shipped constant since stop 56 is the floor where it binds: the host's whole
cycle (launch to launch) per sequence over the later steps the host paced on the 0.5 ms
servers (longer than the stand-in's step by more than 5 %), through the origin
(`host_paced_per_seq_s`), which the replay takes as the floor of a later step
(serving/vllm_v0.py `_run_round`: the longer of the GPU's step and this x the batch). Those
steps also hold the rest of the engine's work in the round (its loop, the outputs the async
processor hands on), part of which lands between the later steps: they vary more from server
to server (at 256: 8.7 to 14.5 ms median) than the GPU-bound servers' host-to-sampler times. The figures are this
machine's CPU's; a server's own host may be faster or slower. The stand-in leaves out what
needs a GPU (the runner's own pythonizing, the input's broadcast to the other ranks,
`advance_step`).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run  # noqa: E402  (benchmarks/vllm_v0_frontend/run.py: the server, the client)
from krakenlm.fileio import write_text_atomically  # noqa: E402

VERSION = "0.6.0"
STEPS = 10
FLAGS = run.FLAGS + ["--num-scheduler-steps", str(STEPS), "--max-num-seqs", "256"]
BATCHES = (10, 40, 80, 160, 256)
PROMPT_TOKENS, OUTPUT_TOKENS = 32, 120
GPUS = {"host_bound": {"prefill_s": 0.002, "prefill_token_s": 1e-6, "decode_s": 0.0005,
                       "decode_seq_s": 0.0},
        "gpu_bound": {"prefill_s": 0.002, "prefill_token_s": 1e-6, "decode_s": 0.012,
                      "decode_seq_s": 0.0}}


def burst_files(work: Path) -> dict[str, Path]:
    """One prompts file per batch: N requests of PROMPT_TOKENS tokens, OUTPUT_TOKENS each."""
    sets = {}
    for n in BATCHES:
        path = work / f"n{n}.json"
        path.write_text(json.dumps({"prompts": run.prompt_texts([PROMPT_TOKENS] * n),
                                    "max_tokens": [OUTPUT_TOKENS] * n}))
        sets[f"n{n}"] = path
    return sets


def later_steps(steps: list[dict]) -> list[tuple[int, float, float]]:
    """(batch, step, host before the sampler's launch) of every later step of a round whose
    next step is in the same round: the time from its launch to the next launch."""
    out = []
    for step, following in zip(steps, steps[1:]):
        if step.get("step", 0) >= 1 and not step.get("last") and \
                following.get("step") == step["step"] + 1 and following["seqs"] == step["seqs"]:
            out.append((step["seqs"], following["t"] - step["t"], step["host_s"]))
    return out


def one_server(env: Path, work: Path, sets: dict, gpu: dict) -> dict[str, list]:
    """A fresh server over the stand-in `gpu`; per burst, its later steps."""
    log = work / "arrivals.jsonl"
    steps_log = Path(str(log) + ".steps")
    steps_log.write_text("")
    out = {}

    def serve(env, work, log):
        return run.serve(env, work, log, flags=FLAGS, step=gpu)

    # the client on core 1, beside the front end: the engine's core is its own, as on a server
    # whose clients are elsewhere
    client = functools.partial(run.client, core="1")
    for name, _, t0, end in run.burst_runs(env, work, sets, log, serve=serve, client=client):
        steps = [json.loads(x) for x in steps_log.read_text().splitlines()]
        steps = [s for s in steps if t0 <= s["t"] < end]
        out[name] = later_steps(steps)
    return out


def fit(rows: list[tuple[int, float, float]], column: int = 1) -> tuple[float, float]:
    """`column` of the rows (1: the step, 2: the host's time to the sampler's launch) =
    fixed + per sequence x batch, least squares: (fixed, per sequence)."""
    x = np.array([[1.0, r[0]] for r in rows])
    y = np.array([r[column] for r in rows])
    (fixed, per_seq), *_ = np.linalg.lstsq(x, y, rcond=None)
    return float(fixed), float(per_seq)


def per_sequence(rows: list[tuple[int, float, float]]) -> float:
    """The host's time to the sampler's launch per sequence of the batch, by least squares
    through the origin (the output processor's and the pythonizing's work is per sequence)."""
    n = np.array([r[0] for r in rows], dtype=float)
    y = np.array([r[2] for r in rows])
    return float(n @ y / (n @ n))


def host_paced_per_sequence(rows: list[tuple[int, float, float]], gpu_step_s: float) -> float:
    """The host's whole cycle per sequence of a later step where the host sets the pace: the
    steps (launch to launch) longer than the stand-in GPU's step by more than 5 %, by least
    squares through the origin. A later step cannot be shorter than this cycle, which is what
    the replay's floor needs; the GPU-bound servers measure only its part before the
    sampler's launch, in a regime where the floor does not bind."""
    paced = [r for r in rows if r[1] > 1.05 * gpu_step_s]
    n = np.array([r[0] for r in paced], dtype=float)
    y = np.array([r[1] for r in paced])
    return float(n @ y / (n @ n)) if len(paced) else float("nan")


def summarise(raw: dict) -> dict:
    """Per stand-in GPU: the median step and host time per batch over every server, the
    least-squares fits of the later steps and of the host's time to the sampler's launch, and
    the host's cycle per sequence on the steps it paced."""
    out = {}
    for gpu, servers in raw.items():
        rows = [r for server in servers for burst in server.values() for r in burst]
        table = {}
        for n in sorted({r[0] for r in rows}):
            mine = [r for r in rows if r[0] == n]
            table[str(n)] = {"steps": len(mine),
                             "step_s": statistics.median(r[1] for r in mine),
                             "host_to_sampler_s": statistics.median(r[2] for r in mine)}
        out[gpu] = {"by_batch": table,
                    "fit": dict(zip(("fixed_s", "per_seq_s"), fit(rows))),
                    "fit_host_to_sampler": dict(zip(("fixed_s", "per_seq_s"), fit(rows, 2))),
                    "host_to_sampler_per_seq_s": per_sequence(rows),
                    "host_paced_steps": sum(r[1] > 1.05 * GPUS[gpu]["decode_s"] for r in rows),
                    "host_paced_per_seq_s": host_paced_per_sequence(rows, GPUS[gpu]["decode_s"])}
    return out


def report(summary: dict) -> None:
    for gpu, s in summary.items():
        print(f"stand-in GPU {gpu} (decode {GPUS[gpu]['decode_s'] * 1e3:.1f} ms a step):")
        for n, row in s["by_batch"].items():
            print(f"  batch {int(n):4d}: step {row['step_s'] * 1e3:6.2f} ms  (host to the sampler's "
                  f"launch {row['host_to_sampler_s'] * 1e3:5.2f} ms; {row['steps']} steps)")
        f, h = s["fit"], s["fit_host_to_sampler"]
        print(f"  fit: step = {f['fixed_s'] * 1e3:.2f} ms + {f['per_seq_s'] * 1e6:.1f} us x batch; "
              f"host to the sampler's launch = {h['fixed_s'] * 1e3:.3f} ms + "
              f"{h['per_seq_s'] * 1e6:.1f} us x batch, through the origin "
              f"{s['host_to_sampler_per_seq_s'] * 1e6:.1f} us x batch; the steps the host paced "
              f"({s['host_paced_steps']}): {s['host_paced_per_seq_s'] * 1e6:.1f} us x batch")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", default="/tmp/krakenlm-vllm-v0",
                    help="the directory setup.sh built (vllm-0.6.0/)")
    ap.add_argument("--reps", type=int, default=3, help="fresh servers per stand-in GPU")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--from-json", help="summarise the servers of an earlier --json file again "
                    "(no servers are started; with --json, write the file with the new summary)")
    args = ap.parse_args(argv)
    if args.from_json:
        earlier, raw = run.read_earlier(args.from_json, "servers")
        summary = summarise(raw)
        report(summary)
        if args.json:  # the same servers' figures, summarised by this version of the script
            earlier.update(summarised_by="python benchmarks/vllm_v0_frontend/multi_step_host.py "
                           f"--from-json {args.from_json} --json {args.json}", **summary)
            write_text_atomically(args.json, json.dumps(earlier, indent=1) + "\n")
        return
    if args.reps < 1:
        run.fail(f"--reps {args.reps}: at least one server per stand-in GPU")
    env = run.environment(args.envs, VERSION)
    work = Path(tempfile.mkdtemp(prefix="vllm-multi-step-host-"))
    sets = burst_files(work)
    raw: dict[str, list] = {gpu: [] for gpu in GPUS}
    started = time.time()
    for rep in range(args.reps):
        for gpu, step in GPUS.items():
            raw[gpu].append(one_server(env, work, sets, step))
            print(f"rep {rep + 1}/{args.reps} {gpu} done ({time.time() - started:.0f} s)",
                  file=sys.stderr)
    summary = summarise(raw)
    report(summary)
    if args.json:
        out = {"command": "python benchmarks/vllm_v0_frontend/multi_step_host.py" +
               (f" --reps {args.reps}" if args.reps != 3 else "") + f" --json {args.json}",
               "cpu": run.cpu_name(), "vllm": VERSION, "server_flags": FLAGS,
               "stand_in_gpus": GPUS, "burst": {"prompt_tokens": PROMPT_TOKENS,
                                               "output_tokens": OUTPUT_TOKENS,
                                               "batches": list(BATCHES)},
               **summary, "servers": raw}
        write_text_atomically(args.json, json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
