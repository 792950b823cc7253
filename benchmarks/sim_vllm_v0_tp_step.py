"""The per-step host cost of vLLM V0 at tensor parallelism > 1 that multi-step scheduling hides,
from public paired runs: same prompts, same server, vLLM 0.5.4 single-step against vLLM 0.6.0
with `--num-scheduler-steps 10`.

    python benchmarks/sim_vllm_v0_tp_step.py [--runs PATH] [--json docs/data/vllm-v0-tp-step.json]

Source (`krakenlm/simulator/constants/vllm_v0_tp_pairs.json`, every number verbatim with its
file and commit): LambdaLabsML/vllm-benchmark, `benchmark_serving.py` result JSONs of the same
10 ShareGPT prompts at request rate inf, Mistral-7B-Instruct-v0.3, on H100-80GB-SXM and
A100-80GB-SXM at TP 1/2/4/8 (`benchmark_1x2x4x8x.sh`: docker `vllm/vllm-openai:v0.5.4`;
`benchmark_v0.md`: the v0.6.0 runs use `num-scheduler-steps=10`). With these outputs the batch is
2 for most steps, so a median inter-token latency (ITL) is a decode step at batch ~2.

Per-step time (ms) of a run: step = median_itl_ms / num_scheduler_steps. Engine 0.5.4 streams
one token per step (num_scheduler_steps 1); engine 0.6.0 streams the 10 tokens of a multi-step
batch together, so one ITL spans 10 steps (the JSON records ITL counts against output lengths,
e.g. 89 ITLs for 883 tokens).

For each GPU and TP n: gap(n) = step_0.5.4(n) - step_0.6.0(n), the per-step time that single-step
scheduling adds. Its TP-independent part (scheduling, input preparation, output processing,
sampling sync, API server) is gap(1); the part that grows with TP is

    d(n) = gap(n) - gap(1)                      for n > 1.

The replay charges the TP cost T(n) (the driver broadcasting the step's inputs to the other
workers, on the host's critical path) on every 0.5.4 step and on the first step of each 0.6.0
round of k = 10 steps (the round's scheduling and input preparation), and on each of the k - 1
later steps of a round the GPU's wait for the same broadcast B(n), its NCCL part
(serving/step_time.py `multi_step_broadcast_s`: the `vllm-v0` profile's
`host.multi_step_broadcast_tensors` NCCL broadcasts, timed by the simulator's NCCL model on the
run's system). Then d(n) = (k - 1) / k x (T(n) - B(n)), so

    T(n) = d(n) x k / (k - 1) + B(n),

and the constant is the plain mean of T(n) over every (GPU, n > 1) that has both engines at n and
at 1 (before stop 52, the mean of d(n): T taken as hidden in every multi-step step and B as 0).
Nothing is fitted. Assumed: the other 0.5.4 -> 0.6.0 changes are TP-neutral, and the GPU
kernels are the same in both engines.

With `--simulate` it also times, for each multi-step run, the simulator's GPU time alone: the
`vllm-v0` profile with every host constant at 0 (per step, per sequence, per TP step, graph
launch), Mistral-7B at batch 2, 30 prompt + 900 generated tokens (the two long requests of
these runs), bf16, mean time per output token. The multi-step step is the nearest thing to GPU
time these runs give, so the two say how far the kernel models are from them (a check, not a
fit; nothing here changes a constant).

When a (GPU, TP, engine) has several runs (other --max-model-len), the earliest-dated run is used
and the others are printed as repeats; the range of the constant over every choice of repeats is
printed too. A file that lacks a field or holds a bad value is refused with one `error:` line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from krakenlm.errors import KrakenError
from krakenlm.fileio import write_text_atomically

RUNS_PACKAGE = "krakenlm.simulator.constants"
RUNS_FILE = "vllm_v0_tp_pairs.json"
SINGLE_STEP = "0.5.4"
MULTI_STEP = "0.6.0"
STEPS_PER_ITL = {SINGLE_STEP: 1, MULTI_STEP: 10}
REQUIRED = {"gpu": str, "system": str, "tp": int, "engine_version": str,
            "num_scheduler_steps": int, "path": str, "commit": str, "date": str,
            "median_itl_ms": float}

Key = tuple[str, int, str]  # (gpu, tp, engine_version)


class PairsError(KrakenError):
    """The runs file is missing, unreadable or malformed."""


def default_runs_path() -> Path:
    """The runs file shipped with the package."""
    return Path(str(resources.files(RUNS_PACKAGE).joinpath(RUNS_FILE)))


def _valid(value: Any, kind: type) -> bool:
    """A positive finite number (float), a positive whole number (int) or a non-empty string."""
    if isinstance(value, bool):
        return False
    if kind is float:
        return isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    if kind is int:
        return isinstance(value, int) and value > 0
    return isinstance(value, str) and value != ""


def _checked_run(run: Any, index: int) -> dict[str, Any]:
    if not isinstance(run, dict):
        raise PairsError(f"runs[{index}] is not an object")
    where = f"runs[{index}] ({run.get('path', 'no path')})"
    for field, kind in REQUIRED.items():
        if field not in run:
            raise PairsError(f"{where} has no {field!r}")
        if not _valid(run[field], kind):
            wanted = {float: "a positive number", int: "a positive whole number",
                      str: "a non-empty string"}[kind]
            raise PairsError(f"{where}: {field} = {run[field]!r} is not {wanted}")
    version = run["engine_version"]
    if version not in STEPS_PER_ITL:
        raise PairsError(f"runs[{index}] ({run['path']}): engine_version {version!r} is not one "
                         f"of {sorted(STEPS_PER_ITL)}")
    if run["num_scheduler_steps"] != STEPS_PER_ITL[version]:
        raise PairsError(f"runs[{index}] ({run['path']}): engine {version} runs use "
                         f"num_scheduler_steps {STEPS_PER_ITL[version]}, got "
                         f"{run['num_scheduler_steps']}")
    return run


def load_runs(path: Path) -> list[dict[str, Any]]:
    """The checked `runs` of the file at `path`; `PairsError` if it is unusable."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise PairsError(f"{path}: cannot read it as JSON ({exc})") from None
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list) or not runs:
        raise PairsError(f"{path}: no 'runs' list")
    return [_checked_run(run, i) for i, run in enumerate(runs)]


