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
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from ..data.batches import training_batch
from ..data.prepare import prepare_corpus
from ..data.vocab import (DEFAULT_TOKENIZER, model_config_for_tokenizer, tokenizer_files,
                          tokenizer_record)
from ..errors import Interrupted, KrakenError, check_seed, warn
from ..evaluation.perplexity import evaluate
from ..fileio import write_text_atomically
from ..models import ModelConfig
from ..models.transformer import Transformer
from ..runtime import checkpoint as ckpt
from ..runtime.bootstrap import DistEnv, init_distributed, set_cpu_threads
from ..runtime.device import available_memory_bytes, pick_device, usable_cores
from ..runtime.model_and_tokenizer import checkpoint_tokenizer
from ..runtime.precision import PRECISIONS, autocast, resolve_precision
from . import run_dir, tracking
from .optim import build_optimizer, learning_rate
from .signals import StopSignals, signal_of

METRICS_FILE = "metrics.jsonl"


@dataclass
class TrainConfig:
    """The options of one training run (`krakenlm train`; checked against the model by `check`): the
    run directory, corpus and tokenizer; optimizer steps, sequences per micro-batch per rank,
    gradient accumulation and tokens per sequence (None: the model's context); the LR schedule
    (linear warm-up over `warmup_steps` to `peak_lr`, cosine decay to peak_lr x min_lr_ratio at
    max_steps: optim.learning_rate); AdamW's weight decay and betas, gradient clipping (max
    norm); precision ("auto", "bf16", "fp32"), torch.compile, the seed, the intervals in steps of
    evaluation (eval_batches batches each), logging and checkpoints; CPU threads; and how the run
    stops, keeps checkpoints, checks memory and logs metrics."""
    out_dir: Path
    data: str | None = None  # corpus name or directory; None is the embedded Shakespeare
    # gpt2, bpe-4k or bpe-8k (data/vocab.py); None: gpt2, or on --resume the checkpoint's
    tokenizer: str | None = None
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
    keep_checkpoints: int = 1  # the newest k checkpoints are kept
    memory_check: bool = True  # refuse a model that cannot fit in memory before building it
    log_to: tuple[str, ...] = ()  # also send metrics to: "tensorboard", "wandb" (tracking.py)

    def check(self, model_config: ModelConfig) -> None:
        """Every option's range, named as the CLI spells it."""
        positive = ("max_steps", "batch_size", "grad_accum", "eval_interval", "eval_batches",
                    "log_interval", "checkpoint_interval", "keep_checkpoints")
        for name in positive:
            value = getattr(self, name)
            if value < 1:
                raise KrakenError(f"{_flag(name)} must be >= 1, got {value}")
        if self.threads is not None and self.threads < 1:
            raise KrakenError(f"--threads must be >= 1, got {self.threads}")
        if self.precision not in PRECISIONS:  # before the corpus is tokenized, not after
            raise KrakenError(f"unknown precision {self.precision!r}; use one of {PRECISIONS}")
        check_seed(self.seed)
        if self.warmup_steps < 0:
            raise KrakenError(f"--warmup-steps must be >= 0, got {self.warmup_steps}")
        if self.seq_len is not None and not 1 <= self.seq_len <= model_config.context_len:
            raise KrakenError(f"--seq-len {self.seq_len} must be between 1 and the model's "
                              f"context {model_config.context_len}")
        if self.stop_at is not None and not 1 <= self.stop_at <= self.max_steps:
            raise KrakenError(f"--stop-at {self.stop_at} must be between 1 and --max-steps "
                              f"{self.max_steps} (the schedule ends at --max-steps)")
        # `nan` and `inf` parse as floats, and nan passes every `<` test: check finiteness.
        floats = {"peak_lr": (0.0, False), "weight_decay": (0.0, True), "grad_clip": (0.0, False),
                  "min_lr_ratio": (0.0, True)}
        for name, (low, low_allowed) in floats.items():
            value = getattr(self, name)
            if not math.isfinite(value) or value < low or (value == low and not low_allowed):
                bound = ">= 0" if low_allowed else "> 0"
                raise KrakenError(f"{_flag(name)} must be a finite number {bound}, got {value}")
        if self.min_lr_ratio > 1:
            raise KrakenError(f"min_lr_ratio must be at most 1, got {self.min_lr_ratio}")
        if not all(0 <= b < 1 for b in self.betas):
            raise KrakenError(f"AdamW betas must be in [0, 1), got {self.betas}")

    def to_json(self) -> dict:
        data = asdict(self)
        data["out_dir"] = str(self.out_dir)
        return data


