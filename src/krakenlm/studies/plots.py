"""Plots for reports (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_loss_curves(curves: dict[str, list[dict]], path: Path, *, title: str) -> None:
    """Training loss (thin) and validation loss (markers) against tokens, one colour per run."""
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (name, rows) in enumerate(curves.items()):
        colour = f"C{i}"
        train = [r for r in rows if "loss" in r]
        tokens_per_step = train[-1]["tokens"] / train[-1]["step"]
        ax.plot([r["tokens"] for r in train], [r["loss"] for r in train], color=colour,
                alpha=0.6, linewidth=1, label=f"{name} train")
        val = [r for r in rows if "val_loss" in r]
        if val:
            ax.plot([r["step"] * tokens_per_step for r in val], [r["val_loss"] for r in val],
                    "o-", color=colour, linewidth=2, markersize=4, label=f"{name} val")
    ax.set_xlabel("training tokens")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
