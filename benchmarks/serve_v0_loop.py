"""How much of the `lambda` runs' missing TTFT vLLM V0's API server on the engine's event loop
explains: an in-sample attribution of the mechanism, not a validation score.

    python benchmarks/serve_v0_loop.py [--loop-ms 0,0.5,0.75,1,1.25,1.5,2,2.5,3]
                                       [--source lambda] [--json docs/data/serve-v0-loop.json]
                                       [--plot docs/img/serve-v0-loop.png]

V0's OpenAI server runs the engine loop as a task of its own asyncio event loop, so it hands
requests to the engine one at a time and no step starts before every arrived request is
handed over (serving/vllm_v0.py; the profile's `frontend.engine_loop_request_s`, c). Until
stop 50 the shipped `vllm-v0` profile had c = 0 (no public per-request figure of vLLM 0.4-0.6's
API server); it now carries the time measured with vLLM's own server code
(benchmarks/vllm_v0_frontend/), and since stop 51 the 0.5.4 runs take 0.5.4's own form (the
front end's loop, `front_loop_*`); this sweep replays them in the engine-loop form. This sweep of one time per request (no per-token part) replays every run of the source (vLLM 0.5.4 bursts of
10, 20 and 160 prompts on one H100 server and one A100 server, TP 1-8) once per c of the grid,
client-side as `benchmarks/serve_validation.py` does, and reports per run the TTFT mean, p90
and p99 errors, and per server (the run's GPU: a host's speed belongs to its server) the median
|TTFT mean error| at each c and the c that minimises it. Because c is chosen on the runs it is
scored on, these numbers say whether one c per server can reproduce the bursts' first-token
waves at every TP and burst size (the mechanism's shape), not how well a prediction does on
unseen data. A within-source check gives the second-best evidence there is: c chosen on each
server's TP 1 runs, scored on its TP 2-8 runs.

TPOT and throughput are printed too: the hand-over delays the first step only, so they stay
within a point of c = 0 (a check that the mechanism does not leak into decode). Every replay
uses the profile's own host times (no server's host time scale, `replay_run(scale=1.0)`), as
when this study was made.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import sys
from pathlib import Path

import numpy as np

from krakenlm.fileio import write_bytes_atomically, write_text_atomically
from krakenlm.serving.validation import load_runs, replay_run, score
from krakenlm.simulator.constants.software import load_software

METRICS = ("ttft_mean", "ttft_p90", "ttft_p99", "tpot_mean")


def with_loop(c_s: float):
    """The `vllm-v0` profile with `frontend.engine_loop_request_s` = c_s and no per-token part
    (`engine_loop_token_s` = 0: this sweep is of one time per request, as before the profile
    carried the measured one)."""
    profile = load_software("vllm-v0")
    return dataclasses.replace(profile, frontend=dataclasses.replace(
        profile.frontend, engine_loop_request_s=c_s, engine_loop_token_s=0.0))


def server_of(run) -> str:
    return run.system.split("-")[0].upper()  # "h100-80gb-x8" -> "H100"


def sweep(runs, by_id, grid_ms: list[float]) -> list[dict]:
    """Per run and c: the scored metrics and the predicted first token (s). Every run is
    replayed in the engine-loop form (its `engine_version` left out: 0.5.4's runs take the
    front-loop form since stop 51, which this constant does not enter)."""
    out = []
    for c_ms in grid_ms:
        profile = with_loop(c_ms * 1e-3)
        for run in runs:
            run = dataclasses.replace(run, engine_version=None)
            report, summary = replay_run(run, by_id, software=profile, scale=1.0)
            scores = score(run, summary)
            first = min(r["first_token_s"] - r["arrival_s"] for r in report.rows)
            out.append({"id": run.id, "server": server_of(run), "tp": run.tp,
                        "prompts": len(run.prompt_tokens), "loop_ms": c_ms,
                        "first_token_s": first,
                        **{k: scores[k]["bias"] for k in METRICS if k in scores}})
    return out


def median_abs(rows: list[dict], metric: str = "ttft_mean") -> float:
    return float(np.median([abs(r[metric]) for r in rows if metric in r]))


def best_loop(rows: list[dict], grid_ms: list[float]) -> tuple[float, float]:
    """The grid's c with the smallest median |TTFT mean error| over `rows`, and that median."""
    scored = [(median_abs([r for r in rows if r["loop_ms"] == c]), c) for c in grid_ms]
    err, c = min(scored)
    return c, err


def analyse(rows: list[dict], runs, grid_ms: list[float]) -> dict:
    servers = sorted({server_of(r) for r in runs})
    out: dict = {"servers": {}, "all": {}}
    for c in grid_ms:
        at = [r for r in rows if r["loop_ms"] == c]
        out["all"][str(c)] = {m: median_abs(at, m) for m in METRICS}
    for srv in servers:
        mine = [r for r in rows if r["server"] == srv]
        curve = {str(c): median_abs([r for r in mine if r["loop_ms"] == c]) for c in grid_ms}
        c_best, err_best = best_loop(mine, grid_ms)
        tp1 = [r for r in mine if r["tp"] == 1]
        c_tp1, _ = best_loop(tp1, grid_ms) if tp1 else (None, None)
        rest = [r for r in mine if r["tp"] > 1]
        held = {m: median_abs([r for r in rest if r["loop_ms"] == c_tp1], m) for m in METRICS} \
            if c_tp1 is not None and rest else None
        zero = {m: median_abs([r for r in rest if r["loop_ms"] == grid_ms[0]], m)
                for m in METRICS} if rest else None
        out["servers"][srv] = {
            "runs": len({r["id"] for r in mine}),
            "median_abs_ttft_mean_by_loop_ms": curve,
            "in_sample_best_loop_ms": c_best, "in_sample_best_median_abs_ttft_mean": err_best,
            "tp1_chosen_loop_ms": c_tp1,
            "tp_gt1_median_abs_at_tp1_choice": held,
            f"tp_gt1_median_abs_at_{grid_ms[0]:g}_ms": zero}
    return out


