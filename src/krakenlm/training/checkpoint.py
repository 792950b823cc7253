"""Checkpoints: a directory with model.safetensors, config.json, optimizer.pt, train_state.json.

Files are written under temporary names and renamed into place; train_state.json goes last and
names the step, and the weights carry the same step in their metadata, so a checkpoint torn by
an interruption is detected instead of silently loaded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from ..errors import KrakenError
from ..models import ConfigError, ModelConfig
from ..models.transformer import Transformer

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "train_state.json"


def _replace_into(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def save_checkpoint(directory: Path, model: Transformer, optimizer: torch.optim.Optimizer | None,
                    train_state: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    step = str(train_state["step"])
    # Tied weights are one tensor; safetensors refuses shared storage, and there is none here
    # because the LM head *is* tok_emb (no separate parameter).
    tensors = {name: t.detach().contiguous().cpu() for name, t in model.state_dict().items()}
    _replace_into(directory / MODEL_FILE,
                  lambda p: save_file(tensors, str(p), metadata={"step": step}))
    _replace_into(directory / CONFIG_FILE, model.config.save)
    if optimizer is not None:
        _replace_into(directory / OPTIMIZER_FILE,
                      lambda p: torch.save({"step": step, "state": optimizer.state_dict()}, p))
    _replace_into(directory / STATE_FILE,
                  lambda p: p.write_text(json.dumps(train_state, indent=2) + "\n"))


def is_checkpoint(directory: Path) -> bool:
    return (directory / MODEL_FILE).is_file() and (directory / CONFIG_FILE).is_file()


def read_train_state(directory: Path) -> dict[str, Any] | None:
    path = directory / STATE_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def load_config(directory: Path) -> ModelConfig:
    if not directory.exists():
        raise KrakenError(f"checkpoint directory {directory} does not exist")
    if not is_checkpoint(directory):
        raise KrakenError(f"{directory} is not a checkpoint: it needs {MODEL_FILE} and "
                          f"{CONFIG_FILE} (written by `krakenlm train --out DIR`)")
    try:
        return ModelConfig.load(directory / CONFIG_FILE)
    except ConfigError as exc:
        raise KrakenError(f"checkpoint {directory}: {exc}") from None


def load_state_dict(directory: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The full (single-device) weights and their metadata."""
    path = directory / MODEL_FILE
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
        return load_file(str(path)), metadata
    except (SafetensorError, OSError) as exc:
        raise KrakenError(f"checkpoint {path} is unreadable ({exc}); it may be truncated") from None


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
    directory = Path(directory)
    config = load_config(directory)
    with torch.device("meta"):
        model = Transformer(config)
    state, _ = load_state_dict(directory)
    check_weights_match_config(state, model, directory)
    model = model.to_empty(device=device)
    model.load_state_dict(state)
    model.restore_buffers()
    return model.eval()


def load_optimizer_state(directory: Path, optimizer: torch.optim.Optimizer, step: int) -> None:
    path = directory / OPTIMIZER_FILE
    if not path.is_file():
        raise KrakenError(f"cannot resume from {directory}: {OPTIMIZER_FILE} is missing")
    saved = torch.load(path, map_location="cpu", weights_only=True)
    if saved.get("step") != str(step):
        raise KrakenError(f"checkpoint {directory} is inconsistent: the optimizer state is from "
                          f"step {saved.get('step')} but train_state.json says {step} (was "
                          "saving interrupted?); resume from an earlier copy")
    optimizer.load_state_dict(saved["state"])
