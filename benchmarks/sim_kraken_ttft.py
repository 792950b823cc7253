"""Kraken vs standard vs parallel block: simulated TTFT in the Kraken paper's inference setting.

    python benchmarks/sim_kraken_ttft.py [--system a100-80gb-x8] [--batch 1]

The grid and the simulation are `krakenlm.studies.kraken_ttft` (also `krakenlm study ttft`,
which writes a report with plots); this script prints the rows as JSON.
"""

from __future__ import annotations

import argparse
import json

from krakenlm.studies.kraken_ttft import geomean_reduction, run_grid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", default="a100-80gb-x8")
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    rows = run_grid(args.system, args.batch)
    print(json.dumps({
        "system": args.system, "batch": args.batch,
        "rows": [{"model": r.shape, "prompt": r.prompt_tokens, "tp": r.tp,
                  **{f"ttft_{arch}_ms": t * 1e3 for arch, t in r.ttft_s.items()},
                  "kraken_reduction_pct": 100 * r.kraken_reduction,
                  "kraken_layer_ms": {k: v * 1e3 for k, v in r.layer_s["kraken"].items()}}
                 for r in rows],
        "geomean_ttft_reduction_pct": 100 * geomean_reduction(rows)}, indent=2))


if __name__ == "__main__":
    main()
