"""The PyTorch model: standard GPT-2 block, GPT-J/PaLM parallel block and Kraken, from one config.

Every weight is stored *stacked* over the sub-layers a device holds: a Linear is a tensor of
shape [n, in, out] applied with one batched matmul, a norm scale is [n, dim]. A GPT layer is the
n = 1 case; a Kraken layer on one device is n = d, so its d sub-layers run together instead of
in a Python loop. Sharding (`Shard`) only changes the local sizes: Kraken keeps d/p sub-layers
per rank, GPT and the parallel block keep 1/p of the heads and FFN columns (Megatron).

Equations follow spec/kraken.md; the comments name which one a line implements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .comm import Communicator, LocalComm
from .config import ConfigError, ModelConfig
from .loss import linear_cross_entropy


@dataclass(frozen=True)
class Shard:
    """Which part of the model this process holds: rank r of a world of p ranks.

    `vocab_parallel_head`: rank r computes only its block of the vocabulary's logits
    (`vocab_range`) and the blocks are gathered, instead of every rank computing them all.
    The head's weight stays replicated (with tied embeddings it is the token embedding, which
    every rank needs anyway), so this saves the head's compute and memory traffic, not memory.
    """

    rank: int = 0
    world_size: int = 1
    vocab_parallel_head: bool = False


def vocab_range(vocab_size: int, shard: Shard) -> tuple[int, int]:
    """[lo, hi): the logits rank r computes with a vocabulary-parallel head (near-equal
    blocks, the last one shorter when p does not divide the vocabulary)."""
    block = -(-vocab_size // shard.world_size)
    lo = min(shard.rank * block, vocab_size)
    return lo, min(lo + block, vocab_size)


@dataclass(frozen=True)
class LocalSizes:
    """What one tensor-parallel rank holds of each layer (local_sizes()): for Kraken, d / p whole
    sub-layers at full width; otherwise one sub-layer with n_heads / p query heads, n_kv_heads /
    p KV heads and ffn_dim / p FFN columns (Megatron-style sharding)."""
    sublayers: int  # sub-layers held locally (d/p for Kraken, 1 otherwise)
    heads: int  # query heads per local sub-layer
    kv_heads: int
    ffn_dim: int  # FFN hidden width per local sub-layer


def local_sizes(config: ModelConfig, shard: Shard) -> LocalSizes:
    p = shard.world_size
    if not 0 <= shard.rank < p:
        raise ConfigError(f"rank {shard.rank} is outside a world of size {p}")
    if config.arch == "kraken":
        if config.degree % p:
            divisors = [k for k in range(1, config.degree + 1) if config.degree % k == 0]
            raise ConfigError(
                f"world size {p} does not divide the Kraken degree {config.degree}: every rank "
                f"must hold whole sub-layers; use a world size in {divisors}")
        return LocalSizes(config.degree // p, config.n_heads, config.kv_heads, config.ffn_dim)
    for name, value in (("n_heads", config.n_heads), ("kv_heads", config.kv_heads),
                        ("ffn_dim", config.ffn_dim)):
        if value % p:
            raise ConfigError(f"tensor parallelism over {p} ranks needs {name} ({value}) to be "
                              f"divisible by {p}; use a world size that divides it")
    return LocalSizes(1, config.n_heads // p, config.kv_heads // p, config.ffn_dim // p)


# ------------------------------------------------------------------------------- building blocks
class StackedLinear(nn.Module):
    """n independent Linear(in -> out) layers applied with one batched matmul.

    weight: [n, in, out] (x @ W layout, so a batch of sub-layers is a plain bmm);
    bias: [n, out] or absent.
    """

    def __init__(self, n: int, in_features: int, out_features: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(n, out_features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [n, rows, in] -> [n, rows, out]."""
        if self.bias is None:
            return torch.bmm(x, self.weight)
        return torch.baddbmm(self.bias.unsqueeze(1), x, self.weight)


