"""Simulator speed, measured as cold processes pinned to one core.

    python benchmarks/sim_speed.py [--repeats 5]

Times (wall clock, median of the repeats, each a fresh `krakenlm` process under `taskset -c 0`):
  1. the issue's run: GPT-3 175B on a100-80gb-x4, TP 4, batch 8, prompt 2048, 1024 generated
     tokens, every decode step simulated (--skip-memory-check: at fp16 it does not fit in 80 GB,
     which the simulator reports; the timing is of the same work the original tool did);
  2. `krakenlm sim sweep` over its default 100 configurations.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

KRAKENLM = str(Path(sys.executable).with_name("krakenlm"))
RUN_175B = [KRAKENLM, "sim", "run", "--system", "a100-80gb-x4", "--model", "gpt3-175b",
            "--tp", "4", "--batch", "8", "--prompt", "2048", "--gen", "1024",
            "--skip-memory-check", "--json"]
SWEEP_100 = [KRAKENLM, "sim", "sweep", "--json"]


def timed(cmd: list[str], repeats: int) -> tuple[list[float], str]:
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    times, out = [], ""
    for _ in range(repeats):
        start = time.perf_counter()
        out = subprocess.run(pin + cmd, check=True, capture_output=True, text=True).stdout
        times.append(time.perf_counter() - start)
    return times, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    run_times, run_out = timed(RUN_175B, args.repeats)
    run = json.loads(run_out)
    sweep_times, sweep_out = timed(SWEEP_100, args.repeats)
    sweep = json.loads(sweep_out)
    report = {
        "gpt3_175b_run": {"command": "taskset -c 0 " + " ".join(["krakenlm"] + RUN_175B[1:]),
                          "median_s": statistics.median(run_times), "all_s": run_times,
                          "decode_steps": run["gen_tokens"] - 1, "ttft_s": run["ttft_s"],
                          "tpot_s": run["tpot_s"], "e2e_s": run["e2e_s"],
                          "memory_bytes_per_device": run["memory_bytes_per_device"],
                          "fits": run["memory"]["fits"]},
        "sweep_100": {"command": "taskset -c 0 " + " ".join(["krakenlm"] + SWEEP_100[1:]),
                      "configurations": sweep["configurations"],
                      "median_s": statistics.median(sweep_times), "all_s": sweep_times},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
