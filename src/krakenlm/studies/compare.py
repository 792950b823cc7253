"""Train several models on the same corpus with the same token budget and compare them.

This is the main job of `make demo` (gpt-tiny against kraken-tiny-2way, a couple of minutes
each) and of `krakenlm study compare` (several architectures and seeds). Each run is an
ordinary `train` run directory, so a comparison interrupted half-way resumes run by run.

With a learning-rate sweep (`lrs`), every preset is first trained at each rate with the first
seed and then, at its own best rate (lowest validation loss), with the remaining seeds: each
architecture is compared at its best, not at a rate tuned for another. The rate is chosen on
one half of the held-out split and the reported perplexity comes from the other half
(`validation_slices`), so the reported number is not the one the choice was made on. Ratios to
the baseline are paired by seed (same data order) with 95 % t intervals, and Welch's unpaired
interval stands beside them (studies/stats.py).

With `budgets` (`run_budgets`), the whole comparison is repeated once per token budget, each
run with its own schedule (warm-up and cosine decay) ending at its own budget: the ratio at a
budget is that of finished runs, not a reading in the middle of a longer run's schedule.
"""

from __future__ import annotations

import json
import math
import signal
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import Interrupted, KrakenError
from ..evaluation.perplexity import evaluate
from ..fileio import write_text_atomically
from ..models import get_preset
from ..runtime import checkpoint
from ..training.run_dir import ResumeOptionsChanged
from ..training.signals import signal_of
from ..training.trainer import METRICS_FILE, TrainConfig, TrainingInterrupted, train
from .plots import plot_gap_vs_tokens, plot_loss_curves
from .stats import mean_interval, ratio_interval, welch_ratio_interval

# The held-out split is cut into blocks of this many tokens, dealt alternately to the LR
# selection slice and to the reported slice: both halves span every validation document.
VALIDATION_BLOCK_TOKENS = 8192


@dataclass(frozen=True)
class RunSpec:
    """One training run of a comparison: the model preset, the seed (data order and initialisation)
    and the peak learning rate (None: the template's). `name` is its run directory's name."""
    preset: str
    seed: int
    lr: float | None = None  # None: the template's peak LR

    @property
    def name(self) -> str:
        lr = "" if self.lr is None else f"-lr{self.lr:g}"
        return f"{self.preset}{lr}-seed{self.seed}"


@dataclass
class RunOutcome:
    """What one finished run of a comparison measured (module docstring): its spec; parameters, with
    and without the embeddings; training FLOPs per token (3 x the forward FLOPs at a key window
    of seq_len / 2, the causal average); optimizer steps and tokens trained; the last logged
    training loss; the validation loss (nats per token) and perplexity on the reported slice and
    the loss on the LR-selection slice (validation_slices); the median logged tokens/s after the
    first log; and the training wall time (s) of its last session."""
    spec: RunSpec
    params: int
    non_embedding_params: int
    train_flops_per_token: int
    steps: int
    tokens: int
    train_loss: float
    val_loss: float  # on the reported slice of the validation split
    val_perplexity: float
    select_loss: float  # on the LR-selection slice: what a sweep chooses the rate by
    tokens_per_s: float
    train_time_s: float  # of the last training session (a resumed run restarts the clock)


def _read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / METRICS_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def run_comparison(specs: list[RunSpec], template: TrainConfig, out_dir: Path,
                   *, title: str, notes: str = "", baseline: str | None = None,
                   lrs: list[float] | None = None, jobs: int = 1) -> Path:
    """Train every spec (skipping finished runs, resuming interrupted ones), evaluate each on
    the whole validation split, and write report.md with plots. Returns the report.

    With `lrs`, the specs name the presets and seeds; each preset is swept over `lrs` with its
    first seed and its other seeds run at its best rate (see the module docstring). `jobs`
    runs that many trainings at once, each on cores / jobs threads (small models use one core
    each better than two cores together)."""
    make_out_dir(out_dir)
    outcomes, sweep = train_and_evaluate(specs, template, out_dir, lrs=lrs, jobs=jobs)
    return write_report(outcomes, template, out_dir, title=title, notes=notes,
                        baseline=baseline, sweep=sweep)


