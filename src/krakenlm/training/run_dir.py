"""A run directory's one writer and its record of how the run was made.

The writer lock: `RUN/.lock`, an exclusive `flock` held by the process that trains into RUN (rank
0 under torchrun) from before it writes anything until it ends. It records the holder's pid,
host, start time and command line. A second `train` (or `--resume`) into RUN is refused in one
line naming that pid. The kernel drops the lock when its holder dies, even by SIGKILL, so a
killed run's lock file is simply taken over by the next writer.

The record: `RUN/train_config.json` holds the run's options and a `resumptions` list (time, step,
command line, host, world size, options changed with `--override`). `--resume` refuses changed
options that define what the run computes (learning rate, seed, data, ...) unless `--override`
names them, so the file always says how the weights were made.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import socket
import sys
import time
from pathlib import Path

from ..errors import KrakenError, warn
from ..fileio import (HeldLock, LockBusy, acquire_lock, describe_holder, lock_holder,
                      write_text_atomically)

LOCK_FILE = ".lock"
OPTIONS_FILE = "train_config.json"

# TrainConfig fields that define what a run computes: a resumption that changes one trains a
# different run, so it must say so with --override (the tokenizer is checked on its own: the
# checkpoint's is always used).
RUN_DEFINING = ("data", "max_steps", "batch_size", "grad_accum", "seq_len", "peak_lr",
                "min_lr_ratio", "warmup_steps", "weight_decay", "betas", "grad_clip",
                "precision", "seed")
# Options a `train --resume` takes from the run when they are not given again; the others
# (threads, progress, stop-at, memory check) belong to one session.
KEPT_ON_RESUME = RUN_DEFINING + ("eval_interval", "eval_batches", "log_interval",
                                 "checkpoint_interval", "keep_checkpoints", "log_to", "compile")
_OPTION_FOR_FIELD = {"peak_lr": "lr"}


def option_name(field: str) -> str:
    """A TrainConfig field as the train command spells it, without dashes: peak_lr -> lr."""
    return _OPTION_FOR_FIELD.get(field, field).replace("_", "-")


def flag(field: str) -> str:
    return f"--{option_name(field)}"


# --------------------------------------------------------------------------------- the lock
_NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)


def _in_use(out: Path, holder: dict) -> KrakenError:
    pid = holder.get("pid")
    stop = f"stop it (kill {pid})" if pid else "stop it"
    return KrakenError(f"{out} is in use by another krakenlm process writing into it "
                       f"({describe_holder(holder)}); wait for it to end or {stop}, or "
                       "choose another --out directory")


def lock_run_dir(out: Path) -> HeldLock | None:
    """Take RUN's writer lock (creating RUN), or fail in one line naming its live holder."""
    try:
        return acquire_lock(out / LOCK_FILE)
    except LockBusy as busy:
        raise _in_use(out, busy.holder) from None
    except OSError as exc:
        if exc.errno not in _NO_FLOCK:
            raise
        warn(f"cannot lock {out} ({exc.strerror}: this filesystem has no flock); a second "
             "writer into it would not be detected")
        return None


def check_not_in_use(out: Path) -> None:
    """Fail in one line if a live writer holds RUN's lock, without taking it for long or writing
    it: what a resumption checks before it reads the checkpoint, which that writer may be
    replacing right now."""
    holder = lock_holder(out / LOCK_FILE)
    if holder is not None:
        raise _in_use(out, holder)


# ------------------------------------------------------------------------------ the options
class ResumeOptionsChanged(KrakenError):
    """A resumption with options the run was not trained with; `changes` names them."""

    def __init__(self, message: str, changes: str = ""):
        super().__init__(message)
        self.changes = changes


def read_options(out: Path) -> dict | None:
    """RUN/train_config.json, or None when the run has none (an older run, or a removed file)."""
    path = out / OPTIONS_FILE
    if not path.is_file():
        return None
    try:
        options = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise KrakenError(f"{path} is not valid JSON ({exc}); was it edited by hand? Restore it "
                          "(or delete it to resume without checking the options)") from None
    if not isinstance(options, dict):
        raise KrakenError(f"{path} does not hold the run's options (a JSON object); restore it "
                          "(or delete it to resume without checking the options)")
    return options


def _canonical(field: str, value):
    """Values as compared across a resumption: JSON types (a tuple is a list), the default
    corpus by name, a corpus directory by its absolute path."""
    value = json.loads(json.dumps(value))
    if field == "data":
        from ..data.prepare import canonical_corpus_name
        return canonical_corpus_name(value)
    return value


def changed_options(saved: dict, current: dict) -> dict[str, tuple]:
    """field -> (saved value, new value) for every run-defining option that differs."""
    return {field: (saved[field], current[field]) for field in RUN_DEFINING if field in saved
            and _canonical(field, saved[field]) != _canonical(field, current[field])}


def _shown(value) -> str:
    if value is None:
        return "default"
    return json.dumps(value) if isinstance(value, list) else str(value)


def check_resume_options(out: Path, current: dict, overrides: set[str],
                         warnings: bool = True) -> dict[str, tuple]:
    """The changed options of a resumption, all of them named by `overrides` (fields), or a
    one-line error naming each one that is not. Nothing to compare with: a warning."""
    saved = read_options(out)
    if saved is None:
        if warnings:
                warn(f"{out} has no {OPTIONS_FILE}: the options of this resumption cannot be "
                 "checked against the run's")
        return {}
    changes = changed_options(saved, current)
    refused = {f: v for f, v in changes.items() if f not in overrides}
    if refused:
        listed = ", ".join(f"{flag(f)} {_shown(old)} -> {_shown(new)}"
                           for f, (old, new) in refused.items())
        names = ",".join(option_name(f) for f in refused)
        raise ResumeOptionsChanged(
                          f"cannot resume {out} with options it was not trained with: {listed}; "
                          f"give the run's values (or leave them out: --resume takes them from "
                          f"{OPTIONS_FILE}), or pass --override {names} to change them (the "
                          "change is recorded in its resumptions)", listed)
    # (the corpus's content can change under the same --data: trainer.py checks that)
    for field in sorted(overrides - set(changes) - {"data"}) if warnings else ():
        warn(f"--override {option_name(field)}: {flag(field)} is not changed by this resumption")
    return changes


def parse_overrides(values: list[str] | None) -> set[str]:
    """`--override lr,seed` (repeatable; dashes optional) -> TrainConfig fields."""
    known = {option_name(f): f for f in RUN_DEFINING}
    fields = set()
    for value in values or []:
        for name in (part.strip().lstrip("-") for part in value.split(",")):
            if not name:
                continue
            if name.replace("_", "-") not in known:
                raise KrakenError(f"--override {name}: not an option that --resume checks; use "
                                  f"one of {', '.join(sorted(known))}")
            fields.add(known[name.replace("_", "-")])
    return fields


def write_options(out: Path, current: dict, *, step: int | None, changes: dict[str, tuple],
                  world_size: int) -> None:
    """Write RUN/train_config.json: the options now in effect and, for a resumption, the
    earlier resumptions plus this one."""
    record = dict(current)
    if step is not None:
        saved = read_options(out) or {}
        record["resumptions"] = list(saved.get("resumptions") or []) + [{
            "time": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "step": step,
            "command": shlex.join(sys.argv), "host": socket.gethostname(), "pid": os.getpid(),
            "world_size": world_size,
            "overrides": {option_name(f): {"from": old, "to": new}
                          for f, (old, new) in changes.items()}}]
    write_text_atomically(out / OPTIONS_FILE, json.dumps(record, indent=2) + "\n")
