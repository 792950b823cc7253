"""Named model configurations: the spec tables, GPT-2/GPT-3 shapes, modern families, tiny CPU models.

Every preset is a plain `ModelConfig`. Large presets are shapes only (for the simulator and the
inference benchmarks); they need not fit in memory here. Torch-free, like `config.py`.

The parameter-matched Kraken presets are each a search over widths (dozens of configs built
and counted); `PRESETS` works one out the first time it is asked for, so a command that needs
one preset does not pay for the 28 searches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import partial

from .config import (ConfigError, ModelConfig, RopeScaling, kraken_engine_for_params,
                     kraken_width_for_params)

GPT2_VOCAB = 50304  # GPT-2's 50257 padded to a multiple of 64, as in the Kraken training runs
GPT3_VOCAB = 50257
SMALL_BPE_VOCAB = 4096  # the bpe-4k tokenizer (data/bpe.py)


def _gpt(n_layers: int, d_model: int, n_heads: int, *, arch: str = "gpt", context_len: int = 1024,
         vocab_size: int = GPT2_VOCAB, **extra) -> ModelConfig:
    return ModelConfig(arch=arch, n_layers=n_layers, d_model=d_model, n_heads=n_heads,
                       ffn_dim=4 * d_model, vocab_size=vocab_size, context_len=context_len, **extra)


def _kraken(degree: int, n_layers: int, e: int, h: int, *, context_len: int = 1024,
            vocab_size: int = GPT2_VOCAB) -> ModelConfig:
    return ModelConfig(arch="kraken", n_layers=n_layers, d_model=e, n_heads=h, ffn_dim=2 * e,
                       degree=degree, vocab_size=vocab_size, context_len=context_len)


class PresetTable(Mapping[str, ModelConfig]):
    """Preset name -> `ModelConfig`, in the order of `_build`; an entry given as a function
    (a parameter-matched search) is called the first time it is read, and kept."""

    def __init__(self, entries: dict[str, ModelConfig | Callable[[], ModelConfig]]):
        self._entries = entries

    def __getitem__(self, name: str) -> ModelConfig:
        entry = self._entries[name]
        if not isinstance(entry, ModelConfig):
            entry = self._entries[name] = entry()
        return entry

    def __contains__(self, name: object) -> bool:  # without working the entry out
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def _build() -> dict[str, ModelConfig | Callable[[], ModelConfig]]:
    """The presets; a parameter-matched Kraken one as the search that finds it (`PresetTable`
    runs it when it is first read)."""
    p: dict[str, ModelConfig | Callable[[], ModelConfig]] = {}

    # Kraken configurations trained in the paper (spec table; vocab 50304, context 1024).
    p["kraken-125m-2way"] = _kraken(2, 12, 678, 6)
    p["kraken-125m-4way"] = _kraken(4, 12, 504, 3)
    p["kraken-125m-6way"] = _kraken(6, 12, 418, 2)
    p["kraken-350m-2way"] = _kraken(2, 24, 888, 8)
    p["kraken-350m-4way"] = _kraken(4, 24, 644, 4)
    p["kraken-760m-4way"] = _kraken(4, 24, 960, 4)

    # GPT-2 baselines (no biases, like the Kraken runs) and the parallel block at the same shape.
    for size, (n_layers, width, heads) in {"124m": (12, 768, 12), "350m": (24, 1024, 16),
                                           "774m": (36, 1280, 20)}.items():
        p[f"gpt2-{size}"] = _gpt(n_layers, width, heads)
        p[f"parallel-{size}"] = _gpt(n_layers, width, heads, arch="parallel")

    # GPT-3 shapes (Brown et al. 2020, table 2.1; 1.3b uses 16 heads of 128 so that width and
    # heads agree) and a 65B shape (LLaMA-65B's depth and width with a GPT block). Shapes only.
    gpt3_shapes = {"1.3b": (24, 2048, 16), "6.7b": (32, 4096, 32), "13b": (40, 5120, 40),
                   "65b": (80, 8192, 64), "175b": (96, 12288, 96)}
    for size, (n_layers, width, heads) in gpt3_shapes.items():
        base = f"gpt3-{size}" if size != "65b" else "gpt-65b"
        standard = _gpt(n_layers, width, heads, context_len=2048, vocab_size=GPT3_VOCAB)
        p[base] = standard
        p[f"parallel-{base}"] = standard.replace(arch="parallel")
        # The inference study's Kraken engines, parameter-matched with FFN expansion 2 and the
        # same depth. Default ("engine rule"): heads of 128 (or 64) that fused attention kernels
        # run; "-hc" ("head-count rule", the spec's): GPT-3's total head count kept, which
        # gives heads of 314-453 dimensions that engines run unfused.
        for degree in (4, 8):
            p[f"kraken-{base}-{degree}way"] = partial(
                kraken_engine_for_params, standard.num_params(), degree=degree,
                n_layers=n_layers, context_len=2048, vocab_size=GPT3_VOCAB)
            p[f"kraken-{base}-{degree}way-hc"] = partial(
                kraken_width_for_params, standard.num_params(), degree=degree,
                n_layers=n_layers, n_heads=heads // degree, context_len=2048,
                vocab_size=GPT3_VOCAB)

    # Modern families, for the simulator (the PyTorch model implements these blocks too).
    llama = dict(norm="rmsnorm", activation="swiglu", position="rope", tie_embeddings=False)
    p["llama2-7b"] = ModelConfig(arch="gpt", n_layers=32, d_model=4096, n_heads=32, ffn_dim=11008,
                                 vocab_size=32000, context_len=4096, **llama)
    p["llama2-13b"] = ModelConfig(arch="gpt", n_layers=40, d_model=5120, n_heads=40,
                                  ffn_dim=13824, vocab_size=32000, context_len=4096, **llama)
    p["llama2-70b"] = ModelConfig(arch="gpt", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8,
                                  ffn_dim=28672, vocab_size=32000, context_len=4096, **llama)
    p["llama3-8b"] = ModelConfig(arch="gpt", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
                                 ffn_dim=14336, vocab_size=128256, context_len=8192,
                                 rope_theta=500000.0, **llama)
    p["llama3-70b"] = ModelConfig(arch="gpt", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8,
                                  ffn_dim=28672, vocab_size=128256, context_len=8192,
                                  rope_theta=500000.0, **llama)
    # Llama 3.1 (8B, 70B, 405B): Llama 3's shapes, 128k context by scaled RoPE (factor 8, bands
    # 1 and 4 around the original 8192 tokens; config.json of meta-llama/Llama-3.1-*: rope_type
    # "llama3"); 405B: 126 layers, hidden 16384, 128 heads, 8 KV heads, FFN 53248.
    llama31 = dict(vocab_size=128256, context_len=131072, n_kv_heads=8, rope_theta=500000.0,
                   rope_scaling=RopeScaling(factor=8.0, low_freq_factor=1.0,
                                            high_freq_factor=4.0, original_context_len=8192),
                   **llama)
    p["llama3.1-8b"] = ModelConfig(arch="gpt", n_layers=32, d_model=4096, n_heads=32,
                                   ffn_dim=14336, **llama31)
    p["llama3.1-70b"] = ModelConfig(arch="gpt", n_layers=80, d_model=8192, n_heads=64,
                                    ffn_dim=28672, **llama31)
    p["llama3.1-405b"] = ModelConfig(arch="gpt", n_layers=126, d_model=16384, n_heads=128,
                                     ffn_dim=53248, **llama31)
    # Mistral-7B-v0.1 (Jiang et al. 2023): Llama block with GQA 32/8 and a 14336 SwiGLU FFN (its
    # 4096-token sliding window does not change prompts up to 4096 tokens).
    p["mistral-7b"] = ModelConfig(arch="gpt", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
                                  ffn_dim=14336, vocab_size=32000, context_len=32768, **llama)
    # Qwen2.5-32B (Qwen team 2024; QwQ-32B is the same shape, HF model_type "qwen2"): 64 layers,
    # hidden 5120, 40 query heads and 8 KV heads of 128, SwiGLU FFN 27648, RMSNorm eps 1e-5, RoPE
    # base 1e6, vocab 152064, untied LM head, bf16; config.json of Qwen/QwQ-32B-Preview as printed
    # in Retruth/deontic nlp_models/qwq/README.md (max_position_embeddings 32768). Its q/k/v
    # biases (5120 + 2 x 1024 per layer, 0.46M of 32.8B parameters) are left out: `bias` here
    # would put biases on every Linear and norm.
    p["qwen2.5-32b"] = ModelConfig(arch="gpt", n_layers=64, d_model=5120, n_heads=40,
                                   n_kv_heads=8, ffn_dim=27648, vocab_size=152064,
                                   context_len=32768, norm_eps=1e-5, rope_theta=1000000.0,
                                   **llama)
    # GPT-J 6B (Wang and Komatsuzaki 2021): the parallel attention+FFN block, 16 heads of 256,
    # rotary embeddings (on 64 of the 256 dims), untied LM head. Its MLP biases are left out.
    p["gpt-j-6b"] = ModelConfig(arch="parallel", n_layers=28, d_model=4096, n_heads=16,
                                ffn_dim=16384, vocab_size=50400, context_len=2048, position="rope",
                                tie_embeddings=False)
    # Falcon-180B (TII 2023): parallel block, 232 heads of 64 with 8 KV heads, GELU FFN 4x, no
    # biases, tied head. (Its two parallel LayerNorms are one norm here: 15k parameters.)
    p["falcon-180b"] = ModelConfig(arch="parallel", n_layers=80, d_model=14848, n_heads=232,
                                   n_kv_heads=8, ffn_dim=59392, vocab_size=65024,
                                   context_len=2048, position="rope")
    # BLOOM-176B (BigScience 2022): ALiBi, biased LayerNorm and Linears, 4x GELU FFN, tied head.
    p["bloom-176b"] = ModelConfig(arch="gpt", n_layers=70, d_model=14336, n_heads=112,
                                  ffn_dim=4 * 14336, vocab_size=250880, context_len=2048,
                                  position="alibi", bias=True)

    # Tiny models for CPU training, parameter-matched to gpt-tiny within 2 %. Kraken keeps the
    # total head count (8 = 2 x 4 = 4 x 2), as the spec's configurations do.
    tiny = dict(context_len=256, vocab_size=GPT2_VOCAB)
    p["gpt-tiny"] = ModelConfig(arch="gpt", n_layers=4, d_model=256, n_heads=8, ffn_dim=1024, **tiny)
    p["parallel-tiny"] = p["gpt-tiny"].replace(arch="parallel")
    for degree in (2, 4):
        p[f"kraken-tiny-{degree}way"] = partial(
            kraken_width_for_params, p["gpt-tiny"].num_params(), degree=degree, n_layers=4,
            n_heads=8 // degree, **tiny)

    # Deeper small models for the bpe-4k vocabulary (`train --tokenizer bpe-4k`): 8 layers, and
    # the embedding is a minority of the parameters (about 14 %, against 80 % for gpt-tiny with
    # GPT-2's vocabulary), closer to the paper's proportions. Kraken matched on total parameters.
    small = dict(context_len=256, vocab_size=SMALL_BPE_VOCAB)
    p["gpt-small8"] = ModelConfig(arch="gpt", n_layers=8, d_model=256, n_heads=8, ffn_dim=1024,
                                  **small)
    p["parallel-small8"] = p["gpt-small8"].replace(arch="parallel")
    for degree in (2, 4):
        p[f"kraken-small8-{degree}way"] = partial(
            kraken_width_for_params, p["gpt-small8"].num_params(), degree=degree, n_layers=8,
            n_heads=8 // degree, **small)

    # The same depth at half the width (about 2.1M parameters, embedding 17-26 %): three times
    # faster to train, so a CPU budget reaches several times more tokens per parameter. The demo
    # and the longer quality study use these.
    p["gpt-mini8"] = ModelConfig(arch="gpt", n_layers=8, d_model=128, n_heads=4, ffn_dim=512,
                                 **small)
    p["parallel-mini8"] = p["gpt-mini8"].replace(arch="parallel")
    for degree in (2, 4):
        p[f"kraken-mini8-{degree}way"] = partial(
            kraken_width_for_params, p["gpt-mini8"].num_params(), degree=degree, n_layers=8,
            n_heads=4 // degree, **small)

    # Width ablations of the mini8 pair (is Kraken's small-scale gap a width effect?): GPT at
    # Kraken 2-way's sub-layer width (112), Kraken 2-way with an untied LM head (its head no
    # longer shares the 112-wide embedding; 0.46M more parameters), and Kraken 2-way with GPT's
    # 4 heads per stream (heads of 28; the same parameters as kraken-mini8-2way).
    k2 = p["kraken-mini8-2way"] = p["kraken-mini8-2way"]()  # found now: the ablations need it
    p["gpt-mini8-w112"] = p["gpt-mini8"].replace(d_model=k2.d_model, ffn_dim=4 * k2.d_model)
    p["kraken-mini8-2way-untied"] = k2.replace(tie_embeddings=False)
    p["kraken-mini8-2way-h4"] = k2.replace(n_heads=p["gpt-mini8"].n_heads)
    # Kraken 2-way with GPT's full-width (128) head: the conjunction maps the two 112-wide
    # streams to 128 (2 x 112 x 128), the final norm and the tied LM head are 128 wide (rank
    # 128, like gpt-mini8's), and the tied 128-wide embedding is projected down to the streams'
    # 112 (a 128 x 112 matrix). Streams, heads and layers unchanged: 2.20M parameters, 84k
    # (4 %) more than kraken-mini8-2way, 2.13M for gpt-mini8.
    p["kraken-mini8-2way-head128"] = k2.replace(lm_head_width=p["gpt-mini8"].d_model)

    # The mini8 pair at other widths (8 layers, 4 GPT heads, Kraken 2-way with 2 heads per
    # stream, parameter-matched): 64 (0.67M parameters), 128 (gpt-mini8, 2.1M) and 160 (3.2M),
    # for the gap against model size at equal tokens per parameter.
    for width in (64, 160):
        gpt = p["gpt-mini8"].replace(d_model=width, ffn_dim=4 * width)
        p[f"gpt-mini8-d{width}"] = gpt
        p[f"kraken-mini8-d{width}-2way"] = partial(
            kraken_width_for_params, gpt.num_params(), degree=2, n_layers=8, n_heads=2, **small)
    return p


PRESETS: Mapping[str, ModelConfig] = PresetTable(_build())


def get_preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(
            f"unknown model preset {name!r}; run `krakenlm models` to list the "
            f"{len(PRESETS)} presets, or pass --config FILE for a custom model") from None


def preset_names() -> list[str]:
    return list(PRESETS)
