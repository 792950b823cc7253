"""The MI300X's library all-reduce (RCCL) protocols, fitted on a public rccl-tests curve.

    python benchmarks/sim_mi300x_rccl_fit.py

Source: Azure's AI-benchmarking-guide results for ND MI300X v5 (8x MI300X, RCCL 2.22.3, HIP
6.2.41133), samuel-bohman/AI-benchmarking-guide@3de0c294fd1059a91a2c158712c4a078619d73e8
`Azure_Results/ND_MI300X_v5_results.md`, "RCCL Bandwidth": the all-reduce bus bandwidth
(GB/s, in place) of 8 GPUs from 1 KB to 8 GB. A bus bandwidth is algbw x 2 (n - 1) / n, so the
time of a message of S bytes is S x 2 (n - 1) / n / busbw. The table labels its rows with
rounded sizes ("65K", "132K", "524K", "33M", "67M", "134M", "268M", "536M"); they are taken as
the powers of two rccl-tests steps through (x2 from 1 KB), which those labels round.

Fitted: three protocols (latency, efficiency) of the template collective model
(kernels/template/collectives.py, the same form `sim calibrate` fits on the A100's NCCL tests)
on the system preset's Infinity Fabric, with the device's launch overhead added as the
simulator adds it, minimising the MAPE of the even-indexed sizes; the odd-indexed sizes are
held out. The printed protocols go into simulator/constants/template_sourced.yaml
(MI300X `nccl_all_reduce`).
"""

from __future__ import annotations

import math

import numpy as np

from krakenlm.hardware import load_system
from krakenlm.simulator.calibration.fit import minimise
from krakenlm.simulator.kernels.template.collectives import Protocol, collective_time
from krakenlm.simulator.measurements.split import mape

GPUS = 8
# (bytes, bus bandwidth GB/s): the table's rows, 1K ... 8G, sizes as powers of two.
BUSBW_GBPS = [0.04, 0.07, 0.15, 0.29, 0.59, 1.13, 2.22, 4.18, 7.50, 13.01, 22.41, 43.41, 82.53,
              131.57, 171.46, 230.35, 266.34, 290.81, 302.80, 308.89, 313.92, 315.06, 314.85,
              316.82]
POINTS = [(1024 * 2 ** i, bw) for i, bw in enumerate(BUSBW_GBPS)]


def measured_s(size: int, busbw_gbps: float) -> float:
    return size * 2 * (GPUS - 1) / GPUS / (busbw_gbps * 1e9)


def decode(x: np.ndarray) -> tuple[Protocol, ...]:
    return tuple(sorted((Protocol(math.exp(x[i]), 1 / (1 + math.exp(-x[i + 1])))
                         for i in range(0, len(x), 2)), key=lambda p: p.latency_s))


def predicted_s(system, size: int, protocols: tuple[Protocol, ...]) -> float:
    return collective_time("all_reduce", system.interconnect, float(size), GPUS,
                           protocols)[0] + system.device.launch_overhead_s


def fit_protocols() -> tuple[tuple[Protocol, ...], float, float]:
    """(protocols, fit-half MAPE %, held-out-half MAPE %) on the table's 8-GPU curve."""
    system = load_system("mi300x-x8")
    fit = POINTS[0::2]
    held = POINTS[1::2]

    def objective(x: np.ndarray) -> float:
        p = decode(x)
        return mape([predicted_s(system, s, p) for s, _ in fit],
                    [measured_s(s, bw) for s, bw in fit])

    def logit(q: float) -> float:
        return math.log(q / (1 - q))

    starts = [np.array([math.log(a), logit(e1), math.log(b), logit(e2), math.log(c), logit(e3)])
              for a, b, c in ((5e-6, 20e-6, 60e-6), (10e-6, 30e-6, 100e-6))
              for e1, e2, e3 in ((0.05, 0.3, 0.8), (0.1, 0.5, 0.9))]
    x, f = minimise(objective, starts)
    protocols = decode(x)
    held_mape = mape([predicted_s(system, s, protocols) for s, _ in held],
                     [measured_s(s, bw) for s, bw in held])
    return protocols, f, held_mape


def main() -> None:
    system = load_system("mi300x-x8")
    protocols, f, held_mape = fit_protocols()
    print(f"fit half MAPE {f:.1f} %, held-out half MAPE {held_mape:.1f} %")
    print("protocols:")
    for p in protocols:
        print(f"- latency_s: {p.latency_s:.4g}\n  efficiency: {p.efficiency:.4g}")
    print("\n| bytes | measured us | predicted us (8 GPUs) | 2 GPUs | ideal (before) 8 GPUs |")
    print("|---:|---:|---:|---:|---:|")
    for s, bw in POINTS:
        ideal = collective_time("all_reduce", system.interconnect, float(s), GPUS)[0] \
            + system.device.launch_overhead_s
        two = collective_time("all_reduce", system.interconnect, float(s), 2, protocols)[0] \
            + system.device.launch_overhead_s
        print(f"| {s} | {measured_s(s, bw) * 1e6:.1f} | {predicted_s(system, s, protocols) * 1e6:.1f}"
              f" | {two * 1e6:.1f} | {ideal * 1e6:.1f} |")


if __name__ == "__main__":
    main()
