"""The training loop: single process, or data parallel under `torchrun --nproc-per-node N`.

Every rank holds the whole model (as in the Kraken runs: data parallelism only). Batches are a
pure function of (seed, step, slot) and the schedule a function of the step, so a run resumed
from a checkpoint repeats the uninterrupted run's loss curve exactly, and N ranks train exactly
like one process with N-fold gradient accumulation.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from ..data.batches import training_batch
from ..data.prepare import prepare_corpus
from ..errors import KrakenError
from ..evaluation.perplexity import evaluate
from ..models import ModelConfig
from ..models.transformer import Transformer
from . import checkpoint as ckpt
from . import tracking
from .optim import build_optimizer, learning_rate
from .runtime import (DistEnv, autocast, init_distributed, pick_device, resolve_precision,
                      set_cpu_threads)

METRICS_FILE = "metrics.jsonl"


@dataclass
class TrainConfig:
    out_dir: Path
    data: str | None = None  # corpus name or directory; None is the embedded Shakespeare
    max_steps: int = 1000
    batch_size: int = 16  # sequences per micro-batch, per rank
    grad_accum: int = 1
    seq_len: int | None = None  # default: the model's context
    peak_lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    precision: str = "auto"
    compile: bool = False
    seed: int = 1337
    eval_interval: int = 250
    eval_batches: int = 20
    log_interval: int = 10
    checkpoint_interval: int = 250
    threads: int | None = None
    progress: bool = True
    stop_at: int | None = None  # stop (with a checkpoint) after this step; resume later
    log_to: tuple[str, ...] = ()  # also send metrics to: "tensorboard", "wandb" (tracking.py)


    def check(self, model_config: ModelConfig) -> None:
        positive = ("max_steps", "batch_size", "grad_accum", "eval_interval", "eval_batches",
                    "log_interval", "checkpoint_interval")
        for name in positive:
            if getattr(self, name) < 1:
                raise KrakenError(f"--{name.replace('_', '-')} must be >= 1")
        if self.seq_len is not None and not 1 <= self.seq_len <= model_config.context_len:
            raise KrakenError(f"--seq-len {self.seq_len} must be between 1 and the model's "
                              f"context {model_config.context_len}")
        if self.peak_lr <= 0:
            raise KrakenError("--lr must be positive")

    def to_json(self) -> dict:
        data = asdict(self)
        data["out_dir"] = str(self.out_dir)
        return data


@dataclass
class TrainResult:
    step: int
    train_loss: float
    val_loss: float | None
    tokens_per_s: float
    elapsed_s: float
    history: list[dict] = field(default_factory=list)


class MetricsLog:
    """metrics.jsonl: one JSON object per logged step or evaluation. On resume, rows past the
    checkpoint are dropped so the file always describes one consistent run."""

    def __init__(self, path: Path, resume_step: int | None, enabled: bool):
        self.path, self.enabled = path, enabled
        if not enabled:
            return
        if resume_step is None:
            path.write_text("")
        elif path.is_file():
            kept = [line for line in path.read_text().splitlines()
                    if line and json.loads(line)["step"] <= resume_step]
            path.write_text("".join(line + "\n" for line in kept))

    def write(self, row: dict) -> None:
        if self.enabled:
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")


def _mean_over_ranks(value: float, env: DistEnv, device: torch.device) -> float:
    if env.world_size == 1:
        return value
    t = torch.tensor([value], device=device)
    dist.all_reduce(t)
    return t.item() / env.world_size


def train(model_config: ModelConfig, tc: TrainConfig, *, resume: bool = False) -> TrainResult:
    tc.check(model_config)
    env = DistEnv.from_environment()
    device = pick_device(env.local_rank)
    set_cpu_threads(env, tc.threads)
    init_distributed(env, device)
    out = Path(tc.out_dir)
    try:
        return _train(model_config, tc, env, device, out, resume)
    finally:
        if env.world_size > 1 and dist.is_initialized():
            dist.destroy_process_group()


def _prepare_data(tc: TrainConfig, env: DistEnv):
    # Rank 0 tokenizes (once, into the cache); the others wait and then read the cache.
    if env.is_main:
        corpus = prepare_corpus(tc.data, progress=tc.progress)
    if env.world_size > 1:
        dist.barrier()
    if not env.is_main:
        corpus = prepare_corpus(tc.data, progress=False)
    return corpus


def _start_state(model_config: ModelConfig, tc: TrainConfig, out: Path, resume: bool):
    state = ckpt.read_train_state(out) if out.exists() else None
    if state is not None and not resume:
        raise KrakenError(f"{out} already holds a checkpoint at step {state['step']}; pass "
                          "--resume to continue it, or choose another --out directory")
    if resume and state is None:
        raise KrakenError(f"nothing to resume: {out} holds no checkpoint (train_state.json)")
    if state is not None:
        saved = ckpt.load_config(out)
        if saved != model_config:
            raise KrakenError(f"cannot resume {out}: its config.json describes a different "
                              "model than the one requested; drop --preset/--config to use the "
                              "saved one")
    return state


def _train(model_config: ModelConfig, tc: TrainConfig, env: DistEnv, device: torch.device,
           out: Path, resume: bool) -> TrainResult:
    state = _start_state(model_config, tc, out, resume)
    corpus = _prepare_data(tc, env)
    train_tokens, val_tokens = corpus.split("train"), corpus.split("val")
    seq_len = tc.seq_len or model_config.context_len
    amp_dtype = resolve_precision(tc.precision, device)

    model = Transformer(model_config)
    model.reset_parameters(seed=tc.seed)  # identical on every rank, independent of torch RNG
    start_step = 0
    if state is not None:
        loaded, metadata = ckpt.load_state_dict(out)
        ckpt.check_weights_match_config(loaded, model, out)
        if metadata.get("step") != str(state["step"]):
            raise KrakenError(f"checkpoint {out} is inconsistent: weights from step "
                              f"{metadata.get('step')}, train_state.json says {state['step']}")
        model.load_state_dict(loaded)
        start_step = state["step"]
    model.to(device)
    optimizer = build_optimizer(model, lr=tc.peak_lr, weight_decay=tc.weight_decay, betas=tc.betas)
    if state is not None:
        ckpt.load_optimizer_state(out, optimizer, start_step)
    if start_step >= tc.max_steps:
        raise KrakenError(f"{out} is already at step {start_step}; raise --max-steps above it "
                          "to train further")
    if tc.compile:
        for layer in model.layers:
            layer.compile()
    wrapped = DistributedDataParallel(model) if env.world_size > 1 else model

    if env.is_main:
        out.mkdir(parents=True, exist_ok=True)
        (out / "train_config.json").write_text(json.dumps(tc.to_json(), indent=2) + "\n")
    log = MetricsLog(out / METRICS_FILE, start_step if state else None, env.is_main)
    log = tracking.track(log, tc.log_to, out, resume_step=start_step if state else None,
                         config={"model": model_config.to_dict(), "train": tc.to_json()},
                         enabled=env.is_main)
    tokens_per_step = tc.batch_size * seq_len * tc.grad_accum * env.world_size
    history: list[dict] = []
    last_loss, val_loss = math.nan, None
    completed = start_step  # optimizer steps applied to the weights

    def save(at_step: int) -> None:
        if env.is_main:
            ckpt.save_checkpoint(out, model, optimizer, {
                "step": at_step, "tokens_seen": at_step * tokens_per_step,
                "corpus": corpus.meta["key"], "val_loss": val_loss})

    def run_eval(at_step: int) -> float:
        result = evaluate(model, val_tokens, batch_size=tc.batch_size, seq_len=seq_len,
                          max_batches=tc.eval_batches, autocast_dtype=amp_dtype)
        row = {"step": at_step, "val_loss": result["loss"], "val_perplexity": result["perplexity"]}
        log.write(row)
        history.append(row)
        return result["loss"]

    bar = tqdm(total=tc.max_steps, initial=start_step, desc=f"training {out.name}", unit="step",
               disable=not (tc.progress and env.is_main), dynamic_ncols=True)
    t_start = t_window = time.perf_counter()
    window_tokens = 0
    postfix: dict[str, str] = {}
    model.train()
    try:
        for step in range(start_step, tc.max_steps):
            lr = learning_rate(step, peak_lr=tc.peak_lr, warmup_steps=tc.warmup_steps,
                               max_steps=tc.max_steps, min_lr_ratio=tc.min_lr_ratio)
            for group in optimizer.param_groups:
                group["lr"] = lr
            step_loss = 0.0
            for micro in range(tc.grad_accum):
                x, y = training_batch(train_tokens, tc.batch_size, seq_len, seed=tc.seed,
                                      step=step, slot=micro * env.world_size + env.rank)
                x, y = x.to(device), y.to(device)
                # Gradients are synchronised once per optimizer step, on the last micro-batch.
                sync = micro == tc.grad_accum - 1 or env.world_size == 1
                with (contextlib.nullcontext() if sync else wrapped.no_sync()):
                    with autocast(device, amp_dtype):
                        loss = wrapped(x, y) / tc.grad_accum
                    loss.backward()
                step_loss += loss.item()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
            optimizer.step()
            completed = step + 1
            optimizer.zero_grad(set_to_none=True)
            window_tokens += tokens_per_step
            if completed % tc.log_interval == 0 or completed == tc.max_steps:
                last_loss = _mean_over_ranks(step_loss, env, device)
                now = time.perf_counter()
                tokens_per_s = window_tokens / (now - t_window)
                t_window, window_tokens = now, 0
                row = {"step": completed, "loss": last_loss, "lr": lr,
                       "grad_norm": float(grad_norm), "tokens": completed * tokens_per_step,
                       "tokens_per_s": tokens_per_s, "elapsed_s": now - t_start}
                log.write(row)
                history.append(row)
                postfix.update(loss=f"{last_loss:.3f}", tok_s=f"{tokens_per_s:,.0f}", lr=f"{lr:.1e}")
                bar.set_postfix(postfix)
            if completed % tc.eval_interval == 0 or completed == tc.max_steps:
                if env.is_main:
                    val_loss = run_eval(completed)
                    postfix["val"] = f"{val_loss:.3f}"
                    bar.set_postfix(postfix)
                if env.world_size > 1:
                    dist.barrier()
            stopping = completed == tc.stop_at
            if completed % tc.checkpoint_interval == 0 or completed == tc.max_steps or stopping:
                save(completed)
            bar.update(1)
            if stopping:
                break
    except KeyboardInterrupt:
        bar.close()
        log.close()
        save(completed)  # resuming then repeats nothing and skips nothing
        raise KrakenError(f"interrupted: checkpoint saved in {out} at step {completed}; continue "
                          f"with the same command plus --resume") from None
    bar.close()
    log.close()
    elapsed = time.perf_counter() - t_start
    trained_tokens = (completed - start_step) * tokens_per_step
    return TrainResult(step=completed, train_loss=last_loss, val_loss=val_loss,
                       tokens_per_s=trained_tokens / elapsed, elapsed_s=elapsed, history=history)
