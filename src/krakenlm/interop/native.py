"""krakenlm's standard block <-> the native `transformers` classes GPT-2 and Llama, both ways.

Which family a config maps to (`native_family`):
  * GPT-2 (GPT2LMHeadModel): arch gpt, learned positions, LayerNorm, tanh-GELU, plain
    multi-head attention. GPT-2 always has biases: a model trained without them is written
    with zero biases, which computes exactly the same thing.
  * Llama (LlamaForCausalLM): arch gpt, RoPE, RMSNorm, SwiGLU (grouped-query attention and
    biases allowed: `attention_bias` and `mlp_bias` both follow ours).
  * anything else (the parallel block, Kraken, or a standard block mixing the two families,
    e.g. LayerNorm with RoPE) has no native class: it is exported as remote code.

Weights: ours stack every Linear as [n, in, out] (n = 1 here). GPT-2's Conv1D stores [in, out]
too; `nn.Linear` (Llama) stores [out, in]. Our fused projections split as: qkv = [q | k | v]
columns (heads in order within each), SwiGLU's up = [gate | up] columns. Our RoPE rotates the
two halves of a head, as Hugging Face's Llama does, so no permutation is needed.
"""

from __future__ import annotations

import torch

from ..errors import KrakenError
from ..models.config import ModelConfig
from ..models.hf import from_hf_dict, rope_scaling_fields

GPT2_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh")  # both are tanh-GELU, like ours


def native_family(config: ModelConfig) -> str | None:
    """'gpt2', 'llama' or None (no native transformers class computes this model)."""
    if config.arch != "gpt":
        return None
    if (config.position, config.norm, config.activation) == ("learned", "layernorm", "gelu") \
            and config.kv_heads == config.n_heads:
        return "gpt2"
    if (config.position, config.norm, config.activation) == ("rope", "rmsnorm", "swiglu"):
        return "llama"
    return None


# ------------------------------------------------------------------------------- configs
def gpt2_config_dict(config: ModelConfig) -> dict:
    return {
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
        "n_layer": config.n_layers, "n_embd": config.d_model, "n_head": config.n_heads,
        "n_inner": config.ffn_dim, "n_positions": config.context_len,
        "vocab_size": config.vocab_size, "activation_function": "gelu_new",
        "layer_norm_epsilon": config.norm_eps, "tie_word_embeddings": config.tie_embeddings,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False, "use_cache": True,
    }


def llama_config_dict(config: ModelConfig) -> dict:
    return {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": config.n_layers, "hidden_size": config.d_model,
        "num_attention_heads": config.n_heads, "num_key_value_heads": config.kv_heads,
        "head_dim": config.head_dim, "intermediate_size": config.ffn_dim,
        "max_position_embeddings": config.context_len, "vocab_size": config.vocab_size,
        "hidden_act": "silu", "rms_norm_eps": config.norm_eps,
        "tie_word_embeddings": config.tie_embeddings,
        "attention_bias": config.bias, "mlp_bias": config.bias, "attention_dropout": 0.0,
        # both spellings: transformers 5 reads rope_parameters, 4.x reads rope_theta
        "rope_theta": config.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
        "pretraining_tp": 1, "use_cache": True,
        **_llama3_rope(config),
    }


def _llama3_rope(config: ModelConfig) -> dict:
    """Llama 3.1's scaled RoPE in both spellings (transformers 5: rope_parameters; 4.x:
    rope_scaling), or nothing for plain RoPE."""
    scaling = config.rope_scaling
    if scaling is None:
        return {}
    fields = {"factor": scaling.factor, "low_freq_factor": scaling.low_freq_factor,
              "high_freq_factor": scaling.high_freq_factor,
              "original_max_position_embeddings": scaling.original_context_len}
    return {"rope_scaling": {"rope_type": "llama3", **fields},
            "rope_parameters": {"rope_type": "llama3", "rope_theta": config.rope_theta,
                                **fields}}