def compare_presets(presets: list[str], seeds: list[int], template: TrainConfig, out_dir: Path,
                    *, baseline: str | None = None, lrs: list[float] | None = None,
                    jobs: int = 1, budgets: list[int] | None = None) -> Path:
    """`krakenlm study compare`: every preset trained with every seed (see run_comparison), at
    each of `budgets` tokens per run when given (see run_budgets).
    The presets, the baseline, the tokenizer and the options against each model are checked
    before any training. Returns the report."""
    for name in presets:
        get_preset(name)  # fail before any training on a typo
    if len(set(presets)) < len(presets):
        raise KrakenError(f"--preset names a model twice ({', '.join(presets)}); give each once")
    if baseline is not None and baseline not in presets:
        raise KrakenError(f"--baseline {baseline} is not one of the --preset models "
                          f"({', '.join(presets)})")
    if template.tokenizer is not None:
        from ..data.vocab import check_tokenizer_name
        check_tokenizer_name(template.tokenizer)
    if jobs < 1:
        raise KrakenError(f"--jobs must be >= 1, got {jobs}")
    from ..data.vocab import DEFAULT_TOKENIZER, model_config_for_tokenizer
    from ..runtime.bootstrap import DistEnv
    from ..runtime.device import pick_device
    from ..training.trainer import check_memory

    device = pick_device()
    for name in presets:  # sizes, rates and memory before the corpus or any training
        config = model_config_for_tokenizer(get_preset(name), template.tokenizer or DEFAULT_TOKENIZER)
        template.check(config)
        if template.memory_check:
            check_memory(config, template, DistEnv(), device)
    specs = [RunSpec(p, s) for s in seeds for p in presets]
    title = "Validation loss at equal token budget"
    if budgets is not None:
        return run_budgets(specs, template, out_dir, budgets, title=title, baseline=baseline,
                           lrs=lrs, jobs=jobs)
    return run_comparison(specs, template, out_dir, title=title, baseline=baseline, lrs=lrs,
                          jobs=jobs)


def budget_template(template: TrainConfig, tokens: int, out_dir: Path) -> TrainConfig:
    """The training setup of one token budget: as many steps as reach `tokens`, the warm-up the
    same fraction of the run as in `template`, evaluations and checkpoints at most as far
    apart as in `template` (and at the run's end). The cosine decay then ends at the budget."""
    per_step = template.batch_size * template.seq_len * template.grad_accum
    if tokens % per_step:
        below = tokens // per_step * per_step
        raise KrakenError(f"--budgets {tokens:,} tokens is not a whole number of steps of "
                          f"{per_step:,} tokens (batch size x sequence length); use a multiple "
                          f"such as {max(below, per_step):,} or {below + per_step:,}")
    steps = tokens // per_step
    warmup = max(1, round(template.warmup_steps * steps / template.max_steps))
    return replace(template, out_dir=out_dir, max_steps=steps, warmup_steps=min(warmup, steps),
                   eval_interval=min(template.eval_interval, steps),
                   checkpoint_interval=min(template.checkpoint_interval, steps))


def run_budgets(specs: list[RunSpec], template: TrainConfig, out_dir: Path,
                budgets: list[int], *, title: str, notes: str = "", baseline: str | None = None,
                lrs: list[float] | None = None, jobs: int = 1) -> Path:
    """One whole comparison per token budget (`run_comparison` in out_dir/tokens-N, each with
    its own schedule and, with `lrs`, its own learning-rate choice), then report.md and
    summary.json in `out_dir` with the ratios against the budget. Returns the report."""
    if template.seq_len is None:
        raise KrakenError("--budgets needs --seq-len (a budget is counted in tokens of a step)")
    make_out_dir(out_dir)
    templates = {tokens: budget_template(template, tokens, out_dir / f"tokens-{tokens}")
                 for tokens in budgets}  # every budget checked before any training
    rows = []
    for tokens, tc in templates.items():
        run_comparison(specs, tc, tc.out_dir, title=f"{title}: {tokens:,} tokens per run",
                       notes=notes, baseline=baseline, lrs=lrs, jobs=jobs)
        summary = json.loads((tc.out_dir / "summary.json").read_text())
        rows.append({"tokens": tokens, "steps": tc.max_steps, "warmup_steps": tc.warmup_steps,
                     "baseline": summary["baseline"], "models": summary["models"]})
    return _write_budgets_report(rows, out_dir, title=title, notes=notes)


