"""Crash-safe checkpoints.

A run directory keeps its checkpoints in `checkpoints/step-NNNNNNNN/`, each a complete,
self-contained checkpoint (model.safetensors, config.json, optimizer.pt, train_state.json).

    The current checkpoint is the highest-numbered `step-*` directory.

A directory only ever gets that name by one atomic rename, after all its files and the
directory itself were written under a temporary name (`.tmp-step-...`) and fsynced. So a kill,
a power cut or a full disk at any instant leaves either the previous checkpoint current or the
new one, never a mixture; the previous one is deleted only after the new one is current (the
last `keep` are kept). Temporary directories left by a killed save are removed by the next save
or resume (`clean_stale`).

Every reader (`eval`, `generate`, `lm-eval`, the studies, the tensor-parallel demo) goes through
`resolve`, so it sees only the current complete checkpoint. A run directory written by older
versions (the four files directly in the run directory) is still read; its first new save moves
it to the new layout.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
from pathlib import Path
from typing import Any, BinaryIO, Callable

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes

from ..errors import KrakenError
from ..fileio import os_error_from
from ..models import ConfigError, ModelConfig
from ..models.transformer import Transformer

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "train_state.json"
CHECKPOINTS_DIR = "checkpoints"
_STEP_DIR = re.compile(r"step-(\d+)")
_STALE_PREFIXES = (".tmp-", ".trash-")

# Test hook for the kill matrix (tests/test_checkpoint_crash.py): with
# KRAKENLM_TEST_KILL_AT="<point>@<step>" the process SIGKILLs itself at that point of the save of
# that step, as the OOM killer or a power cut would; "<point>@<step>@SIGTERM" (or another signal's
# name) sends that signal instead, as `kill`, `timeout` or a scheduler would. Unset, it costs one
# environment lookup per point. The points, in the order a save passes them:
KILL_ENV = "KRAKENLM_TEST_KILL_AT"
SAVED_FILES = (MODEL_FILE, CONFIG_FILE, OPTIMIZER_FILE, STATE_FILE)
KILL_POINTS = (("start",)
               + tuple(f"{when}:{name}" for name in SAVED_FILES
                       for when in ("before", "during", "after"))
               + ("before-rename", "after-rename", "during-prune", "end"))


def _kill_point(point: str, step: int) -> None:
    wanted = os.environ.get(KILL_ENV)
    if wanted is None or not wanted.startswith(f"{point}@{step}"):
        return
    rest = wanted[len(f"{point}@{step}"):]
    if rest in ("", "@SIGKILL"):
        os.kill(os.getpid(), signal.SIGKILL)
    elif rest.startswith("@"):
        os.kill(os.getpid(), signal.Signals[rest[1:]])


class CheckpointSaveError(KrakenError):
    """A save failed (disk full, read-only, no permission); the previous checkpoint is intact."""


# ------------------------------------------------------------------------------ finding one
def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def _step_dirs(parent: Path) -> list[tuple[int, Path]]:
    """The complete checkpoints under `parent`, oldest first."""
    if not parent.is_dir():
        return []
    found = []
    for entry in parent.iterdir():
        match = _STEP_DIR.fullmatch(entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(1)), entry))
    return sorted(found)


def _has_files(directory: Path) -> bool:
    return (directory / MODEL_FILE).is_file() and (directory / CONFIG_FILE).is_file()


def resolve(directory: str | Path) -> Path | None:
    """The current checkpoint of a run directory (or of its `checkpoints/`), or `directory`
    itself when it is one checkpoint (a `step-*` directory, or an old flat run directory)."""
    directory = Path(directory)
    for parent in (directory / CHECKPOINTS_DIR, directory):
        dirs = _step_dirs(parent)
        if dirs:
            return dirs[-1][1]
    return directory if _has_files(directory) else None


def current_checkpoint(directory: str | Path) -> Path:
    """`resolve`, or a one-line error saying what is missing."""
    directory = Path(directory)
    if not directory.exists():
        raise KrakenError(f"checkpoint directory {directory} does not exist")
    found = resolve(directory)
    if found is None:
        raise KrakenError(f"{directory} is not a checkpoint: it holds no {CHECKPOINTS_DIR}/step-* "
                          f"directory nor {MODEL_FILE} and {CONFIG_FILE} (written by "
                          "`krakenlm train --out DIR`)")
    return found


def is_checkpoint(directory: str | Path) -> bool:
    return resolve(directory) is not None


def read_train_state(directory: str | Path) -> dict[str, Any] | None:
    found = resolve(directory)
    if found is None or not (found / STATE_FILE).is_file():
        return None
    try:
        state = json.loads((found / STATE_FILE).read_text())
    except (ValueError, RecursionError) as exc:  # JSON, UTF-8, nesting past the recursion limit
        raise KrakenError(f"{found / STATE_FILE} is not valid JSON ({exc}); was it edited by "
                          "hand? Restore it or resume from an earlier checkpoint") from None
    step = state.get("step") if isinstance(state, dict) else None
    if isinstance(step, bool) or not isinstance(step, int) or step < 0 \
            or not isinstance(state.get("tokenizer") or {}, dict):
        raise KrakenError(f"{found / STATE_FILE} is damaged: expected an object with the step "
                          "count (and the tokenizer record); was it edited by hand? Restore it or "
                          "resume from an earlier checkpoint")
    return state


# ------------------------------------------------------------------------------- loading
def load_config(directory: str | Path) -> ModelConfig:
    found = current_checkpoint(directory)
    try:
        return ModelConfig.load(found / CONFIG_FILE)
    except ConfigError as exc:
        raise KrakenError(f"checkpoint {found}: {exc}") from None


def load_state_dict(directory: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The full (single-device) weights and their metadata, checked to be finite and (for old
    flat run directories, whose saves were not atomic) from the step train_state.json names."""
    found = current_checkpoint(directory)
    path = found / MODEL_FILE
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
        state = load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise KrakenError(f"checkpoint {path} is unreadable ({exc}); it may be truncated") from None
    train_state = read_train_state(found)
    if train_state is not None and metadata.get("step") not in (None, str(train_state["step"])):
        raise KrakenError(f"checkpoint {found} is inconsistent: weights from step "
                          f"{metadata.get('step')}, {STATE_FILE} says {train_state['step']} (an "
                          "interrupted save of an older krakenlm, which wrote the files one by "
                          "one); its state is lost: train again into a new --out directory")
    _check_finite(state, found)
    return state, metadata


