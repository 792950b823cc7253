"""TensorRT-LLM's in-flight batching, on the same engine as vLLM V1.

Each iteration (NVIDIA/TensorRT-LLM, C++ batch manager):

1. Capacity (`cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp` @cf6abc45):
   * GUARANTEED_NO_EVICT (the default, `SchedulerConfig` in `tensorrt_llm/llmapi/llm_args.py`):
     every request in progress stays scheduled, with the blocks it needs to run to completion
     reserved; a new request is admitted, in arrival order, only when the blocks of its whole
     prompt plus its output fit beside those reservations, and the first that does not stops
     the pass. Nothing is ever evicted. Modelled by allocating a request's blocks for prompt +
     output when it is admitted (so the KV use reported includes the reservations).
   * MAX_UTILIZATION: requests are admitted for the blocks they need now; when a request in
     progress cannot get its next block, the most recently scheduled request is paused (its KV
     freed, recomputed later), as vLLM V1 preempts.
2. Micro-batch (`microBatchScheduler.cpp` @b8b7b782, `MicroBatchScheduler::operator()`): the
   scheduled requests in order under `max_num_tokens`: a generation request takes one token;
   without chunked context a context request takes its whole prompt, and the first that does
   not fit ends the batch; with chunked context (`enable_chunked_prefill`) the contexts share
   what is left, first come first served, in multiples of the block size except a last chunk.
   At most `max_batch_size` requests.

Defaults (`tensorrt_llm/llmapi/llm_args.py` @fcd3f316): max_num_tokens 8192, max_batch_size
2048, tokens_per_block 32, free_gpu_memory_fraction 0.9 (of the memory left after the model),
enable_chunked_prefill off, GUARANTEED_NO_EVICT.

KV block reuse (`KvCacheConfig.enable_block_reuse`, `tensorrt_llm/llmapi/llm_args.py`
@fcd3f316, where it defaults to True; here `--prefix-caching`, off unless given, so replays
made before it was modelled keep their numbers): when a request is added its prompt's leading
blocks already in the cache are reused (`BlockManager::addSequence` -> `loadOrAllocateBlocks`,
`cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp` @b35ac1b6), at most prompt - 1 tokens
(`LlmRequest::setPrepopulatedPromptLen` checks prepopulated < prompt length,
`cpp/include/tensorrt_llm/batch_manager/llmRequest.h` @d879430b), and its context starts
after them; a finished request's blocks are stored for reuse (`storeBlocks` in
`releaseBlocks`) and evicted least recently used. The cache is `kv_cache.BlockPool`, the same
as vLLM's prefix cache, keyed by the trace's prefix-block ids; reused blocks are not counted
again in the GUARANTEED_NO_EVICT reservation.
"""

from __future__ import annotations

from .vllm_v1 import Seq, V1Engine

POLICIES = ("guaranteed-no-evict", "max-utilization")


class TRTEngine(V1Engine):
    """One replica running TensorRT-LLM's capacity and micro-batch schedulers."""

    def _take_or_pause(self, s: Seq, need: int) -> bool:
        """MAX_UTILIZATION: get `need` blocks for `s`, pausing the last running requests."""
        while not self.pool.take(need):
            victim = self.running.pop()
            self._preempt(victim)
            if victim is s:
                return False
        return True

    def step(self) -> bool:
        opt, pool, bs = self.opt, self.pool, self.opt.block_size
        per = pool.per_id
        no_evict = opt.capacity_policy == "guaranteed-no-evict"
        chunked = opt.chunked_prefill
        running, waiting = self.running, self.waiting
        budget = opt.max_num_batched_tokens
        sched: list[tuple[Seq, int]] = []
        i = 0
        while i < len(running) and len(sched) < opt.max_num_seqs:
            s = running[i]
            remaining = s.prompt + s.generated - s.computed
            take = remaining if remaining == 1 or not chunked else _chunk(remaining, budget, bs)
            if take <= 0 or take > budget:
                break
            if not no_evict:
                need = -(-(s.computed + take) // bs) - s.private - per * len(s.shared)
                if need > 0:
                    if not self._take_or_pause(s, need):
                        break
                    s.private += need
            sched.append((s, take))
            budget -= take
            i += 1
        while waiting and budget > 0 and len(running) < opt.max_num_seqs:
            s = waiting[0]
            tokens = s.prompt + s.generated
            hits = pool.hit_ids(s.ids, tokens) if per else 0  # KV block reuse
            computed = hits * pool.hash_tokens
            rest = tokens - computed
            take = rest if not chunked else _chunk(rest, budget, bs)
            if take <= 0 or take > budget:
                break
            end = s.prompt + s.output if no_evict else computed + take
            need = max(-(-end // bs) - per * hits, 0)
            hit_ids = list(s.ids[:hits])
            if not pool.admit(hit_ids, need):
                break
            self._start(sched, take, need, computed, hit_ids if hits else None)
            budget -= take
        if not sched:
            return False
        self._execute(sched)
        return True


def _chunk(remaining: int, budget: int, unit: int) -> int:
    """A context's chunk: all of it if it fits, else what fits in whole blocks."""
    return remaining if remaining <= budget else budget // unit * unit
