"""Simulator speed: cold CLI runs, warm in-process queries, and the decode fast path's error.

    python benchmarks/sim_speed.py [--repeats 5] [--json OUT.json] [--parts cold,warm,decode-error]

1. Cold CLI: fresh `krakenlm sim run ... --json` processes pinned to one core (`taskset -c 0`),
   wall clock including Python start-up and imports, median of the repeats, after one
   untimed run that leaves the bytecode cache an installed package has (the runs are started
   without PYTHONDONTWRITEBYTECODE: with it, every process compiles every module it imports
   from source, ~0.2 s of a cold run that no user of an installed krakenlm pays):
   Llama-2-70B on 8x A100 (prefill 1024 + 1023 decode steps), and GPT-3 175B on 4x A100 at
   batch 8, prompt 2048, 1024 generated tokens.
2. Warm API: one `Simulator` session (krakenlm.simulator.Simulator), timed per query after a
   warm-up, on one core: the same query repeated, and a sweep of distinct queries (64 prompt
   lengths), prefill only (gen 1) and prefill + 1023 decode steps.
3. Machine reference: a fixed pure-Python loop (10^7 integer additions) on the same core,
   median of 5. Figures taken on different days are comparable only through it: the shared
   VM this project is measured on has run the same commit's queries up to 9x slower on one
   day than on another.
4. Decode error bound: the fast decode path (exact when no collective can overlap the
   attention, sampled every 32nd step otherwise) against scheduling every step exactly, over
   the Kraken TTFT grid's engines and prompt lengths: the largest relative difference of the
   end-to-end time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

KRAKENLM = str(Path(sys.executable).with_name("krakenlm"))
COLD_RUNS = {
    "llama2-70b, a100-80gb-x8, TP 8, prompt 1024, gen 1024": [
        "sim", "run", "--system", "a100-80gb-x8", "--model", "llama2-70b", "--tp", "8",
        "--batch", "1", "--prompt", "1024", "--gen", "1024", "--json"],
    "gpt3-175b, a100-80gb-x4, TP 4, batch 8, prompt 2048, gen 1024": [
        "sim", "run", "--system", "a100-80gb-x4", "--model", "gpt3-175b", "--tp", "4",
        "--batch", "8", "--prompt", "2048", "--gen", "1024", "--skip-memory-check",
        "--beyond-context", "--json"],
}


def cold(repeats: int) -> dict:
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = {}
    for label, args in COLD_RUNS.items():
        subprocess.run(pin + [KRAKENLM] + args, check=True, capture_output=True, env=env)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run(pin + [KRAKENLM] + args, check=True, capture_output=True, env=env)
            times.append(time.perf_counter() - start)
        out[label] = {"command": " ".join(pin + ["krakenlm"] + args),
                      "median_s": statistics.median(times), "all_s": times}
    return out


def warm(repeats: int) -> dict:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    from krakenlm.models import get_preset
    from krakenlm.simulator import Simulator

    cfg = get_preset("llama2-70b")
    out = {}
    for gen in (1, 1024):
        sim = Simulator("a100-80gb-x8")
        sim.run(cfg, 8, 1, 1024, gen)  # warm-up
        same = []
        for _ in range(max(20, repeats)):
            t = time.perf_counter()
            sim.run(cfg, 8, 1, 1024, gen)
            same.append(time.perf_counter() - t)
        sweep_sim = Simulator("a100-80gb-x8")
        sweep_sim.run(cfg, 8, 1, 100, gen)  # warm-up: imports, first kernels
        distinct = []
        # 64 distinct prompt lengths, prompt + 1024 generated within Llama-2-70B's 4096 context
        for prompt in range(128, 128 + 64 * 46, 46):
            t = time.perf_counter()
            sweep_sim.run(cfg, 8, 1, prompt, gen)
            distinct.append(time.perf_counter() - t)
        key = "prefill only" if gen == 1 else "prefill + 1023 decode steps"
        out[key] = {"same_query_median_ms": statistics.median(same) * 1e3,
                    "distinct_queries_median_ms": statistics.median(distinct) * 1e3,
                    "distinct_queries_max_ms": max(distinct) * 1e3, "queries": len(distinct)}
    return out


def python_loop_s(repeats: int = 5) -> float:
    """Median seconds of 10^7 pure-Python integer additions on core 0 (the machine's speed)."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    times = []
    for _ in range(repeats):
        t, total = time.perf_counter(), 0
        for i in range(10**7):
            total += i
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def decode_error() -> dict:
    from krakenlm.models import get_preset
    from krakenlm.simulator import simulate
    from krakenlm.studies.kraken_ttft import DEGREES, SHAPES

    worst, cases, methods = 0.0, 0, set()
    for shape in SHAPES:
        for d in DEGREES:
            for suffix in ("", "-hc"):
                cfg = get_preset(f"kraken-{shape}-{d}way{suffix}")
                for prompt in (128, 2048):
                    # 2048 + 512 runs past the GPT-3 shapes' 2048-token context: timed as if the
                    # context were longer, which is all a check of the decode schedule needs
                    kw = {"check_memory": False, "check_context": False}
                    fast = simulate(cfg, "a100-80gb-x8", d, 1, prompt, 512, **kw)
                    exact = simulate(cfg, "a100-80gb-x8", d, 1, prompt, 512, exact_decode=True,
                                     **kw)
                    worst = max(worst, abs(fast.e2e_s / exact.e2e_s - 1))
                    methods.add(fast.decode_method)
                    cases += 1
    return {"cases": cases, "max_relative_error_e2e": worst, "methods": sorted(methods)}


PARTS = ("cold", "warm", "decode-error")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None, help="Also write the report here.")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"Comma-separated subset of {', '.join(PARTS)} (default: all); "
                             "the machine reference is always measured.")
    args = parser.parse_args()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; known: {', '.join(PARTS)}")
    report = {"machine_python_loop_s": python_loop_s()}
    if "cold" in parts:
        report["cold_cli"] = cold(args.repeats)
    if "warm" in parts:
        report["warm_api"] = warm(args.repeats)
    if "decode-error" in parts:
        report["decode_fast_path"] = decode_error()
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