def measured_first(run) -> float:
    return min(t for t in run.ttfts_s if t > 0)


def plot(rows: list[dict], grid_ms: list[float], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for srv in sorted({r["server"] for r in rows}):
        ys = [100 * median_abs([r for r in rows if r["server"] == srv and r["loop_ms"] == c])
              for c in grid_ms]
        ax.plot(grid_ms, ys, marker="o", label=f"{srv} server")
    ax.axhline(12, color="grey", ls=":", label="issue goal (TTFT mean, 12 %)")
    ax.set_xlabel("API server work per request on the engine's loop, c (ms)")
    ax.set_ylabel("median |TTFT mean error| (%)")
    ax.set_title("lambda (vLLM 0.5.4 bursts): in-sample, not a validation score", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    write_bytes_atomically(path, buf.getvalue())


def fail(message: str) -> None:
    """One `error:` line on stderr, exit status 2 (the project's bad-input contract)."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loop-ms", default="0,0.5,0.75,1,1.25,1.5,2,2.5,3")
    parser.add_argument("--source", default="lambda")
    parser.add_argument("--json")
    parser.add_argument("--plot")
    args = parser.parse_args(argv)
    try:
        grid_ms = sorted(float(x) for x in args.loop_ms.split(","))
    except ValueError:
        fail(f"error: --loop-ms {args.loop_ms!r} is not a comma-separated list of numbers "
                 "of milliseconds (e.g. 0,1,2)")
    if not grid_ms or grid_ms[0] < 0:
        fail("error: --loop-ms needs at least one value, none negative")
    _, runs = load_runs()
    by_id = {r.id: r for r in runs}
    mine = [r for r in runs if r.source == args.source and r.software == "vllm-v0"]
    if not mine:
        fail(f"error: source {args.source!r} has no vllm-v0 runs; the mechanism is V0's "
                 "(sources: " + ", ".join(sorted({r.source for r in runs})) + ")")
    rows = sweep(mine, by_id, grid_ms)
    result = analyse(rows, mine, grid_ms)
    for srv, a in result["servers"].items():
        print(f"{srv} server ({a['runs']} runs): median |TTFT mean error| by c (ms): "
              + ", ".join(f"{c}: {100 * v:.1f} %"
                          for c, v in a["median_abs_ttft_mean_by_loop_ms"].items()))
        print(f"  in-sample best c {a['in_sample_best_loop_ms']} ms "
              f"({100 * a['in_sample_best_median_abs_ttft_mean']:.1f} %); chosen on TP 1: "
              f"{a['tp1_chosen_loop_ms']} ms -> TP > 1 runs: "
              + (", ".join(f"{m} {100 * v:.1f} %" for m, v in
                           a["tp_gt1_median_abs_at_tp1_choice"].items())
                 if a["tp_gt1_median_abs_at_tp1_choice"] else "none"))
    first = {}
    for run in mine:
        c = result["servers"][server_of(run)]["in_sample_best_loop_ms"]
        r = next(x for x in rows if x["id"] == run.id and x["loop_ms"] == c)
        r0 = next(x for x in rows if x["id"] == run.id and x["loop_ms"] == grid_ms[0])
        first[run.id] = {"measured_s": measured_first(run), "at_best_s": r["first_token_s"],
                         f"at_{grid_ms[0]:g}_ms_s": r0["first_token_s"], "loop_ms": c}
        print(f"{run.id:44s} first token measured {1e3 * measured_first(run):7.1f} ms, "
              f"c={grid_ms[0]:g}: {1e3 * r0['first_token_s']:7.1f}, c={c}: "
              f"{1e3 * r['first_token_s']:7.1f}; TTFT mean {100 * r0['ttft_mean']:+6.1f} -> "
              f"{100 * r['ttft_mean']:+6.1f} %, TPOT mean {100 * r0['tpot_mean']:+6.1f} -> "
              f"{100 * r['tpot_mean']:+6.1f} %")
    result["first_token"] = first
    out = {"command": "python benchmarks/serve_v0_loop.py " + " ".join(argv or sys.argv[1:]),
           "source": args.source, "loop_ms_grid": grid_ms,
           "in_sample": "c is chosen on the runs it is scored on: an attribution, not a "
                        "validation score", **result, "rows": rows}
    if args.json:
        write_text_atomically(Path(args.json), json.dumps(out, indent=1) + "\n")
    if args.plot:
        plot(rows, grid_ms, Path(args.plot))


if __name__ == "__main__":
    main()