_flag = run_dir.flag


class TrainingInterrupted(Interrupted):
    """Ctrl-C, SIGTERM or SIGHUP during training: a checkpoint of `step` was saved in `out`,
    nothing is wrong (the CLI exits with 128 + the signal's number)."""

    def __init__(self, message: str, signum: int = 2, out: Path | None = None,
                 step: int | None = None):  # defaults: unpickled from a study's worker
        super().__init__(message, signum)
        self.out, self.step = out, step


class TrainingDiverged(KrakenError):
    """A non-finite loss or gradient: training stopped before the update reached the weights."""


@dataclass
class TrainResult:
    """What a training session returns: the last completed step, the last logged training loss (NaN
    if none was logged), the last validation loss (None when no evaluation ran), the session's
    tokens/s (tokens trained in this session / its wall time, evaluations and checkpoints
    included), its wall time (s), and the rows it logged (training rows: step, loss, lr,
    grad_norm, tokens, tokens_per_s, elapsed_s; evaluation rows: step, val_loss, val_perplexity)."""
    step: int
    train_loss: float
    val_loss: float | None
    tokens_per_s: float
    elapsed_s: float
    history: list[dict] = field(default_factory=list)


class MetricsLog:
    """metrics.jsonl: one JSON object per logged step or evaluation; every row of the run
    passes through `write`. On resume, rows past the checkpoint (and a line torn by a kill) are
    dropped, so the file always describes one consistent run."""

    def __init__(self, path: Path, resume_step: int | None, enabled: bool):
        self.path, self.enabled = path, enabled
        if not enabled:
            return
        kept = []
        if resume_step is not None and path.is_file():
            for line in path.read_text(errors="replace").splitlines():
                try:
                    row = json.loads(line)
                except (ValueError, RecursionError):  # ValueError: JSON's
                    continue  # the last line, cut short by a kill (or a damaged one)
                step = row.get("step") if isinstance(row, dict) else None
                if isinstance(step, (int, float)) and step <= resume_step:
                    kept.append(line)
        self._guard(lambda: write_text_atomically(path, "".join(line + "\n" for line in kept)))

    def write(self, row: dict) -> None:
        if self.enabled:
            def append() -> None:
                with self.path.open("a") as f:
                    f.write(json.dumps(row) + "\n")
            self._guard(append)

    def _guard(self, action) -> None:
        try:
            action()
        except OSError as exc:
            raise KrakenError(f"cannot write {self.path}: {exc.strerror or exc}; free disk space "
                              "or make the --out directory writable, then continue with "
                              "--resume") from None


def _mean_over_ranks(value: float, env: DistEnv, device: torch.device) -> float:
    if env.world_size == 1:
        return value
    t = torch.tensor([value], device=device)
    dist.all_reduce(t)
    return t.item() / env.world_size


# Bytes per parameter while training: fp32 weights, gradients, AdamW's two moments, and the
# serialised copy of the weights while a checkpoint is written.
TRAIN_BYTES_PER_PARAM = 4 + 4 + 8 + 4


def training_memory_bytes(config: ModelConfig, batch_size: int, seq_len: int) -> dict[str, int]:
    """An estimate of one process's training memory, computable before the model exists.

    States: TRAIN_BYTES_PER_PARAM per parameter. Activations kept for the backward pass, fp32,
    per token and sub-layer: 12 x d_model + 4 x ffn_dim (norm outputs, q/k/v, attention and
    projection outputs, residual sums, the FFN's pre- and post-activation and their
    temporaries). The attention kernel and the chunked LM-head loss keep no [seq, seq] or
    [tokens, vocab] tensors. Measured peak RSS growth over 2 steps (1 thread, fp32): gpt-tiny
    16 x 256: 0.72 GiB (this estimate without the save copy: 0.69), kraken-tiny-4way 16 x 256:
    1.29 GiB (1.29), gpt2-124m 2 x 1024: 3.17 GiB (3.85).
    """
    per_token = (config.n_layers * config.degree * (12 * config.d_model + 4 * config.ffn_dim)
                 + 4 * config.d_model * config.degree)  # the streams entering the head
    return {"states": TRAIN_BYTES_PER_PARAM * config.num_params(),
            "activations": 4 * batch_size * seq_len * per_token}


