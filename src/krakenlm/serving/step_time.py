"""The time of one engine step with a mixed batch, from the inference simulator.

A step of a continuous-batching engine carries prefill chunks (c tokens of a prompt whose
first `context` tokens are already in the KV cache) and decode sequences (one token each,
attending to their KV length). Its time is built from the same pieces `Simulator.run` uses
(simulator/run.py): the per-device operator graphs of `model_graphs`, every operator timed by
the session's `OpTimer` (kernel models fitted on measured kernels where the GPU has them), each
graph scheduled on two streams (`schedule`: Kraken's all-reduce overlaps attention, so its
overlap comes from the same schedule), and the software profile's host costs.

Decomposition. Every operator but attention depends only on the step's token count T (GEMM
rows, norms, RoPE, the KV-cache write, collectives of T x width values); the LM head on the
number of sequences that sample; attention on each sequence's query and KV lengths. So:

* non-attention: the layer graphs of a T-token forward pass (`model_graphs(cfg, tp, 1, T, T,
  "prefill")`), with the attention operator's time replaced by the step's attention time A
  (per layer) and scheduled. Tabulated at every T up to 64, then at multiples of 16 / 64 /
  256 and one past each (`token_grid`); at each T on a grid of A from 0 to 4x the graph's collective time (past it the
  collectives are hidden or serial and the residual total - A no longer changes). Off-grid:
  the residual is interpolated linearly in A, then linearly in T; the standard and parallel
  blocks' residual is constant in A (attention cannot overlap a collective), so only T
  interpolates there.
* prefill attention of a chunk: F(1) + F(context + c) - F(context) (the kernel's fixed cost,
  a one-token prompt's time, plus the extra causal work), at least F(c), where F(n) is the
  causal attention time of an n-token prompt (the extra queries of a causal pass), F tabulated
  on `token_grid` (the kernels' query blocks are 64-128 rows) and interpolated linearly;
  chunks of one step add up (one kernel launch each: vLLM's varlen kernel runs them as one,
  so this overstates a step of many short chunks by their floors).
* decode attention: the decode kernel's time for D sequences at their mean KV length,
  tabulated at every D up to 128 and at multiples of 8 / 16 and one past each above
  (`sequence_grid`: the kernels' split heuristics step with the batch) and on `token_grid`
  in the KV length (the kernels split the cache in blocks of 64-256: a step falls between m
  and m + 1), bilinear.
* LM head + its all-gather: the head graph for the sequences that sample, on the same grid.

Host: a step with any prefill token is timed like `Simulator.run`'s prefill (the profile's
prefill CUDA-graph flag, `prefill_gpu_time_scale`, per-step and per-sequence work), a pure
decode step like its decode steps; what the scalar code below does is `run.host_step_times`.
tests/test_serving_step_time.py checks the oracle against `Simulator.run` at grid and
off-grid points.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from math import floor

import numpy as np

try:  # the compiled function numpy.interp calls (its Python wrapper costs more than the
    # interpolation of the few values a decode window holds)
    from numpy._core.multiarray import interp as _interp
except ImportError:  # numpy < 2
    from numpy.core.multiarray import interp as _interp

from ..hardware.schema import DTYPE_BYTES
from ..models import ModelConfig
from ..simulator import Simulator
from ..simulator.constants.software import Sampler
from ..simulator.graph import ATTENTION_MODELS, OpSpec, SimulationError, head_graph, model_graphs
from ..simulator.run import step_overhead
from ..simulator.schedule import TimedOp

# the bytes of each tensor a multi-step round's later step broadcasts (token ids, positions,
# slot mapping, sequence lengths, block tables of up to a few hundred sequences): a few KiB,
# NCCL's latency floor, where the time does not depend on the size (`multi_step_broadcast_s`)
BROADCAST_TENSOR_BYTES = 4096

ATTENTION_FRACTIONS = (0.0, 0.0625, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0, 1.25,
                       1.5, 2.0, 3.0, 4.0)


def token_grid(high: int) -> list[int]:
    """Step token counts tabulated: every count up to 64, then each multiple m of 16 to 512,
    of 64 to 4096 and of 256 beyond, and m + 1 (GEMM tiles are 16-256 rows: a step of the wave
    quantisation falls between m and m + 1, so interpolation never ramps across one), `high`
    included."""
    aligned = [t for t in range(1, high + 1) if t <= 64 or (t <= 512 and t % 16 == 0)
               or (t <= 4096 and t % 64 == 0) or t % 256 == 0]
    points = sorted({p for t in aligned for p in (t, t + 1) if p <= high} | {high})
    return points


def sequence_grid(high: int) -> list[int]:
    """Decode batch sizes tabulated: every size up to 128, then each multiple m of 8 to 512 and
    of 16 beyond, and m + 1 (the decode kernels' split heuristics step with the batch),
    `high` included."""
    aligned = [d for d in range(1, high + 1) if d <= 128 or (d <= 512 and d % 8 == 0)
               or d % 16 == 0]
    return sorted({p for d in aligned for p in (d, d + 1) if p <= high} | {high})


def multi_step_broadcast_s(sim: Simulator, tp: int) -> float:
    """The GPU time between two steps of a vLLM V0 multi-step round on `tp` devices: the
    driver broadcasts the model input's `host.multi_step_broadcast_tensors` GPU tensors again
    before every later step, one NCCL broadcast each (`broadcast_tensor_dict`), and the next
    step's kernels wait for them (serving/vllm_v0.py). Each is timed as the session's NCCL
    all-gather of BROADCAST_TENSOR_BYTES: a ring broadcast, like an all-gather, passes n - 1
    hops, and at a few KiB both sit on NCCL's latency floor. 0 on one device."""
    tensors = sim.profile.host.multi_step_broadcast_tensors
    if tp <= 1 or not tensors:
        return 0.0
    return tensors * sim.timer.collective_s("all_gather", BROADCAST_TENSOR_BYTES, tp)


def sampler_s(sim: Simulator, spec: Sampler, vocab: int, sequences: int) -> float:
    """GPU time of a profile's sampler kernels (`spec`, the profile's `sampler`) over
    `sequences` x `vocab` logits on `sim`'s device: `kernels` plain streaming kernels, each
    moving an equal share of `bytes_per_logit` per logit (timing.py `_stream` with bytes per
    element: the elementwise kind's constants, one launch floor each). 0 when it charges none."""
    if not spec.kernels or not spec.bytes_per_logit or sequences <= 0:
        return 0.0
    share = spec.bytes_per_logit / spec.kernels
    op = OpSpec("sampler", "Sampler", "stream", ("residual", sequences, vocab, share))
    return spec.kernels * sim.timer(op).time_s


class Linear1D:
    """Piecewise-linear interpolation of tabulated y(x), scalar and fast (bisect); flat beyond
    the ends. `many(xs)` is the same for an array (numpy.interp)."""
    __slots__ = ("constant", "x", "xa", "y", "ya")

    def __init__(self, x, y):
        self.x = [float(v) for v in x]
        self.y = [float(v) for v in y]
        self.xa, self.ya = np.array(self.x), np.array(self.y)
        self.constant = all(v == self.y[0] for v in self.y)

    def many(self, x: np.ndarray) -> np.ndarray | float:
        """y at every x (a scalar when y is constant: numpy broadcasts it)."""
        return self.y[0] if self.constant else _interp(x, self.xa, self.ya)

    def __call__(self, x: float) -> float:
        xs = self.x
        if x <= xs[0]:
            return self.y[0]
        if x >= xs[-1]:
            return self.y[-1]
        i = bisect_right(xs, x)
        x0, x1 = xs[i - 1], xs[i]
        w = (x - x0) / (x1 - x0)
        return self.y[i - 1] * (1 - w) + self.y[i] * w


def _whole_grid_index(xs: list[float]) -> list[int]:
    """`bisect_right(xs, m)` for every whole m from 0 to xs[-1], for a grid of whole numbers
    (the KV lengths of `token_grid`): then `bisect_right(xs, x)` is `index[int(x)]` for every
    float 0 <= x <= xs[-1], since a whole xs[i] is <= x exactly when it is <= floor(x): one
    `math.floor` and a list read instead of a bisect's ~9 float comparisons through the object
    protocol."""
    if any(x != int(x) or x < 0 for x in xs):
        raise ValueError("the grid index needs whole, non-negative grid points")
    return [bisect_right(xs, m) for m in range(int(xs[-1]) + 1)]


def _powers_of_two_on(xs: list[float]) -> bool:
    """Whether a grid of KV lengths starts at 1 or above and holds every power of two up to
    its last point (`token_grid` does). Then, for lo < x < hi two neighbouring points and an
    integer i >= 0 with x + i < hi, (x - lo) + i is x + i - lo exactly: lo, x and x + i lie
    in one binade [2^e, 2^(e+1)) (its ends are grid points), where x + i is exact (i is a
    multiple of the ulp) and both differences are exact (Sterbenz: y / 2 <= x <= 2y)."""
    points = set(xs)
    p = 1.0
    while p <= xs[-1]:
        if p not in points:
            return False
        p *= 2
    return xs[0] >= 1


def _at(table: tuple[list[float], list[float]], x: float) -> float:
    """`Linear1D.__call__` on its (x, y) lists, without the call through the object."""
    xs, ys = table
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect_right(xs, x)
    x0, x1 = xs[i - 1], xs[i]
    w = (x - x0) / (x1 - x0)
    return ys[i - 1] * (1 - w) + ys[i] * w


def _interp_run(xs: list[float], ys: list[float], x0: float, steps: int) -> list[float]:
    """numpy.interp of (xs, ys) at x0, x0 + 1, ..., x0 + steps - 1 on Python floats, by
    numpy's operations (numpy/_core/src/multiarray/compiled_base.c, `arr_interp`): ys[0]
    below xs[0], ys[-1] at and past xs[-1], ys[j] at a grid point xs[j], else
    slope * (x - xs[j]) + ys[j] with slope = (ys[j + 1] - ys[j]) / (xs[j + 1] - xs[j]); so
    the same floats as the array call, without its fixed cost on a few values. The points
    rise, so the bracket is searched once, and again only when a point leaves it."""
    j = bisect_right(xs, x0) - 1
    if 0 <= j < len(xs) - 1 and xs[j] < x0 and x0 + (steps - 1) < xs[j + 1]:
        lo, y0 = xs[j], ys[j]  # every point inside one interval (most windows)
        slope = (ys[j + 1] - y0) / (xs[j + 1] - lo)
        return [slope * (x0 + i - lo) + y0 for i in range(steps)]
    first, last = xs[0], xs[-1]
    out = []
    j = max(j, 0)
    for i in range(steps):
        x = x0 + i  # as numpy adds the offsets 0.0, 1.0, ... (an int converts exactly)
        if x < first:
            out.append(ys[0])
        elif x >= last:
            out.append(ys[-1])
        else:
            if xs[j + 1] <= x:
                j = bisect_right(xs, x, j) - 1
            lo = xs[j]
            if lo == x:
                out.append(ys[j])
            else:
                y0 = ys[j]
                out.append((ys[j + 1] - y0) / (xs[j + 1] - lo) * (x - lo) + y0)
    return out


def _window_attention_list(plan: _DecodePlan, sequences: int, mean_kv: float,
                           steps: int) -> list[float]:
    """`StepTimer._window_attention` as a list, on Python floats (`_interp_run` for the
    rows' interpolation, then the same operations per step as on the arrays)."""
    row_i, row_j, w, beyond = plan.attention
    if row_i.constant:
        att = row_i.y[0]
        if beyond:
            return [att * sequences / beyond] * steps
        if w == 0.0:
            return [att] * steps
        a = att * (1 - w)
        if row_j.constant:
            return [a + row_j.y[0] * w] * steps
        return [a + b * w for b in _interp_run(row_j.x, row_j.y, mean_kv, steps)]
    atts = _interp_run(row_i.x, row_i.y, mean_kv, steps)
    if beyond:
        return [a * sequences / beyond for a in atts]
    if w == 0.0:
        return atts
    u = 1 - w
    if row_j.constant:
        b = row_j.y[0] * w
        return [a * u + b for a in atts]
    return [a * u + b * w for a, b in zip(atts, _interp_run(row_j.x, row_j.y, mean_kv, steps))]


def _bracket(xs: list[float], x: float) -> tuple[int, int, float]:
    if x <= xs[0]:
        return 0, 0, 0.0
    if x >= xs[-1]:
        n = len(xs) - 1
        return n, n, 0.0
    i = bisect_right(xs, x)
    return i - 1, i, (x - xs[i - 1]) / (xs[i] - xs[i - 1])


@dataclass
class _GraphTable:
    """One layer graph (or another graph that repeats `count` times) over the token grid:
    per T the residual (total - A) on a grid of attention times A, for a compute-bound and a
    memory-bound attention."""
    kernels: int
    count: int
    attention: bool  # the graph holds an attention operator (not the embedding)
    residual: dict[str, list[Linear1D]]  # bound -> one interpolant over A per T grid point


@dataclass(frozen=True)
class _DecodePlan:
    """What `StepTimer.decode_steps_s` reads for one batch size (see `_decode_plan`)."""
    attention: tuple  # (row i, row j, weight of j, sequences of the last row when beyond it)
    graphs: tuple  # per graph: (residual row i, row j, weight of j, has attention,
    #                kernel floor or None, repeat count)
    head_s: float
    overhead_s: float
    overlaps: bool
    # (c, r, count) when every step's time is max(c + (r + attention) * count + head,
    # overhead) (or + overhead): the graphs' residuals do not vary with the attention time
    # (c sums the ones without attention), one graph adds the attention; else None (count as
    # a float: float-only arithmetic, the same products)
    scalar: tuple[float, float, float] | None = None
    # with `scalar`, when the attention is one row of the table (a batch size on the grid):
    # (row x, row y, c, r, count, head, overhead), `decode_steps_list`'s shortest path
    line: tuple | None = None


PREFILL_MEMO_SIZE = 1 << 16  # (chunk, context) prefill attention times kept per oracle
SCALAR_STEPS = 16  # decode windows up to this long are timed on Python floats
LINE_STEPS = 64  # and up to this long when they stay inside one interval of a plan's `line`
# a step's offset from a window's first KV length as a float (x + 3.0 is x + 3: an int converts
# exactly; float + float is the interpreter's specialised path)
LINE_OFFSETS = tuple(float(i) for i in range(LINE_STEPS))
DECODE_OFFSETS = 4096  # steps of a decode window whose KV offsets are kept as one array


def _scalar_form(graphs: tuple) -> tuple[float, float, float] | None:
    """A decode plan's `scalar` form (see `_DecodePlan`): c is what `decode_steps_s` adds
    up, in its order and by its operations, over the leading graphs without attention before
    the one graph with it; None when a residual varies with the attention time, a graph after
    the first adds the attention or has a kernel floor."""
    c, tail = None, []
    for res_i, res_j, w_t, attention, kernel_floor, count in graphs:
        if not res_i.constant or (w_t and not res_j.constant):
            return None
        r = res_i.y[0]
        if w_t:
            r = r * (1 - w_t) + res_j.y[0] * w_t
        if attention or tail:
            tail.append((r, attention, kernel_floor, count))
            continue
        t = r + 0.0
        if kernel_floor is not None:
            t = float(np.maximum(t, kernel_floor))
        if count != 1:
            t = t * count
        c = t if c is None else c + t
    if len(tail) != 1 or not tail[0][1] or tail[0][2] is not None:
        return None
    return (0.0 if c is None else c), tail[0][0], float(tail[0][3])  # x * 80.0 is x * 80


class StepTimer:
    """Mixed-batch step times for one model on one replica (a `Simulator` session, TP)."""

    def __init__(self, sim: Simulator, config: ModelConfig, tp: int, *, max_tokens: int = 8192,
                 max_sequences: int = 256, max_context: int | None = None,
                 capture_max: int | None = None):
        if sim.options.attention_path(config.head_dim) != "fused":
            raise SimulationError(
                f"the serving simulator times fused attention only; head dim {config.head_dim} "
                f"runs {sim.options.attention_path(config.head_dim)}")
        self.sim, self.config, self.tp = sim, config, tp
        self.profile = sim.profile
        self.bytes_per_value = DTYPE_BYTES[sim.precision("all_reduce")]
        self.max_context = int(max_context or config.context_len)
        self.tokens_grid = token_grid(max(max_tokens, max_sequences))
        self.seq_grid = sequence_grid(max_sequences)
        self._tables = self._layer_tables()
        self._head_kernels = len(head_graph(config, tp, 1, self.bytes_per_value,
                                            sim.options).ops)
        self._head = Linear1D(self.seq_grid, [self._head_s(n) for n in self.seq_grid])
        self.build_s = 0.0
        (self._fast_tables, self._host, self._head_floor, self._host_ungraphed,
         self._fast_tables_ungraphed, self._head_floor_ungraphed) = self._fast_constants()
        self.multi_step_broadcast_s = multi_step_broadcast_s(sim, tp)
        self._heads: dict[bool, dict[int, float]] = {True: {}, False: {}}  # `_head_step_s`
        # the same for the steps above the largest captured graph (`_graph_top`)
        self._heads_ungraphed: dict[bool, dict[int, float]] = {True: {}, False: {}}
        # the token count a step's padded operators run at, per token count up to the largest
        # graph the engine captures under its knobs (this oracle's `max_sequences`,
        # `max_tokens` and `capture_max`, the engine's own capture-size knob where given:
        # `Graphs.largest_captured`) or the token grid's top, for steps with
        # prompt tokens (True) and pure-decode steps (False): `Graphs.padded_tokens` read once
        # (empty lists: the engine does not pad)
        graphs = self.profile.graphs
        largest = sim.largest_captured(tp, max_sequences, max_tokens, capture_max)
        top = min(largest, self.tokens_grid[-1])
        self._pad: dict[bool, list[int]] = {
            p: [graphs.padded_tokens(t, p, largest) for t in range(top + 1)]
            if graphs.pads else [] for p in (True, False)}
        # per phase, the largest step that replays a graph where the engine's captured sizes
        # are read (`Graphs.pads`) and the phase is captured: a step of more tokens runs
        # without a graph, its kernels issued from the host (`_host_ungraphed`); None: every
        # step of the phase as the profile says (a profile whose sizes are not read times
        # them as captured)
        self._graph_top: dict[bool, int | None] = {
            p: largest if graphs.pads and (graphs.prefill and graphs.pad_mixed if p
                                           else graphs.decode) else None
            for p in (True, False)}
        self._sampler: dict[int, float] = {}  # `sampler_s` per batch size
        self._prefill_attention = self._prefill_attention_table()
        self._decode_attention = self._decode_attention_table()
        self._decode_rows = [(r.x, r.y) for r in self._decode_attention]
        # every decode row is on the same KV grid (`_decode_attention_table`): its bisects as
        # one list read (`_whole_grid_index`; `decode_attention_s`, the counted engine)
        kv_grid = self._decode_rows[0][0]
        if any(x != kv_grid for x, _ in self._decode_rows):
            raise ValueError("decode attention rows on different KV grids")
        self._kv_index = _whole_grid_index(kv_grid)
        # the counted engine's decode windows offset their KV lengths from the grid point
        # below them, exact only on a grid holding every power of two (`_powers_of_two_on`)
        if not _powers_of_two_on(kv_grid):
            raise ValueError("decode attention KV grid without every power of two")
        self._decode_plans: dict[int, _DecodePlan] = {}
        self._attention_rows: dict[int, tuple] = {}  # `decode_attention_s`'s, per batch size
        self._step_offsets = np.arange(DECODE_OFFSETS, dtype=float)
        self._prefill_memo: dict[tuple[int, int], float] = {}
        # `step_s`'s rows per (bound, token count) (`_rows_at`: at most two entries per count
        # up to the budget, the same every call)
        self._step_rows: dict[tuple[str, int], tuple[float, tuple, tuple | None]] = {}
        # the same for steps above the largest captured graph, where their kernels' issue
        # rate differs (`_fast_constants`); else the same dict
        self._step_rows_ungraphed = self._step_rows \
            if self._fast_tables_ungraphed is self._fast_tables else {}

    # ------------------------------------------------------------------------ tabulation
    def _timed(self, ops: list[OpSpec]) -> list[TimedOp]:
        return [self.sim.timer(op) for op in ops]

    def _graphs(self, tokens: int):
        graphs = model_graphs(self.config, self.tp, 1, tokens, tokens, "prefill",
                              self.bytes_per_value, options=self.sim.options)
        return graphs[:-1]  # the head is tabulated over the sequences that sample

    def _layer_tables(self) -> list[_GraphTable]:
        per_graph: list[_GraphTable] = []
        for T in self.tokens_grid:
            for j, g in enumerate(self._graphs(T)):
                timed = self._timed(g.ops)
                att = [i for i, op in enumerate(g.ops) if op.model == "flash_prefill"]
                comm = sum(t.time_s for t in timed if t.stream == "comm")
                grid = [comm * f for f in ATTENTION_FRACTIONS] if comm > 0 and att else [0.0]
                if j == len(per_graph):
                    per_graph.append(_GraphTable(len(g.ops), g.count, bool(att),
                                                 {"compute": [], "memory": []}))
                for bound in ("compute", "memory"):
                    ends = [self._schedule_with(timed, att, a, bound) for a in (grid[0], grid[-1])]
                    if abs(ends[1] - ends[0]) > 1e-12 * max(ends[0], 1e-9):
                        xs, ys = grid, [self._schedule_with(timed, att, a, bound) for a in grid]
                    else:  # no collective overlaps attention (or none at all): constant
                        xs, ys = [0.0, 1.0], [ends[0], ends[0]]
                    per_graph[j].residual[bound].append(Linear1D(xs, ys))
        return per_graph

    def _schedule_with(self, timed: list[TimedOp], att: list[int], a: float,
                       bound: str) -> float:
        """Residual (total - a) of a graph whose attention operators take `a` seconds."""
        ops = list(timed)
        for i in att:
            o = ops[i]
            ops[i] = TimedOp(o.name, o.category, o.stream, a, bound, o.deps, o.memory_share)
        return self.sim.scheduler(ops).total_s - (a if att else 0.0)

    def _head_s(self, sequences: int) -> float:
        g = head_graph(self.config, self.tp, sequences, self.bytes_per_value, self.sim.options)
        return self.sim.scheduler(self._timed(g.ops)).total_s

    def sampler_s(self, sequences: int) -> float:
        """The profile's sampler kernels over `sequences` rows of the whole vocabulary (an
        engine gathers the logits to one rank before it samples: `sampler_s`)."""
        t = self._sampler.get(sequences)
        if t is None:
            t = self._sampler[sequences] = sampler_s(self.sim, self.profile.sampler,
                                                     self.config.vocab_size, sequences)
        return t

    def _attention_spec(self, graph_ops: list[OpSpec]) -> OpSpec:
        return next(op for op in graph_ops if op.model in ATTENTION_MODELS)

    def _prefill_attention_table(self) -> Linear1D:
        lengths = [0] + token_grid(self.max_context)
        times = [0.0]
        for n in lengths[1:]:
            g = model_graphs(self.config, self.tp, 1, n, n, "prefill", self.bytes_per_value,
                             options=self.sim.options)[-2]
            times.append(self.sim.timer(self._attention_spec(g.ops)).time_s)
        return Linear1D(lengths, times)

    def _decode_attention_table(self) -> list[Linear1D]:
        kv = np.array(token_grid(self.max_context))  # the kernels split the KV in 64-256 blocks
        rows = []
        for d in self.seq_grid:
            first, second = (self._attention_spec(model_graphs(
                self.config, self.tp, d, 1, int(k), "decode", self.bytes_per_value,
                options=self.sim.options)[-2].ops) for k in (kv[0], kv[0] + 1))
            rows.append(Linear1D(kv, self.sim.timer.time_steps(first, second, kv)))
        return rows

    def _fast_constants(self):
        """What `step_s` reads on every call, gathered once: per bound, each graph table's
        rows as (x, y) lists with the kernel-launch floor and repeat count; per phase
        (prefill True/False) the host constants of `run.step_overhead` and the GPU scaling."""
        host, sw = self.profile.host, self.profile
        per_kernel = host.per_kernel_s
        # a step above the largest captured graph issues at the rate the engine then runs at
        # (`SoftwareProfile.issuing_host`: SGLang's and vLLM V0's eager dispatch)
        above = sw.issuing_host(host, True).per_kernel_s

        def tables_at(rate: float) -> dict:
            return {bound: [([(r.x, r.y) for r in t.residual[bound]], t.attention,
                             t.kernels * rate, t.count) for t in self._tables]
                    for bound in ("compute", "memory")}
        tables = tables_at(per_kernel)
        consts, ungraphed = {}, {}
        for prefill in (True, False):
            captured = sw.graphs.prefill if prefill else sw.graphs.decode
            for out, graphed, rate in ((consts, captured, per_kernel), (ungraphed, False, above)):
                out[prefill] = (
                    graphed, host.prefill_gpu_time_scale if prefill else 1.0,
                    not graphed and rate > 0,
                    host.per_step_s("prefill" if prefill else "decode", self.tp),
                    host.per_sequence_s, host.graph_launch_s if graphed else 0.0,
                    host.step_overlaps_gpu)
        return (tables, consts, self._head_kernels * per_kernel, ungraphed,
                tables if above == per_kernel else tables_at(above), self._head_kernels * above)

    # --------------------------------------------------------------------------- queries
    def prefill_attention_s(self, chunk: int, context: int) -> float:
        """Attention time (one layer) of `chunk` new prompt tokens after `context` cached ones."""
        memo = self._prefill_memo  # the engines ask for the same (chunk, context) often
        key = (chunk, context)
        t = memo.get(key)
        if t is not None:
            return t
        if len(memo) >= PREFILL_MEMO_SIZE:
            memo.clear()
        f = self._prefill_attention
        if context <= 0:
            t = memo[key] = f(chunk)
            return t
        # the kernel's fixed cost (a one-token prompt's time) plus the extra causal work
        t = memo[key] = max(f(chunk), f(1) + f(context + chunk) - f(context))
        return t

    def decode_attention_s(self, sequences: int, mean_kv: float) -> float:
        """Attention time (one layer) of `sequences` decode tokens at a mean KV length: the
        KV-length interpolation of the batch size's row (`_attention_rows`), or of the two
        rows around it weighted, or of the last row scaled past the table."""
        if sequences <= 0:
            return 0.0
        rows = self._attention_rows.get(sequences)
        if rows is None:
            rows = self._attention_rows[sequences] = self._attention_rows_of(sequences)
        (xs, ys), upper, w, beyond = rows
        if mean_kv <= xs[0]:  # `_at((xs, ys), mean_kv)` written out
            a = ys[0]
        elif mean_kv >= xs[-1]:
            a = ys[-1]
        else:  # xs[0] < mean_kv < xs[-1]: `bisect_right(xs, mean_kv)`
            i = self._kv_index[floor(mean_kv)]
            x0 = xs[i - 1]
            u = (mean_kv - x0) / (xs[i] - x0)
            a = ys[i - 1] * (1 - u) + ys[i] * u
        if beyond:  # beyond the table: proportional to the sequences
            return a * sequences / beyond
        return a if w == 0.0 else a * (1 - w) + _at(upper, mean_kv) * w

    def _attention_rows_of(self, sequences: int) -> tuple[tuple, tuple, float, int]:
        """`decode_attention_s`'s rows for a batch size: the lower row, the upper row, the
        upper's weight, and the table's last size when the batch is past it (else 0)."""
        rows, grid = self._decode_rows, self.seq_grid
        if sequences > grid[-1]:
            return rows[-1], rows[-1], 0.0, grid[-1]
        if sequences <= grid[0]:
            return rows[0], rows[0], 0.0, 0
        if sequences == grid[-1]:
            return rows[-1], rows[-1], 0.0, 0
        j = bisect_right(grid, sequences)
        i = j - 1
        return rows[i], rows[j], (sequences - grid[i]) / (grid[j] - grid[i]), 0

    def step_s(self, tokens: int, sequences: int, logits: int, attention_s: float,
               prefill: bool, attention_bound: str | None = None, host: bool = True) -> float:
        """Wall time of one step: `tokens` in all, `sequences` in the batch, `logits` of them
        sampling, `attention_s` the per-layer attention time, `prefill` whether any prompt
        token is in it (the host model of a prefill step, else of a decode step). `host`
        False: without the per-step and per-sequence host work (the GPU's time and its graph
        launch: a step of a multi-step round after the first, whose scheduling and input
        preparation the round's first step did, serving/vllm_v0.py). The layers run at the
        captured graph's padded token count where the engine pads (`Graphs.padded_tokens`);
        attention, the LM head and the host work see the real sequences.

        The engines' hot path: the interpolations of `Linear1D.__call__` and `_bracket` are
        written out here (the same operations in the same order, so the same floats) and the
        host constants read once per session (`_host`)."""
        bound = attention_bound or ("compute" if prefill else "memory")
        pad = self._pad[prefill]  # a captured graph's padded rows (`Graphs.padded_tokens`)
        heads = self._heads[prefill]
        cache = self._step_rows
        if tokens < len(pad):
            tokens = pad[tokens]
            _, scale, floor, per_step, per_seq, launch, overlaps = self._host[prefill]
        else:
            top = self._graph_top[prefill]
            if top is not None and tokens > top:  # no graph holds it: issued from the host
                _, scale, floor, per_step, per_seq, launch, overlaps = \
                    self._host_ungraphed[prefill]
                heads = self._heads_ungraphed[prefill]
                cache = self._step_rows_ungraphed
            else:
                _, scale, floor, per_step, per_seq, launch, overlaps = self._host[prefill]
        rows = cache.get((bound, tokens))
        if rows is None:
            rows = cache[bound, tokens] = self._rows_at(bound, tokens,
                                                        cache is not self._step_rows)
        w, graphs, flat = rows
        a = attention_s
        gpu = 0.0
        if flat is not None and 0.0 < a < 1.0:
            # every residual row is flat, x [0, 1] -> y [c, c] (no collective overlaps
            # attention): the interpolation below with u = (a - 0.0) / (1.0 - 0.0), which is
            # a exactly, and 1 - u computed once for all graphs
            u_low = 1 - a
            for y, y_j, attention, kernel_floor, count in flat:
                r = y * u_low + y * a
                if w:
                    r = r * (1 - w) + (y_j * u_low + y_j * a) * w
                t = (r + (a if attention else 0.0)) * scale
                if floor and t < kernel_floor:
                    t = kernel_floor
                gpu += t * count
        else:
            for ax, ay, bx, by, attention, kernel_floor, count in graphs:
                if a <= ax[0]:  # `_at((ax, ay), a)` written out
                    r = ay[0]
                elif a >= ax[-1]:
                    r = ay[-1]
                else:  # a two-point row (a graph without overlap) has one interval
                    k = bisect_right(ax, a) if len(ax) > 2 else 1
                    x0 = ax[k - 1]
                    u = (a - x0) / (ax[k] - x0)
                    r = ay[k - 1] * (1 - u) + ay[k] * u
                if w:  # and `_at((bx, by), a)`
                    if a <= bx[0]:
                        r_j = by[0]
                    elif a >= bx[-1]:
                        r_j = by[-1]
                    else:
                        k = bisect_right(bx, a) if len(bx) > 2 else 1
                        x0 = bx[k - 1]
                        u = (a - x0) / (bx[k] - x0)
                        r_j = by[k - 1] * (1 - u) + by[k] * u
                    r = r * (1 - w) + r_j * w
                t = (r + (a if attention else 0.0)) * scale
                if floor and t < kernel_floor:
                    t = kernel_floor
                gpu += t * count
        head = heads.get(logits)
        if head is None:
            head = heads[logits] = self._head_step_s(logits, prefill,
                                                     heads is self._heads_ungraphed[prefill])
        gpu += head
        overhead = per_step + sequences * per_seq + launch if host else launch
        if overlaps:  # max(gpu, overhead) without the call
            return overhead if overhead > gpu else gpu
        return gpu + overhead

    def _rows_at(self, bound: str, tokens: int,
                 ungraphed: bool = False) -> tuple[float, tuple, tuple | None]:
        """What `step_s` reads for a token count: the weight w of the upper of the two token
        grid points around it; per graph table (its residual row at the lower point as x
        and y lists, at the upper, whether it holds attention, its kernel floor, its repeat
        count), one flat tuple per graph; and when every one of those rows is flat on
        [0, 1] (`_layer_tables`' form of a residual that does not vary with the attention
        time), per graph (its value at the lower point, at the upper, attention, floor,
        count), else None."""
        xs = self.tokens_grid
        if tokens <= xs[0]:
            i, j, w = 0, 0, 0.0
        elif tokens >= xs[-1]:
            i = j = len(xs) - 1
            w = 0.0
        else:
            j = bisect_right(xs, tokens)
            i, w = j - 1, (tokens - xs[j - 1]) / (xs[j] - xs[j - 1])
        graphs, flat = [], []
        fast = self._fast_tables_ungraphed if ungraphed else self._fast_tables
        for tables, attention, kernel_floor, count in fast[bound]:
            (ax, ay), (bx, by) = tables[i], tables[j]
            graphs.append((ax, ay, bx, by, attention, kernel_floor, float(count)))
            if flat is not None and ax == bx == [0.0, 1.0] and ay[0] == ay[1] and \
                    by[0] == by[1]:
                flat.append((ay[0], by[0], attention, kernel_floor, float(count)))
            else:
                flat = None
        return w, tuple(graphs), None if flat is None else tuple(flat)

    def _head_step_s(self, logits: int, prefill: bool, ungraphed: bool = False) -> float:
        """The LM head's part of `step_s` for `logits` sampling sequences (kept per count in
        `_heads`: the interpolation is the same on every call); `ungraphed`: of a step above
        the largest captured graph."""
        _, scale, floor = (self._host_ungraphed if ungraphed else self._host)[prefill][:3]
        head = self._head(max(1, logits)) * scale
        head_floor = self._head_floor_ungraphed if ungraphed else self._head_floor
        return head_floor if floor and head < head_floor else head

    def decode_steps_s(self, sequences: int, mean_kv: float, steps: int) -> np.ndarray:
        """Wall times of `steps` consecutive pure-decode steps of `sequences` sequences whose
        mean KV length starts at `mean_kv` and grows by one per step: `step_s` vectorised
        (the engine's decode windows). What depends on the batch size only is looked up once
        per size (`_decode_plan`); the array operations are those of the plain formula."""
        plan = self._decode_plans.get(sequences)
        if plan is None:
            plan = self._decode_plans[sequences] = self._decode_plan(sequences)
        att = self._window_attention(plan, sequences, mean_kv, steps)
        # a float until the first term that varies with the step, then an array; the first
        # term is taken as it is (0.0 + x is x: step times are never -0.0) and a count of 1
        # not multiplied (x * 1 is x), so two array operations fewer than the plain formula
        gpu = None
        for res_i, res_j, w_t, attention, kernel_floor, count in plan.graphs:
            r = res_i.y[0] if res_i.constant else _interp(att, res_i.xa, res_i.ya)
            if w_t:
                r = r * (1 - w_t) + res_j.many(att) * w_t
            t = r + (att if attention else 0.0)
            if kernel_floor is not None:
                t = np.maximum(t, kernel_floor)
            if count != 1:
                t = t * count
            gpu = t if gpu is None else gpu + t
        gpu = (0.0 if gpu is None else gpu) + plan.head_s
        if not isinstance(gpu, np.ndarray):
            gpu = np.full(steps, gpu)
        overhead = plan.overhead_s
        return np.maximum(gpu, overhead) if plan.overlaps else gpu + overhead

    def decode_steps_list(self, sequences: int, mean_kv: float, steps: int) -> list[float]:
        """`decode_steps_s` as a list of floats. A short window (at most `SCALAR_STEPS`
        steps) of a batch size whose plan has a `scalar` form is computed on Python floats
        past the attention interpolation: the same IEEE double operations in the same order
        as the array formula, so the same floats, without its fixed cost per array
        operation (the engines' decode windows are mostly 2-10 steps); up to `LINE_STEPS`
        steps when the plan's attention is one table row (`line`) and the window's KV
        lengths stay inside one interval of it (one expression per step)."""
        plan = self._decode_plans.get(sequences)
        if plan is None:
            plan = self._decode_plans[sequences] = self._decode_plan(sequences)
        line = plan.line
        if line is not None and steps <= LINE_STEPS:
            xs, ys, c, r, count, head, overhead = line
            j = bisect_right(xs, mean_kv) - 1
            if 0 <= j < len(xs) - 1 and xs[j] < mean_kv and mean_kv + (steps - 1) < xs[j + 1]:
                # every step inside one interval of the row: `_interp_run`'s first case and
                # the scalar formula below, written out in one expression (the same
                # operations in the same order)
                lo, y0 = xs[j], ys[j]
                slope = (ys[j + 1] - y0) / (xs[j + 1] - lo)
                offsets = LINE_OFFSETS[:steps]  # floats: float-only arithmetic per step
                if plan.overlaps:
                    return [g if (g := c + (r + (slope * (mean_kv + i - lo) + y0)) * count +
                                  head) > overhead else overhead for i in offsets]
                return [c + (r + (slope * (mean_kv + i - lo) + y0)) * count + head + overhead
                        for i in offsets]
        scalar = plan.scalar
        if scalar is None or steps > SCALAR_STEPS:
            return self.decode_steps_s(sequences, mean_kv, steps).tolist()
        atts = _window_attention_list(plan, sequences, mean_kv, steps)
        c, r, count = scalar
        head, overhead = plan.head_s, plan.overhead_s
        if plan.overlaps:  # max(gpu, overhead) without the call
            return [g if (g := c + (r + a) * count + head) > overhead else overhead
                    for a in atts]
        return [c + (r + a) * count + head + overhead for a in atts]

    def _window_attention(self, plan: _DecodePlan, sequences: int, mean_kv: float,
                          steps: int) -> np.ndarray | float:
        """The per-layer decode attention time of each step of a decode window (a float
        when it does not vary)."""
        offsets = self._step_offsets
        kv = mean_kv + (offsets[:steps] if steps <= len(offsets) else np.arange(steps))
        row_i, row_j, w, beyond = plan.attention
        att = row_i.y[0] if row_i.constant else _interp(kv, row_i.xa, row_i.ya)
        if beyond:  # past the table: proportional to the sequences
            att = att * sequences / beyond
        elif w != 0.0:
            att = att * (1 - w) + row_j.many(kv) * w
        return att

    def _decode_plan(self, sequences: int) -> _DecodePlan:
        """The pieces of a pure-decode step of `sequences` sequences that do not depend on the
        KV length: the attention rows and their weight, each graph's residual rows over the
        attention time (memory-bound) with its kernel floor and count, the LM head and the
        host overhead."""
        rows, grid = self._decode_attention, self.seq_grid
        if sequences > grid[-1]:
            attention = (rows[-1], rows[-1], 0.0, grid[-1])
        else:
            i, j, w = _bracket(grid, sequences)
            attention = (rows[i], rows[j], w, 0)
        host, sw = self.profile.host, self.profile
        top = self._graph_top[False]
        graphed = sw.graphs.decode and (top is None or sequences <= top)
        # above the largest captured graph, the engine's issue rate there (`_fast_constants`)
        rate = sw.issuing_host(host, sw.graphs.decode and not graphed).per_kernel_s
        floored = not graphed and rate > 0
        padded = self._pad[False]  # the layers run at the captured graph's batch
        i, j, w = _bracket(self.tokens_grid,
                           padded[sequences] if sequences < len(padded) else sequences)
        graphs = tuple((t.residual["memory"][i], t.residual["memory"][j], w, t.attention,
                        t.kernels * rate if floored else None, t.count)
                       for t in self._tables)
        head = self._head(sequences)
        if floored:
            head = max(head, self._head_kernels * rate)
        overhead = step_overhead(host, sw, "decode", sequences, self.tp, graphed)
        scalar = _scalar_form(graphs)
        row, _, w, beyond = attention
        line = None
        if scalar is not None and not row.constant and w == 0.0 and not beyond:
            line = (row.x, row.y, *scalar, head, overhead)
        return _DecodePlan(attention, graphs, head, overhead, host.step_overlaps_gpu, scalar,
                           line)

    def batch_s(self, prefills: list[tuple[int, int]], decode_kv: list[int],
                logits: int | None = None) -> float:
        """A step of prefill chunks (tokens, context before them) and decode sequences (their
        KV length, the new token included); `logits` defaults to every sequence."""
        chunks = sum(c for c, _ in prefills)
        att_p = sum(self.prefill_attention_s(c, ctx) for c, ctx in prefills)
        d = len(decode_kv)
        att_d = self.decode_attention_s(d, sum(decode_kv) / d) if d else 0.0
        n = len(prefills) + d
        bound = "compute" if att_p >= att_d else "memory"
        return self.step_s(chunks + d, n, n if logits is None else logits, att_p + att_d,
                           bool(prefills), bound)

