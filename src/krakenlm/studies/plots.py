"""Plots for reports (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _model_and_seed(run_name: str) -> tuple[str, str]:
    model, _, seed = run_name.rpartition("-seed")
    return (model, seed) if model else (run_name, "")


def _finish(fig, ax, path: Path, title: str) -> None:
    """Title, grid and legend of a one-axis report figure, then the PNG at `path`."""
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_loss_curves(curves: dict[str, list[dict]], path: Path, *, title: str) -> None:
    """Left: training loss against tokens. Right: validation loss, zoomed. One colour per
    model, one line style per seed, so repeated seeds of a model read as one family."""
    models = list(dict.fromkeys(_model_and_seed(name)[0] for name in curves))
    seeds = list(dict.fromkeys(_model_and_seed(name)[1] for name in curves))
    styles = ["-", "--", ":", "-."]
    fig, (ax_train, ax_val) = plt.subplots(1, 2, figsize=(12, 5))
    for name, rows in curves.items():
        model, seed = _model_and_seed(name)
        colour = f"C{models.index(model)}"
        style = styles[seeds.index(seed) % len(styles)]
        train = [r for r in rows if "loss" in r]
        tokens_per_step = train[-1]["tokens"] / train[-1]["step"]
        ax_train.plot([r["tokens"] for r in train], [r["loss"] for r in train], style,
                      color=colour, alpha=0.7, linewidth=1, label=name)
        val = [r for r in rows if "val_loss" in r]
        ax_val.plot([r["step"] * tokens_per_step for r in val], [r["val_loss"] for r in val],
                    style, marker="o", color=colour, linewidth=1.5, markersize=3, label=name)
    for ax, what in ((ax_train, "training loss"), (ax_val, "validation loss (held-out plays)")):
        ax.set_xlabel("training tokens")
        ax.set_ylabel(f"{what} (nats/token)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_gap_vs_tokens(gaps: dict[str, list[dict]], path: Path, *, baseline: str,
                       title: str = "Gap to the baseline as training goes on (95 % interval "
                                    "over seeds)",
                       xlabel: str = "training tokens") -> None:
    """Validation-perplexity gap to the baseline against training tokens, one line per model,
    its 95 % interval over seeds shaded where there are two seeds or more."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (preset, rows) in enumerate(gaps.items()):
        if not rows:
            continue
        tokens = [r["tokens"] for r in rows]
        ax.plot(tokens, [100 * r["gap"] for r in rows], "o-", color=f"C{i + 1}", label=preset,
                markersize=3)
        if all(r["low"] is not None for r in rows):
            ax.fill_between(tokens, [100 * r["low"] for r in rows],
                            [100 * r["high"] for r in rows], color=f"C{i + 1}", alpha=0.15)
    ax.axhline(0.0, color="C0", linewidth=1, label=baseline)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"validation perplexity vs {baseline} (%)")
    _finish(fig, ax, path, title)


def plot_ratio_vs_size(points, trend: dict | None, path: Path, *, title: str) -> None:
    """Perplexity ratio against baseline parameters (log axis), each size with its 95 %
    interval, and the fitted trend with its simulated 95 % band where there is one."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for p in points:
        err = None if p.low is None else [[p.ratio - p.low], [p.high - p.ratio]]
        ax.errorbar([p.params], [p.ratio], yerr=err, fmt="o", color="C1", capsize=4)
        ax.annotate(p.label, (p.params, p.ratio), textcoords="offset points", xytext=(6, 6),
                    fontsize=8)
    if trend and trend["band"]:
        band = trend["band"]
        xs = [b["params"] for b in band]
        ax.plot(xs, [b["ratio"] for b in band], "-", color="C1", label="weighted fit")
        ax.fill_between(xs, [b["low"] for b in band], [b["high"] for b in band], color="C1",
                        alpha=0.15, label="95 % band (simulated refits)")
    ax.axhline(1.0, color="C0", linewidth=1, label="equal perplexity")
    ax.axhline(trend["target_ratio"] if trend else 1.02, color="grey", linestyle=":",
               linewidth=1, label="2 % gap")
    ax.set_xscale("log")
    ax.set_yscale("log")  # a band in log ratio is symmetric on this axis
    lows = [p.low or p.ratio for p in points]
    highs = [p.high or p.ratio for p in points]
    ax.set_ylim(min(lows + [0.9]) / 1.2, max(highs + [1.1]) * 1.2)  # the band may run off
    ax.set_xlabel("parameters (baseline model)")
    ax.set_ylabel("perplexity ratio to the baseline")
    _finish(fig, ax, path, title)


ARCH_LABELS = {"gpt": "standard (Megatron TP)", "parallel": "parallel block", "kraken": "Kraken"}


def plot_ttft_grid(rows, path: Path, *, title: str) -> None:
    """Grouped bars: TTFT of each architecture for each (model, prompt, TP) configuration."""
    fig, ax = plt.subplots(figsize=(max(8, 0.75 * len(rows)), 5))
    width = 0.27
    for i, arch in enumerate(ARCH_LABELS):
        xs = [j + (i - 1) * width for j in range(len(rows))]
        ax.bar(xs, [r.ttft_s[arch] * 1e3 for r in rows], width, label=ARCH_LABELS[arch],
               color=f"C{i}")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{r.shape.split('-', 1)[1]}\n{r.prompt_tokens} tok\nTP {r.tp}"
                        for r in rows], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("time to first token (ms, log scale)")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_layer_breakdown(layer_s: dict[str, dict[str, float]], path: Path, *, title: str) -> None:
    """Stacked horizontal bars: one layer's time per category, one bar per architecture."""
    archs = [a for a in ARCH_LABELS if a in layer_s]
    categories = sorted({c for layer in layer_s.values() for c in layer})
    fig, ax = plt.subplots(figsize=(11, 3.5))
    for y, arch in enumerate(archs):
        left = 0.0
        for k, category in enumerate(categories):
            value = layer_s[arch].get(category, 0.0) * 1e3
            ax.barh(y, value, left=left, color=f"C{k}", label=category if y == 0 else None)
            left += value
    ax.set_yticks(range(len(archs)))
    ax.set_yticklabels([ARCH_LABELS[a] for a in archs])
    ax.set_xlabel("ms per layer per device")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
