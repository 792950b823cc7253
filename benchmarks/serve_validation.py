"""The serving simulator against public serving runs (krakenlm/serving/data/serving_runs.json).

    python benchmarks/serve_validation.py [--json docs/data/serve-validation.json]
                                          [--plot docs/img/serve-validation.png] [--seeds 0,1,2]
                                          [--source llmk8s] [--engine-only]

Every run of the file is replayed (`serving.validation.replay_run`: its prompts and outputs in
order, its arrival process, the engine's defaults on its GPUs, the prefix cache as the earlier
runs on the same server left it) once per arrival seed, and every metric the run measured is
scored (relative error of the mean over the seeds; a statistic computed from the run's saved
per-request values, such as the TTFT p90 of its `ttfts_s`, is scored like a printed one).
Every score is held out: the one constant fitted on these runs, a shared server's host time
scale, is fitted leave-one-source-out (`benchmarks/serve_host_fit.py`; each run is replayed with
the scale fitted on the other sources' runs of its server, `validation.host_scale`), and nothing
else is fitted on them, so the leave-one-source-out score (each source scored by a simulator
that never saw it) is the plain score of that source's runs. A second replay with a cold prefix
cache shows how much the server's history matters (only for runs that have one). Prints one
line per run and metric, the medians over each source's runs and over all runs against the
issue's goals (naming the goals' metrics a source or no run states); writes the JSON and the
plot. `--source` replays one source's runs only; `--engine-only` reports the engine's own times
(no front end: `replay_run(client_side=False)`), the "engine only" columns of docs/serving.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from krakenlm.fileio import write_bytes_atomically, write_text_atomically
from krakenlm.serving.validation import host_scale, load_host_scales, load_runs, medians, \
    replay_run, score

# the goals: median over runs of the relative error
GOALS = {"e2e_mean": 0.06, "e2e_p99": 0.08, "ttft_mean": 0.12, "ttft_p90": 0.15,
         "ttft_p99": 0.20, "tpot_mean": 0.05}


def _mean_summary(summaries: list[dict]) -> dict:
    """Seed-mean of every (section, statistic) number of the summaries."""
    out: dict = {}
    for section, stats in summaries[0].items():
        if isinstance(stats, dict):
            out[section] = {k: float(np.mean([s[section][k] for s in summaries]))
                            for k, v in stats.items() if isinstance(v, float | int)
                            and all(s[section][k] is not None for s in summaries)}
    return out


def print_against_goals(scores: dict, errors: Callable[[str, dict], str], missing: str) -> None:
    """One line per metric of `scores` (medians over runs): the errors `errors` writes of it,
    its number of runs and the issue's goal where there is one; then one line saying `missing`
    for each goal metric `scores` lacks."""
    for k, v in scores.items():
        goal = GOALS.get(k)
        print(f"  {k:32s} {errors(k, v)}  ({v['runs']} runs)"
              + (f"  goal {100 * goal:.0f} %" if goal else ""))
    for k in GOALS:
        if k not in scores:
            print(f"  {k:32s} {missing}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--source", default=None, help="replay only this source's runs")
    parser.add_argument("--engine-only", action="store_true",
                        help="the engine's times, without the profile's front end")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    sources, runs = load_runs()
    by_id = {r.id: r for r in runs}
    if args.source is not None:
        if args.source not in sources:
            parser.error(f"--source {args.source!r} is not one of {', '.join(sources)}")
        runs = [r for r in runs if r.source == args.source]
    client_side = not args.engine_only
    started = time.process_time()
    results, cold_scores = [], []
    for run in runs:
        warm, cold = [], []
        for seed in seeds:
            report, summary = replay_run(run, by_id, seed, client_side)
            warm.append(summary)
            if run.served_before or run.test_prompt_first:
                summary = replay_run(replace(run, served_before=(), test_prompt_first=False),
                                     by_id, seed, client_side)[1]
            cold.append(summary)
            if run.rate_per_s is None:
                break  # no randomness (all at once, capped or not): one seed is all seeds
        scored = score(run, _mean_summary(warm))
        cold_scores.append(score(run, _mean_summary(cold)))
        results.append({"id": run.id, "source": run.source, "locator": run.locator,
                        "model": run.model, "system": run.system, "tp": run.tp,
                        "arrival": run.arrival, "rate_per_s": run.rate_per_s,
                        "max_concurrency": run.max_concurrency,
                        "requests": len(run.prompt_tokens), "seeds": len(warm),
                        "kv_blocks_predicted": report.setup["kv_cache"]["blocks"],
                        "kv_blocks_logged": run.kv_blocks_logged,
                        "host_time_scale": host_scale(run),
                        "scores": scored, "cold_cache_scores": cold_scores[-1]})
        for k, v in scored.items():
            print(f"{run.id:28s} {k:32s} predicted {v['predicted']:10.4g} measured "
                  f"{v['measured']:10.4g} error {100 * v['bias']:+7.1f} %")
    by_source = {name: medians([r["scores"] for r in results if r["source"] == name])
                 for name in sources if any(r["source"] == name for r in results)}
    for name, held_out in by_source.items():
        print(f"\nleave-one-source-out: {name} (median over its runs, |error|)")
        print_against_goals(
            held_out, lambda k, v: f"{100 * v['median']:6.1f} %  worst {100 * v['worst']:6.1f} %",
            "not stated by this source's runs")
    summary = medians([r["scores"] for r in results])
    cold = medians(cold_scores)
    print("\nall sources: median over runs (|error|), warm prefix cache / cold; goal")
    print_against_goals(
        summary, lambda k, v: f"{100 * v['median']:6.1f} % / {100 * cold[k]['median']:6.1f} %",
        "no run measured it")
    out = {"command": " ".join(["python benchmarks/serve_validation.py", *sys.argv[1:]]),
           "seeds": seeds, "sources": sources, "runs": results,
           "leave_one_source_out": by_source,
           "not_stated_by_source": {name: [k for k in GOALS if k not in held_out]
                                    for name, held_out in by_source.items()},
           "medians": summary,
           "medians_cold_cache": cold, "goals": GOALS,
           "not_measured_by_any_run": [k for k in GOALS if k not in summary],
           "fitted_on_these_runs": {
               "what": "each shared server's host time scale, leave-one-source-out only: a "
                       "run is replayed with the scale fitted without its source",
               "host_time_scale_without_source": load_host_scales()},
           "cpu_s": time.process_time() - started}
    if args.json:
        write_text_atomically(Path(args.json), json.dumps(out, indent=1) + "\n")
    if args.plot:
        write_bytes_atomically(Path(args.plot), _plot(results))


BARS_UP_TO = 12  # a source with more runs is drawn as the spread of its runs per metric


def _plot(results: list[dict]) -> bytes:
    """One panel per source: predicted vs measured (%) per metric. A source of at most
    BARS_UP_TO runs has one bar per run (its legend beside the panel); a larger one the spread
    of its runs per metric: a box of the quartiles with the median, and every run as a dot,
    coloured by its system."""
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["source"] for r in results))
    fig, axes = plt.subplots(len(names), 1, figsize=(13, 4.2 * len(names)), squeeze=False,
                             layout="constrained")
    for ax, name in zip(axes[:, 0], names):
        runs = [r for r in results if r["source"] == name]
        metrics = sorted({k for r in runs for k in r["scores"]})
        x = np.arange(len(metrics))
        if len(runs) <= BARS_UP_TO:
            width = 0.8 / len(runs)
            for i, r in enumerate(runs):
                bias = [100 * r["scores"][k]["bias"] if k in r["scores"] else np.nan
                        for k in metrics]
                rate = "burst" if r["rate_per_s"] is None else f"{r['rate_per_s']:g}/s"
                if r.get("max_concurrency"):
                    rate += f", {r['max_concurrency']} in flight"
                ax.bar(x + i * width, bias, width, color=plt.cm.tab20(i),
                       label=f"{r['id'].removeprefix(name + '-')} ({rate})")
            ax.set_xticks(x + 0.4 - width / 2, metrics, rotation=30, ha="right", fontsize=8)
            ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
            what = "one bar per run"
        else:
            systems = sorted({r["system"] for r in runs})
            values = [[100 * r["scores"][k]["bias"] for r in runs if k in r["scores"]]
                      for k in metrics]
            ax.boxplot(values, positions=x, widths=0.6, showfliers=False,
                       medianprops={"color": "k"})
            for j, k in enumerate(metrics):
                scored = [r for r in runs if k in r["scores"]]
                offsets = np.linspace(-0.25, 0.25, len(scored)) if len(scored) > 1 else [0.0]
                for dx, r in zip(offsets, scored):
                    ax.plot(x[j] + dx, 100 * r["scores"][k]["bias"], "o", ms=2.5, alpha=0.6,
                            color=plt.cm.tab10(systems.index(r["system"])))
            for i, system in enumerate(systems):
                ax.plot([], [], "o", ms=4, color=plt.cm.tab10(i), label=system)
            ax.set_xticks(x, metrics, rotation=30, ha="right", fontsize=8)
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
            what = f"{len(runs)} runs: quartiles, median and every run"
        ax.axhline(0, color="k", lw=0.6)
        ax.set_ylabel("predicted vs measured (%)")
        ax.set_title(f"source {name}: krakenlm sim serve against public runs "
                     f"(nothing fitted on them; {what})", fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


if __name__ == "__main__":
    main()
