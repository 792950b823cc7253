"""Autoregressive generation with a KV cache (or without, as the reference it must equal).

The loop is the same for a single-device model and for one rank of a sharded model: the model
does its own cross-device reductions, so every rank sees identical logits and, given the same
seed, samples identical tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..errors import KrakenError
from ..models.transformer import Transformer


@dataclass(frozen=True)
class SamplingConfig:
    """How `generate` picks tokens: up to `max_new_tokens`, greedily (argmax) or by sampling the
    softmax of logits / `temperature`, restricted to the `top_k` most likely tokens when set,
    from a generator seeded with `seed` (None: unseeded); it stops early once every sequence's
    new token is `stop_token`."""
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_k: int | None = None
    greedy: bool = False
    seed: int | None = None
    stop_token: int | None = None  # e.g. the tokenizer's end-of-text id

    def __post_init__(self) -> None:
        if self.max_new_tokens < 0:
            raise KrakenError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if not self.greedy and not (math.isfinite(self.temperature) and self.temperature > 0):
            raise KrakenError(f"temperature must be > 0 (got {self.temperature}); "
                              "use --greedy for deterministic decoding")
        if self.top_k is not None and self.top_k < 1:
            raise KrakenError(f"top_k must be >= 1, got {self.top_k}")


def next_token(logits: torch.Tensor, sampling: SamplingConfig,
               generator: torch.Generator | None) -> torch.Tensor:
    """logits [b, V] -> token ids [b, 1]."""
    logits = logits.float()
    # A NaN would make multinomial crash (or argmax pick token 0 silently). Checking [b, V]
    # values per token is negligible next to the forward pass that produced them.
    if not bool(torch.isfinite(logits).all()):
        raise KrakenError("the model produced non-finite logits (NaN or inf): its weights or "
                          "activations overflow; use a checkpoint from before the run diverged")
    if sampling.greedy:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / sampling.temperature
    if sampling.top_k is not None and sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)


def check_prompt_fits(prompt_tokens: int, max_new_tokens: int, context_len: int) -> None:
    if prompt_tokens == 0:
        raise KrakenError("the prompt is empty; give at least one token of prompt")
    if prompt_tokens > context_len:
        raise KrakenError(f"the prompt has {prompt_tokens} tokens but the model's context is "
                          f"{context_len}; shorten the prompt")
    if prompt_tokens + max_new_tokens > context_len:
        raise KrakenError(
            f"prompt ({prompt_tokens} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
            f"model's context of {context_len}; use --max-new-tokens "
            f"{context_len - prompt_tokens} or less")


@torch.no_grad()
def generate(model: Transformer, prompt: torch.Tensor, sampling: SamplingConfig, *,
             use_cache: bool = True,
             on_token: Callable[[int, torch.Tensor], None] | None = None) -> torch.Tensor:
    """prompt [b, t] -> the new tokens [b, n] (n <= max_new_tokens, fewer at a stop token).

    `on_token(step, tokens)` is called after every new token (step 0 is the prefill's token),
    e.g. for streaming or timing TTFT/TPOT.
    """
    model.eval()
    b, t = prompt.shape
    check_prompt_fits(t, sampling.max_new_tokens, model.config.context_len)
    generator = None
    if sampling.seed is not None:
        generator = torch.Generator(device=prompt.device).manual_seed(sampling.seed)
    cache = model.new_cache(b, t + sampling.max_new_tokens) if use_cache else None
    tokens = prompt
    new: list[torch.Tensor] = []
    for step in range(sampling.max_new_tokens):
        if cache is None:  # reference path: recompute the whole sequence each step
            logits = model(tokens, last_only=True)
        elif step == 0:  # prefill
            logits = model(tokens, cache=cache, start_pos=0, last_only=True)
        else:  # decode one token against the cache
            logits = model(tokens[:, -1:], cache=cache, start_pos=tokens.shape[1] - 1,
                           last_only=True)
        token = next_token(logits[:, -1], sampling, generator)
        new.append(token)
        tokens = torch.cat([tokens, token], dim=1)
        if on_token is not None:
            on_token(step, token)
        if sampling.stop_token is not None and bool((token == sampling.stop_token).all()):
            break
    if not new:
        return prompt.new_zeros((b, 0))
    return torch.cat(new, dim=1)
