"""`krakenlm export hf`: a checkpoint -> a Hugging Face model directory.

The rule (see docs/huggingface.md): a standard block that a native `transformers` class
computes exactly is written as that class (GPT-2 or Llama, see `native.native_family`); every
other model (the parallel block, Kraken, mixed standard blocks, or any model with
`remote_code=True`) is written with its own modelling code for `trust_remote_code=True`.
Both get model.safetensors, config.json, generation_config.json and the checkpoint's own
tokenizer (GPT-2's files, or the tokenizer.json of a BPE run or an imported model), so that
`import hf` of the export reads the same tokenizer back.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from ..errors import KrakenError
from ..fileio import os_error_from
from ..models.config import ModelConfig
from ..runtime.model_and_tokenizer import load_model_and_tokenizer
from . import native
from .atomic_dir import check_output_dir, write_directory_atomically
from .tokenizer_files import token_ids, tokenizer_files

REMOTE_FILES = ("configuration_krakenlm.py", "modeling_krakenlm.py")
REMOTE_MODEL_TYPE = "krakenlm"


@dataclass(frozen=True)
class ExportResult:
    """What an export to a Hugging Face directory wrote: the directory, the model family ("gpt2" or
    "llama": loads in stock transformers; "krakenlm": needs trust_remote_code) and the names of
    the files written."""
    out_dir: Path
    family: str  # "gpt2", "llama" or "krakenlm" (remote code)
    files: tuple[str, ...]

    @property
    def remote_code(self) -> bool:
        return self.family == REMOTE_MODEL_TYPE


def remote_config_dict(config: ModelConfig) -> dict:
    return {"model_type": REMOTE_MODEL_TYPE, "architectures": ["KrakenLMForCausalLM"],
            "auto_map": {"AutoConfig": "configuration_krakenlm.KrakenLMConfig",
                         "AutoModelForCausalLM": "modeling_krakenlm.KrakenLMForCausalLM"},
            # rope_scaling is left out: export refuses a scaled RoPE for remote code, and
            # transformers 5 warns on a `rope_scaling` key (its old name for rope parameters)
            **{k: v for k, v in config.to_dict().items() if k != "rope_scaling"},
            "tie_word_embeddings": config.tie_embeddings, "use_cache": True}


def to_remote(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our names under the causal LM's `model.` prefix; an untied head stays `lm_head`."""
    return {(name if name.startswith("lm_head.") else f"model.{name}"): t
            for name, t in state.items()}


def _json(obj: dict) -> str:
    return json.dumps(obj, indent=2) + "\n"


def export_hf(checkpoint_dir: Path, out_dir: Path, *, force: bool = False,
              remote_code: bool = False) -> ExportResult:
    out_dir = Path(out_dir)
    # before loading anything
    check_output_dir(out_dir, force, "Hugging Face model", Path(checkpoint_dir))
    model, tokenizer = load_model_and_tokenizer(checkpoint_dir)
    config = model.config
    if config.lm_head_width is not None:
        raise KrakenError(f"checkpoint {checkpoint_dir} widens its LM head (lm_head_width "
                          f"{config.lm_head_width}), a training ablation the Hugging Face "
                          "export does not carry; only models without it can be exported")
    family = None if remote_code else native.native_family(config)
    state = {name: t.detach() for name, t in model.state_dict().items()}
    if family == "gpt2":
        tensors, config_dict = native.to_gpt2(state, config), native.gpt2_config_dict(config)
    elif family == "llama":
        tensors, config_dict = native.to_llama(state, config), native.llama_config_dict(config)
    else:
        if config.rope_scaling is not None:
            raise KrakenError(f"checkpoint {checkpoint_dir} scales its RoPE (rope_scaling "
                              f"{config.rope_scaling.kind}), which krakenlm's remote code "
                              "does not compute; only a Llama-shaped model (gpt arch, rope, "
                              "rmsnorm, swiglu) exports with it, without --remote-code")
        family = REMOTE_MODEL_TYPE
        tensors, config_dict = to_remote(state), remote_config_dict(config)
    # safetensors refuses tensors sharing memory (our splits are views): one copy each.
    tensors = {name: t.contiguous().clone() for name, t in tensors.items()}
    ids = token_ids(tokenizer)
    config_dict.update(ids, torch_dtype="float32")
    generation = {**ids, "pad_token_id": ids["eos_token_id"]}

    def fill(tmp: Path) -> None:
        path = tmp / "model.safetensors"
        try:
            save_file(tensors, str(path), metadata={"format": "pt"})
        except SafetensorError as exc:
            # its writer reports a full disk as "I/O error: ... (os error 28)": the OSError it
            # is lets the caller say so in one line and clean up
            hidden = os_error_from(exc, path)
            if hidden is None:
                raise
            raise hidden from None
        (tmp / "config.json").write_text(_json(config_dict))
        (tmp / "generation_config.json").write_text(_json(generation))
        for name, content in tokenizer_files(tokenizer, config.context_len).items():
            (tmp / name).write_bytes(content)
        if family == REMOTE_MODEL_TYPE:
            source = resources.files("krakenlm.interop") / "hf_remote"
            for name in REMOTE_FILES:
                with resources.as_file(source / name) as path:
                    shutil.copyfile(path, tmp / name)

    write_directory_atomically(out_dir, fill, force=force, what="Hugging Face model",
                               source=Path(checkpoint_dir))
    return ExportResult(out_dir, family, tuple(sorted(p.name for p in out_dir.iterdir())))
