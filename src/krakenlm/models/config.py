"""The model configuration: the single source of truth for every half of krakenlm.

The PyTorch model, the sharded multi-rank runtime and the simulator's operator graph are all
built from a `ModelConfig`, so they cannot disagree about shapes. This module must stay
importable without torch (the simulator half runs on numpy alone).

Vocabulary used throughout:
  * a *layer* is one of `n_layers` Transformer layers;
  * a *sub-layer* is one of the `degree` independent halves/quarters/... of a Kraken layer
    (GPT and parallel blocks have exactly one sub-layer per layer);
  * `d_model`, `n_heads` and `ffn_dim` always describe ONE sub-layer: for Kraken they are the
    spec's e, h and FFN width, for GPT they are the usual model width, heads and FFN width.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import KrakenError
from ..fileio import read_user_text

ARCHITECTURES = ("gpt", "parallel", "kraken")
NORMS = ("layernorm", "rmsnorm")
ACTIVATIONS = ("gelu", "swiglu")
POSITIONS = ("learned", "rope", "alibi")
ROPE_SCALINGS = ("llama3",)


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3's RoPE frequency scaling (Llama 3.1-3.3, config.json `rope_scaling` /
    `rope_parameters` with rope_type "llama3"), which stretches a model trained at
    `original_context_len` tokens to `factor` times that. With base frequencies
    f_i = theta^(-2i / head_dim) and wavelengths lambda_i = 2 pi / f_i, and
    L = original_context_len, a = low_freq_factor, b = high_freq_factor:

        lambda_i < L / b            (high frequencies)  f_i unchanged
        lambda_i > L / a            (low frequencies)   f_i / factor
        otherwise                                        (1 - s) f_i / factor + s f_i,
                                                         s = (L / lambda_i - a) / (b - a)

    cos and sin are not rescaled (attention factor 1). Source: Meta's reference code,
    meta-llama/llama-models@b25b488f `models/llama3/reference_impl/model.py` (`apply_scaling`,
    used when `use_scaled_rope`; Llama 3.1 ships factor 8, bands 1 and 4, L = 8192); the
    tests compare logits with transformers' LlamaForCausalLM (rope_type "llama3")."""
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_context_len: int
    kind: str = "llama3"

    def __post_init__(self) -> None:
        def need(cond: bool, field: str, msg: str) -> None:
            if not cond:
                raise ConfigError(f"model config field 'rope_scaling.{field}': {msg}")

        need(self.kind in ROPE_SCALINGS, "kind",
             f"is {self.kind!r}; supported: {', '.join(ROPE_SCALINGS)}")
        for name in ("factor", "low_freq_factor", "high_freq_factor"):
            value = getattr(self, name)
            need(isinstance(value, (int, float)) and not isinstance(value, bool)
                 and math.isfinite(value) and value > 0, name,
                 f"must be a positive finite number, got {value!r}")
        need(self.factor >= 1, "factor", f"must be at least 1 (a stretch), got {self.factor}")
        need(self.high_freq_factor > self.low_freq_factor, "high_freq_factor",
             f"{self.high_freq_factor} must exceed low_freq_factor {self.low_freq_factor}")
        value = self.original_context_len
        need(isinstance(value, int) and not isinstance(value, bool) and value > 0,
             "original_context_len", f"must be a positive integer, got {value!r}")

    def inv_freq(self, base: list[float]) -> list[float]:
        """The scaled frequencies of the base frequencies `base` (the class docstring)."""
        low_wavelen = self.original_context_len / self.low_freq_factor
        high_wavelen = self.original_context_len / self.high_freq_factor
        out = []
        for f in base:
            wavelen = 2 * math.pi / f
            if wavelen < high_wavelen:
                out.append(f)
            elif wavelen > low_wavelen:
                out.append(f / self.factor)
            else:
                s = (self.original_context_len / wavelen - self.low_freq_factor) / (
                    self.high_freq_factor - self.low_freq_factor)
                out.append((1 - s) * f / self.factor + s * f)
        return out


