"""A krakenlm model (GPT block, GPT-J/PaLM parallel block or Kraken) as a Hugging Face causal LM.

Written into an exported model directory by `krakenlm export hf` and loaded with
`AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True)`. Self-contained: needs
torch and transformers only, not krakenlm.

Weights keep krakenlm's layout, so an export is a renaming (prefix `model.`): every Linear is
*stacked* over the sub-layers of a layer, a tensor [n, in, out] applied with one batched matmul
(n = degree for Kraken, 1 otherwise); a norm scale is [n, dim]. The math is krakenlm's, on one
device (the sums that cross devices in krakenlm are plain sums here).

The KV cache is a transformers `Cache` (DynamicCache by default). A Kraken layer's sub-layers
are folded into the head axis ([batch, degree * kv_heads, tokens, head_dim]), so that the
cache's batch axis stays the batch and beam search can reorder it.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_krakenlm import KrakenLMConfig

# transformers 5.24 renamed `past_key_values` to `cache` (in `generate`'s calls and in the output
# classes); the model accepts either spelling and answers with the one this version declares.
CACHE_FIELD = ("cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__
               else "past_key_values")


class StackedLinear(nn.Module):
    """n independent Linear(in -> out); weight [n, in, out] (x @ W layout), bias [n, out]."""

    def __init__(self, n, in_features, out_features, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(n, out_features)) if bias else None

    def forward(self, x):
        """x: [n, rows, in] -> [n, rows, out]."""
        if self.bias is None:
            return torch.bmm(x, self.weight)
        return torch.baddbmm(self.bias.unsqueeze(1), x, self.weight)


class StackedNorm(nn.Module):
    """n independent LayerNorm/RMSNorm over the last dim; scale [n, dim], shift [n, dim]."""

    def __init__(self, n, dim, kind, bias, eps):
        super().__init__()
        self.kind, self.eps = kind, eps
        self.weight = nn.Parameter(torch.ones(n, dim))
        self.bias = nn.Parameter(torch.zeros(n, dim)) if bias and kind == "layernorm" else None

    def forward(self, x):
        """x: [n, ..., dim]."""
        shape = (x.shape[-1],)
        if x.shape[0] == 1:  # one sub-layer: the fused kernels apply the affine part
            w = self.weight[0]
            if self.kind == "layernorm":
                return F.layer_norm(x, shape, w, None if self.bias is None else self.bias[0],
                                    self.eps)
            return rms_norm(x, w, self.eps)
        if self.kind == "layernorm":
            y = F.layer_norm(x, shape, eps=self.eps)
        else:
            y = rms_norm(x, None, self.eps)
        view = (x.shape[0],) + (1,) * (x.dim() - 2) + shape
        y = y * self.weight.view(view)
        return y if self.bias is None else y + self.bias.view(view)


def rms_norm(x, weight, eps):
    if hasattr(F, "rms_norm"):  # torch >= 2.4
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight


def rope_cos_sin(position_ids, head_dim, theta):
    """cos, sin [batch, 1, tokens, head_dim / 2] for integer positions [batch, tokens]."""
    half = head_dim // 2
    inv_freq = 1.0 / (theta ** (torch.arange(half, dtype=torch.float64,
                                            device=position_ids.device) / half))
    angles = position_ids.to(torch.float64)[..., None] * inv_freq
    return angles.cos().float()[:, None], angles.sin().float()[:, None]


def apply_rope(x, cos, sin):
    """Rotate pairs (first half, second half) of the head dim; x: [batch, heads, tokens, hd]."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def add_bias(x, bias):
    """A per-sub-layer bias [n, e] added to x [n, b, t, e]."""
    return x if bias is None else x + bias[:, None, None, :]


