"""The multi-process part of `make demo`: Kraken's and GPT's tokens from N ranks equal the
single-device tokens, with the measured TTFTs.

`run_tp_demo()` uses trained checkpoints when given (`{"kraken": DIR, "gpt": DIR}`), else
random weights of the tiny presets. Each rank loads the full weights itself and keeps its shard.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import KrakenError
from ..evaluation.generate import SamplingConfig, check_prompt_fits
from ..models.transformer import Shard, Transformer, local_sizes
from ..runtime.bootstrap import under_torchrun
from .engine import Weights, build_local_model, median, timed_generate
from .launch import RankContext, resolve_world_size, run_ranks

DEFAULT_PRESETS = {"kraken": "kraken-tiny-2way", "gpt": "gpt-tiny"}
DEFAULT_PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?"


@dataclass(frozen=True)
class DemoCase:
    """One architecture's case in the tensor-parallel demo: its name, the weights to load and the
    prompt ids ([1, t], in the tokenizer the weights were trained with)."""
    arch: str
    weights: Weights
    prompt_ids: torch.Tensor  # [1, t], in the tokenizer the weights were trained with


@dataclass
class TPDemoReport:
    """The tensor-parallel demo's result: the sharded run's rank count, prompt and new token counts,
    timing repeats and all-reduce backend, how tokens were chosen (`how`), and a row per
    architecture (its weights, whether the sharded tokens equal the one-device tokens, the
    continuation, and the median TTFT in seconds of each run). `ok`: every row identical."""
    world_size: int
    prompt_tokens: int
    new_tokens: int
    repeats: int
    comm_backend: str  # how the ranks' all-reduces went: shm, gloo or nccl
    how: str = "Greedy generation"  # or "Sampled generation (seed s, temperature t, top-k)"
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(row["identical"] for row in self.rows)

    def text(self) -> str:
        lines = [f"{self.how} sharded over {self.world_size} processes against one device "
                 f"({self.prompt_tokens}-token prompt, {self.new_tokens} new tokens, all-reduce "
                 f"{self.comm_backend}, TTFT median of {self.repeats}):"]
        for row in self.rows:
            lines.append(
                f"  {row['arch']:7s} {row['weights']:40s} tokens identical: "
                f"{'yes' if row['identical'] else 'NO'}   TTFT 1 device "
                f"{1000 * row['ttft_single_s']:7.1f} ms, {self.world_size} ranks "
                f"{1000 * row['ttft_sharded_s']:7.1f} ms")
            lines.append(f"          continuation: {row['continuation']!r}")
        if self.how.startswith("Greedy"):
            lines.append("(Greedy decoding of a briefly trained or random model soon repeats "
                         "itself; the point here is that the sharded run gives the same tokens.)")
        return "\n".join(lines)


def _measure(model: Transformer, prompt: torch.Tensor, sampling: SamplingConfig,
             ctx: RankContext | None, repeats: int) -> dict[str, Any]:
    timed_generate(model, prompt, sampling, ctx)  # warm-up
    runs = [timed_generate(model, prompt, sampling, ctx) for _ in range(repeats)]
    return {"tokens": runs[0].tokens, "ttft_s": median([r.ttft_s for r in runs])}


def _demo_rank(ctx: RankContext, cases: list[DemoCase], sampling: SamplingConfig,
               repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {"comm_backend": ctx.comm_backend}
    for case in cases:
        config, state = case.weights.load()
        model = build_local_model(ctx, config, state_dict=state)
        del state
        out[case.arch] = _measure(model, case.prompt_ids, sampling, ctx, repeats)
    return out


def _check_architectures(checkpoints: dict[str, Path]) -> None:
    """Each checkpoint must hold the architecture its row is labelled with."""
    from ..runtime.checkpoint import load_config

    for arch, path in checkpoints.items():
        if arch not in DEFAULT_PRESETS:
            raise KrakenError(f"unknown demo row {arch!r}; use {' or '.join(DEFAULT_PRESETS)}")
        found = load_config(Path(path)).arch
        if found != arch:
            hint = (" (did you swap --kraken-checkpoint and --gpt-checkpoint?)"
                    if found in DEFAULT_PRESETS else "")
            raise KrakenError(f"--{arch}-checkpoint {path} holds a {found!r} model, not "
                              f"{arch!r}{hint}")


def run_tp_demo(checkpoints: dict[str, Path] | None = None, *, world_size: int = 2,
                prompt: str = DEFAULT_PROMPT, new_tokens: int = 24, repeats: int = 3,
                timeout_s: float = 300.0, sampling: SamplingConfig | None = None
                ) -> TPDemoReport:
    """Run the check; `report.ok` is True when every rank gave the single-device tokens.
    Spawns its ranks itself (not for torchrun: the single-device half runs here).

    Default decoding is greedy. A seeded `sampling` draws the same tokens on every rank (the
    ranks' logits are identical after the all-reduce); against one device it relies on the
    logits agreeing to rounding, which can flip a draw only at a near-tie (rare)."""
    from ..data.tokenizer import Tokenizer
    from ..data.vocab import prompt_ids
    from ..runtime.model_and_tokenizer import checkpoint_tokenizer

    if under_torchrun():
        raise KrakenError("the tensor-parallel demo spawns its own ranks; run it without torchrun")
    checkpoints = checkpoints or {}
    _check_architectures(checkpoints)
    # Each model reads the prompt and writes its tokens in its own tokenizer (a BPE
    # checkpoint's ids mean nothing in GPT-2's vocabulary).
    tokenizers = {arch: checkpoint_tokenizer(checkpoints[arch]) if arch in checkpoints
                  else Tokenizer() for arch in DEFAULT_PRESETS}
    cases = [DemoCase(arch, Weights(checkpoint=Path(checkpoints[arch])) if arch in checkpoints
                      else Weights(preset=preset, seed=0),
                      torch.tensor([prompt_ids(tokenizers[arch], prompt)]))
             for arch, preset in DEFAULT_PRESETS.items()]
    if sampling is None:
        sampling = SamplingConfig(max_new_tokens=new_tokens, greedy=True)
    # Every case must shard and fit before the single-device runs, not in a rank minutes later.
    world_size = resolve_world_size(world_size)
    if sampling.max_new_tokens < 1:
        raise KrakenError(f"--new-tokens must be >= 1, got {sampling.max_new_tokens}")
    for case in cases:
        config = case.weights.model_config()
        check_prompt_fits(case.prompt_ids.shape[1], sampling.max_new_tokens, config.context_len)
        local_sizes(config, Shard(0, world_size))
    how = ("Greedy generation" if sampling.greedy else
           f"Sampled generation (seed {sampling.seed}, temperature {sampling.temperature:g}"
           f"{f', top-{sampling.top_k}' if sampling.top_k else ''})")
    single = {}
    for case in cases:
        config, state = case.weights.load()
        model = Transformer(config)
        model.load_state_dict(state)
        single[case.arch] = _measure(model.eval(), case.prompt_ids, sampling, None, repeats)
    sharded = run_ranks(_demo_rank, (cases, sampling, repeats),
                        world_size=world_size, timeout_s=timeout_s)
    report = TPDemoReport(world_size, max(c.prompt_ids.shape[1] for c in cases),
                          sampling.max_new_tokens, repeats, sharded[0]["comm_backend"], how=how)
    for case in cases:
        one = single[case.arch]
        report.rows.append({
            "arch": case.arch, "weights": case.weights.describe(),
            "identical": all(torch.equal(r[case.arch]["tokens"], one["tokens"])
                             for r in sharded.values()),
            "ttft_single_s": one["ttft_s"], "ttft_sharded_s": sharded[0][case.arch]["ttft_s"],
            "continuation": tokenizers[case.arch].decode(one["tokens"][0].tolist()),
        })
    return report
