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

`GraphOptions` carries what the serving software changes (krakenlm.simulator.software): the
attention path (a fused kernel only up to the head dimension it supports, the unfused QK^T /
softmax / AV kernels beyond it), a residual add fused into the following norm (one kernel
reading two tensors and writing two), RoPE plus the KV-cache write done inside the
attention kernel, and, for a model with biases, the bias of each row-parallel Linear (attention
output, FFN down) added by a kernel of its own after the all-reduce, as Megatron-style layers do
(standard block). The defaults are the plain graph: every operator a kernel of its own, biases
in the GEMMs' epilogues.
"""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass, field

from ..errors import KrakenError
from ..models import ModelConfig
from .kernels.template.attention import unfused_ops


class SimulationError(KrakenError, ValueError):
    """The requested simulation is impossible (sharding, sizes); the message says why."""


@dataclass(frozen=True)
class OpSpec:
    """One operator of a per-device graph: its name (unique in the graph), category (what it is the
    per-category time breakdown reports it under, e.g. "GEMM", "LayerNorm", "AllReduce"), the
    kernel model (matmul, stream, flash_prefill, flash_decode or collective) that times it and
    that model's arguments (per-device shapes), the stream it runs on ("compute" or "comm") and
    the names of the operators it waits for besides its stream's order."""
    name: str
    category: str
    model: str  # matmul | stream | flash_prefill | flash_decode | collective
    args: tuple
    stream: str = "compute"
    deps: tuple[str, ...] = ()


@dataclass
class Graph:
    """A per-device operator graph in program order (module docstring), run `count` times back to
    back (one layer's graph stands for layers 2..L)."""
    name: str
    ops: list[OpSpec] = field(default_factory=list)
    count: int = 1  # identical copies run back to back (layers 2..L)

    def add(self, name: str, category: str, model: str, args: tuple, *, stream: str = "compute",
            deps: tuple[str, ...] = ()) -> None:
        self.ops.append(OpSpec(name, category, model, args, stream, deps))


@dataclass(frozen=True)
class GraphOptions:
    """What the serving software changes in the graph (module docstring; from simulator.software):
    whether a fused attention kernel is asked for, the largest head dimension it supports and its
    name, whether the engine's context phase has a fused kernel at all, a residual add fused into
    the next norm, RoPE and the KV-cache write inside attention, a row-parallel Linear's bias
    added by its own kernel, and whether decode appends to the KV cache by concatenation. The
    defaults are the plain graph."""
    fused_attention: bool = True      # asked for a fused (FlashAttention-style) kernel
    max_head_dim: int | None = None   # the fused kernel's largest head dimension (None: any)
    add_norm: bool = False            # residual add fused into the following norm
    rope_in_attention: bool = False   # RoPE and the KV-cache write inside the attention kernel
    row_bias_after_reduce: bool = False  # a row-parallel Linear's bias added by a kernel of its own
    attention_kernel: str = "fused attention"
    fused_context: bool = True        # the engine's context phase has a fused kernel at all
    # "concat": a decode step copies each layer's whole K/V cache to append one token (`_attention`)
    kv_append: str = "in_place"
    # (streaming op, bytes per element) the stack's unfused kernels move (`eager_elementwise`)
    eager_bytes_per_element: tuple[tuple[str, float], ...] = ()

    def attention_path(self, head_dim: int, phase: str = "") -> str:
        """"fused", or why the unfused kernels run; `phase` "prefill" or "decode" asks about
        one phase, "" about the run (an engine whose context phase is unfused says so)."""
        if not self.fused_attention:
            return "unfused (requested)"
        if self.max_head_dim is not None and head_dim > self.max_head_dim:
            return (f"unfused (head dim {head_dim} > {self.max_head_dim}, the largest "
                    f"{self.attention_kernel} supports)")
        if not self.fused_context and phase != "decode":
            return ("unfused (the engine's context phase: QK^T, masked softmax and AV as "
                    "separate kernels)") if phase == "prefill" else \
                "unfused in prefill (the engine's context phase), fused in decode"
        return "fused"


