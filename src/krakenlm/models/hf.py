"""Hugging Face `config.json` -> `ModelConfig` (torch-free), for the families krakenlm models.

Supported `model_type`s: gpt2, bloom, llama, mistral (standard block), gptj and gpt_neox with
parallel residual (parallel block). Only the shape matters here, not the weights. A krakenlm
config file (with an "arch" field) is accepted too, so one loader serves both, and so is the
config.json of `krakenlm export hf` for remote code (model_type "krakenlm": krakenlm's fields
beside the Hugging Face ones).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .config import ConfigError, ModelConfig, RopeScaling, read_json_object

SUPPORTED = ("gpt2", "bloom", "llama", "mistral", "gptj", "gpt_neox")
KRAKENLM_MODEL_TYPE = "krakenlm"  # what `krakenlm export hf` writes for remote code
# Fields by which Hugging Face configs declare a mixture of experts (Mixtral, Qwen-MoE, OLMoE,
# DeepSeek, DBRX-style names). A value above 1 means routed experts: a different model from
# the dense one the rest of the config describes.
MOE_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts",
              "num_routed_experts", "num_experts_per_tok", "n_shared_experts")


def _get(data: dict[str, Any], source: str, *keys: str, default: Any = ...) -> Any:
    for key in keys:
        if key in data and data[key] is not None:
            return data[key]
    if default is not ...:
        return default
    raise ConfigError(f"{source}: missing field {' or '.join(repr(k) for k in keys)} for "
                      f"model_type {data.get('model_type')!r}")


def _float(source: str, key: str, value: Any) -> float:
    """A real-valued field (an epsilon, a RoPE base) as a float, or a ConfigError naming it."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond the float range
            number = math.inf
        if math.isfinite(number):
            return number
    raise ConfigError(f"{source}: field {key!r} must be a finite number, got {value!r:.60}")


def _rope_base(data: dict[str, Any], source: str) -> Any:
    """rope_theta (transformers 4.x), else transformers 5's rope_parameters.rope_theta."""
    if data.get("rope_theta") is not None:
        return data["rope_theta"]
    nested = data.get("rope_parameters") or {}
    if not isinstance(nested, dict):
        raise ConfigError(f"{source}: field 'rope_parameters' must be an object, got "
                          f"{nested!r:.60}")
    return nested.get("rope_theta", 10000.0)


def rope_scaling_fields(data: dict[str, Any]) -> dict[str, Any]:
    """The RoPE scaling object of a config.json: transformers 5's `rope_parameters` (which
    also holds rope_theta) or 4.x's `rope_scaling`; {} when there is none."""
    rope = data.get("rope_parameters") or data.get("rope_scaling") or {}
    return rope if isinstance(rope, dict) else {"rope_type": rope}


def _rope_scaling(data: dict[str, Any], source: str) -> RopeScaling | None:
    """Llama 3.1's rope_type "llama3" as a `RopeScaling`; None for plain RoPE. Other scalings
    (linear, dynamic, yarn) do not change a step's cost, so the simulator reads such a config
    as plain RoPE; `krakenlm import hf` refuses them (interop.native.unsupported_features)."""
    rope = rope_scaling_fields(data)
    if rope.get("rope_type", rope.get("type")) != "llama3":
        return None
    numbers = {name: _float(source, f"rope_scaling.{name}", rope.get(name))
               for name in ("factor", "low_freq_factor", "high_freq_factor")}
    try:
        return RopeScaling(**numbers,
                           original_context_len=rope.get("original_max_position_embeddings"))
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc} (rope_type llama3 needs factor, low_freq_factor, "
                          "high_freq_factor and original_max_position_embeddings)") from None


