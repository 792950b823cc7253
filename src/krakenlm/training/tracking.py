"""Experiment tracking: every metrics.jsonl row also goes to TensorBoard and/or Weights & Biases.

    krakenlm train --preset gpt-tiny --out runs/t --log-to tensorboard,wandb
    tensorboard --logdir runs/t/tensorboard

metrics.jsonl stays the record; the trackers are views of it. A row {"step": 10, "loss": ...,
"lr": ...} becomes scalars train/loss, train/lr at step 10; {"val_loss": ...} becomes val/loss.
Both trackers are optional extras (`pip install 'krakenlm[tensorboard]'`, `krakenlm[wandb]`).

Resume continues the same run: TensorBoard writes into the same directory and purges events
past the checkpoint's step (as metrics.jsonl drops its rows past it); W&B reopens the run id
saved in the run directory. W&B runs offline unless WANDB_MODE says otherwise (this tool never
talks to a server unasked); upload later with `wandb sync DIR/wandb/offline-run-*`.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any, Protocol

from ..errors import KrakenError

TRACKERS = ("tensorboard", "wandb")
TENSORBOARD_DIR = "tensorboard"
WANDB_ID_FILE = "wandb_run_id.txt"
WANDB_PROJECT = "krakenlm"
_INSTALL = {"tensorboard": ("tensorboard", "pip install 'krakenlm[tensorboard]'"),
            "wandb": ("wandb", "pip install 'krakenlm[wandb]'")}


def parse_log_to(values: list[str] | None) -> tuple[str, ...]:
    """`--log-to` values (repeatable, or comma lists) as a tuple of known tracker names whose
    package is installed; raises a KrakenError naming the fix otherwise."""
    names: list[str] = []
    for value in values or []:
        for name in (part.strip().lower() for part in value.split(",")):
            if not name:
                continue
            if name not in TRACKERS:
                raise KrakenError(f"--log-to {name!r} is not a tracker; choose from "
                                  f"{', '.join(TRACKERS)} (metrics.jsonl is always written)")
            if name not in names:
                names.append(name)
    for name in names:
        module, pip = _INSTALL[name]
        try:
            __import__(module)
        except ImportError:
            raise KrakenError(f"--log-to {name} needs the {module} package: {pip}") from None
    return tuple(names)


def scalar_name(key: str) -> str:
    """metrics.jsonl key -> tracker tag: val_loss -> val/loss, loss -> train/loss."""
    return f"val/{key[4:]}" if key.startswith("val_") else f"train/{key}"


def scalars(row: dict[str, Any]) -> dict[str, float]:
    return {scalar_name(k): float(v) for k, v in row.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


class Tracker(Protocol):
    def log(self, row: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


class TensorBoardTracker:
    def __init__(self, run_dir: Path, resume_step: int | None, config: dict[str, Any]):
        from torch.utils.tensorboard import SummaryWriter

        # purge_step: events at or after it, left by an interrupted run, are discarded on
        # read, so a resumed run shows one curve, exactly as metrics.jsonl does.
        purge = None if resume_step is None else resume_step + 1
        self.writer = SummaryWriter(log_dir=str(run_dir / TENSORBOARD_DIR), purge_step=purge)
        if resume_step is None:
            self.writer.add_text("config", "```\n" + json.dumps(config, indent=2) + "\n```", 0)

    def log(self, row: dict[str, Any]) -> None:
        for tag, value in scalars(row).items():
            self.writer.add_scalar(tag, value, global_step=row["step"])
        self.writer.flush()  # rows are seconds apart; a crash then loses nothing logged

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    def __init__(self, run_dir: Path, resume_step: int | None, config: dict[str, Any]):
        import wandb

        id_file = run_dir / WANDB_ID_FILE
        run_id = id_file.read_text().strip() if resume_step is not None and id_file.is_file() \
            else None
        run_id = run_id or secrets.token_hex(4)  # W&B ids: short, URL-safe
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", WANDB_PROJECT), name=run_dir.name,
            id=run_id, resume="allow", dir=str(run_dir), config=config,
            mode=os.environ.get("WANDB_MODE", "offline"), reinit="finish_previous",
            settings=wandb.Settings(silent=True, console="off"))
        id_file.write_text(run_id + "\n")
        # Our step is a metric of its own: after a resume it restarts below W&B's internal
        # step counter, which W&B would otherwise refuse.
        self.run.define_metric("step")
        self.run.define_metric("train/*", step_metric="step")
        self.run.define_metric("val/*", step_metric="step")

    def log(self, row: dict[str, Any]) -> None:
        self.run.log({"step": row["step"], **scalars(row)})

    def close(self) -> None:
        self.run.finish()


def open_trackers(names: tuple[str, ...], run_dir: Path, *, resume_step: int | None,
                  config: dict[str, Any]) -> list[Tracker]:
    run_dir.mkdir(parents=True, exist_ok=True)
    names = parse_log_to(list(names))  # the Python API gets the same checks as --log-to
    kinds = {"tensorboard": TensorBoardTracker, "wandb": WandbTracker}
    return [kinds[name](run_dir, resume_step, config) for name in names]


class TrackedLog:
    """A metrics log that also sends each row to the trackers (the trainer calls `write`)."""

    def __init__(self, log, trackers: list[Tracker]):
        self.log, self.trackers = log, trackers

    def write(self, row: dict[str, Any]) -> None:
        self.log.write(row)
        for tracker in self.trackers:
            tracker.log(row)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()
        self.trackers = []


def track(log, names: tuple[str, ...], run_dir: Path, *, resume_step: int | None,
          config: dict[str, Any], enabled: bool) -> TrackedLog:
    """Wrap the trainer's MetricsLog; `enabled` is False on ranks other than 0."""
    trackers = open_trackers(names, run_dir, resume_step=resume_step, config=config) \
        if enabled and names else []
    return TrackedLog(log, trackers)
