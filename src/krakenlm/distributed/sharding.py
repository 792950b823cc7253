"""Slice a single-device state dict into the shard that rank r of p holds.

The local model (`Transformer(config, shard=Shard(r, p))`) already has the local shapes; this
module only decides which slice of every full tensor goes where:

* Kraken: every per-sub-layer tensor (all of `layers.*` and `conj.weight`) is stacked over the
  d sub-layers on dim 0; rank r keeps sub-layers [r*d/p, (r+1)*d/p).
* GPT and parallel blocks (Megatron): the QKV projection is column-parallel, its columns laid out
  [q heads | k heads | v heads] with `head_dim` contiguous columns per head, so each of the three
  groups is sliced by heads; FFN-in is column-parallel (SwiGLU's is [gate | up], both halves
  sliced); attention-out and FFN-out are row-parallel (rows sliced), and their biases are
  replicated because they are added once, after the all-reduce.
* Everything else (embeddings, final norm, LM head, per-layer norms of GPT/parallel, the
  conjunction bias) is replicated.
"""

from __future__ import annotations

import torch

from ..models.config import ModelConfig
from ..models.transformer import Shard, local_sizes


def _block(tensor: torch.Tensor, dim: int, rank: int, parts: int) -> torch.Tensor:
    size = tensor.shape[dim] // parts
    return tensor.narrow(dim, rank * size, size)


def _kraken_slice(name: str, tensor: torch.Tensor, shard: Shard) -> torch.Tensor:
    if name.startswith("layers.") or name == "conj.weight":
        return _block(tensor, 0, shard.rank, shard.world_size)
    return tensor


def _megatron_slice(name: str, tensor: torch.Tensor, config: ModelConfig,
                    shard: Shard) -> torch.Tensor:
    r, p = shard.rank, shard.world_size
    if not name.startswith("layers."):
        return tensor
    suffix = name.split(".", 2)[2]  # e.g. "attn.qkv.weight"
    if suffix in ("attn.qkv.weight", "attn.qkv.bias"):
        hd = config.head_dim
        groups = torch.split(tensor, [config.n_heads * hd, config.kv_heads * hd,
                                      config.kv_heads * hd], dim=-1)
        return torch.cat([_block(g, -1, r, p) for g in groups], dim=-1)
    if suffix in ("ffn.up.weight", "ffn.up.bias"):
        if config.activation == "swiglu":  # [gate | up]: the same columns of both halves
            return torch.cat([_block(h, -1, r, p) for h in tensor.chunk(2, dim=-1)], dim=-1)
        return _block(tensor, -1, r, p)
    if suffix in ("attn.out.weight", "ffn.down.weight"):  # [n, in, out]: rows are dim 1
        return _block(tensor, 1, r, p)
    return tensor  # norms and row-parallel biases


def shard_state_dict(config: ModelConfig, state_dict: dict[str, torch.Tensor],
                     shard: Shard) -> dict[str, torch.Tensor]:
    """The tensors rank `shard.rank` holds (slices are copied; replicated tensors are shared)."""
    local_sizes(config, shard)  # raises the clear divisibility error first
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        if config.arch == "kraken":
            part = _kraken_slice(name, tensor, shard)
        else:
            part = _megatron_slice(name, tensor, config, shard)
        out[name] = part.contiguous()
    return out

