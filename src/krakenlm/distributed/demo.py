"""The multi-process part of `make demo`: Kraken's and GPT's tokens from N ranks equal the
single-device tokens, with the measured TTFTs.

`run_tp_demo()` uses trained checkpoints when given (`{"kraken": DIR, "gpt": DIR}`), else
random weights of the tiny presets. Each rank loads the full weights itself and keeps its shard.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch

from ..errors import KrakenError
from ..evaluation.generate import SamplingConfig
from ..models.transformer import Transformer
from .engine import Weights, build_local_model, median, timed_generate
from .launch import RankContext, run_ranks, under_torchrun

DEFAULT_PRESETS = {"kraken": "kraken-tiny-2way", "gpt": "gpt-tiny"}


@dataclass(frozen=True)
class DemoCase:
    arch: str
    weights: Weights


def _prompt(vocab_size: int, tokens: int) -> torch.Tensor:
    return torch.randint(0, vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0))


def _measure(model: Transformer, prompt: torch.Tensor, sampling: SamplingConfig,
             ctx: RankContext | None, repeats: int) -> dict[str, Any]:
    timed_generate(model, prompt, sampling, ctx)  # warm-up
    runs = [timed_generate(model, prompt, sampling, ctx) for _ in range(repeats)]
    return {"tokens": runs[0].tokens, "ttft_s": median([r.ttft_s for r in runs])}


def _demo_rank(ctx: RankContext, cases: list[DemoCase], prompt_tokens: int,
               sampling: SamplingConfig, repeats: int) -> dict[str, dict[str, Any]]:
    out = {}
    for case in cases:
        config, state = case.weights.load()
        model = build_local_model(ctx, config, state_dict=state)
        del state
        prompt = _prompt(config.vocab_size, prompt_tokens)
        out[case.arch] = _measure(model, prompt, sampling, ctx, repeats)
    return out


def run_tp_demo(checkpoints: dict[str, Path] | None = None, *, world_size: int = 2,
                prompt_tokens: int = 64, new_tokens: int = 16, repeats: int = 3,
                timeout_s: float = 300.0, out: TextIO = sys.stdout) -> bool:
    """Print one line per architecture; True when every N-rank run gave the single-device
    tokens. Spawns its ranks itself (not for torchrun: the single-device half runs here)."""
    if under_torchrun():
        raise KrakenError("the tensor-parallel demo spawns its own ranks; run it without torchrun")
    checkpoints = checkpoints or {}
    cases = [DemoCase(arch, Weights(checkpoint=checkpoints[arch]) if arch in checkpoints
                      else Weights(preset=preset, seed=0))
             for arch, preset in DEFAULT_PRESETS.items()]
    sampling = SamplingConfig(max_new_tokens=new_tokens, greedy=True)
    single = {}
    for case in cases:
        config, state = case.weights.load()
        model = Transformer(config)
        model.load_state_dict(state)
        single[case.arch] = _measure(model.eval(), _prompt(config.vocab_size, prompt_tokens),
                                     sampling, None, repeats)
    sharded = run_ranks(_demo_rank, (cases, prompt_tokens, sampling, repeats),
                        world_size=world_size, timeout_s=timeout_s)
    all_equal = True
    print(f"Sharded generation on {world_size} processes against one device "
          f"({prompt_tokens}-token prompt, {new_tokens} greedy tokens, median of {repeats}):",
          file=out)
    for case in cases:
        one, many = single[case.arch], sharded[0][case.arch]
        equal = all(torch.equal(r[case.arch]["tokens"], one["tokens"]) for r in sharded.values())
        all_equal &= equal
        print(f"  {case.arch:7s} {case.weights.describe():40s} tokens identical: "
              f"{'yes' if equal else 'NO'}   TTFT 1 device {1000 * one['ttft_s']:7.1f} ms, "
              f"{world_size} ranks {1000 * many['ttft_s']:7.1f} ms", file=out)
    return all_equal
