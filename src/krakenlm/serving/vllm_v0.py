"""vLLM V0's schedulers (the default, and chunked prefill), on the same engine as V1.

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
max(max_model_len, 2048), `max_num_seqs` = 256; prefix caching off.

Chunked prefill (`--enable-chunked-prefill`; `Scheduler._schedule_chunked_prefill`, same file
at vllm-project/vllm@0054e1fa): "1. schedule as many decoding requests as possible. 2.
schedule chunked prefill requests that are not finished. 3. schedule swapped request. 4.
schedule new prefill requests." The running queue (decodes and prompts being chunked, in
order) goes first under the token budget, each min(tokens left, budget) tokens
(`_schedule_running` with `enable_chunking`, preempting from the end); swapped requests come
back only when nothing was preempted; then waiting prompts in arrival order, each allocating
the blocks of its whole prompt at admission (`_allocate_and_set_running`, with the watermark)
and taking min(prompt, budget) tokens this step. A step may thus mix decodes with prompt
chunks (run without CUDA graphs: the step-time oracle's prefill host model). Budget 512
tokens by default (`V0_CHUNKED_BUDGET`).

Multi-step scheduling (`--num-scheduler-steps N`, vLLM 0.6.0-0.6.1; read in a 0.6.1 copy,
AmberLJC/vllm-0.6.1@5597260f `vllm/engine/llm_engine.py`, `vllm/core/scheduler.py`,
`vllm/sequence.py`; its paths match the pull requests the v0.6.0 release lists, #7921 and
#8050): the scheduler runs once per round. A round of prompts is one step (a prefill's
lookahead is 0: `_get_num_lookahead_slots(is_prefill=True)`); a round of decodes is N steps,
each running decode reserving blocks for N tokens at the round's start (`_append_slots` with
N - 1 lookahead slots, preempting the last running request when they do not fit). Requests
that arrive during a round wait for its end. Tokens reach the client once per round ("For
multi-step, do not create outputs each iteration"), so the client's inter-token latency is one
gap per round. A prompt round's first tokens are made into outputs by the asynchronous output
processor while the next round runs (vLLM pull request #7049, released in 0.6.0 with the
multi-step rounds), and a prompt round waits for its own tokens: so they reach the client as
a decode round starts (when their prompt round ended) or, when the next round is a prompt
round too, at that round's end. A burst whose prompts take two prompt rounds thus gets every
first token at about the same time (LambdaLabs' 20-prompt files: TTFTs within 5 ms of each
other where the prompts took two 2,048-token rounds). A request that reaches its last token inside a round keeps its row of the batch
to the round's end (`_has_remaining_steps` reads step counters only), but it reaches the client
as soon as the host processes that step's output: `_process_model_outputs` hands a request
that finished in a step other than the round's last to the client at once ("For multi-step, do
not create outputs each iteration ... Immediately process request outputs here (if callback is
given)", the 0.6.1 copy above; `AsyncLLMEngine` gives the callback whenever the asynchronous
output processor is on). The host processes a step's output inside the round only if the GPU
has finished it when the host issues a later step (`maybe_pythonize` skips a step whose CUDA
event has not fired); the host runs ahead of the GPU, so otherwise the output waits for the
last step's `_final_process_outputs`, at the round's end. The replay issues the round's later
steps one `host.decode_step_s` apart from the round's GPU start (`_handed_out`): a request
whose last step the GPU finishes before the host issues the round's last step is handed out at
the next issue, else at the round's end. So short GPU steps (small models at TP >= 2) hand a
short request out early, long ones at the round's end. LambdaLabs' files show both
(`benchmarks/serve_multi_step_finish.py`: the TPOT p99 of the bursts with 3-token requests fits
the round's end at GPU steps of 7-12 ms and the early hand-out at 3-5 ms; their
Llama-3.1-8B-FP8 files, with per-request ITLs, show last chunks 2-7 ms before the round's
regular chunks where the GPU step is long). Host work: the round's first step
carries the scheduling and input preparation (the profile's per-step, per-sequence and TP
costs); the later steps only the GPU's time and graph launch (`advance_step` updates the
inputs on the GPU; output processing runs beside the forward pass) unless the host's work
before the sampler's launch is longer: the model runner launches the forward pass, then runs
the asynchronous output processor (`_process_model_outputs`: each sequence's token appended,
detokenised, its stop conditions checked) and pythonizes the previous step's output, and only
then launches the sampler (vLLM 0.6.0 `vllm/worker/multi_step_model_runner.py`
`execute_model` -> `_async_process_outputs`), and inside a round the host never waits for the
GPU (`wait_previous_step` is a stream wait), so a later step lasts at least the host's whole
cycle for it, `host.multi_step_host_seq_s` x the batch (measured with 0.6.0's own engine over a
stand-in GPU fast enough that the host sets the pace, launch to launch:
benchmarks/vllm_v0_frontend/multi_step_host.py); its sampler's GPU kernels
after the forward pass (`profile.sampler`: the greedy path of vLLM 0.6.0's `Sampler.forward`,
42 bytes per logit over the batch x the whole vocabulary in 6 kernels, `StepTimer.sampler_s`),
which the round's first step's measured host work holds (Vidur's SAMPLER_E2E is a wall time)
and nothing else charges in a later one; and, at TP > 1, the
broadcast of the model input before each of them: `MultiStepWorker._get_driver_input_and_broadcast`
(vLLM 0.6.0 `vllm/worker/multi_step_worker.py`) sends the whole input again at every step ("the
delta optimization for model_inputs" is a TODO), one NCCL broadcast per GPU tensor, whose
handles the next step's stream waits on (`host.multi_step_broadcast_tensors`,
`step_time.multi_step_broadcast_s`). Not with chunked prefill
(vLLM raises "Chunked prefill is not supported with multi-step") nor, here, swap preemption.

Swap preemption (`preemption_mode="swap"`, vLLM's `--preemption-mode swap`; vLLM uses it by
itself only for multi-sequence groups such as beam search, `Scheduler._preempt` @0dce2b29):
the victim's KV blocks are copied to CPU swap space (`_preempt_by_swap` -> `_swap_out`; the
engine aborts when the swap space is full, "Aborted due to the lack of CPU swap space", here a
one-line error) and it joins the swapped queue with its computed tokens kept. In
`_schedule_default`, prompts are admitted only while nothing is swapped; after the decodes,
when the step preempted nobody, swapped requests come back in order while `max_num_seqs` and
the blocks (with the watermark) allow (`_schedule_swapped`, `can_swap_in`) and decode in that
same step, without recompute. The worker copies the step's swap-in and swap-out blocks before
it runs the model (`Worker.execute_worker` -> `cache_swap_in` / `cache_swap_out`), so the
step is longer by blocks x bytes per block / the host link's bandwidth (each GPU copies its own
shard over its own link: `device.host_link_bandwidth_bytes_per_s`). The swap space holds
swap_space GiB per GPU / bytes per block blocks (`CacheEngine`, `swap_space` default 4 GiB).

The API server on the engine's event loop (`loop_request_s`, set by a client-side replay from
the profile's `frontend.engine_loop_request_s`): V0's OpenAI server up to 0.5.3 ran
`AsyncLLMEngine` in its own process, the engine loop a task of the server's asyncio event loop
(vllm-project/vllm@002c67f4 `vllm/engine/async_llm_engine.py`: `run_engine_loop` awaits
`engine_step`, which takes the requests handed over so far from `_request_tracker`, adds them
to the engine and then runs the model in an executor thread, `make_async`). The loop runs one
ready task at a time, so the server's per-request work (HTTP, request parsing, tokenisation,
`add_request`) is done one request at a time in arrival order, beside the GPU's step but not
beside the engine's own scheduling. From 0.5.4 the OpenAI front end runs in a process of its
own by default and the engine in an RPC server process (vllm-project/vllm pull request #6883;
issue #7653: "We introduced `multiprocessing` into the frontend in v0.5.4";
`--disable-frontend-multiprocessing` restores one process); each of the two processes still
handles requests one at a time on its event loop, the engine process beside its engine loop.
The model is the one-process form: request i is handed over at

    h_i = max(a_i, h_{i-1}) + loop_request_s + loop_token_s x prompt tokens_i

(a_i its arrival), and a step starts only once every request that has arrived is handed over:
the engine's task is queued behind the ready request handlers. A burst of N requests at once
thus waits N x loop_request_s for its first step, which then prefills as many as the budget
allows; at a low rate a request is handed over before the engine next looks. For the
two-process form it stands for the serial work of both loops in one constant (the front end's
loop also passes every token out, so a busy front end delays the first tokens it carries).
"""

