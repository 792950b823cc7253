"""The fixed part and streaming rate of small-M GEMMs in aiconfigurator's measured tables, per GPU
and framework: the numbers docs/results-simulator.md ("A100 decode: not the GEMM tables")
compares with public cuBLAS timings.

    python benchmarks/aic_gemm_fixed_part.py [--k 4096] [--m 1,2,8,32] [--min-mb 20]

For each table (aiconfigurator-core's `systems/data/<gpu>/gemm/<framework>/<version>/
gemm_perf.parquet`, 16-bit rows), each M and the given K, the rows whose weights (2 x N x K
bytes) exceed `--min-mb` are fitted by least squares as

    latency = fixed + weight_bytes / stream,

and the fixed part (us) and the stream (as a fraction of the GPU's datasheet bandwidth, from
its krakenlm preset) are printed. Needs the optional extra `krakenlm[calibrate]`
(aiconfigurator-core); without it, one `error:` line says how to install it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

# aiconfigurator system directory -> krakenlm preset (for the datasheet bandwidth)
SYSTEMS = {"a100_sxm": "a100-80gb-x8", "h100_sxm": "h100-80gb-x8", "h200_sxm": "h200-x8",
           "b200_sxm": "b200-x8", "l40s": "l40s-x8"}
SIXTEEN_BIT = ("bfloat16", "float16")


def fit(weight_bytes: np.ndarray, latency_s: np.ndarray) -> tuple[float, float]:
    """(fixed s, stream bytes/s) of latency = fixed + bytes / stream, least squares."""
    a = np.vstack([np.ones(len(weight_bytes)), weight_bytes]).T
    fixed, per_byte = np.linalg.lstsq(a, latency_s, rcond=None)[0]
    return float(fixed), float(1.0 / per_byte)


def fail(message: str) -> None:
    """One `error:` line on stderr, exit status 2 (the project's bad-input contract)."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--m", default="1,2,8,32")
    parser.add_argument("--min-mb", type=float, default=20.0)
    args = parser.parse_args(argv)
    try:
        import aiconfigurator_core
        import pandas as pd
    except ImportError:
        fail("error: aiconfigurator-core is not installed; pip install 'krakenlm[calibrate]'")
    try:
        ms = [int(x) for x in args.m.split(",")]
    except ValueError:
        fail(f"error: --m {args.m!r} is not a comma-separated list of integers (e.g. 1,2,8)")
    from krakenlm.hardware import load_system

    root = Path(aiconfigurator_core.__file__).parent / "systems" / "data"
    print(f"K = {args.k}, weights > {args.min_mb:g} MB: latency = fixed + bytes / stream")
    for gpu, preset in SYSTEMS.items():
        peak = load_system(preset).device.memory.bandwidth_bytes_per_s
        for table in sorted(root.glob(f"{gpu}/gemm/*/*/gemm_perf.parquet")):
            df = pd.read_parquet(table)
            df = df[df.gemm_dtype.isin(SIXTEEN_BIT) & (df.k == args.k)]
            for m in ms:
                rows = df[df.m == m]
                weight = 2.0 * rows.n.to_numpy() * rows.k.to_numpy()
                big = weight > args.min_mb * 1e6
                if big.sum() < 3:
                    continue
                fixed_s, stream = fit(weight[big], rows.latency.to_numpy()[big] * 1e-3)
                framework, version = table.parts[-3], table.parts[-2]
                print(f"{gpu:9s} {framework:7s} {version:12s} M = {m:3d}: fixed "
                      f"{fixed_s * 1e6:5.1f} us, stream {stream / 1e12:.2f} TB/s "
                      f"({stream / peak:.2f} of {peak / 1e12:.2f}), {int(big.sum())} shapes")


if __name__ == "__main__":
    main()
