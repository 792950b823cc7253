"""Memory per device: weights, KV cache and peak activations, checked against capacity.

Weights: each device holds its shard of every layer (Megatron: 1/tp of the attention and FFN
matrices, norms replicated; Kraken: degree/tp whole sub-layers), the replicated embedding
table (and learned positions), its V/tp columns of an untied LM head and, for Kraken, its rows
of the conjunction Linear. KV cache: batch x (prompt + generated) tokens x 2 x layers x the
KV heads it holds x head_dim. Activations: the largest live set of the prefill (input and
output of the widest GEMM, the scores of unfused attention) plus the logits. A fixed runtime
reserve stands for the CUDA/HIP context and library workspaces.

Precision per tensor follows the software profile (`SoftwareProfile.precision`): served in FP8,
the layers' matrices take one byte per value while the embedding, an untied LM head and the
norms stay 16-bit, and the KV cache is FP8 only where the profile says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import KrakenError
from ..hardware.schema import DTYPE_BYTES, System
from ..models import ModelConfig
from .graph import shard

RUNTIME_RESERVE_BYTES = 2 * 2**30


class ModelDoesNotFit(KrakenError, ValueError):
    """Weights + KV cache + activations exceed a device's memory."""


@dataclass(frozen=True)
class MemoryUse:
    """Memory per device in bytes (module docstring: what each term counts): weights, KV cache at
    the full sequence, peak activations and the runtime reserve (RUNTIME_RESERVE_BYTES), against
    the device's datasheet capacity. `fits`: their sum is at most the capacity."""
    weights_bytes: int
    kv_cache_bytes: int
    activation_bytes: int
    reserve_bytes: int
    capacity_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes + self.activation_bytes + self.reserve_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def to_dict(self) -> dict[str, int | bool]:
        return {"weights_bytes": self.weights_bytes, "kv_cache_bytes": self.kv_cache_bytes,
                "activation_bytes": self.activation_bytes, "reserve_bytes": self.reserve_bytes,
                "total_bytes": self.total_bytes, "capacity_bytes": self.capacity_bytes,
                "fits": self.fits}


def matrix_params_per_device(cfg: ModelConfig, tp: int) -> int:
    """The layers' GEMM weights (and Kraken's conjunction) held by one device: what FP8
    quantisation shrinks."""
    sh = shard(cfg, tp)
    if cfg.arch == "kraken":
        per_layer = sh.sublayers * (cfg.attention_params_per_sublayer()
                                    + cfg.ffn_params_per_sublayer())
        return cfg.n_layers * per_layer + sh.sublayers * cfg.d_model * cfg.d_model
    matrices = cfg.attention_params_per_sublayer() + cfg.ffn_params_per_sublayer()
    return cfg.n_layers * (matrices // tp)


def weight_params_per_device(cfg: ModelConfig, tp: int) -> int:
    sh = shard(cfg, tp)
    norms = cfg.norms_per_sublayer * cfg.norm_params()
    if cfg.arch == "kraken":
        per_layer = sh.sublayers * cfg.params_per_sublayer()
        extra = sh.sublayers * cfg.d_model * cfg.d_model  # conjunction rows of this device
    else:
        matrices = cfg.attention_params_per_sublayer() + cfg.ffn_params_per_sublayer()
        per_layer = matrices // tp + norms
        extra = 0
    head = 0 if cfg.tie_embeddings else sh.vocab * cfg.d_model
    return cfg.n_layers * per_layer + cfg.embedding_params() + head + extra + cfg.norm_params()


def kv_cache_bytes(cfg: ModelConfig, tp: int, batch: int, tokens: int, dtype: str) -> int:
    sh = shard(cfg, tp)
    per_token = 2 * cfg.n_layers * sh.sublayers * sh.kv_heads * cfg.head_dim
    return batch * tokens * per_token * DTYPE_BYTES[dtype]


def activation_bytes(cfg: ModelConfig, tp: int, batch: int, prompt: int, dtype: str,
                     fused_attention: bool) -> int:
    sh = shard(cfg, tp)
    b = DTYPE_BYTES[dtype]
    tokens = batch * prompt * sh.sublayers
    widest = max((sh.heads + 2 * sh.kv_heads) * cfg.head_dim,
                 sh.ffn * (2 if cfg.activation == "swiglu" else 1))
    live = tokens * (2 * sh.width + widest) * b  # residual stream, its norm, the GEMM output
    if not fused_attention:
        live += batch * sh.sublayers * sh.heads * prompt * prompt * b
    logits = batch * sh.vocab * 4
    return live + logits


def memory_use(cfg: ModelConfig, system: System, tp: int, batch: int, prompt: int, gen: int,
               dtype: str = "fp16", fused_attention: bool = True,
               precision: Callable[[str], str] | None = None) -> MemoryUse:
    """`precision(operator)` gives the dtype of "gemm", "kv_cache", ... (default: `dtype`)."""
    precision = precision or (lambda _op: dtype)
    matrices = matrix_params_per_device(cfg, tp)
    others = weight_params_per_device(cfg, tp) - matrices
    gemm_bytes = DTYPE_BYTES[precision("gemm")]
    other_bytes = DTYPE_BYTES[precision("elementwise")] if dtype == "fp8" else DTYPE_BYTES[dtype]
    return MemoryUse(weights_bytes=matrices * gemm_bytes + others * other_bytes,
                     kv_cache_bytes=kv_cache_bytes(cfg, tp, batch, prompt + gen,
                                                   precision("kv_cache")),
                     activation_bytes=activation_bytes(cfg, tp, batch, prompt,
                                                       precision("elementwise"),
                                                       fused_attention),
                     reserve_bytes=RUNTIME_RESERVE_BYTES,
                     capacity_bytes=int(system.device.memory.capacity_bytes))


def check_fits(use: MemoryUse, model_name: str, system: System, tp: int) -> None:
    if use.fits:
        return
    gb = 1e9
    raise ModelDoesNotFit(
        f"{model_name} does not fit on {system.name} with --tp {tp}: per device it needs "
        f"weights {use.weights_bytes / gb:.1f} GB + KV cache {use.kv_cache_bytes / gb:.1f} GB + "
        f"activations {use.activation_bytes / gb:.1f} GB + runtime reserve "
        f"{use.reserve_bytes / gb:.1f} GB = {use.total_bytes / gb:.1f} GB > "
        f"{use.capacity_bytes / gb:.1f} GB; use a larger --tp, a smaller --batch, --prompt or "
        "--gen, a narrower --dtype, a system with more memory, or --skip-memory-check to "
        "time it anyway")
