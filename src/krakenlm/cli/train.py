"""`krakenlm train`, `krakenlm eval`."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import typer

from ..errors import Interrupted, KrakenError
from ..models import ModelConfig, get_preset
from ..models.hf import load_model_config
from . import app
from ._console import stderr_console


def one_value(values: list | tuple | None, flag: str, *, required: bool = False):
    """The single value of an option declared repeatable only so that a repetition is caught
    (click keeps the last value of a plain option silently)."""
    values = list(values or [])
    if len(values) > 1:
        given = ", ".join(str(v) for v in values)
        raise KrakenError(f"{flag} was given {len(values)} times ({given}); give it once")
    if required and not values:
        raise KrakenError(f"missing option {flag}")
    return values[0] if values else None


def out_dir(value: str | None, flag: str = "--out") -> Path:
    """A directory option: an empty string would silently mean the current directory."""
    if value is None or not str(value).strip():
        raise KrakenError(f"{flag} is empty; give a directory path (use {flag} . for the "
                          "current directory)")
    return Path(value)


def resolve_model_config(preset: str | None, config: Path | None) -> ModelConfig:
    if preset and config:
        raise KrakenError("give either --preset or --config, not both")
    if config is not None:
        return load_model_config(config)  # a krakenlm config or a Hugging Face config.json
    if preset is not None:
        return get_preset(preset)
    raise KrakenError("give a model: --preset NAME (see `krakenlm models`) or --config FILE")


# The train option that sets a TrainConfig field, where the two are spelled differently.
_OPTION_FOR_FIELD = {"peak_lr": "lr"}


def _given_on_command_line(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def _option_of(field: str) -> str:
    return _OPTION_FOR_FIELD.get(field, field)


def _options_kept_on_resume(ctx: typer.Context, out: Path, given: set[str]) -> dict:
    """The run's own options (train_config.json) for those not given again: `--resume` alone
    continues the run as it was made, not with this command's defaults."""
    from ..training import run_dir

    if not (out / run_dir.OPTIONS_FILE).is_file():
        return {}
    saved = run_dir.read_options(out)
    kept = {}
    for field in run_dir.KEPT_ON_RESUME:
        if (field in saved and field not in given
                and not _given_on_command_line(ctx, _option_of(field))):
            value = saved[field]
            kept[field] = tuple(value) if isinstance(value, list) else value
    return kept