def unsupported_features(data: dict) -> list[str]:
    """What in a GPT-2/Llama/Mistral config.json our model cannot compute exactly (called after
    `from_hf_dict` accepted its shape: heads, width and context are positive integers)."""
    kind = data.get("model_type")
    problems = []

    def must(key: str, allowed, default=None) -> None:
        value = data.get(key, default)
        if value not in allowed:
            problems.append(f"{key}={value!r} (supported: {', '.join(map(repr, allowed))})")

    if kind == "gpt2":
        must("activation_function", GPT2_ACTIVATIONS, "gelu_new")
        must("scale_attn_weights", (True,), True)
        must("scale_attn_by_inverse_layer_idx", (False,), False)
        must("add_cross_attention", (False,), False)
    elif kind in ("llama", "mistral"):
        must("hidden_act", ("silu",), "silu")
        if bool(data.get("attention_bias", False)) != bool(data.get("mlp_bias", False)):
            problems.append(f"attention_bias={data.get('attention_bias', False)!r} with "
                            f"mlp_bias={data.get('mlp_bias', False)!r} (krakenlm has biases on "
                            "all Linears or on none)")
        heads, width = data.get("num_attention_heads"), data.get("hidden_size")
        head_dim = data.get("head_dim")
        if head_dim is not None and (not isinstance(head_dim, int) or head_dim * heads != width):
            problems.append(f"head_dim={head_dim} with hidden_size {width} / "
                            f"{heads} heads (krakenlm needs head_dim = hidden_size / heads)")
        rope = rope_scaling_fields(data)
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", None, "llama3"):
            problems.append(f"rope scaling {rope_type!r} (supported: plain RoPE and Llama "
                            "3.1's 'llama3')")
        if rope.get("partial_rotary_factor", 1.0) != 1.0:
            problems.append(f"partial_rotary_factor={rope['partial_rotary_factor']}")
        window = data.get("sliding_window")
        context = data.get("max_position_embeddings")
        if kind == "mistral" and window is not None and not isinstance(window, int):
            problems.append(f"sliding_window={window!r} (not a number of tokens)")
        elif kind == "mistral" and window is not None and context and window < context:
            problems.append(f"sliding_window={window} below max_position_embeddings={context} "
                            "(krakenlm attends to the whole context)")
    return problems


def config_from_native(data: dict, source: str) -> ModelConfig:
    """A GPT-2 or Llama-family config.json -> ModelConfig, refusing what does not map exactly."""
    kind = data.get("model_type")
    if kind not in ("gpt2", "llama", "mistral"):
        raise KrakenError(f"{source}: model_type {kind!r} cannot be imported; `krakenlm import hf` "
                          "supports gpt2, llama and mistral (and krakenlm's own exports)")
    config = from_hf_dict(data, source)  # first: the shape's fields are numbers after it
    problems = unsupported_features(data)
    if problems:
        raise KrakenError(f"{source}: this {kind} model uses what krakenlm cannot compute "
                          f"exactly: {'; '.join(problems)}")
    if kind == "gpt2":
        return config  # GPT-2 always has biases
    return config.replace(bias=bool(data.get("attention_bias", False)))


# ------------------------------------------------------------------------------- weights
def _split_qkv(w: torch.Tensor, config: ModelConfig) -> tuple[torch.Tensor, ...]:
    """Columns [q | k | v] of our qkv weight [in, out] or bias [out]."""
    q = config.n_heads * config.head_dim
    kv = config.kv_heads * config.head_dim
    return tuple(w.split([q, kv, kv], dim=-1))