def _params(n: int) -> str:
    return f"{n / 1e9:,.1f}B" if n >= 1e9 else f"{n / 1e6:,.1f}M"


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:,.1f} GiB"


def check_memory(model_config: ModelConfig, tc: TrainConfig, env: DistEnv,
                 device: torch.device) -> None:
    """Refuse, before building it, a model that cannot train in this host's (or GPU's) free
    memory, instead of letting the OOM killer end the run without a word."""
    seq_len = tc.seq_len or model_config.context_len
    need = training_memory_bytes(model_config, tc.batch_size, seq_len)
    # Every local process holds the whole model (data parallelism only).
    sharing = env.local_world_size if device.type == "cpu" else 1
    total = sharing * sum(need.values())
    available = available_memory_bytes(device)
    if available is None or total <= available:
        return
    where = "this GPU has" if device.type == "cuda" else "this host has"
    procs = f" x {sharing} processes" if sharing > 1 else ""
    raise KrakenError(
        f"training this {_params(model_config.num_params())}-parameter model needs about "
        f"{_gib(total)} ({_gib(need['states'])} for weights, gradients and AdamW states + "
        f"{_gib(need['activations'])} of activations at --batch-size {tc.batch_size} x "
        f"{seq_len} tokens{procs}) but {where} {_gib(available)} available: pick a smaller "
        "--preset (see `krakenlm models`), lower --batch-size (raise --grad-accum to keep the "
        "tokens per step) or --seq-len, or free memory; --no-memory-check skips this estimate")


def train(model_config: ModelConfig, tc: TrainConfig, *, resume: bool = False,
          overrides: set[str] | frozenset[str] = frozenset()) -> TrainResult:
    """Train (or with `resume`, continue) the run in `tc.out_dir`. A resumption may change the
    options that define the run (run_dir.RUN_DEFINING) only where `overrides` names them.
    Ctrl-C, SIGTERM and SIGHUP save the last completed step and raise TrainingInterrupted."""
    if tc.tokenizer is not None or not resume:
        # The model's vocabulary follows the tokenizer (on resume, the saved config has it).
        model_config = model_config_for_tokenizer(model_config, tc.tokenizer or DEFAULT_TOKENIZER)
    tc.check(model_config)
    env = DistEnv.from_environment()
    device = pick_device(env.local_rank)
    if tc.memory_check:
        check_memory(model_config, tc, env, device)
    set_cpu_threads(env, tc.threads)
    init_distributed(env, device)
    out = Path(tc.out_dir)
    try:
        with StopSignals() as stop:
            return _train(model_config, tc, env, device, out, resume, set(overrides), stop)
    finally:
        if env.world_size > 1 and dist.is_initialized():
            dist.destroy_process_group()


def _warn_about_options(tc: TrainConfig, env: DistEnv, device: torch.device) -> None:
    """Plausible but probably unintended settings: one warning line each."""
    if tc.warmup_steps >= tc.max_steps:
        warn(f"--warmup-steps {tc.warmup_steps} is not shorter than --max-steps {tc.max_steps}: "
             f"the learning rate never reaches --lr {tc.peak_lr:g} and never decays; lower "
             "--warmup-steps (about a tenth of the steps is usual)")
    cores = usable_cores()
    if (device.type == "cpu" and tc.threads is not None
            and tc.threads * env.local_world_size > cores):
        procs = f" x {env.local_world_size} processes" if env.local_world_size > 1 else ""
        warn(f"--threads {tc.threads}{procs} is more than the {cores} cores this process may "
             f"use: oversubscribed threads make training slower; use --threads "
             f"{max(1, cores // env.local_world_size)} or leave it out")


def _prepare_data(tc: TrainConfig, env: DistEnv, tokenizer):
    # Rank 0 tokenizes (once, into the cache); the others wait and then read the cache.
    if env.is_main:
        corpus = prepare_corpus(tc.data, tokenizer=tokenizer, progress=tc.progress)
    if env.world_size > 1:
        dist.barrier()
    if not env.is_main:
        corpus = prepare_corpus(tc.data, tokenizer=tokenizer, progress=False)
    return corpus