PLAIN = GraphOptions()


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
               phase: str, opts: GraphOptions) -> str:
    """Append RoPE, the KV-cache write and attention; return the name of the last op.

    With `opts.kv_append` "concat" a decode step does not write the new token into the cache: it
    builds each layer's cache anew, torch.cat([past, new], dim=seq) for K and for V (Hugging Face
    transformers, measurements/harness.py `engine_era` cites the code). The copy reads the
    kv_len - 1 cached tokens and the new one and writes kv_len tokens: the graph's cache-write op
    ("kv_append": read one tensor, write one) over every cached token instead of the new one,

        bytes per layer per step = 2 (read + write) x batch x kv_len x 2 (K, V) x kv_heads
                                   x head_dim x bytes per KV value

    a memory-bound copy the streaming model times. RoPE stays its own op (the concatenation
    sits outside any fused kernel)."""
    s, hd = sh.sublayers, cfg.head_dim
    tokens = batch * q_len
    fused = opts.attention_path(hd, phase) == "fused"
    concat = opts.kv_append == "concat" and phase == "decode"
    if not (fused and opts.rope_in_attention) or concat:
        if cfg.position == "rope":
            g.add("rope", "attention", "stream",
                  ("rope", tokens * s, (sh.heads + sh.kv_heads) * hd))
        if concat:
            g.add("kv_cache_concat", "attention", "stream",
                  ("kv_append", batch * kv_len * s, 2 * sh.kv_heads * hd))
        else:
            g.add("kv_cache_write", "attention", "stream",
                  ("kv_append", tokens * s, 2 * sh.kv_heads * hd))
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
                bytes_per_value: int, *, fused: bool = True, first: bool = False,
                options: GraphOptions | None = None) -> Graph:
    """One layer on one device. `first` is Kraken's layer 1 (no communication).
    `bytes_per_value` sizes the collectives (the activations' dtype on the wire).

    With `options.add_norm` the residual add that ends a sub-block is fused with the norm that
    follows it: the layer starts with "add_norm_attn" (the previous layer's last residual add
    and this layer's first norm) and the FFN norm absorbs the attention residual."""
    opts = options or GraphOptions(fused_attention=fused)
    sh = shard(cfg, tp)
    s, d = sh.sublayers, sh.width
    tokens = batch * q_len
    rows = tokens * s  # elementwise rows over all sub-layers held by the device
    norm = cfg.norm
    add_norm = f"add_{norm}"
    qkv_cols = (sh.heads + 2 * sh.kv_heads) * cfg.head_dim
    up_cols = sh.ffn * (2 if cfg.activation == "swiglu" else 1)
    act = "swiglu" if cfg.activation == "swiglu" else "gelu"
    g = Graph(f"{cfg.arch} layer ({phase})")
    act_bytes = tokens * d * bytes_per_value
    fuse = opts.add_norm

    def first_norm(name: str, rows_: int, deps: tuple[str, ...] = ()) -> None:
        if fuse:  # the previous layer's final residual add happens here
            g.add(f"add_{name}", "LayerNorm", "stream", (add_norm, rows_, d), deps=deps)
        else:
            g.add(name, "LayerNorm", "stream", (norm, rows_, d), deps=deps)

    if cfg.arch == "kraken":
        communicate = not first and tp > 1
        # Fused: the kernel that finishes x_i (previous residual add + this norm) runs first,
        # since the all-reduce of the x_i needs them.
        if fuse:
            first_norm("norm_attn", rows)
        if not first and s > 1:  # the device first sums its own sub-layers' outputs
            g.add("local_sum", "elementwise", "stream", ("residual", tokens * (s - 1), d))
        if communicate:
            ready = ("local_sum",) if s > 1 else (("add_norm_attn",) if fuse else ())
            g.add("allreduce_prev_outputs", "AllReduce", "collective",
                  ("all_reduce", act_bytes, tp), stream="comm", deps=ready)
        if not fuse:
            first_norm("norm_attn", rows)
        g.add("qkv", "GEMM", "matmul", (tokens, qkv_cols, d, s))
        _attention(g, cfg, sh, batch, q_len, kv_len, phase, opts)
        g.add("out_proj", "GEMM", "matmul", (tokens, d, sh.heads * cfg.head_dim, s))
        g.add("residual_attn", "elementwise", "stream", ("residual", rows, d))
        waits = ("allreduce_prev_outputs",) if communicate else ()
        if fuse and not first:
            # S + m_i and the FFN norm in one kernel; only this waits for the all-reduce
            g.add("add_norm_ffn", "LayerNorm", "stream", (add_norm, rows, d), deps=waits)
        else:
            if not first:
                g.add("add_reduced", "elementwise", "stream", ("residual", rows, d), deps=waits)
            g.add("norm_ffn", "LayerNorm", "stream", (norm, rows, d))
        g.add("ffn_up", "GEMM", "matmul", (tokens, up_cols, d, s))
        g.add("activation", "elementwise", "stream", (act, rows, sh.ffn))
        g.add("ffn_down", "GEMM", "matmul", (tokens, d, sh.ffn, s))
        if not fuse:
            g.add("residual_ffn", "elementwise", "stream", ("residual", rows, d))
        return g

    if cfg.arch == "gpt":
        first_norm("norm_attn", tokens)
        g.add("qkv", "GEMM", "matmul", (tokens, qkv_cols, d, 1))
        _attention(g, cfg, sh, batch, q_len, kv_len, phase, opts)
        g.add("out_proj", "GEMM", "matmul", (tokens, d, sh.heads * cfg.head_dim, 1))
        if tp > 1:
            g.add("allreduce_attn", "AllReduce", "collective", ("all_reduce", act_bytes, tp),
                  stream="comm", deps=("out_proj",))
        waits = ("allreduce_attn",) if tp > 1 else ()
        if cfg.bias and opts.row_bias_after_reduce:
            g.add("bias_attn", "elementwise", "stream", ("residual", tokens, d), deps=waits)
        if fuse:
            g.add("add_norm_ffn", "LayerNorm", "stream", (add_norm, tokens, d), deps=waits)
        else:
            g.add("residual_attn", "elementwise", "stream", ("residual", tokens, d), deps=waits)
            g.add("norm_ffn", "LayerNorm", "stream", (norm, tokens, d))
        g.add("ffn_up", "GEMM", "matmul", (tokens, up_cols, d, 1))
        g.add("activation", "elementwise", "stream", (act, tokens, sh.ffn))
        g.add("ffn_down", "GEMM", "matmul", (tokens, d, sh.ffn, 1))
        if tp > 1:
            g.add("allreduce_ffn", "AllReduce", "collective", ("all_reduce", act_bytes, tp),
                  stream="comm", deps=("ffn_down",))
        if cfg.bias and opts.row_bias_after_reduce:
            g.add("bias_ffn", "elementwise", "stream", ("residual", tokens, d),
                  deps=("allreduce_ffn",) if tp > 1 else ())
        if not fuse:
            g.add("residual_ffn", "elementwise", "stream", ("residual", tokens, d),
                  deps=("allreduce_ffn",) if tp > 1 else ())
        return g

    # parallel block: one norm, attention and FFN side by side, one reduce of their sum
    first_norm("norm", tokens)
    g.add("qkv", "GEMM", "matmul", (tokens, qkv_cols, d, 1))
    _attention(g, cfg, sh, batch, q_len, kv_len, phase, opts)
    g.add("out_proj", "GEMM", "matmul", (tokens, d, sh.heads * cfg.head_dim, 1))
    g.add("ffn_up", "GEMM", "matmul", (tokens, up_cols, d, 1))
    g.add("activation", "elementwise", "stream", (act, tokens, sh.ffn))
    g.add("ffn_down", "GEMM", "matmul", (tokens, d, sh.ffn, 1))
    g.add("add_branches", "elementwise", "stream", ("residual", tokens, d))
    if tp > 1:
        g.add("allreduce", "AllReduce", "collective", ("all_reduce", act_bytes, tp),
              stream="comm", deps=("add_branches",))
    if not fuse:
        g.add("residual", "elementwise", "stream", ("residual", tokens, d),
              deps=("allreduce",) if tp > 1 else ())
    return g


