"""Predicted-vs-measured log-log plots, one per validation level."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


def scatter(points: list[dict[str, Any]], path: str | Path, title: str, colour_key: str,
            marker_key: str | None = None, hollow: Callable[[dict], bool] | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(7, 6.5))
    colours = plt.get_cmap("tab10")
    markers = "osD^v<>pP*X"
    groups = sorted({p[colour_key] for p in points})
    kinds = sorted({p[marker_key] for p in points}) if marker_key else [None]
    for gi, g in enumerate(groups):
        for ki, k in enumerate(kinds):
            sel = [p for p in points if p[colour_key] == g and (k is None or p[marker_key] == k)]
            if not sel:
                continue
            colour = colours(gi % 10)
            label = f"{g}" + (f" / {k}" if k is not None else "")
            ax.scatter([p["measured_s"] for p in sel], [p["predicted_s"] for p in sel], s=14,
                       marker=markers[ki % len(markers)], edgecolors=colour, linewidths=0.8,
                       facecolors=colour if (hollow is None or not hollow(sel[0])) else "none",
                       alpha=0.8, label=label)
    if points:
        lo = min(min(p["measured_s"], p["predicted_s"]) for p in points) / 1.5
        hi = max(max(p["measured_s"], p["predicted_s"]) for p in points) * 1.5
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        for f in (0.9, 1.1):
            ax.plot([lo, hi], [lo * f, hi * f], "k:", lw=0.6)
    ax.set(xscale="log", yscale="log", xlabel="measured (s)", ylabel="predicted (s)", title=title)
    ax.legend(fontsize=6.5, loc="upper left", ncol=2 if len(groups) * len(kinds) > 12 else 1)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
