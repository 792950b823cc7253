"""Model -> per-device operator graphs, from the same `ModelConfig` the PyTorch models use.

A graph is a list of operators in program order; each runs on the compute stream or the
communication stream and may name operators of the same graph it waits for (besides the
order of its own stream). Shapes are per device.

Tensor parallelism (tp devices):
* gpt (standard block), Megatron sharding: heads, KV heads and FFN columns split over the
  devices; two blocking all-reduces of tokens x d per layer (after attention, after the FFN).
* parallel (GPT-J / PaLM block): attention and FFN read the same norm output, their partial
  outputs are added and reduced once: one blocking all-reduce per layer.
* kraken: NOT Megatron. With tp = degree each device holds one whole sub-layer (width e, h
  heads, FFN width); with tp dividing the degree, degree/tp sub-layers (batched GEMMs). Layer 1
  has no communication; in layers 2..L the all-reduce of the previous layer's outputs (tokens x
  e values) starts with the layer and only the FFN waits for it, so it overlaps norm, QKV,
  attention and the output projection; a final blocking reduce feeds the conjunction Linear's
  output (d*e -> e, a partial product per device) to the final norm and the LM head.

Embeddings are replicated (no communication); the LM head is vocabulary-parallel (V/tp columns
per device) followed by an all-gather of the last tokens' logits. Prefill computes logits for
the last token of each sequence only (that is all generation needs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import KrakenError
from ..models import ModelConfig
from .attention import unfused_ops


class SimulationError(KrakenError, ValueError):
    """The requested simulation is impossible (sharding, sizes); the message says why."""


@dataclass(frozen=True)
class OpSpec:
    name: str
    category: str
    model: str  # matmul | stream | flash_prefill | flash_decode | collective
    args: tuple
    stream: str = "compute"
    deps: tuple[str, ...] = ()


@dataclass
class Graph:
    name: str
    ops: list[OpSpec] = field(default_factory=list)
    count: int = 1  # identical copies run back to back (layers 2..L)

    def add(self, name: str, category: str, model: str, args: tuple, *, stream: str = "compute",
            deps: tuple[str, ...] = ()) -> None:
        self.ops.append(OpSpec(name, category, model, args, stream, deps))


@dataclass(frozen=True)
class Sharding:
    """What one device holds."""
    sublayers: int  # sub-layers per device per layer (Kraken: degree / tp; else 1)
    heads: int
    kv_heads: int
    ffn: int
    width: int  # residual width handled per sub-layer (d_model or e)
    vocab: int  # LM-head columns per device


def shard(cfg: ModelConfig, tp: int) -> Sharding:
    if tp < 1:
        raise SimulationError(f"--tp must be at least 1, got {tp}")
    vocab = -(-cfg.vocab_size // tp)
    if cfg.arch == "kraken":
        if cfg.degree % tp:
            raise SimulationError(
                f"a {cfg.degree}-way Kraken model runs one or more whole sub-layers per device: "
                f"--tp must divide the degree {cfg.degree}, got {tp}; use one of "
                f"{[t for t in range(1, cfg.degree + 1) if cfg.degree % t == 0]}")
        return Sharding(cfg.degree // tp, cfg.n_heads, cfg.kv_heads, cfg.ffn_dim, cfg.d_model,
                        vocab)
    if cfg.n_heads % tp:
        raise SimulationError(
            f"--tp {tp} does not divide the model's {cfg.n_heads} attention heads (n_heads); "
            f"use a tensor-parallel degree that divides {cfg.n_heads}")
    kv = cfg.kv_heads
    if kv % tp and tp % kv:
        raise SimulationError(
            f"--tp {tp} neither divides nor is a multiple of the {kv} KV heads (n_kv_heads); "
            "use a tensor-parallel degree that does")
    if cfg.ffn_dim % tp:
        raise SimulationError(f"--tp {tp} does not divide the FFN width {cfg.ffn_dim} (ffn_dim)")
    return Sharding(1, cfg.n_heads // tp, max(1, kv // tp), cfg.ffn_dim // tp, cfg.d_model, vocab)


def _attention(g: Graph, cfg: ModelConfig, sh: Sharding, batch: int, q_len: int, kv_len: int,
               phase: str, fused: bool) -> str:
    """Append RoPE, the KV-cache write and attention; return the name of the last op."""
    s, hd = sh.sublayers, cfg.head_dim
    tokens = batch * q_len
    if cfg.position == "rope":
        g.add("rope", "attention", "stream", ("rope", tokens * s, (sh.heads + sh.kv_heads) * hd))
    g.add("kv_cache_write", "attention", "stream", ("kv_append", tokens * s, 2 * sh.kv_heads * hd))
    if fused:
        if phase == "prefill":
            g.add("attention", "attention", "flash_prefill",
                  (batch * s, sh.heads, sh.kv_heads, q_len, kv_len, hd))
        else:
            g.add("attention", "attention", "flash_decode",
                  (batch * s, sh.heads, sh.kv_heads, kv_len, hd))
        return "attention"
    for name, model, args in unfused_ops(batch * s, sh.heads, q_len, kv_len, hd):
        g.add(name, "attention", model, args)
    return "attn_av"


def layer_graph(cfg: ModelConfig, tp: int, batch: int, q_len: int, kv_len: int, phase: str,
                bytes_per_value: int, *, fused: bool = True, first: bool = False) -> Graph:
    """One layer on one device. `first` is Kraken's layer 1 (no communication)."""
    sh = shard(cfg, tp)
    s, d = sh.sublayers, sh.width
    tokens = batch * q_len
    rows = tokens * s  # elementwise rows over all sub-layers held by the device
    norm = cfg.norm
    qkv_cols = (sh.heads + 2 * sh.kv_heads) * cfg.head_dim
    up_cols = sh.ffn * (2 if cfg.activation == "swiglu" else 1)
    act = "swiglu" if cfg.activation == "swiglu" else "gelu"
    g = Graph(f"{cfg.arch} layer ({phase})")
    act_bytes = tokens * d * bytes_per_value

    if cfg.arch == "kraken":
        communicate = not first and tp > 1
        if not first and s > 1:  # the device first sums its own sub-layers' outputs
            g.add("local_sum", "elementwise", "stream", ("residual", tokens * (s - 1), d))
        if communicate:
            g.add("allreduce_prev_outputs", "AllReduce", "collective",
                  ("all_reduce", act_bytes, tp), stream="comm",
                  deps=("local_sum",) if s > 1 else ())
        g.add("norm_attn", "LayerNorm", "stream", (norm, rows, d))
        g.add("qkv", "GEMM", "matmul", (tokens, qkv_cols, d, s))
        _attention(g, cfg, sh, batch, q_len, kv_len, phase, fused)
        g.add("out_proj", "GEMM", "matmul", (tokens, d, sh.heads * cfg.head_dim, s))
        g.add("residual_attn", "elementwise", "stream", ("residual", rows, d))
        if not first:
            # S + m_i: the FFN input mixes every sub-layer; only this waits for the all-reduce
            g.add("add_reduced", "elementwise", "stream", ("residual", rows, d),
                  deps=("allreduce_prev_outputs",) if communicate else ())
        g.add("norm_ffn", "LayerNorm", "stream", (norm, rows, d))
        g.add("ffn_up", "GEMM", "matmul", (tokens, up_cols, d, s))
        g.add("activation", "elementwise", "stream", (act, rows, sh.ffn))
        g.add("ffn_down", "GEMM", "matmul", (tokens, d, sh.ffn, s))
        g.add("residual_ffn", "elementwise", "stream", ("residual", rows, d))
        return g

    if cfg.arch == "gpt":
        g.add("norm_attn", "LayerNorm", "stream", (norm, tokens, d))
        g.add("qkv", "GEMM", "matmul", (tokens, qkv_cols, d, 1))
        _attention(g, cfg, sh, batch, q_len, kv_len, phase, fused)
        g.add("out_proj", "GEMM", "matmul", (tokens, d, sh.heads * cfg.head_dim, 1))
        if tp > 1:
            g.add("allreduce_attn", "AllReduce", "collective", ("all_reduce", act_bytes, tp),
                  stream="comm", deps=("out_proj",))
        g.add("residual_attn", "elementwise", "stream", ("residual", tokens, d),
              deps=("allreduce_attn",) if tp > 1 else ())
        g.add("norm_ffn", "LayerNorm", "stream", (norm, tokens, d))
        g.add("ffn_up", "GEMM", "matmul", (tokens, up_cols, d, 1))
        g.add("activation", "elementwise", "stream", (act, tokens, sh.ffn))
        g.add("ffn_down", "GEMM", "matmul", (tokens, d, sh.ffn, 1))
        if tp > 1:
            g.add("allreduce_ffn", "AllReduce", "collective", ("all_reduce", act_bytes, tp),
                  stream="comm", deps=("ffn_down",))
        g.add("residual_ffn", "elementwise", "stream", ("residual", tokens, d),
              deps=("allreduce_ffn",) if tp > 1 else ())
        return g

    # parallel block: one norm, attention and FFN side by side, one reduce of their sum
    g.add("norm", "LayerNorm", "stream", (norm, tokens, d))
    g.add("qkv", "GEMM", "matmul", (tokens, qkv_cols, d, 1))
    _attention(g, cfg, sh, batch, q_len, kv_len, phase, fused)
    g.add("out_proj", "GEMM", "matmul", (tokens, d, sh.heads * cfg.head_dim, 1))
    g.add("ffn_up", "GEMM", "matmul", (tokens, up_cols, d, 1))
    g.add("activation", "elementwise", "stream", (act, tokens, sh.ffn))
    g.add("ffn_down", "GEMM", "matmul", (tokens, d, sh.ffn, 1))
    g.add("add_branches", "elementwise", "stream", ("residual", tokens, d))
    if tp > 1:
        g.add("allreduce", "AllReduce", "collective", ("all_reduce", act_bytes, tp),
              stream="comm", deps=("add_branches",))
    g.add("residual", "elementwise", "stream", ("residual", tokens, d),
          deps=("allreduce",) if tp > 1 else ())
    return g


