"""`krakenlm train`, `krakenlm eval`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from ..errors import KrakenError
from ..models import ModelConfig, get_preset
from ..models.hf import load_model_config
from . import app
from ._console import stderr_console


def resolve_model_config(preset: str | None, config: Path | None) -> ModelConfig:
    if preset and config:
        raise KrakenError("give either --preset or --config, not both")
    if config is not None:
        return load_model_config(config)  # a krakenlm config or a Hugging Face config.json
    if preset is not None:
        return get_preset(preset)
    raise KrakenError("give a model: --preset NAME (see `krakenlm models`) or --config FILE")


@app.command("train")
def train_command(
    out: Path = typer.Option(..., "--out", help="Run directory: checkpoint, metrics.jsonl, configs."),
    preset: str = typer.Option(None, "--preset", help="Model preset name (see `krakenlm models`)."),
    config: Path = typer.Option(None, "--config", help="JSON model config for a custom model (krakenlm's format or a Hugging Face config.json)."),
    data: str = typer.Option(None, "--data", help="Corpus: shakespeare (default), openwebtext, hf:<dataset>, or a directory of .txt/.jsonl/.parquet files."),
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
    checkpoint_interval: int = typer.Option(250, "--checkpoint-interval", help="Save every N steps (and at the end, and on Ctrl-C)."),
    threads: int = typer.Option(None, "--threads", help="CPU threads per process (default: cores / local processes)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the checkpoint in --out."),
    stop_at: int = typer.Option(None, "--stop-at", help="Stop after this step with a checkpoint (the schedule still ends at --max-steps); continue later with --resume."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr."),
    log_to: list[str] = typer.Option(None, "--log-to", help="Also log metrics to tensorboard and/or wandb (repeat, or a comma list); metrics.jsonl is always written. W&B runs offline unless WANDB_MODE is set."),
) -> None:
    """Train a model on a corpus. Data parallel with `torchrun --nproc-per-node N -m krakenlm train ...`."""
    from ..training import checkpoint
    from ..training.tracking import parse_log_to
    from ..training.trainer import TrainConfig, train

    if resume and preset is None and config is None:
        model_config = checkpoint.load_config(out)
    else:
        model_config = resolve_model_config(preset, config)
    tc = TrainConfig(out_dir=out, data=data, max_steps=max_steps, batch_size=batch_size,
                     grad_accum=grad_accum, seq_len=seq_len, peak_lr=lr, warmup_steps=warmup_steps,
                     weight_decay=weight_decay, grad_clip=grad_clip, precision=precision,
                     compile=compile, seed=seed, eval_interval=eval_interval,
                     eval_batches=eval_batches, log_interval=log_interval,
                     checkpoint_interval=checkpoint_interval,
                     threads=threads, progress=progress, stop_at=stop_at,
                     log_to=parse_log_to(log_to))
    result = train(model_config, tc, resume=resume)
    if os.environ.get("RANK", "0") != "0":
        return  # under torchrun, rank 0 reports for everyone
    val = "n/a" if result.val_loss is None else f"{result.val_loss:.4f}"
    stderr_console().print(f"trained to step {result.step}: train loss {result.train_loss:.4f}, "
                           f"val loss {val}, {result.tokens_per_s:,.0f} tokens/s; checkpoint in {out}")


@app.command("eval")
def eval_command(
    checkpoint_dir: Path = typer.Option(..., "--checkpoint", help="A checkpoint directory (a `train --out` DIR)."),
    data: str = typer.Option(None, "--data", help="Corpus to evaluate on (default: shakespeare)."),
    batch_size: int = typer.Option(8, "--batch-size", help="Sequences per batch."),
    max_batches: int = typer.Option(None, "--max-batches", help="Stop after N batches (default: the whole split)."),
    seq_len: int = typer.Option(None, "--seq-len", help="Tokens per window (default: the model's context)."),
    precision: str = typer.Option("fp32", "--precision", help="fp32 (default), bf16 or auto."),
    as_json: bool = typer.Option(False, "--json", help="Print {\"loss\", \"perplexity\", \"tokens\"} as JSON."),
) -> None:
    """Validation loss and perplexity of a checkpoint."""
    from ..data.prepare import prepare_corpus
    from ..evaluation.perplexity import evaluate
    from ..training.checkpoint import load_model
    from ..training.runtime import pick_device, resolve_precision

    device = pick_device()
    model = load_model(checkpoint_dir, device=device)
    if seq_len is not None and not 1 <= seq_len <= model.config.context_len:
        raise KrakenError(f"--seq-len must be between 1 and the model's context {model.config.context_len}")
    tokens = prepare_corpus(data, progress=not as_json).split("val")
    result = evaluate(model, tokens, batch_size=batch_size, seq_len=seq_len,
                      max_batches=max_batches, autocast_dtype=resolve_precision(precision, device),
                      progress=not as_json)
    if as_json:
        print(json.dumps(result))
    else:
        print(f"val loss {result['loss']:.4f}  perplexity {result['perplexity']:.2f}  "
              f"({result['tokens']:,} tokens)")