class ConfigError(KrakenError, ValueError):
    """A model configuration is inconsistent; the message names the field and the fix."""


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a transformer, enough to build it (models.transformer) and to count its FLOPs
    and bytes (simulator): architecture ("gpt": GPT-2 block, "parallel": GPT-J/PaLM parallel
    attention + FFN, "kraken": d sub-layers per layer), layers, and per sub-layer the residual
    width, query heads and FFN hidden width (Kraken's e, h and its FFN width; `degree` is
    Kraken's d), vocabulary and context length (tokens), KV heads (grouped-query attention; None:
    n_heads), norm, activation, position encoding, biases, tied embeddings, the norm's epsilon,
    RoPE's base and Kraken's LM-head width ablation. Validated on construction; presets in
    models.presets."""
    arch: str  # "gpt" (GPT-2 block), "parallel" (GPT-J/PaLM block) or "kraken"
    n_layers: int
    d_model: int  # residual width of one sub-layer (Kraken's e)
    n_heads: int  # attention heads of one sub-layer (Kraken's h)
    ffn_dim: int  # FFN hidden width of one sub-layer
    degree: int = 1  # Kraken's d: sub-layers per layer; 1 for gpt and parallel
    vocab_size: int = 50304
    context_len: int = 1024
    n_kv_heads: int | None = None  # grouped-query attention; None means n_heads (plain MHA)
    norm: str = "layernorm"
    activation: str = "gelu"  # "gelu" is the tanh approximation, as in GPT-2
    position: str = "learned"
    bias: bool = False  # biases on Linear and LayerNorm (GPT-2 and BLOOM have them)
    tie_embeddings: bool = True
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None  # Llama 3.1's long-context frequencies; None: plain
    # Kraken only, a width ablation: the conjunction maps the d streams to this width (instead
    # of e), the final norm and LM head work at it, and a tied embedding is this wide, projected
    # down to e before the streams. None: e (the spec's model).
    lm_head_width: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.rope_scaling, dict):  # from JSON (to_dict writes it as an object)
            try:
                object.__setattr__(self, "rope_scaling", RopeScaling(**self.rope_scaling))
            except TypeError:
                raise ConfigError(
                    f"model config field 'rope_scaling' {self.rope_scaling!r:.120}: needs "
                    "factor, low_freq_factor, high_freq_factor and original_context_len "
                    "(and optionally kind)") from None
        self._validate()

    # ----------------------------------------------------------------------------- checks
    def _validate(self) -> None:
        def need(cond: bool, field: str, msg: str) -> None:
            if not cond:
                raise ConfigError(f"model config field '{field}': {msg}")

        need(self.arch in ARCHITECTURES, "arch", f"is {self.arch!r}; use one of {ARCHITECTURES}")
        for name in ("n_layers", "d_model", "n_heads", "ffn_dim", "degree", "vocab_size",
                     "context_len"):
            value = getattr(self, name)
            need(isinstance(value, int) and not isinstance(value, bool) and value > 0, name,
                 f"must be a positive integer, got {value!r}")
        need(self.n_kv_heads is None or (isinstance(self.n_kv_heads, int)
                                          and not isinstance(self.n_kv_heads, bool)),
             "n_kv_heads", f"must be a positive integer (or null: n_heads), got "
             f"{self.n_kv_heads!r}")
        for name in ("norm_eps", "rope_theta"):
            value = getattr(self, name)
            need(isinstance(value, (int, float)) and not isinstance(value, bool)
                 and (isinstance(value, int) or math.isfinite(value)), name,
                 f"must be a finite number, got {value!r}")
        for name in ("bias", "tie_embeddings"):
            need(isinstance(getattr(self, name), bool), name,
                 f"must be true or false, got {getattr(self, name)!r}")
        need(self.d_model % self.n_heads == 0, "n_heads",
             f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}; "
             "pick a width that is a multiple of the head count")
        need(self.arch == "kraken" or self.degree == 1, "degree",
             f"is {self.degree} but only Kraken has sub-layers; use degree 1 for {self.arch!r}")
        kv = self.kv_heads
        need(kv > 0 and self.n_heads % kv == 0, "n_kv_heads",
             f"{kv} does not divide n_heads {self.n_heads}")
        need(self.norm in NORMS, "norm", f"is {self.norm!r}; use one of {NORMS}")
        need(self.activation in ACTIVATIONS, "activation",
             f"is {self.activation!r}; use one of {ACTIVATIONS}")
        need(self.position in POSITIONS, "position",
             f"is {self.position!r}; use one of {POSITIONS}")
        need(self.position != "rope" or self.head_dim % 2 == 0, "position",
             f"rope needs an even head dimension, got {self.head_dim}")
        need(self.lm_head_width is None or (isinstance(self.lm_head_width, int)
                                             and not isinstance(self.lm_head_width, bool)
                                             and self.lm_head_width > 0), "lm_head_width",
             f"must be a positive integer (or null: d_model), got {self.lm_head_width!r}")
        need(self.lm_head_width is None or self.arch == "kraken", "lm_head_width",
             f"only Kraken has a conjunction to widen; use null for {self.arch!r}")
        need(self.norm_eps > 0, "norm_eps", "must be positive")
        need(self.rope_theta > 0, "rope_theta", "must be positive")
        need(self.rope_scaling is None or isinstance(self.rope_scaling, RopeScaling),
             "rope_scaling", f"must be an object or null, got {self.rope_scaling!r:.60}")
        need(self.rope_scaling is None or self.position == "rope", "rope_scaling",
             f"scales RoPE, but position is {self.position!r}; use null")

    # ------------------------------------------------------------------------ derived sizes
    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def head_width(self) -> int:
        """Width of the final norm and LM head (Kraken's conjunction output): d_model unless
        `lm_head_width` widens it."""
        return self.d_model if self.lm_head_width is None else self.lm_head_width

    @property
    def embedding_width(self) -> int:
        """Width of the token embedding: the head's when it is tied, else d_model."""
        return self.head_width if self.tie_embeddings else self.d_model

    @property
    def has_embedding_projection(self) -> bool:
        """A tied embedding wider than the streams is projected down to d_model first."""
        return self.embedding_width != self.d_model

    @property
    def has_conjunction(self) -> bool:
        """Kraken joins its d residual streams with one Linear(d*e -> e) before the head."""
        return self.arch == "kraken"

    @property
    def norms_per_sublayer(self) -> int:
        # The parallel block feeds attention and FFN from one shared norm (GPT-J, PaLM).
        return 1 if self.arch == "parallel" else 2

    @property
    def total_heads(self) -> int:
        return self.n_heads * self.degree

    def attention_params_per_sublayer(self) -> int:
        q_and_out = 2 * self.d_model * self.d_model
        kv = 2 * self.d_model * self.kv_heads * self.head_dim
        biases = (self.d_model + 2 * self.kv_heads * self.head_dim + self.d_model) if self.bias else 0
        return q_and_out + kv + biases

    def ffn_params_per_sublayer(self) -> int:
        matrices = 3 if self.activation == "swiglu" else 2
        biases = 0
        if self.bias:
            biases = (2 if self.activation == "swiglu" else 1) * self.ffn_dim + self.d_model
        return matrices * self.d_model * self.ffn_dim + biases

    def norm_params(self) -> int:
        """Parameters of one norm over d_model (scale, plus shift for a biased LayerNorm)."""
        with_shift = self.bias and self.norm == "layernorm"
        return self.d_model * (2 if with_shift else 1)

    def params_per_sublayer(self) -> int:
        return (self.attention_params_per_sublayer() + self.ffn_params_per_sublayer()
                + self.norms_per_sublayer * self.norm_params())

    def embedding_params(self) -> int:
        positions = self.context_len * self.d_model if self.position == "learned" else 0
        projection = self.embedding_width * self.d_model if self.has_embedding_projection else 0
        return self.vocab_size * self.embedding_width + projection + positions

    def num_params(self) -> int:
        """Every parameter counted once (a tied LM head is the token embedding)."""
        total = self.embedding_params()
        total += self.n_layers * self.degree * self.params_per_sublayer()
        w = self.head_width
        if self.has_conjunction:
            total += self.degree * self.d_model * w + (w if self.bias else 0)
        total += self.norm_params() * w // self.d_model  # final norm, over the head's width
        if not self.tie_embeddings:
            total += self.vocab_size * w
        return total

    def kv_cache_values_per_token(self) -> int:
        """Values held in the KV cache per token of context: 2 * L * d * kv_heads * head_dim."""
        return 2 * self.n_layers * self.degree * self.kv_heads * self.head_dim

    def forward_flops_per_token(self, context_tokens: int | None = None) -> int:
        """Matmul FLOPs of one token's forward pass (2 per multiply-add), attention included.

        `context_tokens` is the number of keys a token attends to; by default the full context
        (the usual MFU convention of 6N + 12*L*T*E per trained token counts the same terms).
        """
        t = self.context_len if context_tokens is None else context_tokens
        dense = self.n_layers * self.degree * (self.attention_params_per_sublayer()
                                               + self.ffn_params_per_sublayer())
        if self.has_embedding_projection:
            dense += self.embedding_width * self.d_model
        if self.has_conjunction:
            dense += self.degree * self.d_model * self.head_width
        dense += self.vocab_size * self.head_width  # LM head
        attention = self.n_layers * self.degree * 2 * self.d_model * t  # QK^T and AV
        return 2 * dense + 2 * attention

    # -------------------------------------------------------------------------- serialise
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown model config field(s) {unknown}; known fields: {sorted(known)}")
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.name not in data and f.default is dataclasses.MISSING]
        if missing:
            raise ConfigError(f"model config is missing required field(s) {missing}")
        return cls(**data)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "ModelConfig":
        return cls.from_dict(read_json_object(path))

    def replace(self, **changes: Any) -> "ModelConfig":
        return dataclasses.replace(self, **changes)