def _check_finite(state: dict[str, torch.Tensor], directory: Path) -> None:
    # One pass over the weights: far cheaper than reading them, and it names the broken tensor
    # instead of letting sampling crash or the loss print NaN.
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise KrakenError(f"checkpoint {directory}: tensor {name} holds {bad} non-finite "
                              f"values (NaN or inf) of {tensor.numel()}; the run diverged before "
                              "this save: use an earlier checkpoint or train again with a lower "
                              "--lr")


def check_weights_match_config(state: dict[str, torch.Tensor], model: Transformer,
                               directory: Path) -> None:
    """Name every missing, unexpected and mis-shaped tensor instead of loading garbage."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong_shape = [f"{n} is {tuple(state[n].shape)} but config.json implies "
                   f"{tuple(expected[n].shape)}"
                   for n in sorted(set(state) & set(expected)) if state[n].shape != expected[n].shape]
    problems = []
    if missing:
        problems.append(f"missing {_few(missing)}")
    if unexpected:
        problems.append(f"unexpected {_few(unexpected)}")
    if wrong_shape:
        problems.append(_few(wrong_shape))
    if problems:
        raise KrakenError(f"checkpoint {directory}: the weights do not match its config.json "
                          f"({'; '.join(problems)}); was config.json edited or copied from "
                          "another run?")


def _few(items: list[str], limit: int = 3) -> str:
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def load_model(directory: str | Path, *, device: torch.device | str = "cpu") -> Transformer:
    """A single-device model from a checkpoint, verified against its config."""
    found = current_checkpoint(directory)
    config = load_config(found)
    with torch.device("meta"):
        model = Transformer(config)
    state, _ = load_state_dict(found)
    check_weights_match_config(state, model, found)
    return model.assign_weights(state, device).eval()


def load_optimizer_state(directory: str | Path, optimizer: torch.optim.Optimizer,
                         step: int) -> None:
    found = current_checkpoint(directory)
    path = found / OPTIMIZER_FILE
    if not path.is_file():
        raise KrakenError(f"cannot resume from {found}: {OPTIMIZER_FILE} is missing (a checkpoint "
                          "saved without optimizer state is for inference only)")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(saved, dict) or not isinstance(saved.get("state"), dict):
            raise ValueError("not a krakenlm optimizer state")
    except Exception as exc:  # noqa: BLE001 - damaged bytes reach torch.load's unpickler, which
        # fails with whatever its reading hits (UnpicklingError, RuntimeError, EOFError,
        # IndexError, KeyError, struct.error, ...): every one is "this file is damaged"
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise KrakenError(f"cannot resume from {found}: {path.name} is unreadable "
                          f"({reason[:120]}); it was damaged after the save (cut short by a "
                          f"copy or a disk error): {_recovery(found)}") from None
    if saved.get("step") != str(step):
        raise KrakenError(f"checkpoint {found} is inconsistent: the optimizer state is from "
                          f"step {saved.get('step')} but {STATE_FILE} says {step} (an "
                          "interrupted save of an older krakenlm); train again into a new --out "
                          "directory")
    try:
        optimizer.load_state_dict(saved["state"])
    except (ValueError, KeyError, RuntimeError) as exc:
        raise KrakenError(f"cannot resume from {found}: {path.name} does not fit this model's "
                          f"parameters ({str(exc).splitlines()[0][:120]}); {_recovery(found)}"
                          ) from None


def _recovery(found: Path) -> str:
    """What to do when the current checkpoint cannot be resumed: an older kept one, if any."""
    older = [d for _, d in _step_dirs(found.parent) if d != found and d.name < found.name]
    if older:
        return (f"restore it, or move {found.name} out of {found.parent} to resume from "
                f"{older[-1].name}")
    return ("restore it from a copy of the run, or train again into a new --out directory "
            "(eval and generate still read the weights)")


# -------------------------------------------------------------------------------- saving
class _HookedFile:
    """A binary file that passes the `during:<file>` kill point once, after its first bytes
    reached the disk: what a kill in the middle of a write leaves behind. It also keeps the
    OSError of a failed write: torch.save reports one (a full disk) as a RuntimeError of its
    own ("unexpected pos ..."), and the save must say what really happened."""

    def __init__(self, f: BinaryIO, point: str, step: int):
        self.f, self.point, self.step, self.passed = f, point, step, False
        self.error: OSError | None = None

    def write(self, data) -> int:
        written = self._keeping_error(self.f.write, data)
        if not self.passed:
            self.passed = True
            self.flush()
            _kill_point(self.point, self.step)
        return written

    def flush(self) -> None:
        self._keeping_error(self.f.flush)

    def _keeping_error(self, action, *args):
        try:
            return action(*args)
        except OSError as exc:
            self.error = exc
            raise


def _write_bytes(data: bytes) -> Callable[[BinaryIO], None]:
    def write(f) -> None:
        half = len(data) // 2
        f.write(data[:half])
        f.write(data[half:])
    return write


def _write_file(path: Path, write: Callable[[BinaryIO], None], step: int) -> None:
    _kill_point(f"before:{path.name}", step)
    f = open(path, "wb")
    try:
        hooked = _HookedFile(f, f"during:{path.name}", step)
        try:
            write(hooked)
            f.flush()
            os.fsync(f.fileno())
        except Exception as exc:
            # torch.save wraps the OSError of its writes (ENOSPC, EIO) in a RuntimeError of its
            # own; name the real cause and the file
            hidden = hooked.error or os_error_from(exc)
            if hidden is None:
                raise
            raise OSError(hidden.errno, hidden.strerror, str(path)) from None
    except BaseException:
        with contextlib.suppress(OSError):
            f.close()  # the buffered rest cannot be written either
        raise
    f.close()
    _kill_point(f"after:{path.name}", step)


def _fsync_dir(directory: Path) -> None:
    # A rename is durable only once the directory holding it is on disk.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def clean_stale(run_dir: str | Path) -> None:
    """Remove what a killed save left behind: temporary and half-deleted checkpoint
    directories, and the temporary files of older versions' saves."""
    run_dir = Path(run_dir)
    parent = run_dir / CHECKPOINTS_DIR
    if parent.is_dir():
        for entry in parent.iterdir():
            if entry.name.startswith(_STALE_PREFIXES):
                shutil.rmtree(entry, ignore_errors=True)
    for name in SAVED_FILES:
        (run_dir / f".{name}.tmp").unlink(missing_ok=True)