# the names of the graphs around the layers (every other graph of `model_graphs` is a layer)
EMBEDDING_GRAPH = "embedding"
HEAD_GRAPH = "head"
# the fused attention operators' kernel models (prefill, decode): the per-sequence operators
# of a layer graph, timed by the attention kernel tables
ATTENTION_MODELS = ("flash_prefill", "flash_decode")


def embedding_graph(cfg: ModelConfig, batch: int, q_len: int) -> Graph:
    g = Graph(EMBEDDING_GRAPH)
    tokens = batch * q_len
    g.add("embedding", "embedding", "stream", ("embedding", tokens, cfg.d_model))
    if cfg.position == "learned":
        g.add("position_add", "embedding", "stream", ("residual", tokens, cfg.d_model))
    return g


def head_graph(cfg: ModelConfig, tp: int, batch: int, bytes_per_value: int,
               options: GraphOptions | None = None) -> Graph:
    """Conjunction (Kraken), final norm and the vocabulary-parallel LM head, last tokens only.
    With fused add+norm the last layer's residual add happens here (on the last tokens)."""
    opts = options or PLAIN
    sh = shard(cfg, tp)
    g = Graph(HEAD_GRAPH)
    e = cfg.d_model
    if cfg.arch == "kraken":
        if opts.add_norm:
            g.add("residual_final", "elementwise", "stream", ("residual", batch * sh.sublayers, e))
        # sum_i W_conj[:, i] x_i: each device multiplies its own streams, then one reduce
        g.add("conjunction", "GEMM", "matmul", (batch, e, e * sh.sublayers, 1))
        if tp > 1:
            g.add("allreduce_conjunction", "AllReduce", "collective",
                  ("all_reduce", batch * e * bytes_per_value, tp), stream="comm",
                  deps=("conjunction",))
    norm_op = f"add_{cfg.norm}" if opts.add_norm and cfg.arch != "kraken" else cfg.norm
    g.add("norm_final", "LayerNorm", "stream", (norm_op, batch, e),
          deps=("allreduce_conjunction",) if cfg.arch == "kraken" and tp > 1 else ())
    g.add("lm_head", "LM head", "matmul", (batch, sh.vocab, e, 1))
    if tp > 1:
        g.add("allgather_logits", "AllGather", "collective",
              ("all_gather", batch * sh.vocab * tp * bytes_per_value, tp), stream="comm",
              deps=("lm_head",))
    return g