def step_ms(run: dict[str, Any]) -> float:
    """Per-step time of a run (ms): its median ITL over the steps one ITL spans."""
    return float(run["median_itl_ms"]) / run["num_scheduler_steps"]


def runs_by_key(runs: list[dict[str, Any]]) -> dict[Key, list[dict[str, Any]]]:
    """Runs grouped by (gpu, tp, engine), earliest date first (the first one is used)."""
    grouped: dict[Key, list[dict[str, Any]]] = {}
    for run in runs:
        grouped.setdefault((run["gpu"], run["tp"], run["engine_version"]), []).append(run)
    return {key: sorted(group, key=lambda r: r["date"]) for key, group in grouped.items()}


def broadcast_ms(system: str, tp: int) -> float:
    """B(n): the GPU's wait for the model input's broadcast before a later step of a
    multi-step round on `tp` devices of `system` (module docstring), in ms."""
    from krakenlm.serving.step_time import multi_step_broadcast_s
    from krakenlm.simulator import Simulator

    return multi_step_broadcast_s(Simulator(system, "vllm-v0"), tp) * 1e3


def derive(chosen: dict[Key, dict[str, Any]],
           broadcast: Callable[[str, int], float] | None = broadcast_ms) -> dict[str, Any]:
    """Per GPU and TP the two per-step times, their gap, d(n), B(n) and T(n); and the mean of
    T(n) (module docstring). `broadcast`: B(n) in ms from (system, tp); None: 0."""
    rows = []
    d_values = []
    for gpu in sorted({key[0] for key in chosen}):
        base = (chosen.get((gpu, 1, SINGLE_STEP)), chosen.get((gpu, 1, MULTI_STEP)))
        gap_1 = None if None in base else step_ms(base[0]) - step_ms(base[1])
        for tp in sorted({key[1] for key in chosen if key[0] == gpu}):
            single = chosen.get((gpu, tp, SINGLE_STEP))
            multi = chosen.get((gpu, tp, MULTI_STEP))
            row: dict[str, Any] = {
                "gpu": gpu, "tp": tp,
                "single_step_ms": None if single is None else step_ms(single),
                "multi_step_ms": None if multi is None else step_ms(multi),
                "single_step_file": None if single is None else single["path"],
                "multi_step_file": None if multi is None else multi["path"],
                "gap_ms": None, "d_ms": None, "broadcast_ms": None, "tp_step_ms": None}
            if single is not None and multi is not None:
                row["gap_ms"] = row["single_step_ms"] - row["multi_step_ms"]
                if tp > 1 and gap_1 is not None:
                    k = multi["num_scheduler_steps"]
                    row["d_ms"] = row["gap_ms"] - gap_1
                    row["broadcast_ms"] = broadcast(multi["system"], tp) if broadcast else 0.0
                    row["tp_step_ms"] = row["d_ms"] * k / (k - 1) + row["broadcast_ms"]
                    d_values.append(row["tp_step_ms"])
            rows.append(row)
    if not d_values:
        raise PairsError("no GPU has both engines at TP 1 and at a TP > 1: nothing to derive")
    return {"rows": rows, "n_points": len(d_values),
            "tp_step_cost_ms": sum(d_values) / len(d_values)}


