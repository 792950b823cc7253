"""SGLang's scheduler (`--software sglang`), step by step, on the simulator's step times.

Read at sgl-project/sglang@00550cd1 `python/sglang/srt/managers/schedule_policy.py`
(`SchedulePolicy.calc_priority`, `PrefillAdder.add_one_req`, `add_chunked_req`,
`_get_running_request_total_token_offset`; `CLIP_MAX_NEW_TOKENS` 4096) and the constants of
`python/sglang/srt/environ.py` @21ff4b08 (`SGLANG_INIT_NEW_TOKEN_RATIO` 0.7,
`SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR` 0.14, `SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS` 600,
`SGLANG_RETRACT_DECODE_STEPS` 20). What one step does:

1. A prefill batch is formed first (prefill and decode batches are separate: mixed chunks are
   off by default). The request whose prompt was cut by the previous prefill batch continues
   first. Then the waiting queue, ordered by longest prefix match against the radix cache
   (`--schedule-policy lpm`, the default; stable; first come first served when more than 128
   wait or with `fcfs`): a request is admitted while `max_running_requests`
   (`--max-num-seqs`) allows, only when its extend tokens (prompt not cached) plus
   min(output left, 4096) fit in the free and evictable KV left after reserving, for every
   running request, `new_token_ratio` x min(its output left, 4096) tokens; a prompt longer
   than what is left of `chunked_prefill_size` (`--max-num-batched-tokens`) is cut there (it
   reserves no output then) and ends the batch.
2. Only when no prefill batch forms: every running request decodes one token. When their
   blocks do not fit, requests are retracted (recompute; fewest output tokens first, the
   longest prompt among them) until the rest can decode `SGLANG_RETRACT_DECODE_STEPS` more
   tokens, and `new_token_ratio` goes back to its initial value; every decode step lowers it
   by (0.7 - 0.7 x 0.14) / 600, to at least 0.7 x 0.14.

The radix cache is replayed with the trace's prefix-block hashes on the V1 engine's block pool
(longest cached run of a request's blocks, least recently used evicted first): the radix tree
of token ids reduces to that chain when requests are described by block hashes. Modelled
choices: retracted requests go back to the front of the waiting queue; the page size is
`--block-size` (SGLang's default is 1 token; 16 here unless given, which rounds a request's
KV up to 16 tokens); `max_prefill_tokens` 16384 caps the prompt tokens of a prefill batch.

`max_running_requests` (`--max-num-seqs`) is by default what SGLang sizes from its KV pool
(`max_running_requests`, below): min(KV tokens // 2, the request-slot pool), the slot pool
holding min(max(KV tokens / context length x 512, 2048), 4096) requests
(sgl-project/sglang@0045f98e `python/sglang/srt/managers/tp_worker.py`,
`TpModelWorker.__init__`; the slot pool's size in `init_memory`,
sgl-project/sglang@001ccef0 `python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py`).
"""

from __future__ import annotations

from collections import deque

from .vllm_v1 import Seq, V1Engine

CLIP_MAX_NEW_TOKENS = 4096
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
RETRACT_DECODE_STEPS = 20
LPM_MAX_WAITING = 128  # beyond: first come first served (`_determine_active_policy`)
MAX_PREFILL_TOKENS = 16384
POLICIES = ("lpm", "fcfs")
POOL_SIZED = 0  # `max_num_seqs` of SGLang's defaults: sized from the KV pool (`max_running_requests`)
REQUEST_SLOTS_MIN, REQUEST_SLOTS_MAX, SLOTS_PER_CONTEXT = 2048, 4096, 512