def _write_budgets_report(rows: list[dict], out_dir: Path, *, title: str, notes: str) -> Path:
    baseline = rows[0]["baseline"]
    others = [p for p in rows[0]["models"] if p != baseline]
    gaps = {p: [] for p in others}
    lines = [f"# {title}", ""] + ([notes, ""] if notes else []) + [
        ("One comparison per token budget, each run with its own schedule ending at its budget "
         f"(the per-budget reports are in tokens-N/). Perplexity ratio to {baseline}, 95 % "
         "intervals over seeds, paired by seed / Welch:"), "",
        "| tokens per run | steps | " + " | ".join(others) + " |",
        "|---:|---:|" + "---:|" * len(others)]
    for row in rows:
        cells = []
        for preset in others:
            paired = row["models"][preset]["ratio_to_baseline"]
            welch = row["models"][preset]["ratio_to_baseline_welch"]
            cells.append(f"{_interval_text(paired)} / {_interval_text(welch)}")
            if paired is not None:
                gaps[preset].append({"tokens": row["tokens"], "gap": paired["mean"] - 1,
                                     "low": None if paired["low"] is None else paired["low"] - 1,
                                     "high": None if paired["high"] is None
                                     else paired["high"] - 1, "seeds": paired["n"]})
        lines.append(f"| {row['tokens']:,} | {row['steps']} | " + " | ".join(cells) + " |")
    if others:
        plot_gap_vs_tokens(gaps, out_dir / "gap_vs_budget.png", baseline=baseline,
                           title="Gap to the baseline at the end of runs of each budget "
                                 "(95 % interval, paired)",
                           xlabel="training tokens per run (each run's own schedule)")
        lines += ["", "![gap against budget](gap_vs_budget.png)"]
    write_text_atomically(out_dir / "summary.json",
                          json.dumps({"baseline": baseline, "budgets": rows}, indent=2) + "\n")
    report = out_dir / "report.md"
    write_text_atomically(report, "\n".join(lines) + "\n")
    return report


def _interval_text(interval: dict | None) -> str:
    if interval is None:
        return "-"
    if interval["low"] is None:
        return f"{interval['mean']:.3f} (1 seed)"
    return f"{interval['mean']:.3f} [{interval['low']:.3f}, {interval['high']:.3f}]"


def make_out_dir(out_dir: Path) -> None:
    """Create a study's --out directory, or say in one line why it cannot be one."""
    if out_dir.exists() and not out_dir.is_dir():
        raise KrakenError(f"--out {out_dir} is a file; give a directory for the runs and the "
                          "report")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KrakenError(f"cannot create --out {out_dir}: {exc.strerror or exc} "
                          f"({exc.filename or out_dir}); choose a writable directory") from None


def train_and_evaluate(specs: list[RunSpec], template: TrainConfig, out_dir: Path, *,
                       lrs: list[float] | None = None, jobs: int = 1
                       ) -> tuple[list[RunOutcome], dict[str, dict[float, RunOutcome]]]:
    """The outcomes of `specs` (the LR sweep resolved as in `run_comparison`) and the sweep."""
    _prepare_shared_data(template)
    sweep: dict[str, dict[float, RunOutcome]] = {}
    if lrs:
        presets = list(dict.fromkeys(spec.preset for spec in specs))
        seeds = list(dict.fromkeys(spec.seed for spec in specs))
        first = [RunSpec(p, seeds[0], lr) for p in presets for lr in lrs]
        done = dict(zip(first, _run_all(first, template, out_dir, jobs)))
        for preset in presets:
            sweep[preset] = {lr: done[RunSpec(preset, seeds[0], lr)] for lr in lrs}
        best = {p: min(runs, key=lambda lr: runs[lr].select_loss) for p, runs in sweep.items()}
        rest = [RunSpec(p, seed, best[p]) for seed in seeds[1:] for p in presets]
        done.update(zip(rest, _run_all(rest, template, out_dir, jobs)))
        outcomes = [done[RunSpec(p, seed, best[p])] for seed in seeds for p in presets]
    else:
        outcomes = _run_all(specs, template, out_dir, jobs)
    return outcomes, sweep


