"""Configuration search speed: CPU seconds per configuration evaluation, on one core.

    python benchmarks/serve_search_speed.py [--space benchmarks/serve_search_space.yaml]
        [--configs N] [--json OUT.json]

Evaluates the space's configurations (the first N, default all) one after the other in this
process, as one worker of `krakenlm sim serve-search` does (`config_search.evaluate_config`),
pinned to one core (os.sched_setaffinity), and reports per configuration the process's CPU
seconds (`time.process_time`: on a shared machine the comparable figure; wall time counts other
processes' turns on the core), then the mean and the extrapolation to 1,000 evaluations on 2
cores (1,000 x mean / 2: the search runs one configuration per worker process, and the space's
share of configurations that need a new step-time oracle stays the same). A digest of every
row's figures shows that a speed-up changed no result.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path

from krakenlm.serving.config_search import evaluate_config, load_space

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default=str(ROOT / "benchmarks" / "serve_search_space.yaml"))
    parser.add_argument("--configs", type=int, default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    space = load_space(args.space)
    grid = space.grid()[:args.configs]
    rows, cpu = [], []
    for config in grid:
        started = time.process_time()
        rows.append(evaluate_config(space.fixed, config))
        cpu.append(time.process_time() - started)
        print(json.dumps({"config": config, "cpu_s": round(cpu[-1], 3),
                          "goodput_requests_per_s": rows[-1]["goodput_requests_per_s"]}),
              flush=True)
    text = json.dumps(rows, sort_keys=True, default=repr)
    mean = sum(cpu) / len(cpu)
    summary = {"space": args.space, "configs": len(grid), "cpu_s_total": round(sum(cpu), 2),
               "cpu_s_first": round(cpu[0], 3), "cpu_s_mean": round(mean, 3),
               "minutes_for_1000_on_2_cores": round(1000 * mean / 2 / 60, 1),
               "rows_digest": hashlib.sha256(text.encode()).hexdigest()[:16]}
    print(json.dumps(summary), flush=True)
    if args.json:
        from krakenlm.fileio import write_text_atomically
        write_text_atomically(args.json, json.dumps({"summary": summary, "cpu_s": cpu},
                                                    indent=2) + "\n")


if __name__ == "__main__":
    main()
