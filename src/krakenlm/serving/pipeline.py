"""Pipeline parallelism inside a replica: `pp` stages of `tp` devices, each holding
ceil(layers / pp) layers, with `pp` batches in flight.

How the engine runs it. vLLM runs `pp` batches at once so that every stage has work: V0
keeps `pp` virtual engines, each with its own scheduler and 1/pp of the KV blocks
(vllm-project/vllm@0dce2b29 `vllm/core/scheduler.py`, `num_gpu_blocks //=
pipeline_parallel_size`), and gives a new request to the one with the fewest unfinished
requests (vllm-project/vllm@1473f741 `vllm/engine/llm_engine.py`,
`_add_processed_request`: `min_cost_scheduler`); V1 keeps a queue of `pp` scheduled batches
in flight (vllm-project/vllm@00080ee1 `vllm/v1/engine/core.py`: `batch_queue_size =
max_concurrent_batches`, `step_with_batch_queue`). We model V0's form for every scheduler:
`pp` engines per replica (`virtual_engines`), each with 1/pp of the blocks.

Step time. A batch goes through the stages one after another, so one virtual engine's step
takes pp x the stage time plus pp - 1 activation sends; while it is in one stage the other
pp - 1 batches are in the others, so the replica runs pp steps in that time. The stage time
is the step-time oracle of the model with ceil(layers / pp) layers (its embedding and LM head
included: the slowest stage, the last, holds the head). The send carries each token's hidden
state and residual (vLLM's `IntermediateTensors`), split over the TP ranks, timed by
`transfer.send_s` over the node's links or the network. Not modelled: stages stalling each
other when the in-flight batches differ in size (the pipeline runs at the pace of the
largest)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from ..models import ModelConfig
from .step_time import StepTimer


def stage_config(config: ModelConfig, pp: int) -> ModelConfig:
    """The model one pipeline stage holds: ceil(layers / pp) of its layers."""
    return config if pp == 1 else replace(config, n_layers=math.ceil(config.n_layers / pp))


def activation_bytes_per_device(tokens: int, config: ModelConfig, tp: int,
                                bytes_per_value: int) -> float:
    """Bytes one TP rank sends to the next stage for a step of `tokens` tokens: hidden state
    and residual, d_model values each, split over the TP ranks."""
    return 2.0 * tokens * config.d_model * bytes_per_value / tp


class PipelineTimer:
    """The step times of one virtual engine of a `pp`-stage replica (the `StepTimer` queries
    the engines make)."""

    def __init__(self, stage: StepTimer, pp: int, send_s: Callable[[int], float]):
        self.stage, self.pp, self.send_s = stage, pp, send_s

    def prefill_attention_s(self, chunk: int, context: int) -> float:
        return self.stage.prefill_attention_s(chunk, context)

    def decode_attention_s(self, sequences: int, mean_kv: float) -> float:
        return self.stage.decode_attention_s(sequences, mean_kv)

    def step_s(self, tokens: int, sequences: int, logits: int, attention_s: float,
               prefill: bool, attention_bound: str | None = None) -> float:
        return self.pp * self.stage.step_s(tokens, sequences, logits, attention_s, prefill,
                                           attention_bound) + (self.pp - 1) * self.send_s(tokens)

    def decode_steps_s(self, sequences: int, mean_kv: float, steps: int) -> np.ndarray:
        return self.pp * self.stage.decode_steps_s(sequences, mean_kv, steps) + \
            (self.pp - 1) * self.send_s(sequences)

    def decode_steps_list(self, sequences: int, mean_kv: float, steps: int) -> list[float]:
        return self.decode_steps_s(sequences, mean_kv, steps).tolist()