def _prepare_shared_data(template: TrainConfig) -> None:
    """Tokenize the corpus (and train its BPE) once, before runs in parallel would race to."""
    from ..data.prepare import prepare_corpus

    prepare_corpus(template.data, tokenizer=template.tokenizer or "gpt2",
                   progress=template.progress)


def _run_all(specs: list[RunSpec], template: TrainConfig, out_dir: Path,
             jobs: int) -> list[RunOutcome]:
    if jobs <= 1 or len(specs) <= 1:
        try:
            return [_run(spec, template, out_dir) for spec in specs]
        except TrainingInterrupted as exc:
            raise _interrupted(exc.signum, [exc]) from None
        except KeyboardInterrupt as exc:  # before a run's first step: nothing new to save
            raise _interrupted(signal_of(exc), []) from None
    import os
    from concurrent.futures import FIRST_EXCEPTION, wait
    from concurrent.futures.process import BrokenProcessPool

    from tqdm import tqdm

    from .run_pool import StoppingPool

    jobs = min(jobs, len(specs))
    threads = template.threads or max(1, (os.cpu_count() or 1) // jobs)
    # Each worker trains quietly; this process draws one bar over every run's steps, read
    # from the runs' metrics files (the one record both sides already keep).
    quiet = replace(template, threads=threads, progress=False)
    total = template.max_steps * len(specs)
    # steps of earlier invocations count as done from the start, so the rate and the time
    # left are those of this invocation's training
    done_before = sum(_steps_done(out_dir / spec.name) for spec in specs)
    failure: BaseException | None = None
    with StoppingPool(jobs) as pool, \
            tqdm(total=total, initial=done_before, unit="step",
                 desc=f"training {len(specs)} runs, {jobs} at a time",
                 disable=not template.progress, dynamic_ncols=True) as bar:
        futures = [pool.submit(_run, spec, quiet, out_dir) for spec in specs]
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=1.0, return_when=FIRST_EXCEPTION)
            for future in finished:
                error = future.exception()
                if error is not None and not isinstance(error, TrainingInterrupted) \
                        and failure is None:
                    failure = error  # a failed run stops the comparison: the others save first
                    pool.stop()
            bar.n = sum(_steps_done(out_dir / spec.name) for spec in specs)
            bar.refresh()
    if isinstance(failure, BrokenProcessPool):
        raise KrakenError("a training worker process died (killed, or out of memory); run the "
                          "same command again: finished runs are kept, the others resume") from None
    if failure is not None:
        raise failure
    if pool.stopped:
        saved = [f.exception() for f in futures if isinstance(f.exception(), TrainingInterrupted)]
        raise _interrupted(pool.signum or signal.SIGTERM, saved)
    return [future.result() for future in futures]


def _interrupted(signum: int, saved: list[TrainingInterrupted]) -> Interrupted:
    """One line for a stopped study: where each interrupted run saved, and how to go on."""
    runs = ", ".join(f"{exc.out.name} at step {exc.step}" for exc in saved if exc.out)
    what = f"checkpoints saved ({runs})" if runs else "no run was in training"
    return Interrupted(f"{what}; run the same command again to continue (finished runs are "
                       "kept, interrupted ones resume)", signum)


def _steps_done(run_dir: Path) -> int:
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return 0
    lines = path.read_bytes().rstrip().splitlines()
    for line in reversed(lines):
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line being written
        if "step" in row:
            return row["step"]
    return 0


