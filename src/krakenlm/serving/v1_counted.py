"""vLLM V1's engine (`vllm_v1.V1Engine`, the same schedule step for step) with its decoding
requests kept as counters instead of written every step.

While every running request decodes (it has sampled its last token at the engine's last step
and holds at most one block of free KV slots), a step gives each of them one token: its
computed and generated tokens grow by one, its inter-token gap is the step's length, it takes
a new KV block every `block_size` steps (at the step where its free slots run out) and it
finishes at a step known in advance. So the engine keeps, instead of writing every request:
a tick (decode steps given to all of them), per request the tick its fields were last written
(`Seq.since_tick`) and the tick residue at which it takes a block (`Seq.phase`), a count of
requests per residue, a heap of finishing ticks and the sum of their KV tokens. A decode
window or a step that only adds arrivals then costs the same whatever the number of running
requests; a request's fields are written when it finishes, and every request's when a step
needs the per-request scheduler (a preemption, a chunk left over, a request that does not fit
the pattern), after which the counters are rebuilt. Every float is computed by the same
operations as in `V1Engine` (tests/test_serving_golden.py pins the outputs).

`serve` replays vLLM V1 with this engine; `cluster` keeps `V1Engine` (its token-weighted router
reads each request's computed tokens between steps).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right
from itertools import accumulate
from math import floor

import numpy as np

from .packing import packed_array
from .step_time import (LINE_OFFSETS, LINE_STEPS, SCALAR_STEPS, StepTimer, _at,
                        _interp_run)
from .vllm_v1 import WINDOW_MAX_STEPS, Seq, V1Engine, _first_start_at


def _ends(now: float, durations: list[float]) -> list[float]:
    """End times of steps of these lengths from `now`: now + the running sum."""
    return [now + t for t in accumulate(durations)]


def _scalar_steps(attention_s: list[float], c: float, r: float, count: float, head: float,
                  overhead: float, overlaps: bool) -> list[float]:
    """`StepTimer.decode_steps_list`'s scalar form of steps of these attention times:
    c + (r + a) x count + head, then max(that, overhead) with overlap, else plus it."""
    if overlaps:  # max(gpu, overhead) without the call
        return [g if (g := c + (r + a) * count + head) > overhead else overhead
                for a in attention_s]
    return [c + (r + a) * count + head + overhead for a in attention_s]


class CountedV1Engine(V1Engine):
    """`V1Engine` with its decoding requests as counters (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._counted = False  # every running request is in the counters below
        self._tick = 0
        self._order = 0  # running order of the counted requests (the heap's tie-break)
        self._phases = [0] * self.opt.block_size  # requests taking a block at tick % bs
        self._finishes: list[tuple[int, int, Seq]] = []  # (tick it finishes at, order, seq)
        self._kv = 0  # their computed tokens
        self._last_s = 0.0  # when they sampled their last token
        # gaps logged as runs: `_gap_counts[i]` tokens each waited `_gap_values[i]` (lists:
        # one value per step or window, appended without the conversion an array makes;
        # read once by `itl_runs`)
        self._gap_values: list[float] = []
        self._gap_counts: list[int] = []
        # what the step and the window read on every call and that never changes (the same
        # objects for the engine's life: one tuple read instead of a dozen attributes, each
        # holding only what its method reads); the oracle's memos only for a `StepTimer` (a
        # pipeline's timer is called through its methods)
        timer, pool, timeline, opt = self.timer, self.pool, self.timeline, self.opt
        fast = type(timer) is StepTimer
        kv_index = timer._kv_index if fast else None
        self._lines: dict[int, tuple | bool] | None = {} if fast else None  # `_window_line`
        self._step_consts = (
            timer, pool, opt.block_size, opt.max_num_batched_tokens, opt.max_num_seqs,
            timer._prefill_memo if fast else None, timer._attention_rows if fast else None,
            self._gap_values, self._gap_counts, self.itl_s, timeline.t_s, timeline.kv_blocks,
            timeline._log, kv_index, timer._step_rows if fast else None,
            timer._host if fast else None, timer._heads if fast else None,
            timer._pad if fast else None, timer._graph_top if fast else None)
        self._window_consts = (
            timer, pool, opt.block_size, opt.max_num_batched_tokens, self._lines,
            timer.decode_steps_list, self._gap_values, self._gap_counts, self.itl_window_s,
            timeline.t_s, timeline.kv_blocks, timeline._log, kv_index, WINDOW_MAX_STEPS,
            LINE_STEPS, LINE_OFFSETS)

    def _window_line(self, d: int) -> tuple | bool:
        """What the counted window reads of the decode plan of d sequences when the plan has
        a `line` (`StepTimer.decode_steps_list`'s shortest path): the line's (row x, row y,
        c, r, count, head, overhead), its last interval's index len(x) - 1, and the form of
        its step time: 0 without overlap (GPU time + overhead), 1 with overlap and
        c + r * count + head above the overhead (every step's GPU time is then above it:
        see `_counted_window`), 2 with overlap otherwise (the max per step). Kept per d
        once the plan exists (False: a plan without a line); False, not kept, before."""
        plan = self.timer._decode_plans.get(d)
        if plan is None:
            return False
        line = plan.line
        if line is None:
            form = False
        else:
            xs, _, c, r, count, head, overhead = line
            form = (*line, len(xs) - 1, 0 if not plan.overlaps else
                    1 if c + r * count + head > overhead else 2)
        self._lines[d] = form
        return form

    def advance(self, until: float, stop_at_finish: bool = False) -> None:
        """`V1Engine.advance`, on the counters while they hold (`swapped` is vLLM V0's swap
        space: a V1 engine preempts by recompute, so it stays empty and is not read). The
        loop's test returns from inside it, so that its comparison's jump is short (see
        `_counted_window`, step 2)."""
        while True:
            if not self.now < until:
                return
            left = self.outstanding if stop_at_finish else 0
            if self.running and not self.waiting and (
                    self._counted_window(until, stop_at_finish) if self._counted else
                    self._decode_window(until)):
                if stop_at_finish and self.outstanding < left:
                    return
                continue
            if not (self.running or self.waiting):
                ran = False
            else:  # a step: on the counters when it can, else the per-request scheduler's
                ran = self._counted_step() if self._counted else None
                if ran is None:
                    if self._counted:
                        self._uncount()
                    ran = self.step()
                    self._count()
            if not ran:
                self.now = max(self.now, until) if math.isfinite(until) else self.now
                return
            if stop_at_finish and self.outstanding < left:
                return

    # ------------------------------------------------------------------ the counters
    def _slack(self, s: Seq) -> int:
        """KV slots left in the blocks `s` holds."""
        per = self.pool.per_id
        held = s.private + per * len(s.shared) if per else s.private
        return held * self.opt.block_size - s.computed

    def _count(self) -> None:
        """Start the counters when every running request sampled at the last step, decodes
        and has fewer than a block of free slots; else leave them off."""
        self._phases = [0] * self.opt.block_size
        self._finishes, self._kv, self._last_s = [], 0, self.now
        self._counted = all(self._join(s) for s in self.running)
        if not self._counted:
            self._finishes = []

    def _join(self, s: Seq) -> bool:
        """Add a running request that sampled at the last step to the counters, if it fits
        their pattern (it decodes, fewer than a block of free slots)."""
        bs, tick = self.opt.block_size, self._tick
        g, c = s.generated, s.computed
        if s.last_token_s != self.now or not g or c != s.prompt + g - 1:
            return False
        slack = self._slack(s)
        if not 0 <= slack < bs:
            return False
        s.since_tick, s.phase = tick, (tick + slack) % bs
        self._phases[s.phase] += 1
        heapq.heappush(self._finishes, (tick + s.output - g, self._order, s))
        self._order += 1
        self._kv += c
        self._last_s = self.now  # the counted ones sampled now too (or there are none)
        return True

    def _write(self, s: Seq) -> None:
        """Bring a counted request's fields to the present tick: the steps since they were
        written add to its computed and generated tokens, a block at every `block_size`
        steps from its first full one."""
        m = self._tick - s.since_tick
        if m:
            slack = self._slack(s)
            if m > slack:
                s.private += (m - slack - 1) // self.opt.block_size + 1
            s.computed += m
            s.generated += m
            s.since_tick = self._tick
        s.last_token_s = self._last_s

    def itl_runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`V1Engine.itl_runs` with the counted requests' runs (one token each) after the
        gaps logged one by one (one concatenation per array). The gaps are `V1Engine`'s in
        another order: the report sorts them stably, and equal gaps of one token each are
        interchangeable."""
        singles = packed_array(self.itl_s, float)
        windows = packed_array(self.itl_window_s, float)
        n, runs = len(singles), len(self._gap_values)
        ones = np.ones(n + runs)  # singles and runs stand for one token each (floats)
        return (np.concatenate([singles, packed_array(self._gap_values, float), windows]),
                np.concatenate([ones, self.itl_weight]),
                np.concatenate([np.ones(n, dtype=np.intp),
                                packed_array(self._gap_counts, np.intp),
                                np.ones(len(windows), dtype=np.intp)]))

    def _uncount(self) -> None:
        """Write every counted request and stop the counters."""
        for _, _, s in self._finishes:
            self._write(s)
        self._counted = False
        self._finishes = []

    def _finish(self, end: float) -> None:
        """Finish the counted requests whose last token came at this tick (in running
        order, as `V1Engine` frees them) and take them out of the running list (the callers
        call it when the first of the heap finishes at this tick)."""
        finishes, tick = self._finishes, self._tick
        pool, phases, last_s = self.pool, self._phases, self._last_s
        bs, per = self.opt.block_size, pool.per_id
        kv = self._kv
        running = self.running
        while finishes:
            if finishes[0][0] != tick:  # (a short jump: see `_counted_window`, step 2)
                break
            s = heapq.heappop(finishes)[2]
            running.remove(s)
            m = tick - s.since_tick  # `_write` and `_slack`, written out
            if m:
                slack = (s.private + per * len(s.shared) if per else s.private) * bs - s.computed
                if m > slack:
                    s.private += (m - slack - 1) // bs + 1
                s.computed += m
                s.generated += m
                s.since_tick = tick
            s.last_token_s = last_s
            s.finish_s = end
            pool.free += s.private  # `pool.release`: its cached ids only when it has any
            if s.shared:
                pool.release(0, s.shared)
            s.private, s.shared = 0, []
            phases[s.phase] -= 1
            kv -= s.computed
        self._kv = kv

    # ------------------------------------------------------------------ steps and windows
    def _counted_step(self) -> bool | None:
        """`V1Engine.step` when every running request is counted: each decodes (the budget
        covers them and their new blocks are free), then waiting requests start. None (and
        nothing changed) when the step needs the per-request scheduler.

        One method, with what were its helpers written out (the engine's other hot path: a
        step per arrival). In order, as `V1Engine.step` does them:

        1. the d counted decoders' new blocks (the requests at this tick's residue);
        2. admission (`_admit` and `_start`): waiting requests in arrival order while the
           budget lasts and fewer than `max_num_seqs` run, each with its prefix-cache hit;
           each admitted one is classified as `_execute` does (a decode, or a chunk with its
           prefill attention, summed in admission order);
        3. the step's time (`_execute`: `decode_attention_s`'s row interpolation written
           out for a batch size it has seen, then `step_s`, written out when its rows for
           the token count and its LM head time for the sampling count are kept and its
           residual rows are flat);
        4. the decoders' token (one gap run for all of them, the tick, their finishes),
           then the admitted ones' (`_execute`'s write pass), the running list without the
           finished, the step count and the timeline record (`Timeline.step`);
        5. the admitted ones that still run join the counters (`_join`, written out); the
           first that does not fit their pattern stops them (`_uncount`).

        The engine's fields (`now`, `_tick`, `_kv`, `_last_s`) are written where the helpers
        wrote them (`_finish` and `_uncount` read them)."""
        (timer, pool, bs, budget, max_seqs, memo, attention_rows, gap_values, gap_counts, itl,
         t_log, kv_log, log, kv_index, step_rows, hosts, heads, pads, tops) = self._step_consts
        running, waiting = self.running, self.waiting
        d = len(running)
        if d > budget:
            return None
        phases = self._phases
        need = phases[self._tick % bs] if d else 0
        if need:  # `pool.take(need)`; it takes nothing when they are not free
            if need <= pool.free:
                pool.free -= need
            elif not pool.take(need):
                return None
        # 2. admission, and `_execute`'s first pass over the admitted
        budget -= d
        per, hash_tokens = pool.per_id, pool.hash_tokens
        sched: list[tuple[Seq, int]] = []
        chunk_tokens = chunk_logits = 0
        decodes, kv_sum = d, self._kv + d
        attention_p = 0.0
        now = self.now
        while waiting:
            if budget <= 0 or len(running) >= max_seqs:  # (short jumps: `_counted_window`)
                break
            s = waiting[0]
            g = s.generated
            tokens = s.prompt + g
            if per:
                hits = pool.hit_ids(s.ids, tokens)
                hit_ids = list(s.ids[:hits]) if hits else []
                c = hits * hash_tokens
                new = tokens - c
                if new > budget:  # noqa: PLR1730
                    new = budget
                blocks = -(-(c + new) // bs) - per * hits
                if blocks < 0:  # noqa: PLR1730
                    blocks = 0
                if hit_ids:  # `pool.admit`
                    pool.share(hit_ids)
            else:  # no prefix cache (per = 0): no hit, the same formulas with c = hits = 0
                hits = c = 0
                hit_ids = []
                new = tokens if tokens <= budget else budget
                blocks = -(-new // bs)
            if blocks <= pool.free:
                pool.free -= blocks
            elif not pool.take(blocks):
                if hit_ids:
                    pool.release(0, hit_ids)
                break
            waiting.popleft()  # `_start`
            running.append(s)
            s.private = blocks
            s.computed, s.shared, s.next_id = c, hit_ids, hits
            s.cached_tokens += c
            if s.first_scheduled_s != s.first_scheduled_s:  # nan: first time
                s.first_scheduled_s = now
            sched.append((s, new))
            budget -= new
            if new == 1 and g and c == tokens - 1:  # a decode: its KV holds c + 1 tokens
                decodes += 1
                kv_sum += c + 1
                continue
            chunk_tokens += new
            t = memo.get((new, c)) if memo is not None else None
            attention_p += t if t is not None else timer.prefill_attention_s(new, c)
            if c + new == tokens:
                chunk_logits += 1
        if not (sched or d):
            return False
        # 3. the step's time
        sequences = len(sched) + d
        prefill = decodes < sequences
        tokens, logits = chunk_tokens + decodes, chunk_logits + decodes
        if decodes:
            mean_kv = kv_sum / decodes
            rows = attention_rows.get(decodes) if attention_rows is not None else None
            if rows is None:
                attention_d = timer.decode_attention_s(decodes, mean_kv)
            else:  # `decode_attention_s`, written out
                (xs, ys), upper, w, beyond = rows
                if mean_kv <= xs[0]:
                    a = ys[0]
                elif mean_kv >= xs[-1]:
                    a = ys[-1]
                else:  # `bisect_right(xs, mean_kv)`: the KV grid's index
                    i = kv_index[floor(mean_kv)]
                    x0 = xs[i - 1]
                    u = (mean_kv - x0) / (xs[i] - x0)
                    a = ys[i - 1] * (1.0 - u) + ys[i] * u  # 1.0: float-only operations
                if beyond:
                    attention_d = a * decodes / beyond
                else:
                    attention_d = a if w == 0.0 else a * (1 - w) + _at(upper, mean_kv) * w
        else:
            attention_d = 0.0
        bound = "compute" if attention_p >= attention_d else "memory"
        a = attention_p + attention_d
        rows = None
        if step_rows is not None:
            pad = pads[prefill]  # `step_s`'s padding to a captured graph, written out
            if tokens < len(pad):
                rows = step_rows.get((bound, pad[tokens]))
            elif tops[prefill] is None or tokens <= tops[prefill]:
                rows = step_rows.get((bound, tokens))
            # else a step above the largest graph: `step_s` times it (its host constants)
        head = heads[prefill].get(logits) if rows is not None else None
        if head is not None and rows[2] is not None and 0.0 < a < 1.0:
            # `step_s` on its kept rows and LM head time, its flat path written out (the
            # same operations in the same order); on a miss `step_s` itself fills them
            w, _, flat = rows
            _, scale, floored, per_step, per_seq, launch, overlaps = hosts[prefill]
            u_low = 1.0 - a  # (1 - a: the int converts exactly; 1.0 keeps it float-only)
            gpu = 0.0
            for y, y_j, attention, kernel_floor, count in flat:
                r = y * u_low + y * a
                if w:
                    r = r * (1.0 - w) + (y_j * u_low + y_j * a) * w
                t = (r + (a if attention else 0.0)) * scale
                if floored and t < kernel_floor:
                    t = kernel_floor
                gpu += t * count
            gpu += head
            overhead = per_step + sequences * per_seq + launch
            if overlaps:  # max(gpu, overhead) without the call
                now = now + (overhead if overhead > gpu else gpu)
            else:
                now = now + (gpu + overhead)
        else:
            now = now + timer.step_s(tokens, sequences, logits, a, prefill, bound)
        self.now = now
        # 4. the decoders' token (their gaps first, in running order, as `V1Engine` writes
        # them), then the admitted ones'
        finishes = self._finishes
        if d:
            n = len(finishes)
            gap_values.append(now - self._last_s)  # n equal gaps: one run
            gap_counts.append(n)
            tick = self._tick = self._tick + 1
            self._kv += n
            self._last_s = now
            if finishes and finishes[0][0] == tick:  # they leave the running list
                self._finish(now)
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
                    running.remove(s)
        self.steps += 1
        total = pool.total
        used = total - pool.free - per * len(pool.lru)  # `pool.used`, written out
        t_log.append(now)  # `Timeline.step`
        kv_log.append(used)
        after = len(running)
        log += (1, after, after, len(waiting), self.preemptions, tokens, 0)
        # 5. the admitted ones that still run join the counters (`_join` and `_slack`,
        # written out)
        for s, _ in sched:
            if s.finish_s == s.finish_s:  # finished
                continue
            g, c = s.generated, s.computed
            if s.last_token_s == now and g and c == s.prompt + g - 1:
                slack = (s.private + per * len(s.shared) if per else s.private) * bs - c
                if 0 <= slack < bs:
                    tick = self._tick
                    s.since_tick, s.phase = tick, (tick + slack) % bs
                    phases[s.phase] += 1
                    heapq.heappush(finishes, (tick + s.output - g, self._order, s))
                    self._order += 1
                    self._kv += c
                    self._last_s = now
                    continue
            self._uncount()  # running, not counted
            break
        return True

    def _counted_window(self, until: float, stop_at_finish: bool = False) -> bool:
        """`V1Engine._decode_window` on the counters, window after window: the same windows
        (steps, times, blocks, finishes) without a pass over the requests. Runs windows
        while the clock is before `until` and requests run (and, with `stop_at_finish`,
        none finished: `advance` returns there); False when one could not run (the caller
        then runs a step, as after a failed `_decode_window`), else True.

        One loop, one pass of it per window, with what were its helpers written out (the
        engine's hot path: about half the replay's events are windows). Per window, in order:

        1. its length bound k: the steps until the first counted request finishes (at most
           `WINDOW_MAX_STEPS`); fewer than two: no window;
        2. its step times (`V1Engine._window_steps`: as many as a recent step length says
           fit before `until`, or on a line row as many as its own first step says and one
           more, from `StepTimer.decode_steps_list`, whose shortest path, a
           `_DecodePlan.line` with every KV length inside one interval of its row, is written
           out here by the same operations in the same order) and its end times
           (`now + running sum`), cut at the first step starting at or after `until`;
           `step_s`'s bound on the first step when it could bind (the same test and
           fallback as `_window_steps`);
        3. its new KV blocks (the residues' request counts over its steps); none
           of it is written when they are not free (the window cannot run, nothing changed
           but the step guess, as in `_window_steps`);
        4. the counters: one gap run for the d requests, the tick, their KV tokens, the
           finishes at the window's last step (`_finish`, which takes them out of the
           running list);
        5. its log (`_record_window` and `Timeline.window`): the in-window gaps, the clock,
           the step count, the KV use after each step, the timeline record.

        Invariants between passes: every running request is counted (`self._counted`), the
        engine's fields (`now`, `_tick`, `_kv`, `_last_s`, `steps`) are written at the end of
        each pass (`_finish` reads them), and `running` is the engine's list (finishes
        remove from it in place), so `d` is re-read after a finish."""
        (timer, pool, bs, budget, lines, decode_steps_list, gap_values, gap_counts, itl_window,
         t_log, kv_log, log, kv_index, max_steps, line_steps, offsets) = self._window_consts
        running = self.running
        d = len(running)
        if d > budget:  # d only falls from here on
            return False
        phases, finishes, total = self._phases, self._finishes, pool.total
        tick, now = self._tick, self.now
        finite = until != math.inf
        preemptions = self.preemptions  # a window preempts nothing
        while True:
            # 1. the bound
            k = finishes[0][0] - tick
            if k > max_steps:  # noqa: PLR1730 (min() without the call)
                k = max_steps
            if k < 2:
                return False
            mean_kv = (self._kv + d) / d
            # 2. the step times and end times (`_window_steps`)
            if not finite:
                durations = decode_steps_list(d, mean_kv, k)
                ends = _ends(now, durations)
            else:
                span = until - now
                durations = ends = None
                line = lines.get(d) if lines is not None else False
                if line is None:
                    line = self._window_line(d)
                j = -1
                if line:  # `decode_steps_list`'s line path
                    xs, ys, c, r, count, head, overhead, last, form = line
                    # `bisect_right(xs, mean_kv) - 1` (the line's row is on the KV grid, and
                    # mean_kv at most its last point, the longest request)
                    j = kv_index[floor(mean_kv)] - 1
                # (each test below guards the short branch first: Python 3.11 specialises a
                # comparison only when its conditional jump follows it, and a jump over the
                # long branch takes an EXTENDED_ARG in between)
                if not (0 <= j < last and xs[j] < mean_kv):
                    # no line, or mean_kv off its row: a recent step length says how many fit
                    guess = self._step_guess
                    n = int(span / guess * 1.25) + 2 if guess > 0 else k
                    if n > k:  # noqa: PLR1730
                        n = k
                else:
                    lo, y0 = xs[j], ys[j]
                    slope = (ys[j + 1] - y0) / (xs[j + 1] - lo)
                    # the first step's time, as the lists below compute it (offset 0.0:
                    # mean_kv + 0.0 is mean_kv), sizes the window: as many steps as it says
                    # fit before `until`, and one more (the steps grow with the KV, so no
                    # more than that start before it; too few, and the bound below times it)
                    base = mean_kv - lo  # base + i is mean_kv + i - lo: `_powers_of_two_on`
                    first = c + (r + (slope * base + y0)) * count + head
                    if not form:  # no overlap
                        first += overhead
                    elif first <= overhead:  # noqa: PLR1730
                        first = overhead
                    self._step_guess = first
                    if now + first * (1 - 1e-9) >= until:  # `step_s`'s first step ends there
                        return False
                    n = int(span / first) + 2
                    if n > k:  # noqa: PLR1730
                        n = k
                    # (offsets[n - 1] is n - 1 as a float: mean_kv + (n - 1) without an int)
                    if not (n <= line_steps and mean_kv + offsets[n - 1] < xs[j + 1]):
                        if n <= SCALAR_STEPS:
                            # the KV lengths cross grid points of the line's row: what
                            # `decode_steps_list` returns there (its Python-float path up to
                            # `SCALAR_STEPS`, whose floats are the array formula's), without its
                            # calls: the row interpolated by `_interp_run`, then the scalar form
                            durations = _scalar_steps(_interp_run(xs, ys, mean_kv, n), c, r,
                                                      count, head, overhead, form)
                    else:
                        durations, ends = [], []
                        total_s = 0.0
                        if form == 1:
                            # max(gpu, overhead) is the GPU time at every step: each is
                            # c + (r + a) * count + head with an attention time a >= 0 (an
                            # interpolation inside one interval of positive table values) and a
                            # count >= 1, and rounding is monotone, so none is below
                            # c + r * count + head, evaluated in the same order. Each form
                            # builds its steps' times and their ends (now + running sum, as
                            # `accumulate` sums them: 0.0 + t is t for a positive t) in one
                            # plain loop: a comprehension is a function object and a frame
                            # per window in Python 3.11 (and makes the names it reads cells)
                            for i in offsets[:n]:
                                step_s = c + (r + (slope * (base + i) + y0)) * count + head
                                durations.append(step_s)
                                total_s += step_s
                                ends.append(now + total_s)
                        elif form:
                            for i in offsets[:n]:
                                step_s = c + (r + (slope * (base + i) + y0)) * count + head
                                if not step_s > overhead:  # max(gpu, overhead), NaN as max()
                                    step_s = overhead
                                durations.append(step_s)
                                total_s += step_s
                                ends.append(now + total_s)
                        else:
                            for i in offsets[:n]:
                                step_s = (c + (r + (slope * (base + i) + y0)) * count + head
                                          + overhead)
                                durations.append(step_s)
                                total_s += step_s
                                ends.append(now + total_s)
                if durations is None:
                    durations = decode_steps_list(d, mean_kv, n)
                    first = durations[0]
                    self._step_guess = first
                    if now + first * (1 - 1e-9) >= until:  # `step_s`'s first step ends there
                        return False
                if ends is None:
                    ends = _ends(now, durations)
                starting = bisect_left(ends, until)  # `_first_start_at`, written out
                while starting < n and ends[starting] - durations[starting] < until:
                    starting += 1
                limit = starting if starting < k else k  # min(k, starting)
                margin = first * (1 + 1e-9)
                if (starting < n or n == k) and now + margin < until and \
                        span >= (limit - 1) * margin:
                    bounded = limit  # the first step's bound is not the one that binds
                else:  # the bound as `step_s` times it
                    first = timer.step_s(d, d, d, timer.decode_attention_s(d, mean_kv), False)
                    if now + first >= until:
                        return False
                    k = min(k, int(span / first) + 1)
                    if k > n:
                        durations = decode_steps_list(d, mean_kv, k)
                        ends = _ends(now, durations)
                    else:
                        del durations[k:], ends[k:]
                    bounded = min(k, _first_start_at(ends, durations, until))
                if bounded < 2:
                    return False
                del ends[bounded:]
            k = len(ends)
            # 3. the new blocks
            start = tick % bs
            if k < bs and start + k <= bs:  # the window's steps take blocks at residues start..
                delta = phases[start:start + k]  # new blocks at window step i
                total_need = sum(delta)
            else:
                cycle = phases[start:] + phases[:start]  # new blocks at step i % bs
                full, part = divmod(k, bs)
                delta = (cycle * (full + 1))[:k]
                total_need = full * d + sum(cycle[:part])
            available = pool.free + pool.per_id * len(pool.lru)  # `pool.available`
            if total_need > available:
                return False
            if total_need:  # `pool.take`: from the free blocks when they cover it
                if total_need <= pool.free:
                    pool.free -= total_need
                else:
                    pool.take(total_need)
            # 4. the counters
            end = ends[-1]
            gap_values.append(ends[0] - self._last_s)  # d equal gaps: one run
            gap_counts.append(d)
            tick = self._tick = tick + k
            self._kv += k * d
            self._last_s = end
            finished = False
            if finishes[0][0] == tick:  # the finished ones leave the running list
                finished = True
                self._finish(end)
            # 5. the log (`_record_window`): KV blocks in use after each step, as `used`
            # (the record's base) and the blocks taken since (`Timeline.kv_blocks`); after
            # the last, used + total_need (the pool's available blocks fell by what it took:
            # evictions keep them) unless requests finished there and freed theirs
            used = total - available
            if total_need:
                kv_log += accumulate(delta)
            else:
                kv_log += [0] * k
            if finished:
                kv_log[-1] = total - pool.free - pool.per_id * len(pool.lru) - used
            itl_window += durations[1:k]  # their weights: d, from the timeline
            self.now = now = end
            self.steps += k
            t_log += ends
            after = len(running)
            log += (k, d, after, 0, preemptions, d, used)  # `Timeline.window`'s record
            if not (after and now < until) or (stop_at_finish and after < d):
                return True
            d = after