class StackedNorm(nn.Module):
    """n independent LayerNorm/RMSNorm over the last dim; scale [n, dim], shift [n, dim]."""

    def __init__(self, n: int, dim: int, kind: str, bias: bool, eps: float):
        super().__init__()
        self.kind, self.eps = kind, eps
        self.weight = nn.Parameter(torch.ones(n, dim))
        self.bias = nn.Parameter(torch.zeros(n, dim)) if bias and kind == "layernorm" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [n, ..., dim]."""
        shape = (x.shape[-1],)
        if x.shape[0] == 1:  # one sub-layer: let the fused kernel apply the affine part
            w = self.weight[0]
            b = None if self.bias is None else self.bias[0]
            if self.kind == "layernorm":
                return F.layer_norm(x, shape, w, b, self.eps)
            return F.rms_norm(x, shape, w, self.eps)
        y = F.layer_norm(x, shape, eps=self.eps) if self.kind == "layernorm" else F.rms_norm(
            x, shape, eps=self.eps)
        view = (x.shape[0],) + (1,) * (x.dim() - 2) + shape
        y = y * self.weight.view(view)
        return y if self.bias is None else y + self.bias.view(view)


def rope_tables(config: ModelConfig, device: torch.device | str | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every position's RoPE angles, [context_len, head_dim / 2]: frequencies
    theta^(-2i / head_dim), scaled by `config.rope_scaling` when set (Llama 3.1's three bands,
    models.config.RopeScaling)."""
    half = config.head_dim // 2
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(half, dtype=torch.float64,
                                                         device=device) / half))
    if config.rope_scaling is not None:
        inv_freq = torch.tensor(config.rope_scaling.inv_freq(inv_freq.tolist()),
                                dtype=torch.float64, device=device)
    angles = torch.outer(torch.arange(config.context_len, dtype=torch.float64, device=device),
                         inv_freq)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (first half, second half) of the head dim; x: [rows, heads, T, hd]."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class KVCache:
    """Per-layer key/value tensors preallocated for `max_tokens` positions.

    Shapes [n * batch, kv_heads, max_tokens, head_dim]: the local sub-layers are folded into the
    batch, exactly as attention sees them.
    """

    def __init__(self, config: ModelConfig, sizes: LocalSizes, batch_size: int, max_tokens: int,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
        if max_tokens > config.context_len:
            raise ConfigError(f"a KV cache of {max_tokens} tokens exceeds the model's context of "
                              f"{config.context_len} tokens")
        shape = (config.n_layers, sizes.sublayers * batch_size, sizes.kv_heads, max_tokens,
                 config.head_dim)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.max_tokens = max_tokens

    def update(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor):
        end = start + k.shape[2]
        if end > self.max_tokens:
            raise ConfigError(f"the KV cache holds {self.max_tokens} tokens; writing positions "
                              f"{start}..{end - 1} overflows it")
        self.keys[layer, :, :, start:end] = k
        self.values[layer, :, :, start:end] = v
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]

    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes


class Attention(nn.Module):
    """Causal multi-head (or grouped-query) attention for n stacked sub-layers.

    Returns the output projection *before* any cross-device sum and without its bias: under
    tensor parallelism the projection is row-parallel, and the bias must be added once, after
    the all-reduce (see `Layer`).
    """

    def __init__(self, config: ModelConfig, sizes: LocalSizes):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = sizes.heads, sizes.kv_heads, config.head_dim
        qkv_width = (self.heads + 2 * self.kv_heads) * self.head_dim
        self.qkv = StackedLinear(sizes.sublayers, config.d_model, qkv_width, config.bias)
        self.out = StackedLinear(sizes.sublayers, self.heads * self.head_dim, config.d_model, False)
        self.out_bias = nn.Parameter(torch.zeros(sizes.sublayers, config.d_model)) if config.bias else None
        self.use_rope = config.position == "rope"

    def forward(self, x: torch.Tensor, layer_index: int, start_pos: int, cache: KVCache | None,
                rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        n, b, t, _ = x.shape
        hd = self.head_dim
        qkv = self.qkv(x.reshape(n, b * t, -1)).view(n * b, t, self.heads + 2 * self.kv_heads, hd)
        qkv = qkv.transpose(1, 2)  # [n*b, heads, t, hd]
        q, k, v = qkv.split([self.heads, self.kv_heads, self.kv_heads], dim=1)
        if self.use_rope:
            cos, sin = (table[start_pos:start_pos + t] for table in rope)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(layer_index, start_pos, k, v)
        if start_pos == 0 and t > 1:
            mask, causal = None, True
        elif t == 1:
            mask, causal = None, False  # one query sees every cached key
        else:  # a chunk of queries after cached context: query i sees keys 0..start_pos+i
            keys = torch.arange(start_pos + t, device=x.device)
            mask = keys[None, :] <= (start_pos + torch.arange(t, device=x.device))[:, None]
            causal = False
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                           enable_gqa=self.kv_heads != self.heads)
        y = y.transpose(1, 2).reshape(n, b * t, self.heads * hd)
        return self.out(y).view(n, b, t, -1)


