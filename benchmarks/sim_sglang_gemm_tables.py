"""What the SGLang GEMM tables show on Hopper, against vLLM's tables of the same GPUs.

    python benchmarks/sim_sglang_gemm_tables.py

The evidence behind docs/results-simulator.md's notes on SGLang's GEMM (needs the `calibrate`
extra), every figure from NVIDIA's measured tables:

1. the large-GEMM rate against K (M, N >= 4096, fit half of the shapes only): the median
   TFLOP/s per K range. A tile model's rate can only rise with K; SGLang's falls, which is what
   the power-limited floor (`power_efficiency`, kernels/gpu/gemm.py) was chosen for;
2. SGLang's bf16 GEMM against vLLM's (both call cuBLAS through torch) on the shapes both
   measured: how many, and SGLang's median excess below and above 1 ms;
3. the noise of each table: between adjacent M of 9-16 (the same kernel, nearly the same bytes)
   the mean |log ratio| of consecutive rows, per table; for FP8 also over every pair M, M + 1
   that runs the same tiles in both frameworks' dispatch (9-16, 48/49, 80/81 ... 224/225) and
   the share of pairs more than 10 and 20 % apart;
4. where the FP8 tables step in M for N > 1280 (fit half, K >= 4096, N K >= 2^24): the median
   ratio of the times at M = 17 and 16, and at 33 and 32, SGLang against vLLM. sgl-kernel's sm90
   swap-AB dispatch (kernels/gpu/gemm_cutlass.py, tile_table 3) widens the token tile at M = 33
   (32 -> 64), vLLM's at M = 17 (16 -> 64);
5. the large-GEMM rate against the measured time (M, N >= 4096, K >= 2048, fit half): the
   median TFLOP/s per time range, SGLang against vLLM. The SGLang tables' rate falls once a
   GEMM runs for milliseconds, which is what the burst heating (`heat_s`, measurements/harness.py)
   reads;
6. what zero-filled token rows cost (fit half, K >= 4096, N >= 1024): the median ratio of the
   times at M = 129 and 256 (128 x 128 tiles: 127 rows of the second tile row past the last
   token, or none) and at 65 and 128 (64-row tiles), for N <= 4096 and above. The cost grows
   with the number of weight tile columns, not per wave (kernels/gpu/gemm_cutlass.py).
"""

from __future__ import annotations

import numpy as np

from krakenlm.simulator.kernels.gpu.gemm import shape_key
from krakenlm.simulator.measurements import aiconfigurator as aic
from krakenlm.simulator.measurements.split import fit_half

SYSTEMS = ("h100-80gb-x8", "h200-x8")
K_BINS = ((1024, 4096), (4096, 8192), (8192, 1 << 30))  # (low, high]


def rows(system: str, framework: str, dtype: str) -> dict[tuple[int, int, int], float]:
    t = aic.read_gemm(system, framework)
    c = t.columns
    sel = c["dtype"] == dtype
    return {(int(m), int(n), int(k)): float(s)
            for m, n, k, s in zip(c["m"][sel], c["n"][sel], c["k"][sel], t.latency_s[sel])}


def rate_by_k(system: str, dtype: str) -> list[str]:
    t = aic.read_gemm(system, "sglang")
    c = t.columns
    sel = (c["dtype"] == dtype) & (c["m"] >= 4096) & (c["n"] >= 4096)
    cols = {k: v[sel] for k, v in c.items()}
    fit = fit_half(shape_key(cols))
    tflops = 2.0 * cols["m"] * cols["n"] * cols["k"] / t.latency_s[sel] / 1e12
    out = []
    for low, high in K_BINS:
        pick = fit & (cols["k"] > low) & (cols["k"] <= high)
        if pick.any():
            label = f"K in ({low}, {high}]" if high < 1 << 30 else f"K > {low}"
            out.append(f"{label}: {np.median(tflops[pick]):.0f} (n={int(pick.sum())})")
    return out


def adjacent_m_noise(table: dict[tuple[int, int, int], float]) -> tuple[float, int]:
    """Mean |log ratio| of rows at M and M + 1 for M in 9..15, same N and K."""
    logs = [abs(np.log(table[(m + 1, n, k)] / s)) for (m, n, k), s in table.items()
            if 9 <= m < 16 and (m + 1, n, k) in table]
    return float(np.mean(logs)) * 100, len(logs)


SAME_TILE_PAIRS = tuple((m, m + 1) for m in range(9, 16)) + (
    (48, 49), (80, 81), (96, 97), (112, 113), (160, 161), (192, 193), (224, 225))