@app.command("train")
def train_command(
    ctx: typer.Context,
    outs: list[str] = typer.Option(..., "--out", metavar="DIR", help="Run directory: checkpoints/, metrics.jsonl, configs."),
    presets: list[str] = typer.Option(None, "--preset", metavar="NAME", help="Model preset name (see `krakenlm models`)."),
    configs: list[Path] = typer.Option(None, "--config", metavar="FILE", help="JSON model config for a custom model (krakenlm's format or a Hugging Face config.json)."),
    data: str = typer.Option(None, "--data", help="Corpus: shakespeare (default), classics (Shakespeare + the King James Bible), openwebtext, hf:<dataset>, or a directory of .txt, .jsonl or .parquet files."),
    tokenizer: str = typer.Option(None, "--tokenizer", help="gpt2 (default; on --resume: the checkpoint's), or bpe-4k / bpe-8k: a byte-level BPE trained on the corpus's training split. The model's vocabulary follows it."),
    max_steps: int = typer.Option(1000, "--max-steps", help="Optimizer steps in total (the LR schedule ends here)."),
    batch_size: int = typer.Option(16, "--batch-size", help="Sequences per micro-batch per process."),
    grad_accum: int = typer.Option(1, "--grad-accum", help="Micro-batches per optimizer step."),
    seq_len: int = typer.Option(None, "--seq-len", help="Tokens per sequence (default: the model's context)."),
    lr: float = typer.Option(1e-3, "--lr", help="Peak learning rate (the spec used 2.5e-4 at 125M)."),
    warmup_steps: int = typer.Option(100, "--warmup-steps", help="Linear warm-up steps before the cosine decay."),
    weight_decay: float = typer.Option(0.1, "--weight-decay", help="AdamW decay on matrices and embeddings."),
    grad_clip: float = typer.Option(1.0, "--grad-clip", help="Clip the global gradient norm to this."),
    precision: str = typer.Option("auto", "--precision", help="auto (bf16 where the hardware is fast at it), bf16 or fp32."),
    compile: bool = typer.Option(False, "--compile", help="torch.compile the layers (slow start, faster steps)."),
    seed: int = typer.Option(1337, "--seed", help="Seed for the initial weights and the batch order."),
    eval_interval: int = typer.Option(250, "--eval-interval", help="Evaluate every N steps (and at the end)."),
    eval_batches: int = typer.Option(20, "--eval-batches", help="Validation batches per evaluation."),
    log_interval: int = typer.Option(10, "--log-interval", help="Log loss and tokens/s every N steps."),
    checkpoint_interval: int = typer.Option(250, "--checkpoint-interval", help="Save every N steps (and at the end, and on Ctrl-C, SIGTERM or SIGHUP)."),
    keep_checkpoints: int = typer.Option(1, "--keep-checkpoints", help="Keep the newest K checkpoints in the run's checkpoints/ (older ones are deleted once a newer one is complete)."),
    memory_check: bool = typer.Option(True, "--memory-check/--no-memory-check", help="Refuse a model whose estimated training memory exceeds the free memory."),
    threads: int = typer.Option(None, "--threads", help="CPU threads per process (default: cores / local processes)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the checkpoint in --out, with the run's own options where none are given."),
    override: list[str] = typer.Option(None, "--override", metavar="OPT[,OPT]", help="With --resume: options that may differ from the run's (e.g. lr,max-steps); any other change is refused. Recorded with the run's options."),
    stop_at: int = typer.Option(None, "--stop-at", help="Stop after this step with a checkpoint (the schedule still ends at --max-steps); continue later with --resume."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr."),
    log_to: list[str] = typer.Option(None, "--log-to", help="Also log metrics to tensorboard and/or wandb (repeat, or a comma list); metrics.jsonl is always written. W&B runs offline unless WANDB_MODE is set."),
    recipe_name: str = typer.Option(None, "--recipe", help="A paper-scale recipe (`krakenlm recipes`): its preset and training setup for the world size launched; options given explicitly override it."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved model and training configuration as JSON and exit without training."),
) -> None:
    """Train a model on a corpus. Data parallel with `torchrun --nproc-per-node N -m krakenlm train ...`."""
    out = out_dir(one_value(outs, "--out", required=True))
    model_config, tc, overrides = _model_and_train_config(ctx, out)
    if dry_run:
        print(json.dumps({"recipe": recipe_name, "world_size": _world_size(),
                          "model": model_config.to_dict(), "train": tc.to_json()}, indent=2))
        return
    result = _train(model_config, tc, resume, overrides)
    if result is not None:  # None: a torchrun rank other than 0 (rank 0 reports for everyone)
        stderr_console().print(_trained(result, out))


def _trained(result, out: Path) -> str:
    val = "n/a" if result.val_loss is None else f"{result.val_loss:.4f}"
    return (f"trained to step {result.step}: train loss {result.train_loss:.4f}, val loss {val}, "
            f"{result.tokens_per_s:,.0f} tokens/s; checkpoint in {out}")


def _world_size() -> int:
    """The processes launched (torchrun's WORLD_SIZE; 1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def _model_and_train_config(ctx: typer.Context, out: Path):
    """The model, the TrainConfig and the --override names the train options say: a --recipe's
    setup below the options given explicitly, on --resume the run's own options for those not
    given again."""
    from ..runtime import checkpoint
    from ..training.run_dir import check_not_in_use, parse_overrides
    from ..training.tracking import parse_log_to
    from ..training.trainer import TrainConfig

    p = ctx.params
    overrides = parse_overrides(p["override"])
    if overrides and not p["resume"]:
        raise KrakenError("--override only applies to --resume (a new run takes any options)")
    preset = one_value(p["presets"], "--preset")
    config = one_value(p["configs"], "--config")
    recipe_options = {}
    if p["recipe_name"] is not None:
        from ..training.recipes import get_recipe

        recipe = get_recipe(p["recipe_name"])
        if preset or config:
            raise KrakenError(f"--recipe {recipe.name} trains the preset {recipe.preset}; drop "
                              "--preset/--config (or drop --recipe and set every option)")
        preset = recipe.preset
        recipe_options = {field: value for field, value in recipe.train_options(_world_size()).items()
                          if not _given_on_command_line(ctx, _option_of(field))}
    if p["resume"]:  # before reading the checkpoint a live writer may be replacing
        check_not_in_use(out)
    if p["resume"] and preset is None and config is None:
        model_config = checkpoint.load_config(out)
    else:
        model_config = resolve_model_config(preset, config)
    if p["tokenizer"] is not None:
        from ..data.vocab import check_tokenizer_name, model_config_for_tokenizer

        model_config = model_config_for_tokenizer(model_config,
                                                  check_tokenizer_name(p["tokenizer"]))
    fields = ("data", "tokenizer", "max_steps", "batch_size", "grad_accum", "seq_len",
              "warmup_steps", "weight_decay", "grad_clip", "precision", "compile", "seed",
              "eval_interval", "eval_batches", "log_interval", "checkpoint_interval", "threads",
              "progress", "stop_at", "keep_checkpoints", "memory_check")
    tc = TrainConfig(out_dir=out, peak_lr=p["lr"], log_to=parse_log_to(p["log_to"]),
                     **{name: p[name] for name in fields})
    if recipe_options:
        tc = dataclasses.replace(tc, **recipe_options)
    if p["resume"]:
        tc = dataclasses.replace(tc, **_options_kept_on_resume(ctx, out, set(recipe_options)))
    return model_config, tc, overrides


def _train(model_config: ModelConfig, tc, resume: bool, overrides):
    """train(); None on a torchrun rank other than 0. An interruption before the first step
    says what --out keeps."""
    from ..runtime import checkpoint
    from ..training.signals import signal_of
    from ..training.trainer import train

    try:
        # Ctrl-C, SIGTERM or SIGHUP during training saves and raises TrainingInterrupted (main
        # exits with 128 + the signal number).
        result = train(model_config, tc, resume=resume, overrides=overrides)
    except Interrupted as exc:
        if os.environ.get("RANK", "0") != "0":
            raise typer.Exit(exc.exit_code) from None  # under torchrun, rank 0 reports
        raise
    except KeyboardInterrupt as exc:
        # Ctrl-C, SIGTERM or SIGHUP before the first step (data, model): a save never leaves
        # half a checkpoint, so whatever is current in --out is complete.
        out = tc.out_dir
        state = checkpoint.read_train_state(out) if out.is_dir() else None
        kept = (f"{out} keeps its checkpoint of step {state['step']}" if state is not None
                else "nothing was saved")
        raise Interrupted(kept, signal_of(exc)) from None
    return result if os.environ.get("RANK", "0") == "0" else None


@app.command("eval")
def eval_command(
    checkpoint_dirs: list[Path] = typer.Option(..., "--checkpoint", metavar="DIR", help="A run directory (a `train --out` DIR: its current checkpoint) or one of its checkpoints/step-* directories."),
    data: str = typer.Option(None, "--data", help="Corpus to evaluate on (default: shakespeare)."),
    tokenizer: str = typer.Option(None, "--tokenizer", help="Check that the checkpoint was trained with this tokenizer (its own is always used)."),
    batch_size: int = typer.Option(8, "--batch-size", help="Sequences per batch."),
    max_batches: int = typer.Option(None, "--max-batches", help="Stop after N batches (default: the whole split)."),
    seq_len: int = typer.Option(None, "--seq-len", help="Tokens per window (default: the model's context)."),
    precision: str = typer.Option("fp32", "--precision", help="fp32 (default), bf16 or auto."),
    as_json: bool = typer.Option(False, "--json", help="Print {\"loss\", \"perplexity\", \"tokens\"} as JSON."),
) -> None:
    """Validation loss and perplexity of a checkpoint."""
    from ..data.prepare import prepare_corpus
    from ..evaluation.perplexity import evaluate
    from ..runtime.model_and_tokenizer import load_model_and_tokenizer
    from ..runtime.device import pick_device
    from ..runtime.precision import resolve_precision

    checkpoint_dir = one_value(checkpoint_dirs, "--checkpoint", required=True)
    if batch_size < 1:
        raise KrakenError(f"--batch-size must be >= 1, got {batch_size}")
    if max_batches is not None and max_batches < 1:
        raise KrakenError(f"--max-batches must be >= 1, got {max_batches} (omit it for the "
                          "whole split)")
    device = pick_device()
    model, run_tokenizer = load_model_and_tokenizer(checkpoint_dir, device=device,
                                                    expected_tokenizer=tokenizer)
    if seq_len is not None and not 1 <= seq_len <= model.config.context_len:
        raise KrakenError(f"--seq-len must be between 1 and the model's context {model.config.context_len}")
    # Progress bars go to stderr: with --json (stdout for a program) they are still drawn on a
    # terminal, where a long evaluation would otherwise be minutes of silence.
    progress = not as_json or sys.stderr.isatty()
    tokens = prepare_corpus(data, tokenizer=run_tokenizer, progress=progress).split("val")
    result = evaluate(model, tokens, batch_size=batch_size, seq_len=seq_len,
                      max_batches=max_batches, autocast_dtype=resolve_precision(precision, device),
                      progress=progress)
    if as_json:
        print(json.dumps(result))
    else:
        print(f"val loss {result['loss']:.4f}  perplexity {result['perplexity']:.2f}  "
              f"({result['tokens']:,} tokens)")


@app.command("recipes")
def recipes_command(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """The paper-scale training recipes (`train --recipe NAME`): the authors' OpenWebText runs for
    every Kraken preset and its GPT-2 baseline, with a GPU-hour estimate."""
    from ..training.recipes import RECIPES
    from ._console import stdout_console, table

    rows = []
    for recipe in RECIPES.values():
        micro, accum = recipe.split(8)
        rows.append({"name": recipe.name, "preset": recipe.preset, "peak_lr": recipe.peak_lr,
                     "steps": recipe.max_steps, "tokens_per_step": recipe.tokens_per_step,
                     "tokens": recipe.total_tokens, "micro_batch_x_accum_on_8": [micro, accum],
                     "train_flops": recipe.train_flops(),
                     "a100_gpu_hours_at_40pct_mfu": recipe.gpu_hours()})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    out = table(title="train --recipe NAME (OpenWebText, GPT-2 BPE, bf16, AdamW 0.9/0.95, "
                      "2k warm-up, cosine to 10 %)")
    for column in ("name", "peak LR", "steps", "tokens", "8 GPUs: micro x accum", "FLOPs",
                   "A100 GPU-h (40 % MFU)"):
        out.add_column(column, justify="left" if column == "name" else "right", no_wrap=True)
    for r in rows:
        micro, accum = r["micro_batch_x_accum_on_8"]
        out.add_row(r["name"], f"{r['peak_lr']:.1e}", f"{r['steps']:,}", f"{r['tokens'] / 1e9:.1f}B",
                    f"{micro} x {accum}", f"{r['train_flops']:.2e}",
                    f"{r['a100_gpu_hours_at_40pct_mfu']:,.0f}")
    stdout_console().print(out)