class FeedForward(nn.Module):
    """e -> F -> e with tanh-GELU, or SwiGLU (gate and up projections fused in one matmul).

    Like `Attention`, returns the down projection before the cross-device sum and bias.
    """

    def __init__(self, config: ModelConfig, sizes: LocalSizes):
        super().__init__()
        self.swiglu = config.activation == "swiglu"
        up_width = 2 * sizes.ffn_dim if self.swiglu else sizes.ffn_dim
        self.up = StackedLinear(sizes.sublayers, config.d_model, up_width, config.bias)
        self.down = StackedLinear(sizes.sublayers, sizes.ffn_dim, config.d_model, False)
        self.down_bias = nn.Parameter(torch.zeros(sizes.sublayers, config.d_model)) if config.bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, b, t, _ = x.shape
        h = self.up(x.reshape(n, b * t, -1))
        if self.swiglu:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h, approximate="tanh")
        return self.down(h).view(n, b, t, -1)


def parameter_kind(name: str) -> str:
    """'norm', 'bias' or 'matrix' (Linear weights and embeddings) for a parameter name."""
    parts = name.split(".")
    if len(parts) >= 2 and parts[-2].startswith("norm"):
        return "norm"
    return "bias" if parts[-1].endswith("bias") else "matrix"


def _add_bias(x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Add a per-sub-layer bias [n, e] to x [n, b, t, e]."""
    return x if bias is None else x + bias[:, None, None, :]


class Layer(nn.Module):
    def __init__(self, config: ModelConfig, sizes: LocalSizes, index: int):
        super().__init__()
        self.arch, self.index = config.arch, index
        norm = lambda: StackedNorm(sizes.sublayers, config.d_model, config.norm, config.bias,  # noqa: E731
                                   config.norm_eps)
        self.norm1 = norm()
        self.attn = Attention(config, sizes)
        self.norm2 = norm() if config.norms_per_sublayer == 2 else None
        self.ffn = FeedForward(config, sizes)

    def forward(self, x: torch.Tensor, comm: Communicator, start_pos: int, cache: KVCache | None,
                rope) -> torch.Tensor:
        """x: [n, b, t, e], the residual stream of each local sub-layer."""
        attend = lambda h: self.attn(h, self.index, start_pos, cache, rope)  # noqa: E731
        if self.arch == "gpt":
            # Megatron TP: two blocking all-reduces (after attention, after the FFN).
            x = x + _add_bias(comm.all_reduce(attend(self.norm1(x))), self.attn.out_bias)
            return x + _add_bias(comm.all_reduce(self.ffn(self.norm2(x))), self.ffn.down_bias)
        if self.arch == "parallel":
            # GPT-J/PaLM: attention and FFN read one norm; one blocking all-reduce of their sum.
            h = self.norm1(x)
            y = comm.all_reduce(attend(h) + self.ffn(h))
            return x + _add_bias(_add_bias(y, self.attn.out_bias), self.ffn.down_bias)
        return self._kraken(x, comm, attend)

    def _kraken(self, x: torch.Tensor, comm: Communicator, attend) -> torch.Tensor:
        if self.index == 0:
            # Layer 1: a_i = x0 + MHA_i(LN1_i(x0)); x_i = a_i + FFN_i(LN2_i(a_i)). No traffic.
            a = x + _add_bias(attend(self.norm1(x)), self.attn.out_bias)
            return a + _add_bias(self.ffn(self.norm2(a)), self.ffn.down_bias)
        # S = sum_j x_j: launched now, needed only by the FFN, so attention hides it.
        pending = comm.all_reduce_async(x.sum(dim=0, keepdim=True))
        m = _add_bias(attend(self.norm1(x)), self.attn.out_bias)  # m_i = MHA_i(LN1_i(x_i))
        s = pending.wait()
        a = x + m  # local residual
        return a + _add_bias(self.ffn(self.norm2(s + m)), self.ffn.down_bias)


def _embedding(rows: int, width: int) -> nn.Embedding:
    """nn.Embedding(rows, width). Built on the meta device (a model whose weights are loaded
    next: checkpoints, shards, imports), without torch's own N(0, 1) init: on meta tensors that
    init runs a Python kernel that imports torch._dynamo, about 1.5 s of every process that
    loads a model. Elsewhere torch's init runs as always (it draws from the global generator
    before `reset_parameters`, so skipping it would change every seeded model)."""
    weight = torch.empty(rows, width)
    if weight.is_meta:
        return nn.Embedding(rows, width, _weight=weight)
    return nn.Embedding(rows, width)


class Transformer(nn.Module):
    """A language model of any of the three architectures (or a shard of one)."""

    def __init__(self, config: ModelConfig, shard: Shard = Shard(), comm: Communicator | None = None):
        super().__init__()
        if config.position == "alibi":
            raise ConfigError("position='alibi' (BLOOM) is modelled by the simulator only; the "
                              "PyTorch model supports 'learned' and 'rope' positions")
        self.config, self.shard = config, shard
        self.sizes = local_sizes(config, shard)
        self.comm: Communicator = comm if comm is not None else LocalComm()
        e, w = config.d_model, config.head_width
        self.tok_emb = _embedding(config.vocab_size, config.embedding_width)
        # A tied embedding wider than the streams (lm_head_width) is projected down to e.
        self.emb_proj = (nn.Linear(config.embedding_width, e, bias=False)
                         if config.has_embedding_projection else None)
        self.pos_emb = _embedding(config.context_len, e) if config.position == "learned" else None
        self.layers = nn.ModuleList(Layer(config, self.sizes, i) for i in range(config.n_layers))
        self.conj = (StackedLinear(self.sizes.sublayers, e, w, False)
                     if config.has_conjunction else None)
        self.conj_bias = nn.Parameter(torch.zeros(w)) if config.has_conjunction and config.bias else None
        self.norm_f = StackedNorm(1, w, config.norm, config.bias, config.norm_eps)
        self.lm_head = None if config.tie_embeddings else nn.Linear(w, config.vocab_size, bias=False)
        if config.position == "rope":
            # on the meta device the tables are computed on the CPU (meta kernels are slow to
            # load) and replaced on the weights' device by restore_buffers
            cos, sin = rope_tables(config, "cpu" if torch.empty(0).is_meta else None)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def restore_buffers(self, device: torch.device | str | None = None) -> None:
        """Recompute the derived (non-saved) buffers on `device` (default: the weights'), after
        building on the meta device."""
        if self.config.position == "rope":
            device = device if device is not None else self.tok_emb.weight.device
            cos, sin = rope_tables(self.config)
            self.rope_cos, self.rope_sin = cos.to(device), sin.to(device)

    @torch.no_grad()
    def assign_weights(self, state: dict[str, torch.Tensor],
                       device: torch.device | str = "cpu") -> Transformer:
        """Take `state` (every weight of this model or shard, strict) as the weights of a model
        built on the meta device: each tensor becomes the parameter itself, in the dtype the
        model declares, contiguous, on `device`; then the derived buffers. Unlike `to_empty`
        and a copy, nothing is allocated twice and no meta kernel runs (torch's run Python
        code that imports torch.fx and sympy: seconds per process)."""
        own = {name: t.dtype for name, t in self.state_dict().items()}
        self.load_state_dict({name: t.to(device=device, dtype=own.get(name, t.dtype)).contiguous()
                              for name, t in state.items()}, assign=True)
        self.restore_buffers(device)
        return self

    # ------------------------------------------------------------------------------ init
    @torch.no_grad()
    def reset_parameters(self, seed: int | None = None) -> None:
        """N(0, 0.02) everywhere; attention and FFN output projections N(0, 0.02/sqrt(2 L d))."""
        gen = None
        if seed is not None:
            gen = torch.Generator().manual_seed(seed)
        out_std = 0.02 / math.sqrt(2 * self.config.n_layers * self.config.degree)
        for name, param in self.named_parameters():
            if parameter_kind(name) != "matrix" or param.is_meta:
                continue  # norms start at scale 1 and biases at 0 (set at construction)
            std = out_std if name.endswith(("attn.out.weight", "ffn.down.weight")) else 0.02
            if name == "emb_proj.weight":  # keeps the embedding's scale: std 0.02 in and out
                std = 1 / math.sqrt(param.shape[1])
            param.copy_(torch.randn(param.shape, generator=gen) * std)

    def decay_parameter_names(self) -> set[str]:
        """Weight decay applies to matrices and embeddings only (spec: not norms, not biases)."""
        return {name for name, _ in self.named_parameters() if parameter_kind(name) == "matrix"}

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # --------------------------------------------------------------------------- forward
    def new_cache(self, batch_size: int, max_tokens: int | None = None,
                  dtype: torch.dtype | None = None) -> KVCache:
        weight = self.tok_emb.weight
        return KVCache(self.config, self.sizes, batch_size, max_tokens or self.config.context_len,
                       device=weight.device, dtype=dtype or weight.dtype)

    def hidden_states(self, idx: torch.Tensor, *, cache: KVCache | None = None,
                      start_pos: int = 0, last_only: bool = False) -> torch.Tensor:
        """idx: [b, t] token ids -> final-norm output [b, t, w] ([b, 1, w] with last_only; w is
        the head width, e unless `lm_head_width` widens it)."""
        b, t = idx.shape
        if start_pos + t > self.config.context_len:
            raise ConfigError(f"{start_pos + t} tokens exceed the model's context of "
                              f"{self.config.context_len} tokens")
        x = self.tok_emb(idx)
        if self.emb_proj is not None:
            x = self.emb_proj(x)
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(start_pos, start_pos + t, device=idx.device))
        # Every local sub-layer starts from the same embedding: x_i = x0.
        x = x.unsqueeze(0).expand(self.sizes.sublayers, b, t, -1)
        rope = (self.rope_cos, self.rope_sin) if self.config.position == "rope" else None
        for layer in self.layers:
            x = layer(x, self.comm, start_pos, cache, rope)
        if last_only:
            x = x[:, :, -1:]
        return self.norm_f(self._join_streams(x).unsqueeze(0))[0]

    @property
    def head_weight(self) -> torch.Tensor:
        return self.tok_emb.weight if self.lm_head is None else self.lm_head.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, *,
                cache: KVCache | None = None, start_pos: int = 0,
                last_only: bool = False) -> torch.Tensor:
        """idx: [b, t] token ids.

        Without targets: logits [b, t, V] ([b, 1, V] with last_only).
        With targets [b, t] (-1 ignored): the mean next-token cross-entropy, computed without
        ever building the logits (see loss.py).
        """
        z = self.hidden_states(idx, cache=cache, start_pos=start_pos, last_only=last_only)
        if targets is None:
            if self.shard.vocab_parallel_head:
                return self._vocab_parallel_logits(z)
            return F.linear(z, self.head_weight)
        return linear_cross_entropy(z.reshape(-1, z.shape[-1]), self.head_weight,
                                    targets.reshape(-1))

    def _vocab_parallel_logits(self, z: torch.Tensor) -> torch.Tensor:
        """This rank's block of the logits, gathered from all ranks as a sum in which every
        other rank contributes zeros there (x + 0 is exact), so the communicator's one
        collective, the all-reduce, serves as the all-gather too."""
        lo, hi = vocab_range(self.config.vocab_size, self.shard)
        logits = z.new_zeros(*z.shape[:-1], self.config.vocab_size)
        logits[..., lo:hi] = F.linear(z, self.head_weight[lo:hi])
        return self.comm.all_reduce(logits)

    def _join_streams(self, x: torch.Tensor) -> torch.Tensor:
        """[n, b, t, e] -> [b, t, e]. Kraken: z = sum_i W_conj,i x_i, one final reduce."""
        if self.conj is None:
            return x[0]  # GPT and parallel: the (replicated) single stream
        n, b, t, e = x.shape
        partial = self.conj(x.reshape(n, b * t, e)).sum(dim=0)
        z = self.comm.all_reduce(partial).view(b, t, self.config.head_width)
        return z if self.conj_bias is None else z + self.conj_bias
