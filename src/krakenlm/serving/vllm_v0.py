"""vLLM V0's default scheduler (no chunked prefill), on the same engine as V1.

What one step does (vllm-project/vllm@0dce2b29 `vllm/core/scheduler.py`,
`Scheduler._schedule_default` and `_schedule_prefills`; `_preempt` picks recompute for a
single-sequence request):

1. Prefills first: waiting requests in arrival order, each with its whole prompt (plus any
   output tokens to recompute after a preemption), while the token budget
   (`max_num_batched_tokens`) and `max_num_seqs` (running included) allow it and the block
   manager can allocate its blocks keeping a watermark of 1 % of the blocks free
   (`BlockSpaceManager`, `watermark=0.01`); the first that does not fit stops the pass.
2. Only when no prefill was scheduled: every running request decodes one token; when its new
   block does not fit, the last running request is preempted (recompute: blocks freed, back
   to the front of the waiting queue).

So a V0 step is all prefills or all decodes: a new prompt stalls the decodes of every running
request for its whole prefill (the inter-token spikes chunked prefill removes). Defaults
(vllm/config.py `SchedulerConfig`, without chunked prefill): `max_num_batched_tokens` =
max(max_model_len, 2048), `max_num_seqs` = 256; prefix caching off. Swap preemption is not
modelled.
"""

from __future__ import annotations

from .vllm_v1 import Seq, V1Engine

WATERMARK = 0.01  # vLLM V0 BlockSpaceManager: blocks kept free when admitting a prompt


class V0Engine(V1Engine):
    """One replica running vLLM V0's default scheduler."""

    def step(self) -> bool:
        opt, pool, bs = self.opt, self.pool, self.opt.block_size
        per = pool.per_id
        running, waiting = self.running, self.waiting
        sched: list[tuple[Seq, int]] = []
        budget = opt.max_num_batched_tokens
        watermark = int(WATERMARK * pool.total)
        while waiting:
            s = waiting[0]
            tokens = s.prompt + s.generated
            need = -(-tokens // bs)
            if (tokens > budget or len(running) + 1 > opt.max_num_seqs
                    or pool.available - need < watermark):
                break
            pool.take(need)
            waiting.popleft()
            running.append(s)
            s.private = need
            if s.first_scheduled_s != s.first_scheduled_s:
                s.first_scheduled_s = self.now
            sched.append((s, tokens))
            budget -= tokens
        if not sched:
            i = 0
            while i < len(running):
                s = running[i]
                need = -(-(s.computed + 1) // bs) - s.private - per * len(s.shared)
                if need > 0:
                    if not self._take_or_preempt(s, need)[0]:
                        break
                    s.private += need
                sched.append((s, 1))
                i += 1
        if not sched:
            return False
        self._execute(sched)
        return True