def _run(spec: RunSpec, template: TrainConfig, out_dir: Path) -> RunOutcome | None:
    """Train (or resume, or only evaluate) one run; None when the study stopped before it."""
    from .run_pool import stop_requested

    if stop_requested():
        return None
    run_dir = out_dir / spec.name
    tc = replace(template, out_dir=run_dir, seed=spec.seed,
                 peak_lr=template.peak_lr if spec.lr is None else spec.lr)
    state = checkpoint.read_train_state(run_dir)
    if state is None or state["step"] < tc.max_steps:
        try:
            train(get_preset(spec.preset), tc, resume=state is not None)
        except ResumeOptionsChanged as exc:
            raise KrakenError(f"the run {run_dir} was started with other options ({exc.changes}); "
                              "repeat the study with its own options, or give a new --out for "
                              "new ones") from None
        except KeyboardInterrupt:
            if stop_requested():
                return None  # the study stopped before this run's first step
            raise
    elif tc.threads:
        import torch
        torch.set_num_threads(tc.threads)  # the evaluation below, in a worker
    return _outcome(spec, run_dir, tc)


def _outcome(spec: RunSpec, run_dir: Path, tc: TrainConfig) -> RunOutcome:
    from ..data.prepare import prepare_corpus

    from ..runtime.model_and_tokenizer import checkpoint_tokenizer

    model = checkpoint.load_model(run_dir)
    # The run's own tokenizer (a BPE run's validation split is in its ids, not GPT-2's).
    tokens = prepare_corpus(tc.data, tokenizer=checkpoint_tokenizer(run_dir),
                            progress=False).split("val")
    select_tokens, report_tokens = validation_slices(tokens, tc.seq_len or model.config.context_len)
    select = evaluate(model, select_tokens, batch_size=tc.batch_size, seq_len=tc.seq_len)
    val = evaluate(model, report_tokens, batch_size=tc.batch_size, seq_len=tc.seq_len)
    rows = _read_metrics(run_dir)
    train_rows = [r for r in rows if "loss" in r]
    speeds = [r["tokens_per_s"] for r in train_rows[1:]] or [train_rows[-1]["tokens_per_s"]]
    config = model.config
    seq_len = tc.seq_len or config.context_len
    return RunOutcome(spec=spec, params=model.num_params(),
                      non_embedding_params=model.num_params() - config.embedding_params(),
                      # forward + backward = 3 forward passes, keys averaged over a causal window
                      train_flops_per_token=3 * config.forward_flops_per_token(seq_len // 2),
                      steps=train_rows[-1]["step"],
                      tokens=train_rows[-1]["tokens"], train_loss=train_rows[-1]["loss"],
                      val_loss=val["loss"], val_perplexity=val["perplexity"],
                      select_loss=select["loss"],
                      tokens_per_s=statistics.median(speeds),
                      train_time_s=train_rows[-1]["elapsed_s"])


def validation_slices(tokens, seq_len: int):
    """(LR-selection slice, reported slice) of a validation split: blocks of
    VALIDATION_BLOCK_TOKENS (fewer for a short split) dealt alternately, even blocks to the
    selection, odd ones to the report. Each slice holds at least one evaluation window."""
    import numpy as np

    n = len(tokens)
    if n < 2 * (seq_len + 1):
        raise KrakenError(f"the validation split has {n:,} tokens: choosing the learning rate on "
                          f"one part and reporting another needs two windows of {seq_len + 1} "
                          "tokens; use a larger corpus or a shorter --seq-len")
    block = max(seq_len + 1, min(VALIDATION_BLOCK_TOKENS, n // 2))
    starts = range(0, n, block)
    select = [tokens[i:i + block] for k, i in enumerate(starts) if k % 2 == 0]
    report = [tokens[i:i + block] for k, i in enumerate(starts) if k % 2 == 1]
    if len(report[-1]) < seq_len + 1:  # a short last block: keep it on the selection side
        select.append(report.pop())
    return np.concatenate(select), np.concatenate(report)


def write_report(outcomes: list[RunOutcome], template: TrainConfig, out_dir: Path, *,
                 title: str, notes: str, baseline: str | None = None,
                 sweep: dict[str, dict[float, RunOutcome]] | None = None) -> Path:
    lines = [f"# {title}", ""]
    if notes:
        lines += [notes, ""]
    lines += comparison_section(outcomes, template, out_dir, title=title, baseline=baseline,
                                sweep=sweep)
    report = out_dir / "report.md"
    write_text_atomically(report, "\n".join(lines) + "\n")
    return report


def comparison_section(outcomes: list[RunOutcome], template: TrainConfig, out_dir: Path, *,
                       title: str, baseline: str | None = None,
                       sweep: dict[str, dict[float, RunOutcome]] | None = None) -> list[str]:
    """The comparison's markdown lines (tables, plots written next to them in `out_dir`) and
    its summary.json."""
    curves = {o.spec.name: _read_metrics(out_dir / o.spec.name) for o in outcomes}
    plot_path = out_dir / "loss_curves.png"
    plot_loss_curves(curves, plot_path, title=title)
    by_preset: dict[str, list[RunOutcome]] = {}
    for o in outcomes:
        by_preset.setdefault(o.spec.preset, []).append(o)
    baseline = baseline or ("gpt-tiny" if "gpt-tiny" in by_preset else next(iter(by_preset)))
    if baseline not in by_preset:
        raise KrakenError(f"--baseline {baseline} is not one of the compared presets "
                          f"({', '.join(by_preset)})")
    gaps = _gaps_by_tokens(by_preset, baseline, out_dir)
    if len(by_preset) > 1:
        plot_gap_vs_tokens(gaps, out_dir / "gap_vs_tokens.png", baseline=baseline)

    lines = []
    seq_len = template.seq_len or "context"
    run_lrs = {o.spec.preset: o.spec.lr for o in outcomes if o.spec.lr is not None}
    if sweep:
        lr = "each preset's best of the sweep below"
    elif run_lrs:
        lr = "per model " + ", ".join(f"{p} {v:g}" for p, v in run_lrs.items())
    else:
        lr = f"{template.peak_lr:g}"
    lines += [f"Corpus: `{template.data or 'shakespeare'}` (validation: whole held-out "
              "documents, cut into blocks dealt alternately to the learning-rate choice and to "
              f"the reported perplexity), tokenizer `{template.tokenizer or 'gpt2'}`. Budget per run: "
              f"{template.max_steps} steps x {template.batch_size} sequences x {seq_len} tokens; "
              f"peak LR {lr}, warm-up {template.warmup_steps}, cosine to LR/10; precision "
              f"{template.precision}.", "",
              f"![loss curves]({plot_path.name})", "",
              "| run | params | non-embedding | train FLOPs/token | tokens | train loss | "
              "selection loss | val loss | val perplexity | tokens/s | train time |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for o in outcomes:
        lines.append(f"| {o.spec.name} | {o.params / 1e6:.2f}M | "
                     f"{o.non_embedding_params / 1e6:.2f}M | {o.train_flops_per_token / 1e6:.1f}M | "
                     f"{o.tokens:,} | {o.train_loss:.3f} | {o.select_loss:.4f} | {o.val_loss:.4f} | "
                     f"{o.val_perplexity:.2f} | {o.tokens_per_s:,.0f} | {o.train_time_s:.0f} s |")
    if sweep:
        lrs = sorted({lr for runs in sweep.values() for lr in runs})
        lines += ["", f"Learning-rate sweep (seed {outcomes[0].spec.seed}; perplexity on the "
                  "selection slice, best in bold):", "",
                  "| model | " + " | ".join(f"LR {lr:g}" for lr in lrs) + " |",
                  "|---|" + "---:|" * len(lrs)]
        for preset, runs in sweep.items():
            best = min(runs, key=lambda lr: runs[lr].select_loss)
            cells = [(f"**{math.exp(runs[lr].select_loss):.2f}**" if lr == best
                      else f"{math.exp(runs[lr].select_loss):.2f}") if lr in runs else "-"
                     for lr in lrs]
            lines.append(f"| {preset} | " + " | ".join(cells) + " |")
    summary = _summary(by_preset, baseline)
    if len(by_preset) > 1:
        lines += ["", f"Per model (95 % t intervals over seeds; the ratio to {baseline} paired "
                  "by seed, and Welch's interval, which does not use the pairing):", "",
                  "| model | seeds | val perplexity | ratio, paired | ratio, Welch | "
                  "gap at the end |", "|---|---:|---:|---:|---:|---:|"]
        for preset, row in summary.items():
            lines.append(f"| {preset} | {row['seeds']} | {row['perplexity'].text('{:.2f}')} | "
                         f"{row['ratio'].text('{:.3f}') if row['ratio'] else '-'} | "
                         f"{row['welch'].text('{:.3f}') if row['welch'] else '-'} | "
                         f"{row['gap_text']} |")
        lines += ["", "![gap against tokens](gap_vs_tokens.png)"]
    write_text_atomically(out_dir / "summary.json", json.dumps({
        "runs": [{"run": o.spec.name, "preset": o.spec.preset, "seed": o.spec.seed,
                  "lr": o.spec.lr, "params": o.params,
                  "non_embedding_params": o.non_embedding_params,
                  "train_flops_per_token": o.train_flops_per_token, "tokens": o.tokens,
                  "train_loss": o.train_loss, "val_loss": o.val_loss,
                  "select_loss": o.select_loss,
                  "val_perplexity": o.val_perplexity, "tokens_per_s": o.tokens_per_s,
                  "train_time_s": o.train_time_s} for o in outcomes],
        "baseline": baseline,
        "models": {p: {"seeds": r["seeds"], "perplexity": vars(r["perplexity"]),
                       "ratio_to_baseline": vars(r["ratio"]) if r["ratio"] else None,
                       "ratio_to_baseline_welch": vars(r["welch"]) if r["welch"] else None}
                   for p, r in summary.items()},
        "validation": "val_loss on the reported slice; select_loss (and lr_sweep) on the "
                      "learning-rate selection slice",
        "gap_by_tokens": gaps,
        "lr_sweep": {p: {str(lr): o.select_loss for lr, o in runs.items()}
                     for p, runs in (sweep or {}).items()},
    }, indent=2) + "\n")
    return lines


def _summary(by_preset: dict[str, list[RunOutcome]], baseline: str) -> dict[str, dict]:
    base = {o.spec.seed: o for o in by_preset[baseline]}
    summary = {}
    for preset, runs in by_preset.items():
        paired = [o.val_loss - base[o.spec.seed].val_loss for o in runs if o.spec.seed in base]
        ratio = ratio_interval(paired) if preset != baseline and paired else None
        welch = (welch_ratio_interval([o.val_loss for o in runs],
                                      [o.val_loss for o in by_preset[baseline]])
                 if preset != baseline else None)
        summary[preset] = {
            "seeds": len(runs),
            "perplexity": mean_interval([o.val_perplexity for o in runs]),
            "ratio": ratio,
            "welch": welch,
            "gap_text": "-" if ratio is None else f"{100 * (ratio.mean - 1):+.1f} %",
        }
    return summary


def _gaps_by_tokens(by_preset: dict[str, list[RunOutcome]], baseline: str,
                    out_dir: Path) -> dict[str, list[dict]]:
    """Per preset, the perplexity gap to the baseline at every evaluation both runs of a seed
    made: mean over seeds of exp(val loss - baseline val loss) - 1, with its t interval."""
    def val_by_step(o: RunOutcome) -> dict[int, tuple[float, int]]:
        rows = _read_metrics(out_dir / o.spec.name)
        tokens_per_step = next(r["tokens"] / r["step"] for r in rows if "tokens" in r)
        return {r["step"]: (r["val_loss"], int(r["step"] * tokens_per_step))
                for r in rows if "val_loss" in r}

    base = {o.spec.seed: val_by_step(o) for o in by_preset[baseline]}
    gaps: dict[str, list[dict]] = {}
    for preset, runs in by_preset.items():
        if preset == baseline:
            continue
        per_step: dict[int, list[float]] = {}
        tokens_at: dict[int, int] = {}
        for o in runs:
            if o.spec.seed not in base:
                continue
            for step, (loss, tokens) in val_by_step(o).items():
                if step in base[o.spec.seed]:
                    per_step.setdefault(step, []).append(loss - base[o.spec.seed][step][0])
                    tokens_at[step] = tokens
        gaps[preset] = []
        for step in sorted(per_step):
            r = ratio_interval(per_step[step])
            gaps[preset].append({"step": step, "tokens": tokens_at[step],
                                 "gap": r.mean - 1,
                                 "low": None if r.low is None else r.low - 1,
                                 "high": None if r.high is None else r.high - 1,
                                 "seeds": r.n})
    return gaps