def read_json_object(path: str | Path) -> dict[str, Any]:
    """A JSON file holding one object, or a ConfigError saying what is wrong with it."""
    path = Path(path)
    if path.is_dir():
        inside = ("; give the config.json in it" if (path / "config.json").is_file()
                  else " with no config.json; give the path of the model's config file")
        raise ConfigError(f"model config file {path} is a directory{inside}")
    if not path.is_file():
        raise ConfigError(f"model config file {path} does not exist")
    text = read_user_text(path, "model config file", ConfigError)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"model config file {path} is not valid JSON: {exc.msg} at line "
                          f"{exc.lineno}, column {exc.colno}") from None
    except (RecursionError, ValueError) as exc:  # nesting past the recursion limit, huge ints
        raise ConfigError(f"model config file {path} is not a model config: "
                          f"{str(exc).splitlines()[0][:120]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"model config file {path} must hold a JSON object")
    return data


def _closest_multiple(target_params: int, step: int, build) -> ModelConfig:
    """The config build(e) of e a multiple of `step` whose parameter count is closest to the
    target. Parameters grow monotonically with e: bisect on the multiple, then compare the two
    neighbours (fast: the presets module builds dozens of these at import)."""
    lo, hi = 1, 1
    while build(hi * step).num_params() < target_params:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if build(mid * step).num_params() < target_params:
            lo = mid
        else:
            hi = mid
    a, b = build(lo * step), build(hi * step)
    return a if abs(a.num_params() - target_params) <= abs(b.num_params() - target_params) else b


def kraken_width_for_params(target_params: int, degree: int, n_layers: int, n_heads: int,
                            ffn_mult: int = 2, **common: Any) -> ModelConfig:
    """The Kraken config of sub-layer width e (a multiple of `n_heads`) closest in parameters.

    The spec's param-matching rule ("head-count rule"): keep L and the head count, FFN
    expansion 2, choose e so that the total parameter count matches the target. For the large
    GPT-3 shapes it gives heads of 314-453 dimensions, beyond what fused attention kernels
    support (see `kraken_engine_for_params`).
    """
    return _closest_multiple(target_params, n_heads, lambda e: ModelConfig(
        arch="kraken", n_layers=n_layers, d_model=e, n_heads=n_heads, ffn_dim=ffn_mult * e,
        degree=degree, **common))


ENGINE_WIDTH_STEP = 64
ENGINE_HEAD_DIMS = (128, 64)


def kraken_engine_for_params(target_params: int, degree: int, n_layers: int,
                             ffn_mult: int = 2, **common: Any) -> ModelConfig:
    """A Kraken config an inference engine can run with its fused attention kernels.

    The "engine rule": keep L and FFN expansion 2, choose the sub-layer width e as the multiple
    of 64 closest in parameters, and split it into heads of 128 (GPT-3's head size) when e
    allows it, else heads of 64. FlashAttention / TensorRT-LLM FMHA support both; parameters
    land within ~2 % of the target (the 64-wide granularity), where the head-count rule's
    wide heads would fall back to unfused attention.
    """
    def build(e: int) -> ModelConfig:
        hd = next(h for h in ENGINE_HEAD_DIMS if e % h == 0)
        return ModelConfig(arch="kraken", n_layers=n_layers, d_model=e, n_heads=e // hd,
                           ffn_dim=ffn_mult * e, degree=degree, **common)

    return _closest_multiple(target_params, ENGINE_WIDTH_STEP, build)
