"""Simulator fidelity at the model level: what each piece of the calibration buys.

    python benchmarks/sim_fidelity.py [--json docs/data/sim-fidelity.json]

The public end-to-end set (validation_data/model_measurements.csv, 423 scored rows) simulated
three ways, every row with its framework's software profile:

1. template: the LLMCompass-style tile models with the template constants (`--mode tile`),
   what the simulator did before the GPU kernel calibrations;
2. kernels: the GPU kernel models fitted on the measured kernel tables, with the software
   profiles' sourced host constants only (the per-system fitted host constants removed);
3. shipped: (2) plus the host constants `sim fit-software` fitted on the fit half.

For each: MAPE over all rows, the fit half and the held-out half, per (source, system,
metric), per metric, for the optimised runtimes' TTFT and for the issue's own case (batch-1
Splitwise prefill of 1k-4k-token prompts), and how many rows are predicted too fast. Operator- and layer-level figures come from
`krakenlm sim validate --level all --json`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from krakenlm.simulator.constants.software import load_software
from krakenlm.simulator.measurements.models import stats
from krakenlm.simulator.validation.models import validate_models


def _without_fitted_host(name: str):
    profile = load_software(name)
    return dataclasses.replace(profile, host_systems={})


def _summary(report) -> dict:
    return {"all": report.overall(), "fit": report.overall("fit"),
            "held_out": report.overall("held_out"),
            "by_source_system_metric": report.groups(("source", "system", "metric")),
            "held_out_by_source_system_metric": report.groups(("source", "system", "metric"),
                                                              "held_out")}


def _mape(rows: list[dict]) -> dict:
    return stats(rows) if rows else {"n": 0}


def case_subsets(report) -> dict:
    """MAPE per metric, of the optimised runtimes' TTFT, and of the issue's own case (Splitwise:
    batch-1 prefill of 1k-4k-token prompts of BLOOM-176B and Llama-2-70B), all rows and per
    system, each over all rows and over the held-out half."""
    rows = [r for r in report.rows if not r["anomalous"]]
    picks = {f"metric {m}": lambda r, m=m: r["metric"] == m for m in ("ttft", "tpot", "e2e")}
    picks["optimised runtimes ttft"] = lambda r: (
        r["metric"] == "ttft" and r["source"].startswith(("trtllm", "nim")))
    def headline(r):
        return (r["source"] == "splitwise" and r["metric"] == "ttft" and r["batch"] == 1
                and 1000 <= r["prompt"] <= 4096)
    picks["issue case"] = headline
    for system in ("a100-80gb-x8", "h100-80gb-x8"):
        picks[f"issue case {system}"] = lambda r, s=system: headline(r) and r["system"] == s
    return {name: {"all": _mape([r for r in rows if pick(r)]),
                   "held_out": _mape([r for r in rows if pick(r) and r["half"] == "held_out"])}
            for name, pick in picks.items()}


def speedup(report, fast: str = "h100-80gb-x8", slow: str = "a100-80gb-x8",
            metric: str = "ttft", min_prompt: int = 0, batch: int | None = None) -> dict:
    """Measured and predicted `slow`/`fast` time ratios over setups measured on both systems."""
    by = {}
    for r in report.rows:
        if (r["metric"] == metric and not r["anomalous"] and r["system"] in (fast, slow)
                and r["prompt"] >= min_prompt and (batch is None or r["batch"] == batch)):
            key = (r["source"], r["model"], r["tp"], r["batch"], r["prompt"], r["output"])
            by.setdefault(key, {})[r["system"]] = r
    pairs = [(v[slow]["measured_s"] / v[fast]["measured_s"],
              v[slow]["predicted_s"] / v[fast]["predicted_s"])
             for v in by.values() if len(v) == 2]
    if not pairs:
        return {"n": 0}
    measured, predicted = zip(*pairs)
    return {"n": len(pairs), "measured_min": min(measured), "measured_max": max(measured),
            "measured_mean": sum(measured) / len(pairs), "predicted_min": min(predicted),
            "predicted_max": max(predicted), "predicted_mean": sum(predicted) / len(pairs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    variants = {
        "template": validate_models(software_override=_without_fitted_host, mode="tile"),
        "kernels": validate_models(software_override=_without_fitted_host),
        "shipped": validate_models(),
    }
    # the case: batch-1 prefill of 1k-4k-token prompts
    out = {name: {**_summary(r), "h100_over_a100_ttft": speedup(r),
                  "h100_over_a100_ttft_batch1_prompt_ge_1k": speedup(r, min_prompt=1000, batch=1),
                  "subsets": case_subsets(r)}
           for name, r in variants.items()}
    print(f"{'variant':10s} {'n':>4s} {'MAPE':>6s} {'fit':>6s} {'held-out':>9s} {'too fast':>9s}")
    for name, s in out.items():
        a = s["all"]
        print(f"{name:10s} {a['n']:4d} {a['mape_pct']:6.1f} {s['fit']['mape_pct']:6.1f} "
              f"{s['held_out']['mape_pct']:9.1f} {a['too_fast']:5d}/{a['n']}")
    print("\nsubsets, MAPE (held-out) [too fast], template / kernels / shipped:")
    for label in out["shipped"]["subsets"]:
        cells = []
        for s in out.values():
            q = s["subsets"][label]
            cells.append(f"{q['all']['mape_pct']:5.1f} ({q['held_out']['mape_pct']:5.1f}) "
                         f"[{q['all']['too_fast']}/{q['all']['n']}]")
        print(f"  {label:28s} " + " / ".join(cells))
    print("\nA100 / H100 TTFT ratio on setups measured on both (measured vs predicted):")
    subsets = {"all setups": "h100_over_a100_ttft",
               "batch 1, prompt >= 1k": "h100_over_a100_ttft_batch1_prompt_ge_1k"}
    for name, s in out.items():
        for label, key in subsets.items():
            q = s[key]
            if q["n"]:
                print(f"  {name:10s} {label:22s} n={q['n']:2d}: measured {q['measured_min']:.2f}-"
                      f"{q['measured_max']:.2f} (mean {q['measured_mean']:.2f}), predicted "
                      f"{q['predicted_min']:.2f}-{q['predicted_max']:.2f} "
                      f"(mean {q['predicted_mean']:.2f})")
    print("\nheld-out MAPE per source, system and metric (template / kernels / shipped):")
    rows = {v: {(g["source"], g["system"], g["metric"]): g
                for g in out[v]["held_out_by_source_system_metric"]} for v in out}
    for key in sorted(rows["shipped"]):
        cells = " / ".join(f"{rows[v][key]['mape_pct']:5.1f}" if key in rows[v] else "  -  "
                           for v in out)
        print(f"  {' '.join(key):45s} n={rows['shipped'][key]['n']:3d}  {cells}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()
