"""The small engine the scheduler tests drive by hand: GPT-3 1.3B on one H100, at most 1024
tokens and 16 sequences per step, requests fed in arrival order."""

from __future__ import annotations

import functools

from krakenlm.models import get_preset
from krakenlm.serving.step_time import StepTimer
from krakenlm.serving.vllm_v1 import Seq, V1Options
from krakenlm.simulator import Simulator

MODEL = "gpt3-1.3b"


@functools.cache
def small_timer(software: str) -> StepTimer:
    return StepTimer(Simulator("h100-80gb-x8", software), get_preset(MODEL), 1,
                     max_tokens=1024, max_sequences=16)


def replay(timer: StepTimer, engine_class, requests, blocks: int, block_tokens: int, **options):
    """Run `requests` through `engine_class` to the end; returns (engine, their Seqs)."""
    opt = V1Options(**{"max_num_batched_tokens": 1024, "max_num_seqs": 16, **options})
    engine = engine_class(timer, opt, blocks, block_tokens)
    seqs = []
    for req in requests:
        engine.advance(req.arrival_s)
        engine.hold_for_schedule(req.arrival_s)  # as `serve` does (async scheduling only)
        seq = Seq(req)
        engine.add(seq)
        seqs.append(seq)
    engine.advance(float("inf"))
    return engine, seqs
