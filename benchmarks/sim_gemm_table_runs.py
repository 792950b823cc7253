"""How far apart two published measurement runs of the same GEMMs on the same GPU are.

    python benchmarks/sim_gemm_table_runs.py RUN_A RUN_B [--label-a A] [--label-b B] [--json OUT]

RUN_A and RUN_B are GEMM tables in aiconfigurator's formats: a `gemm_perf.txt` (CSV, the
`aiconfigurator` wheels up to 0.10: systems/data/<gpu>/<framework>/<version>/gemm_perf.txt) or a
`gemm_perf.parquet` (aiconfigurator-core: systems/data/<gpu>/gemm/<framework>/<version>/). Only
their 16-bit rows (float16 / bfloat16) are compared, on the (m, n, k) shapes both measured: per
token count m, the median over the shapes with n x k >= 4096^2 of time_B / time_A, and each
run's median weight-streaming rate (bytes of A, B and C over the time). A ratio far from 1 at
small m, where a GEMM streams its weights and the device's memory sets the time, is the
run-to-run spread of the tables themselves (the GPU node, its clocks and power, the library
build), which no kernel model fitted on one run can be closer than.

The tables are not part of this repository. The ones docs/results-simulator.md compares (the
A100 and H100 leads) come from the PyPI wheels:

    pip download --no-deps aiconfigurator==0.7.0 aiconfigurator-core==0.12.0 -d /tmp/aic
    unzip -q /tmp/aic/aiconfigurator-0.7.0-*.whl 'aiconfigurator/systems/data/*/vllm/*' -d /tmp/aic/0.7.0
    unzip -q /tmp/aic/aiconfigurator_core-0.12.0-*.whl \\
        'aiconfigurator_core/systems/data/*/gemm/vllm/*' -d /tmp/aic/core
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from krakenlm.fileio import write_text_atomically

SIXTEEN_BIT = ("float16", "bfloat16", "fp16", "bf16")
LARGE_WEIGHT = 4096 * 4096  # n x k at least this: the weight, not the launch, sets the time


def read_table(path: Path):
    """The 16-bit rows of one GEMM table: (m, n, k, latency in ms, dtype, device)."""
    import pandas as pd

    table = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    missing = {"m", "n", "k", "latency", "gemm_dtype"} - set(table.columns)
    if missing:
        raise SystemExit(f"error: {path}: not a GEMM table (no column {', '.join(sorted(missing))})")
    table = table[table["gemm_dtype"].isin(SIXTEEN_BIT)]
    if table.empty:
        raise SystemExit(f"error: {path}: no 16-bit (float16 / bfloat16) rows")
    return table


def compare(a, b) -> dict:
    """Per m: shapes compared, median time ratio B / A and each run's median weight-streaming
    rate (TB/s), over the shapes both runs measured whose weight is at least 4096^2."""
    both = a.merge(b, on=["m", "n", "k"], suffixes=("_a", "_b"))
    both = both[both["n"] * both["k"] >= LARGE_WEIGHT]
    streamed = 2.0 * (both["n"] * both["k"] + both["m"] * both["k"] + both["m"] * both["n"])
    rows = {}
    for m in sorted(int(x) for x in both["m"].unique()):
        mine = both["m"] == m
        rows[str(m)] = {
            "shapes": int(mine.sum()),
            "ratio_b_over_a": float(np.median(both["latency_b"][mine] / both["latency_a"][mine])),
            "tb_per_s_a": float(np.median(streamed[mine] / (both["latency_a"][mine] * 1e-3)) / 1e12),
            "tb_per_s_b": float(np.median(streamed[mine] / (both["latency_b"][mine] * 1e-3)) / 1e12),
        }
    return {"shapes": int(len(both)), "by_m": rows}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--label-a", default="A")
    ap.add_argument("--label-b", default="B")
    ap.add_argument("--json", help="write the comparison here")
    args = ap.parse_args(argv)
    a, b = read_table(args.run_a), read_table(args.run_b)
    out = {"command": "python benchmarks/sim_gemm_table_runs.py " + " ".join(
               [args.run_a.name, args.run_b.name, "--label-a", args.label_a,
                "--label-b", args.label_b]),
           "a": {"label": args.label_a, "device": str(a["device"].iloc[0]) if "device" in a else "",
                 "dtype": sorted(set(a["gemm_dtype"]))},
           "b": {"label": args.label_b, "device": str(b["device"].iloc[0]) if "device" in b else "",
                 "dtype": sorted(set(b["gemm_dtype"]))},
           **compare(a, b)}
    print(f"A = {args.label_a} ({out['a']['device']}, {', '.join(out['a']['dtype'])}); "
          f"B = {args.label_b} ({out['b']['device']}, {', '.join(out['b']['dtype'])}); "
          f"{out['shapes']} shapes with n x k >= 4096^2 in both")
    print(f"{'m':>6} {'shapes':>7} {'B / A':>7} {'A TB/s':>7} {'B TB/s':>7}")
    for m, row in out["by_m"].items():
        print(f"{m:>6} {row['shapes']:>7} {row['ratio_b_over_a']:7.3f} {row['tb_per_s_a']:7.2f} "
              f"{row['tb_per_s_b']:7.2f}")
    if args.json:
        write_text_atomically(args.json, json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
