"""The serving step-time oracle against direct `Simulator.run` calls, off its grids.

    python benchmarks/serve_oracle_accuracy.py [--points 40] [--seed 0] [--json OUT.json]

Llama-2-70B and its Kraken (degree 4), TP 4 on h100-80gb-x8, vLLM profile; the oracle
tabulated for vLLM's H100 defaults (8192 tokens, 1024 sequences, context 4096). Random
points: prefill steps of one prompt of 1..4000 tokens (against the prefill time of
`Simulator.run`) and decode steps of 1..1024 sequences at KV lengths 2..4000 (against its
first decode step). Prints the median and largest relative deviation per architecture and
kind.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from krakenlm.models import get_preset
from krakenlm.serving.step_time import StepTimer
from krakenlm.simulator import Simulator, arch_variant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    for arch in ("gpt", "kraken"):
        rng = np.random.default_rng(args.seed)
        config = arch_variant(get_preset("llama2-70b"), arch, 4)
        sim = Simulator("h100-80gb-x8", "vllm")
        oracle = StepTimer(sim, config, 4, max_tokens=8192, max_sequences=1024,
                           max_context=4096)
        prefill, decode = [], []
        for p in rng.integers(1, 4001, args.points):
            direct = sim.run(config, 4, 1, int(p), 2, check_memory=False).prefill.time_s
            prefill.append(oracle.batch_s([(int(p), 0)], []) / direct - 1)
        for b, kv in zip(rng.integers(1, 1025, args.points), rng.integers(2, 4001, args.points)):
            direct = float(sim.run(config, 4, int(b), int(kv) - 1, 2, check_memory=False)
                           .decode.step_times_s[0])
            decode.append(oracle.batch_s([], [int(kv)] * int(b)) / direct - 1)
        for kind, errors in (("prefill", prefill), ("decode", decode)):
            e = 100 * np.abs(errors)
            row = {"arch": arch, "kind": kind, "points": len(e),
                   "median_pct": round(float(np.median(e)), 3),
                   "max_pct": round(float(e.max()), 3)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.json:
        from krakenlm.fileio import write_text_atomically
        write_text_atomically(args.json, json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