def from_hf_dict(data: dict[str, Any], source: str = "config.json") -> ModelConfig:
    if "arch" in data and "model_type" not in data:
        return ModelConfig.from_dict(data)
    kind = data.get("model_type")
    _refuse_experts(data, source)
    if kind == KRAKENLM_MODEL_TYPE:
        # krakenlm's own fields, written beside model_type, auto_map, token ids and the like
        return ModelConfig.from_dict({k: v for k, v in data.items()
                                      if k in ModelConfig.__dataclass_fields__})
    if kind not in SUPPORTED:
        raise ConfigError(f"{source}: unsupported model_type {kind!r}; supported: "
                          f"{', '.join(SUPPORTED)}, {KRAKENLM_MODEL_TYPE} (krakenlm's own export) "
                          "or a krakenlm config with an 'arch' field")
    g = lambda *keys, default=...: _get(data, source, *keys, default=default)  # noqa: E731
    number = lambda key, default: _float(source, key, g(key, default=default))  # noqa: E731
    if kind in ("llama", "mistral"):
        heads = g("num_attention_heads")
        return ModelConfig(
            arch="gpt", n_layers=g("num_hidden_layers"), d_model=g("hidden_size"), n_heads=heads,
            ffn_dim=g("intermediate_size"), vocab_size=g("vocab_size"),
            context_len=g("max_position_embeddings", default=4096),
            n_kv_heads=g("num_key_value_heads", default=heads), norm="rmsnorm",
            activation="swiglu", position="rope", bias=bool(g("attention_bias", default=False)),
            tie_embeddings=bool(g("tie_word_embeddings", default=False)),
            norm_eps=number("rms_norm_eps", 1e-5),
            rope_theta=_float(source, "rope_theta", _rope_base(data, source)),
            rope_scaling=_rope_scaling(data, source))
    if kind == "gpt2":
        width = g("n_embd", "hidden_size")
        return ModelConfig(
            arch="gpt", n_layers=g("n_layer", "num_hidden_layers"), d_model=width,
            n_heads=g("n_head", "num_attention_heads"), ffn_dim=g("n_inner", default=4 * width),
            vocab_size=g("vocab_size"), context_len=g("n_positions", "n_ctx", default=1024),
            bias=True, tie_embeddings=bool(g("tie_word_embeddings", default=True)),
            norm_eps=number("layer_norm_epsilon", 1e-5))
    if kind == "bloom":
        width = g("hidden_size", "n_embed")
        return ModelConfig(
            arch="gpt", n_layers=g("n_layer", "num_hidden_layers"), d_model=width,
            n_heads=g("n_head", "num_attention_heads"), ffn_dim=4 * width,
            vocab_size=g("vocab_size"), context_len=g("seq_length", default=2048),
            position="alibi", bias=True, tie_embeddings=True,
            norm_eps=number("layer_norm_epsilon", 1e-5))
    if kind == "gptj":
        width = g("n_embd", "hidden_size")
        return ModelConfig(
            arch="parallel", n_layers=g("n_layer"), d_model=width, n_heads=g("n_head"),
            ffn_dim=g("n_inner", default=4 * width), vocab_size=g("vocab_size"),
            context_len=g("n_positions", default=2048), position="rope", bias=True,
            tie_embeddings=bool(g("tie_word_embeddings", default=False)),
            norm_eps=number("layer_norm_epsilon", 1e-5))
    # gpt_neox
    parallel = bool(g("use_parallel_residual", default=True))
    return ModelConfig(
        arch="parallel" if parallel else "gpt", n_layers=g("num_hidden_layers"),
        d_model=g("hidden_size"), n_heads=g("num_attention_heads"),
        ffn_dim=g("intermediate_size"), vocab_size=g("vocab_size"),
        context_len=g("max_position_embeddings", default=2048), position="rope", bias=True,
        tie_embeddings=bool(g("tie_word_embeddings", default=False)),
        norm_eps=number("layer_norm_eps", 1e-5))


def _refuse_experts(data: dict[str, Any], source: str) -> None:
    """A mixture-of-experts config read as its dense skeleton would be another model (every
    expert's weights, routing, all-to-all): refuse it rather than simulate or train that."""
    experts = {k: data[k] for k in MOE_FIELDS
               if isinstance(data.get(k), (int, float)) and not isinstance(data[k], bool)
               and data[k] > 1}
    if experts:
        found = ", ".join(f"{k}={v}" for k, v in experts.items())
        raise ConfigError(f"{source}: a mixture-of-experts model ({found}); krakenlm models "
                          "dense Transformers only (MoE routing and experts are not modelled)")


def load_model_config(path: str | Path) -> ModelConfig:
    """A Hugging Face config.json or a krakenlm config file."""
    data = read_json_object(path)
    try:
        return from_hf_dict(data, str(path))
    except TypeError as exc:  # a field of the wrong type reaching the dataclass
        raise ConfigError(f"{path}: {exc}") from None
