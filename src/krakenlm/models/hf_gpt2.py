"""Hugging Face GPT-2 checkpoints <-> krakenlm's standard block.

GPT-2 is our `gpt` architecture with biases: the conversion is a renaming plus a leading
sub-layer axis of size 1. Used to check our block against `transformers` token for token, to
benchmark against it, and to load released GPT-2 weights when a hub copy is at hand.
"""

from __future__ import annotations

import torch

from .config import ModelConfig
from .hf import from_hf_dict


def config_from_hf_gpt2(hf_config) -> ModelConfig:
    """A `transformers.GPT2Config` -> ModelConfig (the same mapping as for its config.json)."""
    return from_hf_dict(hf_config.to_dict(), "GPT2Config")


def state_dict_from_hf_gpt2(hf_state: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    """GPT2LMHeadModel's state dict -> ours. HF's Conv1D already stores weights as [in, out]."""
    def get(name: str) -> torch.Tensor:
        return hf_state.get(f"transformer.{name}", hf_state.get(name))

    out = {"tok_emb.weight": get("wte.weight"), "pos_emb.weight": get("wpe.weight"),
           "norm_f.weight": get("ln_f.weight")[None], "norm_f.bias": get("ln_f.bias")[None]}
    renames = {"ln_1": "norm1", "ln_2": "norm2", "attn.c_attn": "attn.qkv",
               "mlp.c_fc": "ffn.up"}
    for i in range(n_layers):
        src, dst = f"h.{i}.", f"layers.{i}."
        for hf_name, ours in renames.items():
            out[f"{dst}{ours}.weight"] = get(f"{src}{hf_name}.weight")[None]
            out[f"{dst}{ours}.bias"] = get(f"{src}{hf_name}.bias")[None]
        # Row-parallel projections keep their bias outside the matmul (added after the reduce).
        out[f"{dst}attn.out.weight"] = get(f"{src}attn.c_proj.weight")[None]
        out[f"{dst}attn.out_bias"] = get(f"{src}attn.c_proj.bias")[None]
        out[f"{dst}ffn.down.weight"] = get(f"{src}mlp.c_proj.weight")[None]
        out[f"{dst}ffn.down_bias"] = get(f"{src}mlp.c_proj.bias")[None]
    return {k: v.detach().clone().contiguous() for k, v in out.items()}
