"""A server's host time scale, fitted leave-one-source-out on the public serving runs.

The host and front-end constants of a software profile were measured on some CPU (this
machine's, for the vLLM V0 front end and multi-step host; the servers of Vidur and of vLLM's own
issues for the rest), and the servers of the validation runs have CPUs of their own that no
source names. Where one machine served the runs of two or more sources (LambdaLabs ran its
August vLLM 0.5.4 sweep and its September 0.6.0 sweep on one A100 server and one H100 server,
`benchmark_1x2x4x8x.sh`: "Run 1x, 2x, 4x, 8x On A Server"), that machine's scale s (its CPU
takes s times as long for the profile's host and front-end work: `SoftwareProfile.
host_time_scaled`) can be fitted on one source's runs and tested on another's. Each source's
runs on the server are replayed with s fitted on the runs of the *other* sources there
(validation.py `host_scale`), as the static simulator's leave-one-source-out does with its
fitted constants.

The fit: s on the grid 2^(k/16) (k = -8 .. 24: 0.71 to 2.83, steps of 4.4 %), first every
fourth point, then the points around the best, minimising the median |relative error| of the
TTFT mean over the runs; ties go to the scale nearest 1. The TTFT mean because a burst's first
tokens wait on the API server's per-request work, which the profile times with the engines' own
code on this machine (benchmarks/vllm_v0_frontend: the reference CPU of the scale, the same for
0.5.4 and 0.6.0), while a TPOT also carries the GPU's step and host constants measured on other
CPUs. Averaging TTFT, TPOT and E2E means instead (`metrics`; the first form shipped, stop 54)
gives fits that disagree between the two sources on the H100 server (1.30 against 1.04), the
0.6.0 runs' too-short H100 decode step taken up as host time; the TTFT fits agree on both servers
(docs/serving.md "Stop 54").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .validation import ServingRun, replay_run, score

# the metrics whose median |error| the objective averages (validation.score's keys)
OBJECTIVE_METRICS = ("ttft_mean",)
GRID_STEPS_PER_DOUBLING = 16
GRID_K = (-8, 24)  # 2^(-8/16) = 0.71 .. 2^(24/16) = 2.83
COARSE_STRIDE = 4


def grid_scale(k: int) -> float:
    """The k-th point of the grid: 2^(k / GRID_STEPS_PER_DOUBLING)."""
    return float(2.0 ** (k / GRID_STEPS_PER_DOUBLING))


def objective(runs: Sequence[ServingRun], by_id: dict[str, ServingRun], scale: float,
              metrics: Sequence[str] = OBJECTIVE_METRICS) -> float:
    """Mean over `metrics` (validation.score's keys) that any of `runs` states of the median
    |relative error| over the runs stating it, with every run replayed at host time scale
    `scale`."""
    errors: dict[str, list[float]] = {}
    for run in runs:
        _, summary = replay_run(run, by_id, scale=scale)
        for metric, s in score(run, summary).items():
            if metric in metrics:
                errors.setdefault(metric, []).append(s["error"])
    if not errors:
        raise ValueError(f"no run states any of {', '.join(metrics)}")
    return float(np.mean([np.median(v) for v in errors.values()]))


def fit_scale(runs: Sequence[ServingRun], by_id: dict[str, ServingRun],
              progress: Callable[[float, float], None] | None = None,
              metrics: Sequence[str] = OBJECTIVE_METRICS) -> tuple[float, dict[float, float]]:
    """The grid scale minimising `objective` on `runs` (module docstring) and every
    objective value evaluated, by scale."""
    low, high = GRID_K
    values: dict[int, float] = {}

    def at(k: int) -> float:
        if k not in values:
            values[k] = objective(runs, by_id, grid_scale(k), metrics)
            if progress is not None:
                progress(grid_scale(k), values[k])
        return values[k]

    def best() -> int:
        return min(values, key=lambda k: (values[k], abs(k)))

    for k in range(low, high + 1, COARSE_STRIDE):
        at(k)
    centre = best()
    for k in range(max(low, centre - COARSE_STRIDE + 1), min(high, centre + COARSE_STRIDE - 1) + 1):
        at(k)
    k = best()
    return grid_scale(k), {grid_scale(j): v for j, v in sorted(values.items())}


def fit_servers(runs: Sequence[ServingRun],
                progress: Callable[[str, str, float, float], None] | None = None,
                metrics: Sequence[str] = OBJECTIVE_METRICS) -> dict:
    """For every server that runs of two or more sources name: per source, the scale fitted on
    the server's runs of the other sources ("without"), with the runs counted per source and
    each fit's objective values ("objective": {source left out: {scale: value}})."""
    by_id = {r.id: r for r in runs}
    servers: dict[str, dict[str, list[ServingRun]]] = {}
    for r in runs:
        if r.server is not None:
            servers.setdefault(r.server, {}).setdefault(r.source, []).append(r)
    out = {}
    for server, by_source in sorted(servers.items()):
        if len(by_source) < 2:
            continue
        without, curves = {}, {}
        for left_out in sorted(by_source):
            rest = [r for src, rs in sorted(by_source.items()) if src != left_out for r in rs]

            def step(scale: float, value: float, server=server, left_out=left_out) -> None:
                if progress is not None:
                    progress(server, left_out, scale, value)
            without[left_out], curve = fit_scale(rest, by_id, step, metrics)
            curves[left_out] = {f"{s:.4f}": round(v, 6) for s, v in curve.items()}
        out[server] = {"runs": {src: len(rs) for src, rs in sorted(by_source.items())},
                       "without": without, "objective": curves}
    return out