class Attention(nn.Module):
    def __init__(self, config, layer_index):
        super().__init__()
        n = config.degree
        self.layer_index = layer_index
        self.heads = config.n_heads
        self.kv_heads = config.n_kv_heads or config.n_heads
        self.head_dim = config.d_model // config.n_heads
        width = (self.heads + 2 * self.kv_heads) * self.head_dim
        self.qkv = StackedLinear(n, config.d_model, width, config.bias)
        self.out = StackedLinear(n, self.heads * self.head_dim, config.d_model, False)
        self.out_bias = nn.Parameter(torch.zeros(n, config.d_model)) if config.bias else None

    def forward(self, x, mask, rope, cache):
        """x: [n, b, t, e] -> the output projection [n, b, t, e], without its bias."""
        n, b, t, _ = x.shape
        hd = self.head_dim
        qkv = self.qkv(x.reshape(n, b * t, -1)).view(n, b, t, self.heads + 2 * self.kv_heads, hd)
        qkv = qkv.permute(1, 0, 3, 2, 4)  # [b, n, heads, t, hd]
        q, k, v = qkv.split([self.heads, self.kv_heads, self.kv_heads], dim=2)
        q, k, v = (z.reshape(b, -1, t, hd) for z in (q, k, v))  # sub-layers folded into heads
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_index)
        if self.kv_heads != self.heads:  # grouped-query: head s*h + i reads kv head s*kv + i//g
            group = self.heads // self.kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.view(b, n, self.heads, t, hd).permute(1, 0, 3, 2, 4).reshape(n, b * t, -1)
        return self.out(y).view(n, b, t, -1)


class FeedForward(nn.Module):
    """e -> F -> e with tanh-GELU, or SwiGLU (gate and up fused: [gate | up] columns)."""

    def __init__(self, config):
        super().__init__()
        n = config.degree
        self.swiglu = config.activation == "swiglu"
        up_width = 2 * config.ffn_dim if self.swiglu else config.ffn_dim
        self.up = StackedLinear(n, config.d_model, up_width, config.bias)
        self.down = StackedLinear(n, config.ffn_dim, config.d_model, False)
        self.down_bias = nn.Parameter(torch.zeros(n, config.d_model)) if config.bias else None

    def forward(self, x):
        n, b, t, _ = x.shape
        h = self.up(x.reshape(n, b * t, -1))
        if self.swiglu:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h, approximate="tanh")
        return self.down(h).view(n, b, t, -1)


class Layer(nn.Module):
    def __init__(self, config, index):
        super().__init__()
        self.arch, self.index = config.arch, index
        n = config.degree
        self.norm1 = StackedNorm(n, config.d_model, config.norm, config.bias, config.norm_eps)
        self.attn = Attention(config, index)
        self.norm2 = (None if config.arch == "parallel" else
                      StackedNorm(n, config.d_model, config.norm, config.bias, config.norm_eps))
        self.ffn = FeedForward(config)

    def forward(self, x, mask, rope, cache):
        """x: [n, b, t, e], the residual stream of each sub-layer."""
        def attend(h):
            return add_bias(self.attn(h, mask, rope, cache), self.attn.out_bias)

        def ffn(h):
            return add_bias(self.ffn(h), self.ffn.down_bias)

        if self.arch == "gpt":
            x = x + attend(self.norm1(x))
            return x + ffn(self.norm2(x))
        if self.arch == "parallel":  # attention and FFN read one shared norm
            h = self.norm1(x)
            y = self.attn(h, mask, rope, cache) + self.ffn(h)
            return x + add_bias(add_bias(y, self.attn.out_bias), self.ffn.down_bias)
        if self.index == 0:  # Kraken layer 1: each sub-layer on its own stream
            a = x + attend(self.norm1(x))
            return a + ffn(self.norm2(a))
        # Kraken layer l > 1: the FFN of sub-layer i reads S + m_i, S the sum of all streams.
        s = x.sum(dim=0, keepdim=True)
        m = attend(self.norm1(x))
        return x + m + ffn(self.norm2(s + m))


class KrakenLMPreTrainedModel(PreTrainedModel):
    config_class = KrakenLMConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = False
    _no_split_modules = ["Layer"]
    _supports_sdpa = True

    def _init_weights(self, module):
        # krakenlm's initialisation: N(0, 0.02) for matrices, output projections scaled down.
        out_std = 0.02 / math.sqrt(2 * self.config.n_layers * self.config.degree)
        with torch.no_grad():
            if isinstance(module, (Attention, FeedForward)):
                for name, child in module.named_children():
                    if isinstance(child, StackedLinear):
                        std = out_std if name in ("out", "down") else 0.02
                        child.weight.normal_(0.0, std)
                        if child.bias is not None:
                            child.bias.zero_()
                for name in ("out_bias", "down_bias"):
                    if getattr(module, name, None) is not None:
                        getattr(module, name).zero_()
            elif isinstance(module, KrakenLMModel) and module.conj is not None:
                module.conj.weight.normal_(0.0, 0.02)  # the conjunction
            elif isinstance(module, StackedNorm):
                module.weight.fill_(1.0)
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, (nn.Embedding, nn.Linear)):
                module.weight.normal_(0.0, 0.02)


