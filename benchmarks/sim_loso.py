"""Leave-one-source-out validation of the whole-model predictions, and the coverage of the 80 %
intervals on sources nobody fitted.

    python benchmarks/sim_loso.py [--out docs/data/sim-loso] [--plot docs/img/sim-loso.png]
                                  [--install-residuals]

Writes the per-row CSV, the slice tables as Markdown (source, TP, batch band, device, phase:
MAPE and mean signed error with the constants refitted without the row's source, beside the
shipped constants) and a PNG of the signed error per slice. `--install-residuals` also writes
the residual table the query's intervals read (simulator/constants/model_residuals.csv) and
the bands worked out from it (model_residual_bands.json beside it, `uncertainty.shipped_bands`).
The same numbers: `krakenlm sim validate --level models --loso`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from krakenlm.fileio import write_text_atomically
from krakenlm.simulator.calibration.loso import SLICES, coverage, validate_loso, write_residuals
from krakenlm.simulator.uncertainty import residuals_path, write_shipped_bands


def tables(report, cov) -> str:
    lines = []
    o, s = report.overall(), report.overall("shipped_error_pct")
    lines.append(f"Overall: leave-one-source-out MAPE {o['mape_pct']:.1f} %, mean signed "
                 f"{o['mean_signed_pct']:+.1f} % ({o['n']} rows); shipped constants (fitted on "
                 f"the fit half of every source) {s['mape_pct']:.1f} % / {s['mean_signed_pct']:+.1f} %;"
                 f" 80 % interval covers {cov['overall']['coverage_pct']:.1f} % of unseen-source "
                 f"rows ({cov['mean_over_sources_pct']:.1f} % averaged over the {cov['sources']} "
                 f"sources; median width {cov['overall']['median_width_pct']:.0f} % of the "
                 f"prediction; between-source sd of ln(measured / predicted) "
                 f"{cov['between_source_sd']:.3f}).\n")
    for key in SLICES:
        shipped = {g[key]: g for g in report.by((key,), "shipped_error_pct")}
        covered = {g[key]: g for g in cov[key]}
        lines.append(f"| {key.replace('_', ' ')} | n | LOSO MAPE | LOSO signed | shipped MAPE | "
                     "shipped signed | 80 % interval covers | median width |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for g in report.by((key,)):
            sh, c = shipped[g[key]], covered[g[key]]
            lines.append(f"| {g[key]} | {g['n']} | {g['mape_pct']:.1f} % | "
                         f"{g['mean_signed_pct']:+.1f} % | {sh['mape_pct']:.1f} % | "
                         f"{sh['mean_signed_pct']:+.1f} % | {c['coverage_pct']:.0f} % | "
                         f"{c['median_width_pct']:.0f} % |")
        lines.append("")
    return "\n".join(lines)


def plot(report, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    widths = [max(1, len(report.by((key,)))) for key in SLICES]
    fig, axes = plt.subplots(1, len(SLICES), figsize=(0.55 * sum(widths) + 2, 4.2), sharey=True,
                             gridspec_kw={"width_ratios": widths})
    for ax, key in zip(axes, SLICES):
        loso = report.by((key,))
        ship = {g[key]: g for g in report.by((key,), "shipped_error_pct")}
        x = range(len(loso))
        ax.bar([i - 0.2 for i in x], [g["mean_signed_pct"] for g in loso], 0.4,
               label="left-out source")
        ax.bar([i + 0.2 for i in x], [ship[g[key]]["mean_signed_pct"] for g in loso], 0.4,
               label="shipped (fit half)")
        ax.axhspan(-5, 5, color="0.9", zorder=0)
        ax.set_xticks(list(x))
        ax.set_xticklabels([str(g[key]).replace("_v", "\nv").replace("_llm", "\nllm")
                            for g in loso], fontsize=7, rotation=60, ha="right",
                           rotation_mode="anchor")
        ax.set_title(key.replace("_", " "))
        ax.axhline(0, color="k", lw=0.5)
    axes[0].set_ylabel("mean signed error %")
    axes[0].legend(fontsize=7)
    fig.suptitle("Whole models, leave-one-source-out (grey: the +-5 % goal)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/data/sim-loso")
    parser.add_argument("--plot", default="docs/img/sim-loso.png")
    parser.add_argument("--install-residuals", action="store_true")
    args = parser.parse_args()
    report = validate_loso()
    cov = coverage(report)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_residuals(report, out / "rows.csv")
    write_text_atomically(out / "tables.md", tables(report, cov))
    write_text_atomically(out / "folds.json", json.dumps(
        {"folds": [f.__dict__ for f in report.folds], "coverage": cov}, indent=1, default=float))
    plot(report, Path(args.plot))
    if args.install_residuals:
        write_residuals(report, residuals_path())
        write_shipped_bands(residuals_path())
    print(tables(report, cov))


if __name__ == "__main__":
    main()