def max_running_requests(kv_tokens: int, context_len: int) -> int:
    """SGLang's default `max_running_requests` for a KV pool of `kv_tokens` tokens: the
    request-slot pool (KV tokens / context length x 512, clamped to 2048-4096), and at most
    half the KV tokens."""
    slots = min(max(int(kv_tokens / context_len * SLOTS_PER_CONTEXT), REQUEST_SLOTS_MIN),
                REQUEST_SLOTS_MAX)
    return max(1, min(kv_tokens // 2, slots))


def _decoding(s: Seq) -> bool:
    return s.generated > 0 and s.computed == s.prompt + s.generated - 1


class SGLangEngine(V1Engine):
    """One replica running SGLang's scheduler."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.chunked: Seq | None = None  # the request whose prompt a prefill batch cut

    def _decay(self, steps: int) -> None:
        self.new_token_ratio = max(MIN_NEW_TOKEN_RATIO,
                                   self.new_token_ratio - steps * NEW_TOKEN_RATIO_DECAY)

    def _decode_window(self, until: float) -> bool:
        before = self.steps
        if super()._decode_window(until):
            self._decay(self.steps - before)
            return True
        return False

    def _held(self, s: Seq) -> int:
        return s.private + self.pool.per_id * len(s.shared)

    def step(self) -> bool:
        sched = self._prefill_batch() if (self.waiting or self.chunked) else []
        if sched:
            self._execute(sched)
            return True
        return self._decode_batch()

    # ---------------------------------------------------------------------- prefill batch
    def _order_waiting(self) -> None:
        pool = self.pool
        if self.opt.schedule_policy != "lpm" or not pool.per_id or \
                len(self.waiting) > LPM_MAX_WAITING:
            return
        self.waiting = deque(sorted(
            self.waiting, key=lambda s: -pool.hit_ids(s.ids, s.prompt + s.generated)))

    def _prefill_batch(self) -> list[tuple[Seq, int]]:
        opt, pool, bs = self.opt, self.pool, self.opt.block_size
        per = pool.per_id
        rem_chunk, rem_input = opt.max_num_batched_tokens, MAX_PREFILL_TOKENS
        ratio = self.new_token_ratio
        reserved = sum(min(s.output - s.generated, CLIP_MAX_NEW_TOKENS) * ratio
                       for s in self.running if s is not self.chunked)
        rem_total = pool.available * bs - reserved
        sched: list[tuple[Seq, int]] = []
        s = self.chunked
        if s is not None:
            left = s.prompt + s.generated - s.computed
            new = min(left, rem_chunk)
            need = -(-(s.computed + new) // bs) - self._held(s)
            if need > 0 and not pool.take(need):
                return []
            s.private += max(need, 0)
            sched.append((s, new))
            rem_chunk -= new
            rem_input -= new
            rem_total -= new + (min(s.output - s.generated, CLIP_MAX_NEW_TOKENS)
                                if new == left else 0)
            if new < left:
                return sched
            self.chunked = None
        self._order_waiting()
        waiting, running = self.waiting, self.running
        while waiting and rem_chunk > 0 and rem_input > 0 and len(running) < opt.max_num_seqs:
            s = waiting[0]
            tokens = s.prompt + s.generated
            hits = pool.hit_ids(s.ids, tokens) if per else 0
            computed = hits * pool.hash_tokens
            extend = tokens - computed
            max_new = min(s.output - s.generated, CLIP_MAX_NEW_TOKENS)
            if extend + max_new > rem_total:
                break
            new = min(extend, rem_chunk)
            hit_ids = list(s.ids[:hits])
            need = max(-(-(computed + new) // bs) - per * hits, 0)
            if not pool.admit(hit_ids, need):
                break
            self._start(sched, new, need, computed, hit_ids)
            rem_chunk -= new
            rem_input -= new
            if new < extend:
                rem_total -= new
                self.chunked = s
                break
            rem_total -= extend + max_new
        return sched

    # ----------------------------------------------------------------------- decode batch
    def _decode_need(self, batch: list[Seq], tokens: int) -> int:
        bs = self.opt.block_size
        return sum(max(0, -(-(s.computed + tokens) // bs) - self._held(s)) for s in batch)

    def _decode_batch(self) -> bool:
        batch = [s for s in self.running if _decoding(s)]
        if not batch:
            return False
        pool = self.pool
        if self._decode_need(batch, 1) > pool.available:
            # the retracted first: fewest output tokens, then the longest prompt
            order = sorted(batch, key=lambda s: (s.generated, -s.prompt))
            while len(batch) > 1 and \
                    self._decode_need(batch, RETRACT_DECODE_STEPS) > pool.available:
                victim = order.pop(0)
                batch.remove(victim)
                self.running.remove(victim)
                self._preempt(victim)
            self.new_token_ratio = INIT_NEW_TOKEN_RATIO
            if self._decode_need(batch, 1) > pool.available:
                return False
        bs = self.opt.block_size
        for s in batch:
            need = -(-(s.computed + 1) // bs) - self._held(s)
            if need > 0:
                pool.take(need)
                s.private += need
        self._execute([(s, 1) for s in batch])
        self._decay(1)
        return True
