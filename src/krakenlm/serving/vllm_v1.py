"""vLLM V1's scheduler, step by step, on the simulator's step times.

What one step does (vllm-project/vllm@b4622cf9 `vllm/v1/core/sched/scheduler.py`,
`Scheduler.schedule`; the V1 engine always chunks prefills and enables prefix caching by
default, `vllm/engine/arg_utils.py`):

1. Running requests first, in order, under a token budget `max_num_batched_tokens`: each
   gets min(tokens it has not computed, budget) tokens, so a decode gets one token and a
   prompt is chunked. Its new KV blocks come from `allocate_slots`; when they do not fit, the
   *last* running request is preempted (`self.running.pop()`), its blocks freed, its computed
   tokens reset to 0 and it goes back to the front of the waiting queue (recompute), until the
   request fits or is itself the one preempted (then the pass stops).
2. Only when nothing was preempted in this step: waiting requests in arrival order, while the
   budget lasts and fewer than `max_num_seqs` run. A new request first takes its prefix-cache
   hit (`get_computed_blocks`), then min(rest, budget) tokens; when its blocks do not fit it
   waits (the pass stops).
3. The model runs the step; every request whose computed tokens reach its prompt + output so
   far samples one token (the first ends its time to first token); a request that has all its
   output tokens finishes and frees its blocks.

The step's time is `StepTimer.step_s` for its tokens, sequences, sampled sequences and
attention (prefill chunks with their context, decodes at their mean KV length). Defaults are
vLLM's for the OpenAI server (`EngineArgs.get_batch_defaults`, vllm-project/vllm@99d7eb5d
`vllm/engine/arg_utils.py`): 8192 batched tokens and 1024 sequences on devices with at least
70 GiB that are not A100s, 2048 and 256 otherwise; block size 16; gpu_memory_utilization 0.9.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from .kv_cache import BlockPool
from .packing import packed_array
from .step_time import StepTimer
from .traces import Request

GIB = 2**30
WINDOW_MAX_STEPS = 4096  # the longest decode window run at once
RECORD = 7  # ints per record of a `Timeline`'s log


@dataclass(frozen=True)
class V1Options:
    """The engine knobs the schedulers read (vLLM's names; TensorRT-LLM's max_num_tokens,
    max_batch_size, tokens_per_block and free_gpu_memory_fraction map onto the first four).
    `chunked_prefill` is read by the TensorRT-LLM and vLLM V0 engines (V1 and SGLang always
    chunk; the engines' defaults set it, `replay.default_options`), `capacity_policy` by
    TensorRT-LLM's only,
    `preemption_mode` and `swap_space_gib` by vLLM V0's,
    `schedule_policy` by SGLang's (whose chunked_prefill_size, max_running_requests,
    mem_fraction_static and page_size are the first four)."""
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True
    chunked_prefill: bool = True
    capacity_policy: str = "guaranteed-no-evict"
    schedule_policy: str = "lpm"  # SGLang only: lpm or fcfs
    preemption_mode: str = "recompute"  # vLLM V0 only: recompute or swap
    swap_space_gib: float = 4.0  # vLLM V0 only: CPU swap space per GPU (vLLM's `swap_space`)
    # vLLM V0 only (0.6.0+): forward steps per scheduler call (`--num-scheduler-steps`,
    # multi-step scheduling: a decode batch runs that many steps before the next schedule)
    num_scheduler_steps: int = 1
    # vLLM V1 only: asynchronous scheduling (`--async-scheduling`, the default from 0.14):
    # a step's batch is fixed as the step before it starts (`V1Engine.hold_for_schedule`)
    async_scheduling: bool = False
    # the largest CUDA graph the engine captures (vLLM V1 `--max-cudagraph-capture-size`,
    # SGLang `--cuda-graph-max-bs`); 0: no CUDA graphs (vLLM `--enforce-eager`, SGLang
    # `--disable-cuda-graph`); None: the engine's default (replay.cuda_graph_session)
    cuda_graph_max: int | None = None

    @staticmethod
    def defaults_for(device_name: str, memory_bytes: float) -> V1Options:
        """vLLM's OpenAI-server defaults for a device (`EngineArgs.get_batch_defaults`),
        with asynchronous scheduling, on by default since vLLM 0.14 (its release notes:
        "Async scheduling is now enabled by default", vllm-project/vllm#27614)."""
        if memory_bytes >= 70 * GIB and "a100" not in device_name.lower():
            return V1Options(8192, 1024, async_scheduling=True)
        return V1Options(2048, 256, async_scheduling=True)


class Seq:
    """A request inside the engine."""
    __slots__ = (
        "cached_tokens",
        "computed",
        "finish_s",
        "first_scheduled_s",
        "first_token_s",
        "generated",
        "ids",
        "last_token_s",
        "next_id",
        "output",
        "phase",
        "preemptions",
        "private",
        "prompt",
        "replica",
        "req",
        "shared",
        "since_tick",
    )

    def __init__(self, req: Request, replica: int = 0):
        self.req = req
        self.prompt, self.output, self.ids = req.prompt_tokens, req.output_tokens, req.hash_ids
        self.computed = self.generated = self.private = self.next_id = 0
        self.shared: list[int] = []
        self.first_scheduled_s = self.first_token_s = self.last_token_s = self.finish_s = math.nan
        self.preemptions = self.cached_tokens = 0
        self.replica = replica
        self.since_tick = self.phase = 0  # v1_counted.CountedV1Engine's decode counters


class Timeline:
    """Per step: end time, KV blocks in use (logged as a count of the pool's `total_blocks`,
    read as the fraction), running and waiting requests, preemptions so far, tokens in the
    step. The last four are logged once per step or per decode window (whose steps share them,
    but for the running requests after its last step) and expanded to one value per step when
    read."""

    def __init__(self, total_blocks: int = 1):
        # step end times as Python floats in a list (a window extends it with its ends, where
        # an array parses every float), read by `packed_array`
        self.t_s: list[float] = []
        # KV blocks in use after each step less its record's base (the seventh int of the
        # record below), as ints in a list: a decode window extends it with its running block
        # counts (`accumulate` consumed in C), where a fraction per step would be a division
        # and an array the parsing of every float; `kv_used` adds the bases back and divides
        # once when read (int64 sums are exact, and int / int is the double quotient of two
        # exact doubles in Python as in numpy, so the same floats as dividing as they are
        # logged). A counted decode window logs its blocks as its level before its first
        # step (the base) and the blocks it took since (mostly below 256: ints CPython keeps
        # once, where block counts in the thousands are each a new int object)
        self.kv_blocks: list[int] = []
        self.total_blocks = total_blocks
        self._kv_read: np.ndarray = np.zeros(0)
        # per step or window, seven ints: steps, running, running after the last step,
        # waiting, preemptions, tokens per step, the base of its KV blocks (a flat list:
        # appending a record is one list extend, where an array converts each value; read as
        # an int array, kept until it grows)
        self._log: list[int] = []
        self._read: np.ndarray = np.zeros((0, RECORD), dtype=np.int64)

    def step(self, t_s: float, kv_blocks: int, running: int, waiting: int, preemptions: int,
             tokens: int) -> None:
        self.t_s.append(t_s)
        self.kv_blocks.append(kv_blocks)
        self._log += (1, running, running, waiting, preemptions, tokens, 0)

    def window(self, ends: list[float], kv_blocks: list[int], running: int,
               running_after: int, preemptions: int) -> None:
        """A decode window: `running` sequences decode one token each per step, none wait."""
        self.t_s += ends
        self.kv_blocks += kv_blocks
        self._log += (len(ends), running, running_after, 0, preemptions, running, 0)

    @property
    def kv_used(self) -> np.ndarray:
        """The fraction of the KV blocks in use after each step (kept until the log grows)."""
        blocks = self.kv_blocks
        if len(self._kv_read) != len(blocks):
            log = self._records()
            in_use = packed_array(blocks, np.int64)
            in_use += np.repeat(log[:, 6], log[:, 0])
            self._kv_read = in_use / self.total_blocks
        return self._kv_read

    def _records(self) -> np.ndarray:
        """The log as one row of `RECORD` ints per record (read by `packed_array`: the same
        values, without numpy's type discovery over the list)."""
        log = self._log
        if len(self._read) * RECORD != len(log):
            self._read = packed_array(log, np.int64).reshape(-1, RECORD)
        return self._read

    def _column(self, i: int) -> np.ndarray:
        log = self._records()
        counts = log[:, 0]
        values = np.repeat(log[:, i].astype(float), counts)
        if i == 1:  # the running requests after each record's last step
            values[np.cumsum(counts) - 1] = log[:, 2]
        return values

    def values_at(self, i: int, steps: np.ndarray) -> np.ndarray:
        """`_column(i)[steps]` without expanding the column to every step: step s is in the
        first record whose steps end past it (a search of the records' cumulative step
        counts), and takes that record's value (for the running requests, the value after
        the record's last step at its last step). A log with an empty record, whose last
        step the expansion would assign to the record before, is expanded instead."""
        log = self._records()
        counts = log[:, 0]
        if not counts.all():
            return self._column(i)[steps]
        ends = np.cumsum(counts)
        record = np.searchsorted(ends, steps, side="right")
        values = log[record, i].astype(float)
        if i == 1:
            last = steps == ends[record] - 1
            values[last] = log[record[last], 2]
        return values

    def window_weights(self) -> np.ndarray:
        """Per inter-token gap inside a decode window (a window of k steps has k - 1, in
        window order), the tokens it stands for: the window's running requests."""
        log = self._records()
        return np.repeat(log[:, 1].astype(float), np.maximum(log[:, 0] - 1, 0))

    @property
    def running(self) -> np.ndarray:
        return self._column(1)

    @property
    def waiting(self) -> np.ndarray:
        return self._column(3)

    @property
    def preemptions(self) -> np.ndarray:
        return self._column(4)

    @property
    def tokens(self) -> np.ndarray:
        return self._column(5)


def _first_start_at(ends: list[float], durations: list[float], until: float) -> int:
    """The first step whose start (end - duration) is at or after `until`, len(ends) if none:
    none before the first end at or after `until` (a step starts at most at its end)."""
    i = bisect.bisect_left(ends, until)
    n = len(ends)
    while i < n and ends[i] - durations[i] < until:
        i += 1
    return i


class V1Engine:
    """One replica running vLLM V1's scheduler."""

    def __init__(self, timer: StepTimer, options: V1Options, blocks: int,
                 hash_block_tokens: int = 0, index: int = 0):
        self.timer, self.opt, self.index = timer, options, index
        self.pool = BlockPool(blocks, options.block_size, hash_block_tokens,
                              options.enable_prefix_caching)
        self.now = 0.0
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.swapped: deque[Seq] = deque()  # vLLM V0 swap preemption only (vllm_v0.py)
        self.preemptions = 0
        # inter-token gaps, one per token, and the gaps of decode windows, each for
        # `itl_weight` tokens: lists of Python floats, read by `packed_array`
        self.itl_s: list[float] = []
        self.itl_window_s: list[float] = []
        self.timeline = Timeline(self.pool.total)
        self.steps = 0
        self._step_guess = 0.0  # a recent decode step's length (`_window_steps`)

    @property
    def itl_weight(self) -> np.ndarray:
        """The tokens each of `itl_window_s`'s gaps stands for (read from the timeline's
        window records: a window of k steps of d requests logs k - 1 gaps of d tokens)."""
        return self.timeline.window_weights()

    def itl_runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every inter-token gap as runs (value, tokens each stands for, count of equal
        entries), in log order: the gaps logged one per token (`itl_s`: one token, one
        entry each), then the decode windows' (`itl_window_s`, `itl_weight`). A subclass
        that logs equal gaps as one run adds its runs after `itl_s`'s."""
        singles = packed_array(self.itl_s, float)
        windows = packed_array(self.itl_window_s, float)
        return (np.concatenate([singles, windows]),
                np.concatenate([np.ones(len(singles)), self.itl_weight]),
                np.ones(len(singles) + len(windows), dtype=np.intp))

    @property
    def outstanding(self) -> int:
        return len(self.running) + len(self.waiting) + len(self.swapped)

    def add(self, seq: Seq) -> None:
        self.waiting.append(seq)

    def advance(self, until: float, stop_at_finish: bool = False) -> None:
        """Run steps while the engine has work and its clock is before `until`; an idle engine
        waits until then. `stop_at_finish`: return after the first step in which a request
        finished (a decode window ends at its first finish), the clock at that step's end:
        a closed-loop client sends its next request then (`replay.serve`'s
        `max_concurrency`)."""
        while self.now < until:
            left = self.outstanding if stop_at_finish else 0
            if self.running and not (self.waiting or self.swapped) and \
                    self._decode_window(until):
                if stop_at_finish and self.outstanding < left:
                    return
                continue
            if not (self.running or self.waiting or self.swapped) or not self.step():
                self.now = max(self.now, until) if math.isfinite(until) else self.now
                return
            if stop_at_finish and self.outstanding < left:
                return

    def hold_for_schedule(self, arrival_s: float) -> None:
        """With asynchronous scheduling (`opt.async_scheduling`), run the steps whose batches
        were fixed before a request arriving at `arrival_s`: the engine core schedules step
        j + 1 as soon as step j - 1's output is back, that is as step j starts, so a request
        that arrives while step j runs, or at its start, first joins step j + 2
        (vllm-project/vllm pull request #19970, "Implement Async Scheduling"; the engine
        core's `step_with_batch_queue` keeps two batches in flight). So steps run until one
        has started after the arrival (the timeline's second-to-last end is the last step's
        start while steps run back to back). An idle engine starts at once with the first
        request; a request of the same instant is handed over after it (the API server
        passes requests on one at a time), so it waits for the step after that first step's
        successor, as a burst does on a real server (scicom_vllm's closed loops: a burst of
        ten 4,095-token prompts on an idle server gets a step of one prompt, a decode-only
        step, then the other nine, docs/serving.md). Without asynchronous scheduling (or
        with nothing to run) this does nothing."""
        if not self.opt.async_scheduling:
            return
        ends = self.timeline.t_s
        while self.outstanding and not (len(ends) >= 2 and ends[-2] > arrival_s):
            before = (self.now, len(ends))
            self.advance(math.nextafter(self.now, math.inf))
            if (self.now, len(ends)) == before:
                return

    # ----------------------------------------------------------------------------- a step
    def _preempt(self, s: Seq) -> None:
        self.pool.release(s.private, s.shared)
        s.private, s.shared, s.computed, s.next_id = 0, [], 0, 0
        s.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(s)

    def _take_or_preempt(self, s: Seq, need: int) -> tuple[bool, bool]:
        """Take `need` more KV blocks for running request `s`, preempting the last running
        request (recompute) until they are free. Returns (s got them, anything was preempted);
        `s` itself may be the one preempted, and then it did not get them."""
        preempted = False
        while not self.pool.take(need):
            victim = self.running.pop()
            self._preempt(victim)
            preempted = True
            if victim is s:
                return False, True
        return True, preempted

    def _decode_window(self, until: float) -> bool:
        """Run k pure-decode steps at once when the schedule cannot change during them: every
        running request decodes, none waits (arrivals come only between `advance` calls, and
        the window ends with the last step starting before `until`), the budget covers them,
        no request finishes before the last step and the KV blocks they will need are free
        (so nothing is preempted). Exactly what k calls of `step` would do, at the cost of
        one: the step times come vectorised from `StepTimer.decode_steps_s`, the per-request
        bookkeeping is one pass that reads each request and one that writes it."""
        running = self.running
        d = len(running)
        if d > self.opt.max_num_batched_tokens:
            return False
        scan = self._window_scan(running)
        if scan is None:
            return False
        last_finish, kv, slack = scan
        window = self._window_steps(d, kv / d, last_finish, until)
        if window is None:
            return False
        durations, ends = window
        k = len(ends)
        bs, pool = self.opt.block_size, self.pool
        # a request whose held blocks leave j < k free tokens needs ceil((k - j) / bs) more
        total_need = sum([(bs - 1 + k - j) // bs for j in slack if j < k])
        if total_need > pool.available:
            return False
        used = pool.used
        pool.take(total_need)
        delta = self._window_advance(slack, k, ends[0], ends[-1], k == last_finish,
                                     bool(total_need))
        self._record_window(durations, ends, d, used, delta if total_need else None)
        return True

    def _record_window(self, durations: list[float], ends: list[float], d: int, used: int,
                       delta: list[int] | None) -> None:
        """Log a decode window of k = len(ends) steps of d sequences that started with `used`
        KV blocks in use and took `delta[i]` new ones in its step i (None: none): the gaps
        inside it (each for d tokens), the clock, the step count and the timeline."""
        k = len(ends)
        pool = self.pool
        total = pool.total
        if delta is not None:  # the blocks in use after each of the first k - 1 steps
            steps = delta[:k - 1]
            if steps:
                steps[0] += used
            levels = list(accumulate(steps))
        else:
            levels = [used] * (k - 1)
        self.itl_window_s += durations[1:k]  # their weights: d, from the timeline
        self.now = ends[-1]
        self.steps += k
        levels.append(total - pool.free - pool.per_id * len(pool.lru))  # `pool.used`
        self.timeline.window(ends, levels, d, len(self.running), self.preemptions)

    def _window_scan(self, running: list[Seq]) -> tuple[int, int, list[int]] | None:
        """One read of every running request for a decode window: None unless each one
        decodes (it has sampled a token and computed all but the last), else (the steps until
        the first finishes, capped at WINDOW_MAX_STEPS; the KV tokens of the window's first
        step; per request the tokens it can still write into the blocks it holds)."""
        bs = self.opt.block_size
        per = self.pool.per_id
        k = WINDOW_MAX_STEPS
        kv = 0
        slack = []
        for s in running:
            g = s.generated
            c = s.computed
            if not g or c != s.prompt + g - 1:
                return None
            left = s.output - g
            if left < k:  # noqa: PLR1730 (a conditional: this loop runs for every request)
                k = left
            kv += c
            slack.append((s.private + per * len(s.shared)) * bs - c if per else
                         s.private * bs - c)
        return k, kv + len(running), slack

    def _window_steps(self, d: int, mean_kv: float, k: int,
                      until: float) -> tuple[list[float], list[float]] | None:
        """The durations and end times of the window's steps: at most k, as many as start
        before `until`, and at most int((until - now) / first) + 1 where `first` is the first
        step's `StepTimer.step_s` (that bound decides where a window ends, so it is kept
        exactly); None when fewer than two would run.

        `first` equals the first of `decode_steps_s`'s durations to a few ulps (the same
        formula, interpolated in another order), so it is computed only when the bound could
        bind: when `until - now` does not clear the window's other limit times that duration
        by a relative 1e-9. For the same reason there is no window (None) as soon as the
        first duration, less that margin, ends at or after `until`: `step_s`'s first step
        ends there too. The steps are timed for about as many as a recent step length says fit
        before `until` (`_step_guess`; the next try times more when too few)."""
        if k < 2:
            return None
        timer, now = self.timer, self.now
        if until == math.inf:
            durations = timer.decode_steps_list(d, mean_kv, k)
            return durations, [now + t for t in accumulate(durations)]
        span = until - now
        guess = self._step_guess
        n = int(span / guess * 1.25) + 2 if guess > 0 else k
        if n > k:  # noqa: PLR1730 (min(k, n) without the call: this runs for every window)
            n = k
        durations = timer.decode_steps_list(d, mean_kv, n)
        first = durations[0]
        self._step_guess = first
        if now + first * (1 - 1e-9) >= until:  # `step_s`'s first step ends at `until` or later
            return None
        ends = [now + t for t in accumulate(durations)]
        starting = bisect.bisect_left(ends, until)  # `_first_start_at`, written out
        while starting < n and ends[starting] - durations[starting] < until:
            starting += 1
        limit = starting if starting < k else k  # min(k, starting)
        margin = first * (1 + 1e-9)
        if (starting < n or n == k) and now + margin < until and span >= (limit - 1) * margin:
            bounded = limit  # the first step's bound is not the one that binds
        else:  # the bound as `step_s` times it
            first = timer.step_s(d, d, d, timer.decode_attention_s(d, mean_kv), False)
            if now + first >= until:
                return None
            k = min(k, int(span / first) + 1)
            if k > n:
                durations = timer.decode_steps_list(d, mean_kv, k)
                ends = [now + t for t in accumulate(durations)]
            else:
                del durations[k:], ends[k:]
            bounded = min(k, _first_start_at(ends, durations, until))
        if bounded < 2:
            return None
        del ends[bounded:]
        return durations, ends

    def _window_advance(self, slack: list[int], k: int, first_end: float, end: float,
                        may_finish: bool, new_blocks: bool) -> list[int]:
        """Write the window into every running request (one pass): its new blocks (a request
        with j free tokens in the blocks it holds crosses into a new block at steps j, j + bs,
        ... of the window), k more tokens computed and sampled, its gap to the window's first
        token (an inter-token latency), its last token at `end`; free the finished ones (only
        when k reached the first finish). Returns the blocks newly in use at each step."""
        running = self.running
        bs = self.opt.block_size
        delta = [0] * k
        gaps = []
        gap = gaps.append
        for s, j in zip(running, slack):
            if new_blocks and j < k:
                s.private += (bs - 1 + k - j) // bs
                while j < k:
                    delta[j] += 1
                    j += bs
            gap(first_end - s.last_token_s)
            s.computed += k
            s.generated += k
            s.last_token_s = end
        self.itl_s.extend(gaps)
        if may_finish:
            pool = self.pool
            for s in running:
                if s.generated >= s.output:
                    s.finish_s = end
                    pool.release(s.private, s.shared)
                    s.private, s.shared = 0, []
            self.running = [s for s in running if s.finish_s != s.finish_s]
        return delta

    def step(self) -> bool:
        sched: list[tuple[Seq, int]] = []
        budget, preempted = self._schedule_running(sched)
        if not preempted:
            self._admit(sched, budget)
        if not sched:
            return False
        self._execute(sched)
        return True

    def _schedule_running(self, sched: list[tuple[Seq, int]]) -> tuple[int, bool]:
        """Step 1 of the module docstring: the running requests in order, each min(tokens it
        has not computed, budget) tokens, preempting from the end when its blocks do not fit.
        Returns the budget left and whether anything was preempted."""
        opt, pool, bs = self.opt, self.pool, self.opt.block_size
        per = pool.per_id
        budget = opt.max_num_batched_tokens
        running = self.running
        preempted = False
        for s in running:  # a preemption pops from the end: the loop sees the list shrink
            if budget <= 0:
                break
            c = s.computed
            new = s.prompt + s.generated - c
            if new > budget:  # noqa: PLR1730 (a conditional: this loop runs for every request)
                new = budget
            need = -(-(c + new) // bs) - s.private - (per * len(s.shared) if per else 0)
            if need > 0:
                fits, evicted = self._take_or_preempt(s, need)
                preempted = preempted or evicted
                if not fits:
                    break
                s.private += need
            sched.append((s, new))
            budget -= new
        return budget, preempted

    def _admit(self, sched: list[tuple[Seq, int]], budget: int) -> None:
        """Start waiting requests in arrival order while the budget lasts and fewer than
        `max_num_seqs` run: each takes its prefix-cache hit, then min(rest, budget) tokens;
        one whose blocks do not fit waits, and so do the ones behind it."""
        opt, pool, bs = self.opt, self.pool, self.opt.block_size
        per = pool.per_id
        running = self.running
        waiting = self.waiting
        while waiting and budget > 0 and len(running) < opt.max_num_seqs:
            s = waiting[0]
            tokens = s.prompt + s.generated
            hits = pool.hit_ids(s.ids, tokens) if per else 0
            hit_ids = list(s.ids[:hits]) if hits else []
            computed = hits * pool.hash_tokens
            new = tokens - computed
            if new > budget:  # noqa: PLR1730 (a conditional: the hot path, no call)
                new = budget
            need = -(-(computed + new) // bs) - per * hits
            if need < 0:  # noqa: PLR1730
                need = 0
            if not pool.admit(hit_ids, need):
                break
            self._start(sched, new, need, computed, hit_ids)
            budget -= new

    def _start(self, sched: list[tuple[Seq, int]], tokens: int, private: int, computed: int = 0,
               hit_ids: list[int] | None = None) -> None:
        """Move the head of the queue to the running requests, scheduled for `tokens` tokens
        this step, holding `private` blocks of its own; with `hit_ids` (its prefix-cache hit,
        admitted by the pool) it also takes the hit's blocks and its `computed` tokens. Its
        first schedule time is kept across preemptions."""
        s = self.waiting.popleft()
        self.running.append(s)
        s.private = private
        if hit_ids is not None:
            s.computed, s.shared, s.next_id = computed, hit_ids, len(hit_ids)
            s.cached_tokens += computed
        if s.first_scheduled_s != s.first_scheduled_s:  # nan: first time
            s.first_scheduled_s = self.now
        sched.append((s, tokens))

    def _execute(self, sched: list[tuple[Seq, int]]) -> None:
        """Time the step and write it into its requests."""
        timer = self.timer
        chunk_tokens = chunk_logits = 0
        decodes = kv_sum = 0
        attention_p = 0.0
        for s, new in sched:
            c, g = s.computed, s.generated
            if new == 1 and g and c == s.prompt + g - 1:  # a decode: its KV holds c + 1 tokens
                decodes += 1
                kv_sum += c + 1
                continue
            chunk_tokens += new
            attention_p += timer.prefill_attention_s(new, c)
            if c + new == s.prompt + g:
                chunk_logits += 1
        sequences = len(sched)
        prefill = decodes < sequences
        tokens, logits = chunk_tokens + decodes, chunk_logits + decodes
        attention_d = timer.decode_attention_s(decodes, kv_sum / decodes) if decodes else 0.0
        bound = "compute" if attention_p >= attention_d else "memory"
        self.now += timer.step_s(tokens, sequences, logits, attention_p + attention_d,
                                 prefill, bound)
        now, pool, itl = self.now, self.pool, self.itl_s
        hash_tokens = pool.hash_tokens
        finished = False
        for s, new in sched:
            c = s.computed = s.computed + new
            if hash_tokens and s.next_id < len(s.ids):
                full = min(c, s.prompt)  # a block of prompt tokens only
                while s.next_id < len(s.ids) and (s.next_id + 1) * hash_tokens <= full:
                    if pool.publish(s.ids[s.next_id]):
                        s.private -= pool.per_id
                        s.shared.append(s.ids[s.next_id])
                    s.next_id += 1
            g = s.generated
            if c == s.prompt + g:
                g = s.generated = g + 1
                if g == 1:
                    s.first_token_s = now
                else:
                    itl.append(now - s.last_token_s)
                s.last_token_s = now
                if g >= s.output:
                    s.finish_s = now
                    pool.release(s.private, s.shared)
                    s.private, s.shared = 0, []
                    finished = True
        if finished:
            self.running = [s for s in self.running if s.finish_s != s.finish_s]
        self.steps += 1
        total = pool.total
        used = total - pool.free - pool.per_id * len(pool.lru)  # `pool.used`, written out
        self.timeline.step(now, used, len(self.running), len(self.waiting),
                           self.preemptions, tokens)