def gpu_only_check(chosen: dict[Key, dict[str, Any]]) -> list[dict[str, Any]]:
    """For each chosen multi-step run: its per-step time against the simulator's GPU time alone
    (module docstring), and their ratio minus 1."""
    import dataclasses

    from krakenlm.hardware import load_system
    from krakenlm.models import get_preset
    from krakenlm.simulator.constants.software import load_software
    from krakenlm.simulator.run import simulate

    profile = load_software("vllm-v0")
    host = dataclasses.replace(profile.host, prefill_step_s=0.0, decode_step_s=0.0,
                               per_sequence_s=0.0, tp_step_s=0.0, graph_launch_s=0.0)
    gpu_only = dataclasses.replace(profile, host=host)
    config = get_preset("mistral-7b")
    out = []
    for (gpu, tp, version), run in sorted(chosen.items()):
        if version != MULTI_STEP:
            continue
        result = simulate(config, load_system(run["system"]), tp, 2, 30, 900, software=gpu_only,
                          dtype="bf16")
        simulated_ms = result.tpot_s * 1e3
        out.append({"gpu": gpu, "tp": tp, "system": run["system"],
                    "multi_step_ms": step_ms(run), "simulated_gpu_only_ms": simulated_ms,
                    "simulated_over_measured_minus_1": simulated_ms / step_ms(run) - 1})
    return out


def repeat_range_ms(grouped: dict[Key, list[dict[str, Any]]]) -> tuple[float, float, int]:
    """Smallest and largest constant over every choice of one run per (gpu, tp, engine)."""
    keys = sorted(grouped)
    memo: dict[tuple[str, int], float] = {}

    def broadcast(system: str, tp: int) -> float:  # the same B(n) for every choice
        if (system, tp) not in memo:
            memo[(system, tp)] = broadcast_ms(system, tp)
        return memo[(system, tp)]
    values = [derive(dict(zip(keys, choice)), broadcast)["tp_step_cost_ms"]
              for choice in itertools.product(*(grouped[key] for key in keys))]
    return min(values), max(values), len(values)


def _fmt(value: float | None, width: int = 8) -> str:
    return f"{'-':>{width}s}" if value is None else f"{value:{width}.3f}"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=None, help=f"runs file (default: the shipped "
                                                     f"{RUNS_FILE})")
    parser.add_argument("--json", default=None, help="write the derivation here")
    parser.add_argument("--simulate", action="store_true",
                        help="also time the simulator's GPU-only step against each multi-step run")
    args = parser.parse_args(argv)
    runs_path = Path(args.runs) if args.runs else default_runs_path()
    try:
        grouped = runs_by_key(load_runs(runs_path))
        chosen = {key: group[0] for key, group in grouped.items()}
        result = derive(chosen)
        low_ms, high_ms, n_choices = repeat_range_ms(grouped)
    except KrakenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None

    print(f"{'GPU':14s} {'TP':>2s} {'0.5.4 ms':>8s} {'0.6.0 ms':>8s} {'gap ms':>8s} "
          f"{'d(n) ms':>8s} {'B(n) ms':>8s} {'T(n) ms':>8s}")
    for row in result["rows"]:
        print(f"{row['gpu']:14s} {row['tp']:2d} {_fmt(row['single_step_ms'])} "
              f"{_fmt(row['multi_step_ms'])} {_fmt(row['gap_ms'])} {_fmt(row['d_ms'])} "
              f"{_fmt(row['broadcast_ms'])} {_fmt(row['tp_step_ms'])}")
    print(f"per-step TP cost (mean T over {result['n_points']} points): "
          f"{result['tp_step_cost_ms']:.3f} ms")
    print(f"over every choice of repeats ({n_choices}): {low_ms:.3f} .. {high_ms:.3f} ms")
    repeats = []
    for key, group in sorted(grouped.items()):
        for run in group[1:]:
            repeats.append({"gpu": key[0], "tp": key[1], "engine_version": key[2],
                            "path": run["path"], "date": run["date"],
                            "step_ms": step_ms(run), "used_step_ms": step_ms(group[0])})
            print(f"repeat: {key[0]} TP{key[1]} {key[2]} {Path(run['path']).name} "
                  f"({run['date']}): {step_ms(run):.3f} ms/step vs {step_ms(group[0]):.3f} used")

    check = gpu_only_check(chosen) if args.simulate else None
    if check is not None:
        print("multi-step step against the simulator's GPU time alone (vllm-v0, host at 0):")
        for row in check:
            print(f"{row['gpu']:14s} TP{row['tp']} measured {row['multi_step_ms']:.2f} ms, "
                  f"simulated {row['simulated_gpu_only_ms']:.2f} ms "
                  f"({100 * row['simulated_over_measured_minus_1']:+.1f} %)")

    if args.json:
        command = " ".join(["python", "benchmarks/sim_vllm_v0_tp_step.py", *argv])
        doc = {"command": command, "runs_file": RUNS_FILE,
               "formula": "step = median_itl_ms / num_scheduler_steps; gap(n) = step_0.5.4(n) - "
                          "step_0.6.0(n); d(n) = gap(n) - gap(1) for n > 1; T(n) = d(n) k / "
                          "(k - 1) + B(n), k = 10 steps a round, B(n) the multi-step broadcast "
                          "(serving/step_time.py multi_step_broadcast_s); constant = mean T",
               "selection": "earliest-dated run per (gpu, tp, engine)",
               **result,
               "repeat_range_ms": {"low": low_ms, "high": high_ms, "choices": n_choices},
               "repeats": repeats}
        if check is not None:
            doc["gpu_only_check"] = check
        write_text_atomically(Path(args.json), json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