def model_graphs(cfg: ModelConfig, tp: int, batch: int, q_len: int, kv_len: int, phase: str,
                 bytes_per_value: int, fused: bool = True,
                 options: GraphOptions | None = None) -> list[Graph]:
    """Every graph of one forward pass (prefill or one decode step), with repeat counts."""
    opts = options or GraphOptions(fused_attention=fused)
    graphs = [embedding_graph(cfg, batch, q_len)]

    def layer(first: bool = False) -> Graph:
        return layer_graph(cfg, tp, batch, q_len, kv_len, phase, bytes_per_value, first=first,
                           options=opts)

    if cfg.arch == "kraken":
        graphs.append(layer(first=True))
        if cfg.n_layers > 1:
            rest = layer()
            rest.count = cfg.n_layers - 1
            graphs.append(rest)
    else:
        one = layer()
        one.count = cfg.n_layers
        graphs.append(one)
    graphs.append(head_graph(cfg, tp, batch, bytes_per_value, opts))
    if opts.eager_bytes_per_element:
        for g in graphs:
            eager_elementwise(g, dict(opts.eager_bytes_per_element))
    return graphs


def eager_elementwise(g: Graph, bytes_per_element: dict[str, float]) -> None:
    """Give each streaming op of `g` that an eager stack runs unfused the bytes its kernels move:
    the op's arguments (op, rows, cols) become (op, rows, cols, bytes per element), and the op
    moves rows x cols x bytes per element instead of the fused kernel's tensors read and written
    (timing.py `_stream`). E.g. transformers 4.35's LlamaRMSNorm runs eight kernels, cast to
    fp32, pow, mean, add eps, rsqrt, mul, cast back, weight mul: 36 bytes per hidden element
    against a fused norm's 4 (read and write 16-bit); its RoPE (two gathers, then mul, neg, cat,
    mul, add on q and on k) 20 per q and k element against 4; SiLU then x up 10 per
    intermediate element against SiLU-and-mul's 6 (benchmarks/hf_eager_op_count.py
    --elementwise-bytes, counted on the era's code). Names, order and dependencies stay."""
    for i, spec in enumerate(g.ops):
        if spec.model == "stream" and spec.args[0] in bytes_per_element:
            g.ops[i] = dataclasses.replace(spec, args=(*spec.args[:3],
                                                       bytes_per_element[spec.args[0]]))
