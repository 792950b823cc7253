"""Design-space throughput: designs evaluated per second on one core and with 2 processes.

    python benchmarks/design_space.py [--designs 480] [--json OUT.json]

A grid of distinct designs (cores x lanes x memory x units x global buffer) from the A100
80GB x8 base, each scored by `krakenlm.design.evaluate` on two objectives: throughput (GPT-3
175B, prompt 1024, gen 128, the largest batch memory holds, every power-of-two tp tried) and
latency (e2e at batch 1). One process pinned to core 0 (`taskset`), then the local pool with 2
processes (cores 0-1). Rejected designs (reticle, die edge) are cheaper and counted apart.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time

from krakenlm.design import Objective
from krakenlm.design.runner import run_designs

OBJECTIVES = {
    "throughput": Objective("throughput", "gpt3-175b", prompt_tokens=1024, gen_tokens=128),
    "latency": Objective("latency", "gpt3-175b", prompt_tokens=1024, gen_tokens=128, batch=1),
}
KNOBS = {"cores": [32, 48, 64, 80, 96, 108, 128, 144], "lanes": [2, 4],
         "memory": ["HBM2e", "HBM3", "DDR5", "LPDDR5"], "memory_units": [4, 6, 8, 12, 16],
         "global_buffer_mib": [20, 40, 60]}


def designs(n: int) -> list[dict]:
    names = list(KNOBS)
    grid = [dict(zip(names, v)) for v in itertools.product(*KNOBS.values())]
    return grid[:n]


def timed(objective: Objective, ds: list[dict], processes: int) -> dict:
    started = time.perf_counter()
    res = run_designs(ds, objective, knob_names=list(KNOBS), processes=processes,
                      progress=False, chunk=16)
    seconds = time.perf_counter() - started
    feasible = sum(1 for r in res.rows if r["feasible"])
    return {"processes": processes, "designs": len(res.rows), "feasible": feasible,
            "seconds": seconds, "designs_per_s": len(res.rows) / seconds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--designs", type=int, default=480)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    ds = designs(args.designs)
    out = []
    for name, obj in OBJECTIVES.items():
        for processes, cpus in ((1, {0}), (2, {0, 1})):
            if hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(0, cpus)
            row = {"objective": name, **timed(obj, ds, processes)}
            out.append(row)
            print(f"{name:10s} {processes} process(es): {row['designs']} designs "
                  f"({row['feasible']} feasible) in {row['seconds']:.1f} s = "
                  f"{row['designs_per_s']:.0f} designs/s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
