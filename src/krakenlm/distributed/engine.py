"""What one rank runs: build its shard of the model, then prefill and decode with timing.

Generation itself is `evaluation.generate.generate`, unchanged: the sharded model does its own
all-reduces, so every rank computes identical logits and (same seed) samples identical tokens.
The per-rank KV cache comes from `model.new_cache`, already sized for the local heads or
sub-layers.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..evaluation.generate import SamplingConfig, check_prompt_fits, generate
from ..models import get_preset
from ..models.comm import Communicator
from ..models.config import ModelConfig
from ..models.transformer import Shard, Transformer, local_sizes
from .launch import DEFAULT_TIMEOUT_S, RankContext, resolve_world_size, run_ranks
from .sharding import shard_state_dict


def random_state_dict(config: ModelConfig, seed: int) -> dict[str, torch.Tensor]:
    """Full single-device weights: exactly those of `Transformer(config)` after
    `torch.manual_seed(seed)`, so a sharded model can be compared with the single-device one."""
    torch.manual_seed(seed)
    return Transformer(config).state_dict()


@dataclass(frozen=True)
class Weights:
    """Where every rank gets the full single-device weights from (it then keeps its shard):
    a training checkpoint directory, or the random weights of a preset (`random_state_dict`).
    Small to pickle, so spawned ranks load the weights themselves instead of receiving them."""

    checkpoint: Path | None = None
    preset: str | None = None
    seed: int = 0

    def model_config(self) -> ModelConfig:
        if self.checkpoint is not None:
            from ..runtime.checkpoint import load_config
            return load_config(Path(self.checkpoint))
        return get_preset(self.preset)

    def load(self) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
        config = self.model_config()
        if self.checkpoint is not None:
            from ..runtime.checkpoint import check_weights_match_config, load_state_dict
            state = load_state_dict(Path(self.checkpoint))[0]
            with torch.device("meta"):
                check_weights_match_config(state, Transformer(config), Path(self.checkpoint))
            return config, state
        return config, random_state_dict(config, self.seed)

    def describe(self) -> str:
        if self.checkpoint is not None:
            return f"checkpoint {self.checkpoint}"
        return f"{self.preset}, random weights (seed {self.seed})"


def build_local_model(ctx: RankContext, config: ModelConfig, *,
                      state_dict: dict[str, torch.Tensor] | None = None,
                      comm: Communicator | None = None,
                      vocab_parallel_head: bool = False) -> Transformer:
    """This rank's shard on `ctx.device`, in eval mode.

    With `state_dict` (full, single-device weights, e.g. a checkpoint) the shard is sliced from
    it; without, the shard has its own random weights (enough for timing, not for comparing
    with a single-device model). `vocab_parallel_head`: see `Shard`.
    """
    shard = Shard(ctx.rank, ctx.world_size, vocab_parallel_head)
    comm = comm if comm is not None else ctx.new_comm()
    if state_dict is None:
        return Transformer(config, shard, comm).to(ctx.device).eval()
    with torch.device("meta"):  # no random init of weights that are overwritten at once
        model = Transformer(config, shard, comm)
    return model.assign_weights(shard_state_dict(config, state_dict, shard), ctx.device).eval()


@dataclass(frozen=True)
class TimedGeneration:
    """The new tokens ([b, n], on the CPU) of one generation and this rank's wall-clock timing in
    seconds (time.perf_counter stamped as each token comes out, after a CUDA synchronize on a
    GPU): TTFT, the mean TPOT after the first token (None for one token), and the prefill's time
    inside collectives (and of that, waiting for peers, when the communicator can tell)."""
    tokens: torch.Tensor  # [b, n] new token ids, on the CPU
    ttft_s: float  # prompt in -> first token out (prefill, incl. the KV cache allocation)
    tpot_s: float | None  # mean time per decoded token after the first; None if only one token
    prefill_comm_blocked_s: float  # this rank's wall time inside collectives during prefill
    # Of which waiting for peers; None unless the communicator can tell (shared memory).
    prefill_comm_peer_wait_s: float | None = None


def _comm_blocked_s(model: Transformer) -> float:
    return getattr(model.comm, "blocked_s", 0.0)


def _comm_peer_wait_s(model: Transformer) -> float | None:
    return getattr(model.comm, "peer_wait_s", None)


def timed_generate(model: Transformer, prompt: torch.Tensor, sampling: SamplingConfig,
                   ctx: RankContext | None = None) -> TimedGeneration:
    """`generate`, timed through its `on_token` hook; on one rank of `ctx`, or single-device.

    All ranks pass a barrier first so that no rank's clock includes another's start-up; the
    timings are this rank's wall clock (a blocking collective makes a rank wait for the slowest).
    """
    device = model.tok_emb.weight.device
    prompt = prompt.to(device)
    stamps: list[float] = []
    blocked_at_first = [0.0]
    waited_at_first: list[float | None] = [None]

    def on_token(step: int, token: torch.Tensor) -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        stamps.append(time.perf_counter())
        if step == 0:
            blocked_at_first[0] = _comm_blocked_s(model)
            waited_at_first[0] = _comm_peer_wait_s(model)

    if ctx is not None:
        ctx.barrier()
    blocked_before, waited_before = _comm_blocked_s(model), _comm_peer_wait_s(model)
    start = time.perf_counter()
    tokens = generate(model, prompt, sampling, on_token=on_token)
    ttft_s = stamps[0] - start if stamps else float("nan")
    tpot_s = (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else None
    waited_s = (None if waited_before is None or waited_at_first[0] is None
                else waited_at_first[0] - waited_before)
    return TimedGeneration(tokens.cpu(), ttft_s, tpot_s, blocked_at_first[0] - blocked_before,
                           waited_s)


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _generate_rank(ctx: RankContext, weights: Weights, prompt_ids: list[int],
                   sampling: SamplingConfig, vocab_parallel_head: bool) -> list[int] | None:
    config, state = weights.load()
    model = build_local_model(ctx, config, state_dict=state,
                              vocab_parallel_head=vocab_parallel_head)
    del state  # keep only the shard
    new = generate(model, torch.tensor([prompt_ids], device=ctx.device), sampling)
    return new[0].tolist() if ctx.is_main else None  # every rank has the same tokens


def generate_sharded(checkpoint: Path, prompt_ids: list[int], sampling: SamplingConfig, *,
                     world_size: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                     comm_backend: str = "auto",
                     vocab_parallel_head: bool = False) -> list[int] | None:
    """Generate from a single-device checkpoint sharded over `world_size` ranks (spawned here,
    or this process's torchrun group). The new token ids, or None on a torchrun rank other
    than 0. Bad input is refused before any process starts."""
    world_size = resolve_world_size(world_size)
    weights = Weights(checkpoint=Path(checkpoint))
    config = weights.model_config()
    check_prompt_fits(len(prompt_ids), sampling.max_new_tokens, config.context_len)
    local_sizes(config, Shard(0, world_size))
    results = run_ranks(_generate_rank, (weights, prompt_ids, sampling, vocab_parallel_head),
                        world_size=world_size,
                        timeout_s=timeout_s, comm_backend=comm_backend)
    return results.get(0)