def _run_tokenizer(tc: TrainConfig, out: Path, state: dict | None):
    """A new run: the --tokenizer name (a BPE is trained on the corpus when first used). A
    resumed run: the checkpoint's own tokenizer file, so the ids cannot change under it."""
    if state is None:
        return tc.tokenizer or DEFAULT_TOKENIZER
    return checkpoint_tokenizer(out, expected=tc.tokenizer)


def _start_state(model_config: ModelConfig, tc: TrainConfig, out: Path, resume: bool,
                 overrides: set[str] | None, warnings: bool = False
                 ) -> tuple[dict | None, dict[str, tuple]]:
    """The checkpoint's train state (None for a new run) and the options this resumption
    changes (all named by `overrides`; None: not checked yet), or a one-line error on what
    does not fit."""
    if out.parent.name == ckpt.CHECKPOINTS_DIR and ckpt.resolve(out) == out:
        raise KrakenError(f"--out {out} is one checkpoint of a run; give the run directory "
                          f"{out.parent.parent}")
    state = ckpt.read_train_state(out) if out.exists() else None
    if state is not None and not resume:
        raise KrakenError(f"{out} already holds a checkpoint at step {state['step']}; pass "
                          "--resume to continue it, or choose another --out directory")
    if resume and state is None:
        raise KrakenError(f"nothing to resume: {out} holds no checkpoint (no save completed); "
                          "start the run again without --resume")
    if state is not None:
        checkpoint_tokenizer(out, expected=tc.tokenizer)  # a mismatch, named as such
        saved = ckpt.load_config(out)
        if saved != model_config:
            raise KrakenError(f"cannot resume {out}: its config.json describes a different "
                              "model than the one requested; drop --preset/--config to use the "
                              "saved one")
        if state["step"] >= tc.max_steps:
            raise KrakenError(f"{out} is already at step {state['step']}; raise --max-steps "
                              "above it (with --override max-steps: the schedule changes) to "
                              "train further")
        if tc.stop_at is not None and tc.stop_at <= state["step"]:
            raise KrakenError(f"--stop-at {tc.stop_at} is not after the checkpoint's step "
                              f"{state['step']}; give a later step")
        if overrides is None:
            return state, {}
        return state, run_dir.check_resume_options(out, tc.to_json(), overrides, warnings)
    if overrides:
        raise KrakenError("--override only applies to --resume (a new run takes any options)")
    return state, {}


def _unwritable(out: Path, exc: OSError) -> KrakenError:
    return KrakenError(f"cannot write to --out {out}: {exc.strerror or exc} "
                       f"({exc.filename or out}); choose a directory on a writable filesystem "
                       "with free space")


