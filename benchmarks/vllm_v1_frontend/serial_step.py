"""The host time vLLM V1's engine core spends between two steps when it steps serially (no
asynchronous scheduling), measured with vLLM 0.19's own engine core over a stand-in GPU.

    bash benchmarks/vllm_v1_frontend/setup.sh              # once: vLLM 0.19.0 (PyPI)
    python benchmarks/vllm_v1_frontend/serial_step.py [--envs DIR] [--json FILE]
    python benchmarks/vllm_v1_frontend/serial_step.py --from-json docs/data/vllm-v1-serial-step.json

Without asynchronous scheduling (vLLM V1 0.8-0.13 by default; `--no-async-scheduling` later)
`EngineCore.step` schedules a batch, runs it and then takes its output
(`scheduler.update_from_output`, the outputs sent to the API server) before it schedules the
next: that host work lies between two GPU steps. `fake_executor.FakeExecutor` stands in for
the GPU (each step sleeps a modelled time and logs when it started and how many sequences it
held), so the time from one step's end to the next step's start is the engine core's own work
on this machine's CPU. Closed loops (`closed_loop.run_loop`: 128-token prompts, 128 output
tokens, N requests in flight) at N = 1 to 256 give decode steps of 1 to 256 sequences; the
gaps after the decode-only steps followed by another decode-only step are fitted by least
squares to a + b x sequences (the per-step and per-sequence host time of a serial V1 step).

What this leaves out (so a lower bound of a real server's serial step): the executor's
hand-over to its workers (a multi-GPU server's `MultiprocExecutor` broadcasts the scheduler's
output to every rank through shared memory) and the workers' own input preparation before the
forward pass (`GPUModelRunner._update_states` / `_prepare_inputs`), which the stand-in skips.
The figures are this machine's CPU's. The engine core has core 0 to itself; the API server and
the client share core 1 (a client beside the engine core, as closed_loop.py runs it, takes
its CPU time from the engine core's gaps once hundreds of streams are open).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import closed_loop  # noqa: E402  (this directory's closed loops over the stand-in GPU)
import handover  # noqa: E402
from krakenlm.fileio import write_text_atomically  # noqa: E402

LOOPS = {1: 24, 8: 64, 32: 128, 64: 192, 128: 384, 256: 768}  # in flight -> requests


def loop_steps(env: Path, work: Path, n: int, count: int) -> list[dict]:
    """One closed loop on a fresh server: every step's log line (start, sequences, prompt
    tokens, modelled GPU time)."""
    closed_loop.run_loop(env, work, n, count, client_core="1")
    log = work / f"c{n}.jsonl.steps"
    return [json.loads(line) for line in log.read_text().splitlines()]


def decode_gaps(steps: list[dict]) -> list[tuple[int, float]]:
    """(sequences, host gap) after each decode-only step whose successor is decode-only too:
    the engine core's update of that step's output and its scheduling of the next."""
    return [(a["seqs"], b["t"] - (a["t"] + a["gpu_s"])) for a, b in zip(steps, steps[1:])
            if not a["prompt_tokens"] and not b["prompt_tokens"]]


def fit(loops: dict[str, list[list[float]]]) -> dict[str, float]:
    """Least squares of the gap on a + b x sequences over every loop's decode gaps (gaps over
    0.1 s, a descheduled process, left out)."""
    pairs = [(s, g) for gaps in loops.values() for s, g in gaps if 0 <= g <= 0.1]
    x = np.array([s for s, _ in pairs], dtype=float)
    y = np.array([g for _, g in pairs])
    a_mat = np.stack([np.ones_like(x), x], axis=1)
    (a, b), *_ = np.linalg.lstsq(a_mat, y, rcond=None)
    rms = float(np.sqrt(np.mean((a_mat @ np.array([a, b]) - y) ** 2)))
    return {"per_step_s": float(a), "per_sequence_s": float(b), "rms_s": rms,
            "gaps": len(pairs)}


def medians(loops: dict[str, list[list[float]]]) -> dict[str, dict[str, float]]:
    """Per loop: the median decode batch and the median gap."""
    return {n: {"sequences": statistics.median(s for s, _ in gaps),
                "gap_s": statistics.median(g for _, g in gaps), "gaps": len(gaps)}
            for n, gaps in loops.items() if gaps}


def report(data: dict) -> None:
    for n, m in data["medians"].items():
        print(f"{n:>4} in flight: median decode batch {m['sequences']:6.1f}, median gap "
              f"{m['gap_s'] * 1e3:.3f} ms ({m['gaps']} gaps)")
    f = data["fit"]
    print(f"gap = {f['per_step_s'] * 1e3:.3f} ms + {f['per_sequence_s'] * 1e6:.2f} us x sequences "
          f"(least squares over {f['gaps']} gaps, rms {f['rms_s'] * 1e3:.3f} ms)")


def main(argv: list[str] | None = None) -> None:
    ap = handover.arg_parser(__doc__)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--from-json", help="fit the gaps of an earlier --json file again")
    args = ap.parse_args(argv)
    if args.from_json:
        try:
            data = json.loads(Path(args.from_json).read_text())
            loops = {n: [tuple(p) for p in gaps] for n, gaps in data["loops"].items()}
            report({"medians": medians(loops), "fit": fit(loops)})
        except (OSError, ValueError, KeyError, TypeError) as e:
            handover.v0.fail(f"{args.from_json}: not a file this script wrote ({e})")
        return
    env = handover.environment(args.envs)
    loops: dict[str, list[tuple[int, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n, count in LOOPS.items():
            loops[str(n)] = decode_gaps(loop_steps(env, Path(tmp), n, count))
            print(f"{n} in flight: {len(loops[str(n)])} decode gaps", file=sys.stderr)
    data = {"command": "python benchmarks/vllm_v1_frontend/serial_step.py --envs DIR --json "
                       "docs/data/vllm-v1-serial-step.json",
            "cpu": handover.v0.cpu_name(), "vllm": handover.VERSION,
            "fake_gpu": closed_loop.STEP, "server_flags": handover.FLAGS,
            "prompt_tokens": closed_loop.PROMPT, "output_tokens": closed_loop.OUTPUT,
            "medians": medians(loops), "fit": fit(loops),
            "loops": {n: [[s, g] for s, g in gaps] for n, gaps in loops.items()}}
    report(data)
    if args.json:
        write_text_atomically(Path(args.json), json.dumps(data, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