def embedding_graph(cfg: ModelConfig, batch: int, q_len: int) -> Graph:
    g = Graph("embedding")
    tokens = batch * q_len
    g.add("embedding", "embedding", "stream", ("embedding", tokens, cfg.d_model))
    if cfg.position == "learned":
        g.add("position_add", "embedding", "stream", ("residual", tokens, cfg.d_model))
    return g


def head_graph(cfg: ModelConfig, tp: int, batch: int, bytes_per_value: int) -> Graph:
    """Conjunction (Kraken), final norm and the vocabulary-parallel LM head, last tokens only."""
    sh = shard(cfg, tp)
    g = Graph("head")
    e = cfg.d_model
    if cfg.arch == "kraken":
        # sum_i W_conj[:, i] x_i: each device multiplies its own streams, then one reduce
        g.add("conjunction", "GEMM", "matmul", (batch, e, e * sh.sublayers, 1))
        if tp > 1:
            g.add("allreduce_conjunction", "AllReduce", "collective",
                  ("all_reduce", batch * e * bytes_per_value, tp), stream="comm",
                  deps=("conjunction",))
    g.add("norm_final", "LayerNorm", "stream", (cfg.norm, batch, e),
          deps=("allreduce_conjunction",) if cfg.arch == "kraken" and tp > 1 else ())
    g.add("lm_head", "LM head", "matmul", (batch, sh.vocab, e, 1))
    if tp > 1:
        g.add("allgather_logits", "AllGather", "collective",
              ("all_gather", batch * sh.vocab * tp * bytes_per_value, tp), stream="comm",
              deps=("lm_head",))
    return g


def model_graphs(cfg: ModelConfig, tp: int, batch: int, q_len: int, kv_len: int, phase: str,
                 bytes_per_value: int, fused: bool = True) -> list[Graph]:
    """Every graph of one forward pass (prefill or one decode step), with repeat counts."""
    graphs = [embedding_graph(cfg, batch, q_len)]
    if cfg.arch == "kraken":
        graphs.append(layer_graph(cfg, tp, batch, q_len, kv_len, phase, bytes_per_value,
                                  fused=fused, first=True))
        if cfg.n_layers > 1:
            rest = layer_graph(cfg, tp, batch, q_len, kv_len, phase, bytes_per_value, fused=fused)
            rest.count = cfg.n_layers - 1
            graphs.append(rest)
    else:
        layer = layer_graph(cfg, tp, batch, q_len, kv_len, phase, bytes_per_value, fused=fused)
        layer.count = cfg.n_layers
        graphs.append(layer)
    graphs.append(head_graph(cfg, tp, batch, bytes_per_value))
    return graphs
