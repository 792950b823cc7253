"""Train several models on the same corpus with the same token budget and compare them.

This is the main job of `make demo` (gpt-tiny against kraken-tiny-2way, a couple of minutes
each) and of the quality benchmark (four architectures, two seeds, longer runs). Each run is an
ordinary `train` run directory, so a comparison interrupted half-way resumes run by run.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from ..evaluation.perplexity import evaluate
from ..models import get_preset
from ..training import checkpoint
from ..training.trainer import METRICS_FILE, TrainConfig, train
from .plots import plot_loss_curves


@dataclass(frozen=True)
class RunSpec:
    preset: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.preset}-seed{self.seed}"


@dataclass
class RunOutcome:
    spec: RunSpec
    params: int
    steps: int
    tokens: int
    train_loss: float
    val_loss: float
    val_perplexity: float
    tokens_per_s: float
    train_time_s: float  # of the last training session (a resumed run restarts the clock)


def _read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / METRICS_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def run_comparison(specs: list[RunSpec], template: TrainConfig, out_dir: Path,
                   *, title: str, notes: str = "") -> Path:
    """Train every spec (skipping finished runs, resuming interrupted ones), evaluate each on
    the whole validation split, and write report.md with a loss-curve plot. Returns the report."""
    out_dir.mkdir(parents=True, exist_ok=True)
    outcomes = []
    for spec in specs:
        run_dir = out_dir / spec.name
        tc = replace(template, out_dir=run_dir, seed=spec.seed)
        state = checkpoint.read_train_state(run_dir)
        if state is None or state["step"] < tc.max_steps:
            train(get_preset(spec.preset), tc, resume=state is not None)
        outcomes.append(_outcome(spec, run_dir, tc))
    return write_report(outcomes, template, out_dir, title=title, notes=notes)


def _outcome(spec: RunSpec, run_dir: Path, tc: TrainConfig) -> RunOutcome:
    from ..data.prepare import prepare_corpus

    model = checkpoint.load_model(run_dir)
    val = evaluate(model, prepare_corpus(tc.data, progress=False).split("val"),
                   batch_size=tc.batch_size, seq_len=tc.seq_len)
    rows = _read_metrics(run_dir)
    train_rows = [r for r in rows if "loss" in r]
    speeds = [r["tokens_per_s"] for r in train_rows[1:]] or [train_rows[-1]["tokens_per_s"]]
    return RunOutcome(spec=spec, params=model.num_params(), steps=train_rows[-1]["step"],
                      tokens=train_rows[-1]["tokens"], train_loss=train_rows[-1]["loss"],
                      val_loss=val["loss"], val_perplexity=val["perplexity"],
                      tokens_per_s=statistics.median(speeds),
                      train_time_s=train_rows[-1]["elapsed_s"])


def write_report(outcomes: list[RunOutcome], template: TrainConfig, out_dir: Path, *,
                 title: str, notes: str) -> Path:
    curves = {o.spec.name: _read_metrics(out_dir / o.spec.name) for o in outcomes}
    plot_path = out_dir / "loss_curves.png"
    plot_loss_curves(curves, plot_path, title=title)
    by_preset: dict[str, list[RunOutcome]] = {}
    for o in outcomes:
        by_preset.setdefault(o.spec.preset, []).append(o)
    baseline = by_preset.get("gpt-tiny")
    base_ppl = statistics.mean(o.val_perplexity for o in baseline) if baseline else None

    lines = [f"# {title}", ""]
    if notes:
        lines += [notes, ""]
    seq_len = template.seq_len or "context"
    lines += [f"Corpus: `{template.data or 'shakespeare'}` (validation: whole held-out plays). "
              f"Budget per run: {template.max_steps} steps x {template.batch_size} sequences x "
              f"{seq_len} tokens; peak LR {template.peak_lr}, warm-up {template.warmup_steps}, "
              f"cosine to LR/10; precision {template.precision}.", "",
              f"![loss curves]({plot_path.name})", "",
              "| run | params | tokens | train loss | val loss | val perplexity | tokens/s | train time |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for o in outcomes:
        lines.append(f"| {o.spec.name} | {o.params / 1e6:.2f}M | {o.tokens:,} | "
                     f"{o.train_loss:.3f} | {o.val_loss:.4f} | {o.val_perplexity:.2f} | "
                     f"{o.tokens_per_s:,.0f} | {o.train_time_s:.0f} s |")
    if len(by_preset) > 1:
        lines += ["", "| model | seeds | mean val perplexity | vs gpt-tiny |", "|---|---:|---:|---:|"]
        for preset, runs in by_preset.items():
            ppl = statistics.mean(o.val_perplexity for o in runs)
            rel = f"{100 * (ppl / base_ppl - 1):+.1f} %" if base_ppl else "-"
            lines.append(f"| {preset} | {len(runs)} | {ppl:.2f} | {rel} |")
    report = out_dir / "report.md"
    report.write_text("\n".join(lines) + "\n")
    (out_dir / "summary.json").write_text(json.dumps(
        [{"run": o.spec.name, "preset": o.spec.preset, "seed": o.spec.seed, "params": o.params,
          "tokens": o.tokens, "train_loss": o.train_loss, "val_loss": o.val_loss,
          "val_perplexity": o.val_perplexity, "tokens_per_s": o.tokens_per_s,
          "train_time_s": o.train_time_s} for o in outcomes], indent=2) + "\n")
    return report