def save_checkpoint(run_dir: str | Path, model: Transformer,
                    optimizer: torch.optim.Optimizer | None, train_state: dict[str, Any], *,
                    keep: int = 1, files: dict[str, bytes] | None = None) -> Path:
    """Write a complete checkpoint of `train_state["step"]` and make it current; keep the
    newest `keep` checkpoints. Returns the new checkpoint directory. `files` (name -> bytes,
    e.g. the run's tokenizer.json) are written into the checkpoint with the others, before
    the rename, so they are part of it or absent with it.

    On an OSError (disk full, read-only filesystem, permissions) the temporary directory is
    removed and a CheckpointSaveError raised; the previous checkpoint stays current.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    run_dir = Path(run_dir)
    step = int(train_state["step"])
    parent = run_dir / CHECKPOINTS_DIR
    final = parent / step_dir_name(step)
    if final.exists():
        # The trainer never saves one step twice; replacing a current checkpoint in place
        # could not be atomic.
        raise ValueError(f"{final} already exists")
    tmp = parent / f".tmp-{step_dir_name(step)}-{os.getpid()}"
    try:
        parent.mkdir(parents=True, exist_ok=True)
        clean_stale(run_dir)
        _kill_point("start", step)
        tmp.mkdir()
        # Tied weights are one tensor; safetensors refuses shared storage, and there is none
        # here because the LM head *is* tok_emb (no separate parameter). The serialised bytes
        # are one extra copy of the weights in memory while saving.
        tensors = {name: t.detach().contiguous().cpu() for name, t in model.state_dict().items()}
        _write_file(tmp / MODEL_FILE,
                    _write_bytes(safetensors_bytes(tensors, metadata={"step": str(step)})), step)
        config_text = json.dumps(model.config.to_dict(), indent=2) + "\n"
        _write_file(tmp / CONFIG_FILE, _write_bytes(config_text.encode()), step)
        if optimizer is not None:
            _write_file(tmp / OPTIMIZER_FILE, lambda f: torch.save(
                {"step": str(step), "state": optimizer.state_dict()}, f), step)
        for name, data in (files or {}).items():
            if name in SAVED_FILES or "/" in name or name.startswith("."):
                raise ValueError(f"cannot save an extra checkpoint file named {name!r}")
            _write_file(tmp / name, _write_bytes(data), step)
        state_text = json.dumps(train_state, indent=2) + "\n"
        _write_file(tmp / STATE_FILE, _write_bytes(state_text.encode()), step)
        _fsync_dir(tmp)
        _kill_point("before-rename", step)
        os.rename(tmp, final)  # the one step that makes the new checkpoint current
        _fsync_dir(parent)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        previous = resolve(run_dir)
        kept = (f"the previous checkpoint {previous} is intact" if previous is not None
                else "no earlier checkpoint exists")
        reason = exc.strerror or str(exc)
        raise CheckpointSaveError(
            f"could not save the checkpoint of step {step} in {parent}: {reason} "
            f"({exc.filename or parent}); {kept}; free disk space or make {run_dir} writable"
        ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # Ctrl-C while saving: the old one stays
        raise
    _kill_point("after-rename", step)
    _prune(run_dir, keep, step)
    _kill_point("end", step)
    return final


def _prune(run_dir: Path, keep: int, step: int) -> None:
    """Delete all but the newest `keep` checkpoints, and an old flat layout's files. Each old
    directory is first renamed out of the `step-*` names (atomic), so a half-deleted one is
    never mistaken for a checkpoint. Failures only leave extra files behind."""
    parent = run_dir / CHECKPOINTS_DIR
    for old_step, old in _step_dirs(parent)[:-keep]:
        trash = parent / f".trash-{old.name}-{os.getpid()}"
        try:
            os.rename(old, trash)
        except OSError:
            continue
        _kill_point("during-prune", step)
        shutil.rmtree(trash, ignore_errors=True)
    if (run_dir / MODEL_FILE).is_file() and (run_dir / STATE_FILE).is_file():
        for name in SAVED_FILES:  # an old flat checkpoint, now superseded
            try:
                (run_dir / name).unlink(missing_ok=True)
            except OSError:
                pass