def _probe_out_dir(out: Path) -> None:
    """Fail in one line on an unwritable --out before data is prepared or anything is built,
    without leaving a directory behind: create and remove a file in --out, or in its nearest
    existing parent."""
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        fd, probe = tempfile.mkstemp(prefix=".krakenlm-probe-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise _unwritable(out, exc) from None


def _lock_out_dir(out: Path):
    """Create the run directory and take its writer lock (run_dir.py)."""
    try:
        return run_dir.lock_run_dir(out)
    except OSError as exc:
        raise _unwritable(out, exc) from None


def _claim_out_dir(out: Path, tc: TrainConfig, tokenizer_name: str, state: dict | None,
                   changes: dict[str, tuple], env: DistEnv) -> None:
    """Clean what a killed save left behind, write train_config.json (with this resumption)."""
    options = dict(tc.to_json(), tokenizer=tokenizer_name)
    try:
        ckpt.clean_stale(out)
        run_dir.write_options(out, options, step=None if state is None else state["step"],
                              changes=changes, world_size=env.world_size)
    except OSError as exc:
        raise _unwritable(out, exc) from None


def _train(model_config: ModelConfig, tc: TrainConfig, env: DistEnv, device: torch.device,
           out: Path, resume: bool, overrides: set[str], stop: StopSignals) -> TrainResult:
    if resume:  # a live writer may be replacing the checkpoint read below: name it instead
        run_dir.check_not_in_use(out)
    _start_state(model_config, tc, out, resume, None)  # fail before creating anything
    lock, created = None, not out.exists()
    if env.is_main:
        _probe_out_dir(out)
        lock = _lock_out_dir(out)
    try:
        # again under the lock: a writer that just finished may have saved since
        state, changes = _start_state(model_config, tc, out, resume, overrides, env.is_main)
        return _train_locked(model_config, tc, env, device, out, state, changes, overrides,
                             stop)
    except BaseException:
        if lock is not None and created:
            _remove_if_unused(out, lock)  # a new run that failed before writing anything
        raise
    finally:
        if lock is not None:
            lock.release()


def _remove_if_unused(out: Path, lock) -> None:
    """Remove a run directory this process created if it holds nothing but its lock file."""
    try:
        if {p.name for p in out.iterdir()} <= {run_dir.LOCK_FILE}:
            lock.release()
            (out / run_dir.LOCK_FILE).unlink(missing_ok=True)
            out.rmdir()
    except OSError:
        pass  # a leftover empty directory is harmless


def _train_locked(model_config: ModelConfig, tc: TrainConfig, env: DistEnv, device: torch.device,
                  out: Path, state: dict | None, changes: dict[str, tuple],
                  overrides: set[str], stop: StopSignals) -> TrainResult:
    corpus = _prepare_data(tc, env, _run_tokenizer(tc, out, state))
    tokenizer = corpus.tokenizer
    if tokenizer.vocab_size > model_config.vocab_size:
        raise KrakenError(f"the {tokenizer.name} tokenizer has {tokenizer.vocab_size} tokens but "
                          f"the model's vocabulary only {model_config.vocab_size}; raise "
                          "vocab_size in the model config")
    if state is not None and state.get("corpus") not in (None, corpus.meta["key"]) \
            and "data" not in overrides:
        raise KrakenError(f"cannot resume {out}: the corpus changed since its checkpoint "
                          f"({state['corpus']} -> {corpus.meta['key']}: its files were edited, "
                          "added or removed); restore them, or pass --override data to go on "
                          "with the new text")
    train_tokens, val_tokens = corpus.split("train"), corpus.split("val")
    seq_len = tc.seq_len or model_config.context_len
    amp_dtype = resolve_precision(tc.precision, device)

    model = Transformer(model_config)
    model.reset_parameters(seed=tc.seed)  # identical on every rank, independent of torch RNG
    start_step = 0
    if state is not None:
        loaded, _ = ckpt.load_state_dict(out)  # checks the step and finiteness
        ckpt.check_weights_match_config(loaded, model, out)
        model.load_state_dict(loaded)
        start_step = state["step"]
    model.to(device)
    optimizer = build_optimizer(model, lr=tc.peak_lr, weight_decay=tc.weight_decay, betas=tc.betas)
    if state is not None:
        ckpt.load_optimizer_state(out, optimizer, start_step)
    if env.is_main:  # only now, when the run can go on: a failed resumption records nothing
        _claim_out_dir(out, tc, tokenizer.name, state, changes, env)
    if tc.compile:
        for layer in model.layers:
            layer.compile()
    wrapped = DistributedDataParallel(model) if env.world_size > 1 else model

    log = MetricsLog(out / METRICS_FILE, start_step if state else None, env.is_main)
    log = tracking.track(log, tc.log_to, out, resume_step=start_step if state else None,
                         config={"model": model_config.to_dict(), "train": tc.to_json()},
                         enabled=env.is_main)
    tokens_per_step = tc.batch_size * seq_len * tc.grad_accum * env.world_size
    history: list[dict] = []
    last_loss, val_loss = math.nan, None
    completed = start_step  # optimizer steps applied to the weights
    saved_step = start_step if state is not None else None  # the current checkpoint's step

    def save(at_step: int) -> None:
        nonlocal saved_step
        if at_step == saved_step:
            return  # e.g. Ctrl-C right after a save: that checkpoint is this state
        if env.is_main:
            try:
                ckpt.save_checkpoint(out, model, optimizer, {
                    "step": at_step, "tokens_seen": at_step * tokens_per_step,
                    "corpus": corpus.meta["key"], "val_loss": val_loss,
                    "tokenizer": tokenizer_record(tokenizer)},
                    keep=tc.keep_checkpoints, files=tokenizer_files(tokenizer))
            except ckpt.CheckpointSaveError as exc:
                then = ("continue with --resume" if saved_step is not None
                        else "run the command again")
                raise KrakenError(f"{exc}, then {then}") from None
        saved_step = at_step

    def check_finite(at_step: int, loss: float, grad_norm: torch.Tensor) -> None:
        # Before optimizer.step(): a NaN never reaches the weights, and no checkpoint is
        # written from this state, so the last one stays the last good one.
        # The gradient norm is all-reduced, so every rank takes the same decision on it; the
        # loss is this rank's own, so it only decides alone.
        if bool(torch.isfinite(grad_norm)) and (env.world_size > 1 or math.isfinite(loss)):
            return
        kept = (f"the last checkpoint (step {saved_step}) in {out} is intact"
                if saved_step is not None else "no checkpoint was saved")
        raise TrainingDiverged(f"training diverged at step {at_step}: loss {loss}, gradient "
                               f"norm {float(grad_norm)}; {kept}; lower --lr or raise "
                               "--warmup-steps (then --resume, or start a new --out)")

    def run_eval(at_step: int) -> float:
        # A bar of its own (removed when done): an evaluation can take longer than a step.
        result = evaluate(model, val_tokens, batch_size=tc.batch_size, seq_len=seq_len,
                          max_batches=tc.eval_batches, autocast_dtype=amp_dtype,
                          progress=tc.progress and env.is_main)
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
    # A stop signal cuts a step's forward and backward passes short (single process: nothing
    # has changed yet) and is held everywhere else, until the step is complete (signals.py).
    interruptible = stop.released if env.world_size == 1 else contextlib.nullcontext
    try:
        with stop.holding():
            for step in range(start_step, tc.max_steps):
                lr = learning_rate(step, peak_lr=tc.peak_lr, warmup_steps=tc.warmup_steps,
                                   max_steps=tc.max_steps, min_lr_ratio=tc.min_lr_ratio)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                step_loss = 0.0
                with interruptible():
                    for micro in range(tc.grad_accum):
                        x, y = training_batch(train_tokens, tc.batch_size, seq_len, seed=tc.seed,
                                              step=step, slot=micro * env.world_size + env.rank)
                        x, y = x.to(device), y.to(device)
                        # Gradients are synchronised once per optimizer step, on the last
                        # micro-batch.
                        sync = micro == tc.grad_accum - 1 or env.world_size == 1
                        with (contextlib.nullcontext() if sync else wrapped.no_sync()):
                            with autocast(device, amp_dtype):
                                loss = wrapped(x, y) / tc.grad_accum
                            loss.backward()
                        step_loss += loss.item()
                    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
                check_finite(step + 1, step_loss, grad_norm)
                optimizer.step()
                completed = step + 1
                if completed == start_step + 1 and env.is_main:
                    # once a step ran: a setup error would say it all in its one line
                    with tqdm.external_write_mode(file=sys.stderr):
                        _warn_about_options(tc, env, device)
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
                    postfix.update(loss=f"{last_loss:.3f}", tok_s=f"{tokens_per_s:,.0f}",
                                   lr=f"{lr:.1e}")
                    bar.set_postfix(postfix)
                if completed % tc.eval_interval == 0 or completed == tc.max_steps:
                    if env.is_main:
                        val_loss = run_eval(completed)
                        postfix["val"] = f"{val_loss:.3f}"
                        bar.set_postfix(postfix)
                    if env.world_size > 1:
                        dist.barrier()
                stopping = completed == tc.stop_at
                if (completed % tc.checkpoint_interval == 0 or completed == tc.max_steps
                        or stopping):
                    save(completed)
                bar.update(1)
                if stopping:
                    break
                if completed < tc.max_steps:
                    stop.check(env.world_size, device)  # every rank stops after the same step
    except KeyboardInterrupt as exc:  # Ctrl-C, or a StopRequested for SIGTERM or SIGHUP
        bar.close()
        log.close()
        with stop.holding():
            save(completed)  # resuming then repeats nothing and skips nothing
        raise TrainingInterrupted(f"checkpoint saved in {out} at step {completed}; continue "
                                  "with the same command plus --resume", signal_of(exc), out,
                                  completed) from None
    except KrakenError:
        bar.close()
        log.close()  # what was logged up to the failure stays readable in the trackers
        raise
    bar.close()
    log.close()
    elapsed = time.perf_counter() - t_start
    trained_tokens = (completed - start_step) * tokens_per_step
    return TrainResult(step=completed, train_loss=last_loss, val_loss=val_loss,
                       tokens_per_s=trained_tokens / elapsed, elapsed_s=elapsed, history=history)