from __future__ import annotations

import math

from .kv_cache import KVCacheError
from .vllm_v1 import Seq, V1Engine

WATERMARK = 0.01  # vLLM V0 BlockSpaceManager: blocks kept free when admitting a prompt
# the first vLLM release with multi-step scheduling (`--num-scheduler-steps`), which also has the
# asynchronous output processor (vLLM's v0.6.0 blog lists both, #7921 with #7049 and #8050):
# a multi-step replay charges the host constants of that version (`Host.at_version`)
MULTI_STEP_SINCE = "0.6.0"
# max_num_batched_tokens with --enable-chunked-prefill and no explicit value (vLLM 0.4-0.5
# `vllm/config.py` `SchedulerConfig.__init__`: "the best balance between ITL and TTFT on
# A100"; docs/source/models/performance.rst: "512 is the default max_num_batched_tokens for
# chunked prefill")
V0_CHUNKED_BUDGET = 512
# max_model_len above which V0 turns chunked prefill on when the flag is unset
# (replay.v0_chunks_by_default)
V0_LONG_CONTEXT = 32768


PREEMPTION_MODES = ("recompute", "swap")


class V0Engine(V1Engine):
    """One replica running vLLM V0's default scheduler."""

    swap_bytes_per_block = 0.0  # set by `enable_swap`
    host_link_bytes_per_s = 0.0
    cpu_blocks_free = 0
    swap_blocks = 0  # blocks copied over the host link in the current step
    swapped_blocks_total = 0  # blocks copied over the host link so far, in and out
    loop_request_s = 0.0  # the API server's work per request on the engine's loop (docstring)
    loop_token_s = 0.0  # and per prompt token
    loop_busy_until = -math.inf  # when the last request added is handed over
    held_first: tuple = ()  # multi-step: the last prompt round's first tokens, not yet out
    # multi-step: when a request that finishes inside a round reaches the client (`_handed_out`):
    # "host" (the model), "round_end" or "own_step" (what-ifs of
    # benchmarks/serve_multi_step_finish.py)
    finish_rule = "host"

    def enable_swap(self, bytes_per_block: float, host_link_bytes_per_s: float,
                    cpu_blocks: int) -> None:
        """Preempt by swapping to `cpu_blocks` host blocks over a link of that bandwidth."""
        self.swap_bytes_per_block = bytes_per_block
        self.host_link_bytes_per_s = host_link_bytes_per_s
        self.cpu_blocks_free = cpu_blocks
        self._held: dict[int, int] = {}  # id(seq) -> blocks it holds in host memory

    def add(self, seq: Seq) -> None:
        """Queue `seq`; with the API server on the engine's loop it is handed over at h_i
        (module docstring), which holds the next step back until then."""
        if self.loop_request_s or self.loop_token_s:
            self.loop_busy_until = max(seq.req.arrival_s, self.loop_busy_until) + \
                self.loop_request_s + self.loop_token_s * seq.req.prompt_tokens
        super().add(seq)

    def advance(self, until: float, stop_at_finish: bool = False) -> None:
        """`V1Engine.advance`, after the event loop has handed over every request added so far
        (module docstring): until then no step starts, so the clock waits for the hand-over,
        or to `until` when the hand-over ends later (the next arrival joins the queue first)."""
        busy = self.loop_busy_until
        if busy > self.now:
            if busy >= until:
                self.now = max(self.now, until)
                return
            self.now = busy
        super().advance(until, stop_at_finish)

    def _decode_window(self, until: float) -> bool:
        """`V1Engine._decode_window` (single steps of a decode window), which a multi-step
        engine does not use: its decode rounds are `_run_round`'s."""
        if self.opt.num_scheduler_steps > 1:
            return False
        return super()._decode_window(until)

    def _preempt(self, s: Seq) -> None:
        if self.opt.preemption_mode != "swap":
            super()._preempt(s)
            return
        per = self.pool.per_id
        blocks = s.private + per * len(s.shared)
        if blocks > self.cpu_blocks_free:
            raise KVCacheError(
                f"vLLM V0 aborts: request {s.req.id} needs {blocks} KV blocks of CPU "
                f"swap space and {self.cpu_blocks_free} are free; raise --swap-space (GiB per "
                "GPU) or use --preemption-mode recompute")
        self.pool.release(s.private, s.shared)
        s.private, s.shared = 0, []
        self.cpu_blocks_free -= blocks
        self._held[id(s)] = blocks
        self.swap_blocks += blocks
        s.preemptions += 1
        self.preemptions += 1
        self.swapped.append(s)

    def _swap_in(self, sched: list[tuple[Seq, int]], budget: int, watermark: int) -> None:
        """Bring swapped requests back, in order, each decoding one token this step."""
        pool, bs, swapped, running = self.pool, self.opt.block_size, self.swapped, self.running
        while swapped and budget >= 1 and len(running) < self.opt.max_num_seqs:
            s = swapped[0]
            held = self._held[id(s)]
            need = max(held, -(-(s.computed + 1) // bs))
            if pool.available - need < watermark or not pool.take(need):
                break
            swapped.popleft()
            del self._held[id(s)]
            self.cpu_blocks_free += held
            self.swap_blocks += held
            s.private, s.next_id = need, len(s.ids)
            running.append(s)
            sched.append((s, 1))
            budget -= 1

    def step(self) -> bool:
        self.swap_blocks = 0
        if self.opt.chunked_prefill:
            return self._step_chunked()
        opt, pool, bs = self.opt, self.pool, self.opt.block_size
        per = pool.per_id
        running, waiting = self.running, self.waiting
        sched: list[tuple[Seq, int]] = []
        budget = opt.max_num_batched_tokens
        watermark = int(WATERMARK * pool.total)
        while waiting and not self.swapped:
            s = waiting[0]
            tokens = s.prompt + s.generated
            need = -(-tokens // bs)
            if (tokens > budget or len(running) + 1 > opt.max_num_seqs
                    or pool.available - need < watermark):
                break
            pool.take(need)
            self._start(sched, tokens, need)
            budget -= tokens
        if sched and opt.num_scheduler_steps > 1:
            return self._prompt_round(sched)
        if not sched:
            before = self.preemptions
            ahead = opt.num_scheduler_steps  # the round's tokens: 1 + its lookahead slots
            i = 0
            while i < len(running):
                s = running[i]
                need = -(-(s.computed + ahead) // bs) - s.private - per * len(s.shared)
                if need > 0:
                    if not self._take_or_preempt(s, need)[0]:
                        break
                    s.private += need
                sched.append((s, 1))
                i += 1
            if self.swapped and self.preemptions == before:
                self._swap_in(sched, budget - len(sched), watermark)
            if ahead > 1 and sched:
                self._run_round(sched, ahead)
                return True
        return self._run(sched)

    def _prompt_round(self, sched: list[tuple[Seq, int]]) -> bool:
        """A multi-step engine's prompt round (one step; module docstring): its first tokens
        reach the client with the next round, and the previous prompt round's with this one's
        end (the asynchronous output processor makes a step's outputs while the next runs,
        and a prompt round waits for its own tokens)."""
        held = self.held_first
        self._run(sched)
        for s in held:
            s.first_token_s = s.last_token_s = self.now
            if s.generated >= s.output:
                s.finish_s = self.now
        self.held_first = tuple(s for s, _ in sched if s.generated == 1)
        return True

    def _run_round(self, sched: list[tuple[Seq, int]], steps: int) -> None:
        """A multi-step round of decodes (module docstring): `steps` steps of the whole batch,
        the first with the host's scheduling and input preparation, the others without; every
        request's tokens reach the client at the round's end, one inter-token gap per round,
        but a finishing request's last ones when `_handed_out` says."""
        timer, pool, itl = self.timer, self.pool, self.itl_s
        self.held_first = ()  # out as this round starts, when their prompt round ended
        n = len(sched)
        mean_kv = sum(s.computed for s, _ in sched) / n + 1  # the KV each decode reads, step 1
        step_ends = []
        broadcast_s = timer.multi_step_broadcast_s  # before every later step (docstring)
        # a later step lasts at least the host's work before its sampler's launch (docstring)
        host_s = timer.profile.host.multi_step_host_seq_s * n
        # and its sampler's GPU kernels, which no host time charged in it holds (docstring)
        sampler_s = timer.sampler_s(n)
        for k in range(steps):
            attention = timer.decode_attention_s(n, mean_kv + k)
            step = timer.step_s(n, n, n, attention, False, "memory", host=k == 0)
            self.now += max(step + broadcast_s + sampler_s, host_s) if k else step
            if k == 0:  # when the GPU started the round: its first step less the GPU's time
                gpu_start = self.now - timer.step_s(n, n, n, attention, False, "memory",
                                                    host=False)
            step_ends.append(self.now)
            self.steps += 1
            self.timeline.step(self.now, pool.total - pool.free - pool.per_id * len(pool.lru),
                               len(self.running), len(self.waiting), self.preemptions, n)
        end = self.now
        finished = False
        for s, _ in sched:
            tokens = min(steps, s.output - s.generated)
            s.computed += tokens
            s.generated += tokens
            out = end
            if s.generated >= s.output:
                out = self._handed_out(step_ends, tokens - 1, gpu_start,
                                       timer.profile.host.decode_step_s)
                s.finish_s = out
                pool.release(s.private, s.shared)
                s.private, s.shared = 0, []
                finished = True
            itl.append(out - s.last_token_s)
            s.last_token_s = out
        if finished:
            self.running = [s for s in self.running if s.finish_s != s.finish_s]

    def _handed_out(self, step_ends: list[float], last: int, gpu_start: float,
                    issue_s: float) -> float:
        """When a request whose last token is step `last` of a round (step_ends: the GPU's
        step ends) reaches the client (module docstring, "Multi-step"). The host issues the
        round's later steps one `issue_s` (the profile's `host.decode_step_s`) apart from the
        round's GPU start without waiting for the GPU, and at each it processes the outputs of
        the steps the GPU has finished; a request that finished in one of them is handed to
        the client at once. If
        the host has issued the last step before the GPU finished step `last`, that step is
        processed, and the request handed out, when the round ends."""
        end = step_ends[-1]
        if self.finish_rule == "round_end":
            return end
        if self.finish_rule == "own_step":
            return step_ends[last]
        done = step_ends[last]
        for k in range(last + 1, len(step_ends)):
            if gpu_start + k * issue_s >= done:
                return min(gpu_start + k * issue_s, end)
        return end

    def _step_chunked(self) -> bool:
        """One step of `_schedule_chunked_prefill` (module docstring, "Chunked prefill"):
        the running requests first, in order, each with min(tokens left, budget) tokens (a
        decode one, a prompt its next chunk; `V1Engine._schedule_running`, preempting the last
        running request when a decode's block does not fit); then, when nothing was
        preempted, swapped requests; then waiting ones in arrival order, each allocating the
        blocks of its whole prompt at admission (with the watermark) and taking min(prompt,
        budget) tokens now. Requests preempted by recompute in this step rejoin the waiting
        queue at its front only after it (`self.waiting.extendleft(running_scheduled.preempted)`
        follows `_schedule_prefills`), so they are not admitted again in the same step."""
        opt, pool, bs = self.opt, self.pool, self.opt.block_size
        waiting, running = self.waiting, self.running
        sched: list[tuple[Seq, int]] = []
        before = self.preemptions
        budget, preempted = self._schedule_running(sched)
        victims = [waiting.popleft() for _ in range(self.preemptions - before)] \
            if opt.preemption_mode != "swap" else []
        watermark = int(WATERMARK * pool.total)
        if self.swapped and not preempted:
            scheduled = len(sched)
            self._swap_in(sched, budget, watermark)
            budget -= len(sched) - scheduled
        while waiting and budget > 0 and len(running) < opt.max_num_seqs:
            s = waiting[0]
            tokens = s.prompt + s.generated
            need = -(-tokens // bs)
            if pool.available - need < watermark:
                break
            pool.take(need)
            self._start(sched, min(tokens, budget), need)
            budget -= min(tokens, budget)
        waiting.extendleft(reversed(victims))
        return self._run(sched)

    def _run(self, sched: list[tuple[Seq, int]]) -> bool:
        """Copy the step's swapped blocks over the host link, then run the model on `sched`;
        False when there was nothing to do."""
        if self.swap_blocks:  # the worker copies the step's blocks before the model runs
            self.swapped_blocks_total += self.swap_blocks
            self.now += self.swap_blocks * self.swap_bytes_per_block / self.host_link_bytes_per_s
        if not sched:
            return self.swap_blocks > 0
        self._execute(sched)
        return True