class KrakenLMModel(KrakenLMPreTrainedModel):
    """Embeddings, layers, Kraken's conjunction and the final norm: token ids -> hidden states."""

    def __init__(self, config):
        super().__init__(config)
        e = config.d_model
        self.tok_emb = nn.Embedding(config.vocab_size, e)
        self.pos_emb = nn.Embedding(config.context_len, e) if config.position == "learned" else None
        self.layers = nn.ModuleList(Layer(config, i) for i in range(config.n_layers))
        kraken = config.arch == "kraken"
        self.conj = StackedLinear(config.degree, e, e, False) if kraken else None
        self.conj_bias = nn.Parameter(torch.zeros(e)) if kraken and config.bias else None
        self.norm_f = StackedNorm(1, e, config.norm, config.bias, config.norm_eps)
        self.post_init()

    def get_input_embeddings(self):
        return self.tok_emb

    def set_input_embeddings(self, value):
        self.tok_emb = value

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None,
                use_cache=False):
        config = self.config
        b, t = input_ids.shape
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + t, device=input_ids.device)
            position_ids = position_ids[None].expand(b, t)
        if past + t > config.context_len or int(position_ids.max()) >= config.context_len:
            raise ValueError(f"{past + t} tokens exceed the model's context of "
                             f"{config.context_len} tokens")
        x = self.tok_emb(input_ids)
        if self.pos_emb is not None:
            x = x + self.pos_emb(position_ids)
        rope = None
        if config.position == "rope":
            rope = rope_cos_sin(position_ids, config.d_model // config.n_heads, config.rope_theta)
        mask = self._mask(attention_mask, b, t, past, input_ids.device)
        x = x.unsqueeze(0).expand(config.degree, b, t, -1)  # every sub-layer starts from x0
        for layer in self.layers:
            x = layer(x, mask, rope, past_key_values)
        if self.conj is None:
            z = x[0]
        else:  # Kraken: z = sum_i W_conj,i x_i
            n = x.shape[0]
            z = self.conj(x.reshape(n, b * t, -1)).sum(dim=0).view(b, t, -1)
            if self.conj_bias is not None:
                z = z + self.conj_bias
        return self.norm_f(z.unsqueeze(0))[0], past_key_values

    @staticmethod
    def _mask(attention_mask, b, t, past, device):
        """None (plain causal, or one query over its whole past) or a boolean mask
        [b, 1, t, past + t]: causal, without padded keys; a query always sees itself, so that a
        padded row gives finite garbage instead of NaN."""
        if attention_mask is None or bool(attention_mask.all()):
            if past == 0 or t == 1:
                return None
            attention_mask = None
        keys = torch.arange(past + t, device=device)
        queries = past + torch.arange(t, device=device)
        allowed = (keys[None, :] <= queries[:, None])[None, None].expand(b, 1, t, past + t)
        if attention_mask is not None:
            allowed = allowed & attention_mask[:, None, None, -(past + t):].bool()
        return allowed | (keys[None, :] == queries[:, None])[None, None]


class KrakenLMForCausalLM(KrakenLMPreTrainedModel, GenerationMixin):
    def __init__(self, config):
        super().__init__(config)
        self.model = KrakenLMModel(config)
        # A tied head *is* the token embedding: no separate parameter to tie or save.
        self.lm_head = (None if config.tie_embeddings else
                        nn.Linear(config.d_model, config.vocab_size, bias=False))
        self.post_init()

    def get_input_embeddings(self):
        return self.model.tok_emb

    def set_input_embeddings(self, value):
        self.model.tok_emb = value

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids=None, attention_mask=None, position_ids=None,
                past_key_values=None, labels=None, use_cache=None, logits_to_keep=0, cache=None,
                **kwargs):
        if input_ids is None:
            raise ValueError("krakenlm models take input_ids (inputs_embeds is not supported)")
        if past_key_values is None:
            past_key_values = cache
        use_cache = self.config.use_cache if use_cache is None else use_cache
        hidden, cache = self.model(input_ids, attention_mask=attention_mask,
                                   position_ids=position_ids, past_key_values=past_key_values,
                                   use_cache=use_cache)
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        head = self.model.tok_emb.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(hidden, head)
        loss = None
        if labels is not None:  # labels are the inputs; predict token i + 1 from position i
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                   labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits,
                                      **{CACHE_FIELD: cache if use_cache else None})
