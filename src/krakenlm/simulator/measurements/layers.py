"""Vidur's measured Llama-2-70B layer operators (`data/layer_measurements.csv`) as the operator
specs the simulator's graph gives them (graph.py), so a measured op is timed exactly as a model
run times it."""

from __future__ import annotations

from ...models import ModelConfig
from ..graph import OpSpec, shard


def op_spec(op: str, cfg: ModelConfig, tp: int, tokens: int) -> OpSpec | None:
    """The graph's spec for a measured op of one rank's layer shard."""
    sh = shard(cfg, tp)
    d, hd = cfg.d_model, cfg.head_dim
    if op == "qkv_proj":
        return OpSpec("qkv", "GEMM", "matmul", (tokens, (sh.heads + 2 * sh.kv_heads) * hd, d, 1))
    if op == "o_proj":
        return OpSpec("out_proj", "GEMM", "matmul", (tokens, d, sh.heads * hd, 1))
    if op == "mlp_up_proj":
        width = sh.ffn * (2 if cfg.activation == "swiglu" else 1)
        return OpSpec("ffn_up", "GEMM", "matmul", (tokens, width, d, 1))
    if op == "mlp_down_proj":
        return OpSpec("ffn_down", "GEMM", "matmul", (tokens, d, sh.ffn, 1))
    if op == "mlp_act":
        act = "swiglu" if cfg.activation == "swiglu" else "gelu"
        return OpSpec("activation", "elementwise", "stream", (act, tokens, sh.ffn))
    if op == "rmsnorm":
        return OpSpec("norm", "LayerNorm", "stream", (cfg.norm, tokens, d))
    if op == "rope":
        return OpSpec("rope", "attention", "stream", ("rope", tokens, (sh.heads + sh.kv_heads) * hd))
    if op == "residual_add":
        return OpSpec("residual", "elementwise", "stream", ("residual", tokens, d))
    if op == "all_reduce":
        return OpSpec("allreduce", "AllReduce", "collective", ("all_reduce", tokens * d * 2, tp))
    return None