def to_gpt2(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Our state dict -> GPT2LMHeadModel's (zero biases where ours has none)."""
    def bias(name: str, width: int) -> torch.Tensor:
        return state[name].reshape(-1) if name in state else torch.zeros(width)

    e = config.d_model
    out = {"transformer.wte.weight": state["tok_emb.weight"],
           "transformer.wpe.weight": state["pos_emb.weight"],
           "transformer.ln_f.weight": state["norm_f.weight"][0],
           "transformer.ln_f.bias": bias("norm_f.bias", e)}
    for i in range(config.n_layers):
        src, dst = f"layers.{i}.", f"transformer.h.{i}."
        pairs = {"ln_1": ("norm1.weight", "norm1.bias"), "ln_2": ("norm2.weight", "norm2.bias"),
                 "attn.c_attn": ("attn.qkv.weight", "attn.qkv.bias"),
                 "mlp.c_fc": ("ffn.up.weight", "ffn.up.bias"),
                 "attn.c_proj": ("attn.out.weight", "attn.out_bias"),
                 "mlp.c_proj": ("ffn.down.weight", "ffn.down_bias")}
        for hf_name, (weight, bias_name) in pairs.items():
            w = state[src + weight][0]
            out[f"{dst}{hf_name}.weight"] = w
            out[f"{dst}{hf_name}.bias"] = bias(src + bias_name, w.shape[-1])
    if not config.tie_embeddings:
        out["lm_head.weight"] = state["lm_head.weight"]
    return out


def from_gpt2(hf: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """GPT2LMHeadModel's state dict (prefix `transformer.` optional) -> ours."""
    out = {"tok_emb.weight": hf["wte.weight"], "pos_emb.weight": hf["wpe.weight"],
           "norm_f.weight": hf["ln_f.weight"][None], "norm_f.bias": hf["ln_f.bias"][None]}
    renames = {"ln_1": "norm1", "ln_2": "norm2", "attn.c_attn": "attn.qkv", "mlp.c_fc": "ffn.up"}
    for i in range(config.n_layers):
        src, dst = f"h.{i}.", f"layers.{i}."
        for hf_name, ours in renames.items():
            out[f"{dst}{ours}.weight"] = hf[f"{src}{hf_name}.weight"][None]
            out[f"{dst}{ours}.bias"] = hf[f"{src}{hf_name}.bias"][None]
        # Row-parallel projections keep their bias outside the matmul (added after the reduce).
        out[f"{dst}attn.out.weight"] = hf[f"{src}attn.c_proj.weight"][None]
        out[f"{dst}attn.out_bias"] = hf[f"{src}attn.c_proj.bias"][None]
        out[f"{dst}ffn.down.weight"] = hf[f"{src}mlp.c_proj.weight"][None]
        out[f"{dst}ffn.down_bias"] = hf[f"{src}mlp.c_proj.bias"][None]
    if not config.tie_embeddings:
        out["lm_head.weight"] = hf["lm_head.weight"]
    return out


def gpt2_expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The tensors (without prefix) a GPT-2 checkpoint of this config holds, and their shapes."""
    e, f, v = config.d_model, config.ffn_dim, config.vocab_size
    shapes = {"wte.weight": (v, e), "wpe.weight": (config.context_len, e),
              "ln_f.weight": (e,), "ln_f.bias": (e,)}
    for i in range(config.n_layers):
        p = f"h.{i}."
        shapes.update({p + "ln_1.weight": (e,), p + "ln_1.bias": (e,), p + "ln_2.weight": (e,),
                       p + "ln_2.bias": (e,), p + "attn.c_attn.weight": (e, 3 * e),
                       p + "attn.c_attn.bias": (3 * e,), p + "attn.c_proj.weight": (e, e),
                       p + "attn.c_proj.bias": (e,), p + "mlp.c_fc.weight": (e, f),
                       p + "mlp.c_fc.bias": (f,), p + "mlp.c_proj.weight": (f, e),
                       p + "mlp.c_proj.bias": (e,)})
    if not config.tie_embeddings:
        shapes["lm_head.weight"] = (v, e)
    return shapes


def to_llama(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Our state dict -> LlamaForCausalLM's. nn.Linear stores [out, in]: transpose."""
    out = {"model.embed_tokens.weight": state["tok_emb.weight"],
           "model.norm.weight": state["norm_f.weight"][0]}
    for i in range(config.n_layers):
        src, dst = f"layers.{i}.", f"model.layers.{i}."
        q, k, v = _split_qkv(state[src + "attn.qkv.weight"][0], config)
        gate, up = state[src + "ffn.up.weight"][0].chunk(2, dim=-1)
        out.update({
            dst + "input_layernorm.weight": state[src + "norm1.weight"][0],
            dst + "post_attention_layernorm.weight": state[src + "norm2.weight"][0],
            dst + "self_attn.q_proj.weight": q.T, dst + "self_attn.k_proj.weight": k.T,
            dst + "self_attn.v_proj.weight": v.T,
            dst + "self_attn.o_proj.weight": state[src + "attn.out.weight"][0].T,
            dst + "mlp.gate_proj.weight": gate.T, dst + "mlp.up_proj.weight": up.T,
            dst + "mlp.down_proj.weight": state[src + "ffn.down.weight"][0].T})
        if config.bias:
            qb, kb, vb = _split_qkv(state[src + "attn.qkv.bias"][0], config)
            gate_b, up_b = state[src + "ffn.up.bias"][0].chunk(2)
            out.update({
                dst + "self_attn.q_proj.bias": qb, dst + "self_attn.k_proj.bias": kb,
                dst + "self_attn.v_proj.bias": vb,
                dst + "self_attn.o_proj.bias": state[src + "attn.out_bias"][0],
                dst + "mlp.gate_proj.bias": gate_b, dst + "mlp.up_proj.bias": up_b,
                dst + "mlp.down_proj.bias": state[src + "ffn.down_bias"][0]})
    if not config.tie_embeddings:
        out["lm_head.weight"] = state["lm_head.weight"]
    return out


def from_llama(hf: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """LlamaForCausalLM's state dict (prefix `model.` optional) -> ours."""
    out = {"tok_emb.weight": hf["embed_tokens.weight"], "norm_f.weight": hf["norm.weight"][None]}
    for i in range(config.n_layers):
        src, dst = f"layers.{i}.", f"layers.{i}."
        a, m = src + "self_attn.", src + "mlp."
        qkv = torch.cat([hf[a + "q_proj.weight"].T, hf[a + "k_proj.weight"].T,
                         hf[a + "v_proj.weight"].T], dim=1)
        up = torch.cat([hf[m + "gate_proj.weight"].T, hf[m + "up_proj.weight"].T], dim=1)
        out.update({dst + "norm1.weight": hf[src + "input_layernorm.weight"][None],
                    dst + "norm2.weight": hf[src + "post_attention_layernorm.weight"][None],
                    dst + "attn.qkv.weight": qkv[None],
                    dst + "attn.out.weight": hf[a + "o_proj.weight"].T[None],
                    dst + "ffn.up.weight": up[None],
                    dst + "ffn.down.weight": hf[m + "down_proj.weight"].T[None]})
        if config.bias:
            out.update({
                dst + "attn.qkv.bias": torch.cat([hf[a + "q_proj.bias"], hf[a + "k_proj.bias"],
                                                  hf[a + "v_proj.bias"]])[None],
                dst + "attn.out_bias": hf[a + "o_proj.bias"][None],
                dst + "ffn.up.bias": torch.cat([hf[m + "gate_proj.bias"],
                                                hf[m + "up_proj.bias"]])[None],
                dst + "ffn.down_bias": hf[m + "down_proj.bias"][None]})
    if not config.tie_embeddings:
        out["lm_head.weight"] = hf["lm_head.weight"]
    return out


def llama_expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    e, f, v = config.d_model, config.ffn_dim, config.vocab_size
    kv = config.kv_heads * config.head_dim
    shapes = {"embed_tokens.weight": (v, e), "norm.weight": (e,)}
    for i in range(config.n_layers):
        a, m = f"layers.{i}.self_attn.", f"layers.{i}.mlp."
        shapes.update({f"layers.{i}.input_layernorm.weight": (e,),
                       f"layers.{i}.post_attention_layernorm.weight": (e,),
                       a + "q_proj.weight": (e, e), a + "k_proj.weight": (kv, e),
                       a + "v_proj.weight": (kv, e), a + "o_proj.weight": (e, e),
                       m + "gate_proj.weight": (f, e), m + "up_proj.weight": (f, e),
                       m + "down_proj.weight": (e, f)})
        if config.bias:
            shapes.update({a + "q_proj.bias": (e,), a + "k_proj.bias": (kv,),
                           a + "v_proj.bias": (kv,), a + "o_proj.bias": (e,),
                           m + "gate_proj.bias": (f,), m + "up_proj.bias": (f,),
                           m + "down_proj.bias": (e,)})
    if not config.tie_embeddings:
        shapes["lm_head.weight"] = (v, e)
    return shapes