def same_tile_noise(table: dict[tuple[int, int, int], float]) -> str:
    logs = np.abs([np.log(table[(b, n, k)] / s) for a, b in SAME_TILE_PAIRS
                   for (m, n, k), s in table.items() if m == a and (b, n, k) in table]) * 100
    return (f"mean |log ratio| {logs.mean():.1f} %, > 10 %: {(logs > 10).mean() * 100:.1f} % of "
            f"pairs, > 20 %: {(logs > 20).mean() * 100:.1f} % ({len(logs):,} pairs)")


def m_steps(system: str, framework: str) -> str:
    """Median t(M + 1) / t(M) at the token-tile boundaries 16 and 32, N > 1280, fit half."""
    table = rows(system, framework, "fp8")
    fit = dict(zip(table, fit_half([f"{m},{n},{k}" for m, n, k in table])))
    out = []
    for m in (16, 32):
        r = [table[(m + 1, n, k)] / s for (mm, n, k), s in table.items()
             if mm == m and n > 1280 and k >= 4096 and n * k >= 1 << 24 and fit[(mm, n, k)]
             and (m + 1, n, k) in table]
        out.append(f"{m} -> {m + 1}: {np.median(r):.3f} (n={len(r)})")
    return "; ".join(out)


T_BINS_MS = (0.1, 1, 5, 10, 30, 1e9)


def rate_by_time(system: str, framework: str, dtype: str) -> str:
    table = rows(system, framework, dtype)
    keys = list(table)
    fit = fit_half([f"{m},{n},{k}" for m, n, k in keys])
    m, n, k = (np.array([x[i] for x in keys], float) for i in range(3))
    t = np.array([table[x] for x in keys])
    sel = fit & (m >= 4096) & (n >= 4096) & (k >= 2048)
    tflops = 2.0 * m * n * k / t / 1e12
    out = []
    for low, high in zip(T_BINS_MS[:-1], T_BINS_MS[1:]):
        pick = sel & (t * 1e3 > low) & (t * 1e3 <= high)
        label = f"({low:g}, {high:g}] ms" if high < 1e9 else f"> {low:g} ms"
        out.append(f"{label}: {np.median(tflops[pick]):.0f} (n={int(pick.sum())})")
    return "; ".join(out)


def padding_cost(system: str, framework: str) -> str:
    table = rows(system, framework, "fp8")
    fit = dict(zip(table, fit_half([f"{m},{n},{k}" for m, n, k in table])))
    out = []
    for low, full in ((129, 256), (65, 128)):
        for label, wide in (("N <= 4096", False), ("N > 4096", True)):
            r = [table[(low, n, k)] / s for (m, n, k), s in table.items()
                 if m == full and k >= 4096 and n >= 1024 and (n > 4096) == wide
                 and fit[(m, n, k)] and (low, n, k) in table]
            out.append(f"t({low}) / t({full}) {label}: {np.median(r):.3f} (n={len(r)})")
    return "; ".join(out)


def main() -> None:
    for system in SYSTEMS:
        print(f"== {system}")
        for dtype in ("fp8", "bf16"):
            print(f"  SGLang {dtype} median TFLOP/s, M, N >= 4096, fit half: "
                  + "; ".join(rate_by_k(system, dtype)))
        sgl, vllm = rows(system, "sglang", "bf16"), rows(system, "vllm", "bf16")
        shared = sorted(set(sgl) & set(vllm))
        excess = np.array([sgl[s] / vllm[s] - 1 for s in shared]) * 100
        short = np.array([vllm[s] < 1e-3 for s in shared])
        print(f"  bf16, {len(shared):,} shapes in both tables: SGLang slower by a median "
              f"{np.median(excess[short]):.1f} % below 1 ms (n={int(short.sum()):,}), "
              f"{np.median(excess[~short]):.1f} % above (n={int((~short).sum()):,})")
        for name, table in (("SGLang", sgl), ("vLLM", vllm)):
            noise, n = adjacent_m_noise(table)
            print(f"  bf16 {name}: adjacent M 9-16, mean |log ratio| {noise:.1f} % ({n:,} pairs)")
        for framework in ("sglang", "vllm"):
            print(f"  fp8 {framework}, same-tile pairs M, M + 1: "
                  f"{same_tile_noise(rows(system, framework, 'fp8'))}")
        for framework in ("sglang", "vllm"):
            print(f"  fp8 {framework} time ratio at M steps, N > 1280: {m_steps(system, framework)}")
        for framework, dtype in (("sglang", "fp8"), ("vllm", "fp8"), ("sglang", "bf16"),
                                 ("vllm", "bf16")):
            print(f"  {framework} {dtype} median TFLOP/s against the measured time, M, N >= 4096, "
                  f"K >= 2048, fit half: {rate_by_time(system, framework, dtype)}")
        for framework in ("sglang", "vllm"):
            print(f"  fp8 {framework} zero-filled rows, fit half: {padding_cost(system, framework)}")


if __name__ == "__main__":
    main()
