"""Whole-model inference: prefill (TTFT), every decode step (TPOT), memory per device.

Every operator of every graph (graph.py) is timed (timing.py: the GPU kernel models fitted on
measured kernels where the device has them, the template tile models otherwise), each graph is
scheduled on two streams (schedule.py), and the software profile (software.py) adds what the
host does: a step issued kernel by kernel from the host takes, per graph, max(GPU time,
kernels x host time per kernel) (kernels: the graph's operators, or the profile's
`issued_kernels` counts for a stack that issues more: `issued_kernels`); a step replayed as a
CUDA graph pays one graph launch; every step pays the per-step host work (scheduler, sampling) plus its per-sequence part for each
sequence in the batch, added or, with an asynchronous scheduler, overlapped. Identical layers
are scheduled once and multiplied.

Decode: every step is accounted for, and fast. Only the attention operators depend on the KV
length; their times for all steps are computed at once (vectorised), everything else once.
When no collective can run beside those operators (the dependency structure forbids it: the
standard and parallel blocks), a step's time is the first step's plus the change of the
attention time, exactly. When one can (Kraken's all-reduce overlaps attention), the step is
scheduled exactly at every `DECODE_SAMPLE_STRIDE`-th step and the overlap residual (step time
minus the attention time) is interpolated linearly between those steps; `exact_decode=True`
schedules every step (benchmarks/sim_speed.py measures the difference).

Token accounting: prefill processes the prompt and yields the first token (TTFT); each of the
gen - 1 decode steps then yields one more token, attending to prompt + tokens so far. TPOT is
the mean decode step; end-to-end = TTFT + sum of decode steps.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import warn
from ..hardware import load_system
from ..hardware.identity import lookup
from ..hardware.schema import DTYPE_BYTES, Device, System
from ..models import ModelConfig
from .constants import gpu_kernels as gpu_store
from .constants.gpu_kernels import DeviceCalibration
from .constants.software import Host, SoftwareProfile, load_software
from .constants.template import Calibration
from .graph import (
    ATTENTION_MODELS,
    HEAD_GRAPH,
    Graph,
    GraphOptions,
    OpSpec,
    SimulationError,
    model_graphs,
)
from .memory import MemoryUse, check_fits, memory_use
from .schedule import COMM_CORE_SHARE, Schedule, TimedOp, schedule
from .timing import OpTimer
from .uncertainty import prediction_interval

MODES = ("simulate", "tile", "roofline")
DECODE_SAMPLE_STRIDE = 32
HOST_KERNELS = "host overhead (kernel launches)"
HOST_STEP = "host overhead (per step)"
PREFILL_SCALE = "prefill GPU time over the kernel models (fitted per system)"


@dataclass(frozen=True)
class GraphTime:
    """One graph of a phase: its GPU time per step (a single value for prefill), how many
    kernels the host issues for it and how often it repeats per step (layers). Frozen: the
    fields derived from `gpu_s` at construction must not go stale."""
    name: str
    kernels: int
    count: int
    gpu_s: np.ndarray
    # gpu_s[0] when every step has that same value (bit for bit), else None: re-timing then
    # works on one float instead of an array (`host_step_times`)
    same_every_step_s: float | None = field(init=False, repr=False, compare=False)
    n_steps: int = field(init=False, repr=False, compare=False)  # len(gpu_s)

    def __post_init__(self) -> None:
        bits = np.ascontiguousarray(self.gpu_s, dtype=np.float64).view(np.int64)
        same = float(self.gpu_s[0]) if bits.size and bool((bits == bits[0]).all()) else None
        object.__setattr__(self, "n_steps", len(self.gpu_s))
        object.__setattr__(self, "same_every_step_s", same)


@dataclass
class PhaseResult:
    """One phase (prefill or decode) of a simulated run: its time in seconds, that time per category
    (the schedule's attribution, e.g. "GEMM", "exposed AllReduce"), per operator its category,
    time (s) and count, the per-graph GPU times kept for re-timing with other host constants,
    and, for decode, the time of every step (s)."""
    time_s: float = 0.0
    categories: dict[str, float] = field(default_factory=dict)
    ops: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> category, time, count
    graphs: list[GraphTime] = field(default_factory=list)
    step_times_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # decode: every step

    def add_category(self, category: str, seconds: float) -> None:
        if seconds:
            self.categories[category] = self.categories.get(category, 0.0) + seconds

    def add_op(self, name: str, category: str, seconds: float, count: int) -> None:
        entry = self.ops.setdefault(name, {"category": category, "time_s": 0.0, "count": 0})
        entry["time_s"] += seconds
        entry["count"] += count


@dataclass
class Result:
    """One simulated query (Simulator.run): model, system, architecture, TP, batch, prompt and
    generated tokens, the timing mode (simulate, tile or roofline) and dtype; TTFT, mean TPOT and
    end-to-end time in seconds; memory per device; the prefill and decode phases and the
    categories of one later layer per phase; the software profile, the attention path, which
    model timed each kernel family, the device key of the fitted GPU kernel constants (None:
    template models only), how the decode steps were scheduled (exact, or sampled every
    DECODE_SAMPLE_STRIDE-th step), the wall time of the simulation itself (s), and the nominal 80
    % interval of the latencies (uncertainty.py)."""
    model: str
    system: str
    arch: str
    tp: int
    batch: int
    prompt_tokens: int
    gen_tokens: int
    mode: str
    dtype: str
    ttft_s: float
    tpot_s: float
    e2e_s: float
    memory: MemoryUse
    prefill: PhaseResult
    decode: PhaseResult
    layer_categories: dict[str, dict[str, float]]  # phase -> categories of one (later) layer
    software: str = ""
    attention_path: str = "fused"
    kernel_sources: dict[str, str] = field(default_factory=dict)
    # the device key of the fitted GPU kernel constants that timed the query ("H100"); None:
    # the template models timed every kernel (no calibration, or mode tile / roofline)
    kernel_calibration: str | None = None
    decode_method: str = ""
    simulated_in_s: float = 0.0
    # the largest CUDA graph the profile's engine captures here (`Simulator.largest_captured`;
    # 0: it pads no step), to which the report's padding note reads the steps' padding
    graph_largest: int = 0
    # whether the prefill step and the decode steps replayed a CUDA graph (a step above the
    # largest captured one runs without); None: as the profile captures the phase
    prefill_captured: bool | None = None
    decode_captured: bool | None = None
    profile: SoftwareProfile | None = field(default=None, repr=False, compare=False)
    # nominal 80 % interval of ttft_s / tpot_s / e2e_s from the leave-one-source-out residuals
    # of comparable public measurements, and what the query extrapolates beyond (uncertainty.py)
    interval: dict[str, Any] | None = None

    def cuda_graphs(self) -> dict[str, Any] | None:
        """What the steps replayed: the largest graph the engine captures here (0: the profile
        reads no captured sizes), whether the prompt's step and the decode steps replayed one,
        and the token count each ran its padded operators at (`Graphs.padded_tokens`); None
        without a profile."""
        sw = self.profile
        if sw is None:
            return None
        g = sw.graphs
        prefill = g.prefill if self.prefill_captured is None else self.prefill_captured
        decode = g.decode if self.decode_captured is None else self.decode_captured
        # the tokens `Simulator.run` prefills (an engine that decodes the prompt's last token
        # prefills one fewer)
        tokens = self.batch * (self.prompt_tokens - int(sw.prefill.last_token_in_decode))
        return {"largest_captured": self.graph_largest, "prefill_tokens": tokens,
                "prefill": bool(prefill), "decode": bool(decode) and self.gen_tokens > 1,
                "prefill_runs_at_tokens": g.padded_tokens(tokens, True, self.graph_largest),
                "decode_runs_at_batch": g.padded_tokens(self.batch, False, self.graph_largest)}

    def retimed(self, host: Host) -> tuple[float, float]:
        """(TTFT, mean TPOT) under other host constants, from the per-graph GPU times kept in
        `prefill.graphs` / `decode.graphs`: no re-simulation (used to fit host constants)."""
        sw = self.profile
        if sw is None:
            raise ValueError("this result keeps no software profile")
        prefill_captured = sw.graphs.prefill if self.prefill_captured is None \
            else self.prefill_captured
        decode_captured = sw.graphs.decode if self.decode_captured is None \
            else self.decode_captured
        # a step above the largest captured graph issues its kernels as the engine then does
        issuing = {phase: sw.issuing_host(host, profiled and not captured) for phase, profiled,
                   captured in (("prefill", sw.graphs.prefill, prefill_captured),
                                ("decode", sw.graphs.decode, decode_captured))}
        ttft = _first_step(_step_times(self.prefill.graphs, issuing["prefill"], prefill_captured,
                                       step_overhead(host, sw, "prefill", self.batch, self.tp,
                                                     prefill_captured), 1,
                                       host.prefill_gpu_time_scale)) \
            if self.prefill.graphs else 0.0
        split = sw.prefill.last_token_in_decode
        steps = self.gen_tokens - (0 if split else 1)
        if steps <= 0:
            return ttft, 0.0
        decode = host_step_times(self.decode.graphs, issuing["decode"], decode_captured,
                                 step_overhead(host, sw, "decode", self.batch, self.tp,
                                               decode_captured), steps)
        if split:  # the first decode step produced the first token
            return ttft + float(decode[0]), _mean(decode[1:]) if steps > 1 else 0.0
        return ttft, _mean(decode)

    def breakdown(self) -> list[dict[str, Any]]:
        rows = []
        for phase, res in (("prefill", self.prefill), ("decode", self.decode)):
            for name, info in res.ops.items():
                rows.append({"op": name, "phase": phase, "category": info["category"],
                             "time_s": info["time_s"], "count": info["count"]})
        return rows

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "system": self.system, "arch": self.arch, "tp": self.tp,
                "batch": self.batch, "prompt_tokens": self.prompt_tokens,
                "gen_tokens": self.gen_tokens, "mode": self.mode, "dtype": self.dtype,
                "software": self.software, "attention_path": self.attention_path,
                "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s,
                "memory_bytes_per_device": self.memory.total_bytes,
                "memory": self.memory.to_dict(), "breakdown": self.breakdown(),
                "categories": {"prefill": self.prefill.categories,
                               "decode": self.decode.categories},
                "layer_categories": self.layer_categories,
                "kernel_sources": self.kernel_sources,
                "kernel_calibration": self.kernel_calibration, "decode_method": self.decode_method,
                "cuda_graphs": self.cuda_graphs(),
                "interval": self.interval, "simulated_in_s": self.simulated_in_s}


# ----------------------------------------------------------------------------------- helpers
def _measured_on_another_part(cal: DeviceCalibration, system: System) -> bool:
    """Whether the system `cal` records it was fitted on declares another vendor, family or
    sm_version than `system`'s device (False when that system cannot be loaded)."""
    measured = cal.fitted_on()
    if measured is None:
        return False
    return lookup(measured.device).architecture != lookup(system.device).architecture


_TOLD_TEMPLATE: set[Device] = set()  # devices already warned about in this process


def _kernel_calibration(system: System, explicit: DeviceCalibration | None,
                        mode: str) -> DeviceCalibration | None:
    """The GPU calibration a session uses: `explicit` (--gpu-calibration), else the one the
    device declares (hardware/identity.py), else None. Says so on stderr when it is another
    device's (a what-if: an explicit file other than the declared one, or a declared one
    measured on a part of another vendor, family or sm_version) and, once per device and
    process (a study simulates one device many times), when the device's kernels are timed
    by the template models in mode simulate."""
    declared = gpu_store.for_device(system.device)
    gpu = explicit if explicit is not None else declared
    if gpu is not None and (_measured_on_another_part(gpu, system) if gpu is declared else
                            declared is None or declared.device_key != gpu.device_key):
        # plausible for a what-if device modelled on a measured GPU, but usually a mix-up
        warn(f"GPU calibration {gpu.path or gpu.device_key} holds fits measured on "
             f"{gpu.device_key}, not on {system.name}'s {system.device.name}: its kernels "
             "are timed with another GPU's constants")
    if gpu is None and mode == "simulate" and system.device not in _TOLD_TEMPLATE:
        _TOLD_TEMPLATE.add(system.device)
        warn(f"{system.device.name} ({system.name}) has no fitted GPU kernels "
             "(device.identity.calibration): the template models time it from its datasheet "
             "numbers; docs/adding-a-gpu.md says how to calibrate it")
    return gpu


SCHEDULE_MEMO_SIZE = 4096  # schedules a session keeps (a sweep's queries would grow it unbounded)


class _Scheduler:
    """Schedules timed graphs, memoised on the timed operators: the last `SCHEDULE_MEMO_SIZE`
    distinct graphs (the oldest dropped first), so a long session's memory stays bounded."""

    def __init__(self, core_share: float = COMM_CORE_SHARE) -> None:
        self.core_share = core_share
        self.cache: dict[tuple, Schedule] = {}

    def __call__(self, timed: list[TimedOp]) -> Schedule:
        key = tuple(timed)
        hit = self.cache.get(key)
        if hit is None:
            if len(self.cache) >= SCHEDULE_MEMO_SIZE:
                del self.cache[next(iter(self.cache))]
            hit = self.cache[key] = schedule(timed, self.core_share)
        return hit


def issued_kernels(g: Graph, software: SoftwareProfile, phase: str) -> int:
    """Kernels the host issues for graph `g` of a `phase` ("prefill" or "decode") step: its
    operators, part by part where the profile's `issued_kernels` counts are set (an eager stack
    issues each elementwise step of its norms and RoPE as its own kernel: `graph_kernels`),
    and for the head graph also `outside_layers_<phase>`, the step's kernels that are no
    operator of any graph (mask and position bookkeeping, a decode step's sampling)."""
    counts = software.issued_kernels
    kernels = graph_kernels(g.ops, counts, phase)
    if g.name == HEAD_GRAPH:
        kernels += counts.outside_layers_prefill if phase == "prefill" \
            else counts.outside_layers_decode
    return kernels


# a layer's attention block besides its "attention"-category operators (RoPE apart): the
# projections into and out of it; and the operators of a gated MLP (IssuedKernels)
ATTENTION_PROJECTIONS = ("qkv", "out_proj")
GATED_MLP_OPS = ("ffn_up", "activation", "ffn_down")


def graph_kernels(ops: list, counts, phase: str) -> int:
    """Kernels a graph's operators issue, part by part (`IssuedKernels`): each RMSNorm
    `rmsnorm`, RoPE `rope`, each attention block (one per "qkv" projection: the projections,
    the cache write or concatenation, attention, the output projection) `attention_<phase>`,
    each gated MLP (one per SwiGLU: up projections, SiLU and product, down projection)
    `gated_mlp`, and every other operator one. With every count 0 it is the graph's operator
    count. E.g. gpt-fast's Llama decode layer at TP 1: 2 x 8 + 18 + 15 + 5 + 2 residual adds =
    56; a GPT-2 block in the same stack (LayerNorm, GELU: one kernel each): 1 + 15 + 1 + 1 +
    3 + 1 = 22; the head of a Llama: final RMSNorm 8 + LM head 1."""
    attention = counts.attention_prefill if phase == "prefill" else counts.attention_decode
    kinds = [op.args[0] if op.model == "stream" else "" for op in ops]
    swiglus = kinds.count("swiglu") if counts.gated_mlp else 0
    per_kind = {"rmsnorm": counts.rmsnorm, "rope": counts.rope}
    total = 0
    for op, kind in zip(ops, kinds):
        if attention and (op.name in ATTENTION_PROJECTIONS
                          or op.category == "attention" and kind != "rope"):
            continue
        if swiglus and op.name in GATED_MLP_OPS:
            continue
        total += per_kind.get(kind) or 1
    blocks = sum(op.name == "qkv" for op in ops) if attention else 0
    return total + attention * blocks + counts.gated_mlp * swiglus


def _host_bound(gpu_s: float | np.ndarray, kernels: int, per_kernel_s: float, graphs: bool):
    """A graph issued kernel by kernel cannot run faster than the host issues its kernels."""
    if graphs or per_kernel_s <= 0:
        return gpu_s
    return np.maximum(gpu_s, kernels * per_kernel_s)


def host_step_times(graphs: list[GraphTime], host: Host, captured: bool, step_s: float,
                    steps: int = 1, gpu_scale: float = 1.0) -> np.ndarray:
    """Wall time of every step of a phase under a host model: the per-graph GPU times bounded
    by the host's kernel issue rate (outside CUDA graphs), plus the per-step host work (or its
    excess over the GPU time, with an asynchronous scheduler). What `simulate` reports, and
    what `fit_software` re-evaluates for candidate host constants without re-simulating."""
    times = _step_times(graphs, host, captured, step_s, steps, gpu_scale)
    return np.full(steps, times) if isinstance(times, float) else times


def _step_times(graphs: list[GraphTime], host: Host, captured: bool, step_s: float,
                steps: int, gpu_scale: float) -> float | np.ndarray:
    """`host_step_times`, as one float when every step takes the same time. The same IEEE
    operations in the same order as on whole arrays (a graph whose steps all take one time
    is added as that float), so every step's value is bit for bit the array formula's:
    step = sum over graphs in order of count x max(gpu_s x gpu_scale, kernels x per_kernel_s),
    then + step_s (or max(step, step_s) when the host work overlaps the GPU)."""
    bound = not (captured or host.per_kernel_s <= 0)  # as `_host_bound` decides
    gpu: float | np.ndarray = 0.0
    for g in graphs:
        if g.n_steps != steps and g.n_steps != 1:  # numpy broadcasts (or refuses) the arrays
            return _step_times_of_arrays(graphs, host, captured, step_s, steps, gpu_scale)
        if g.same_every_step_s is not None:
            t = g.same_every_step_s * gpu_scale
            if bound:
                t = _max(t, g.kernels * host.per_kernel_s)
            gpu = gpu + g.count * t
        else:  # x * 1.0 and 1 * x are x exactly: skipped
            t = g.gpu_s * gpu_scale if gpu_scale != 1.0 else g.gpu_s
            if bound:
                t = np.maximum(t, g.kernels * host.per_kernel_s)
            gpu = gpu + (g.count * t if g.count != 1 else t)
    if host.step_overlaps_gpu:
        return _max(gpu, step_s) if isinstance(gpu, float) else np.maximum(gpu, step_s)
    return gpu + step_s


def _mean(values: np.ndarray) -> float:
    """`values.mean()` of a float64 array: np.mean's own sum (np.add.reduce, pairwise) over the
    count, the same float without np.mean's Python wrapper (re-timing calls it per fit step)."""
    return float(np.add.reduce(values) / values.size)


def _first_step(times: float | np.ndarray) -> float:
    return times if isinstance(times, float) else float(times[0])


def _max(a: float, b: float) -> float:
    """np.maximum on two floats: the larger, NaN if either is NaN."""
    return a if a >= b else b if b > a else a + b


def _step_times_of_arrays(graphs: list[GraphTime], host: Host, captured: bool, step_s: float,
                          steps: int, gpu_scale: float) -> np.ndarray:
    """`host_step_times` on whole arrays (graphs whose step counts differ: numpy broadcasts)."""
    gpu = np.zeros(steps)
    for g in graphs:
        gpu = gpu + g.count * _host_bound(g.gpu_s * gpu_scale, g.kernels, host.per_kernel_s,
                                          captured)
    if host.step_overlaps_gpu:
        return np.maximum(gpu, step_s)
    return gpu + step_s


def _add_graph(phase: PhaseResult, g: Graph, timed: list[TimedOp], sched: Schedule,
               times: int, host_s: float, gpu_s: float | None = None) -> None:
    """Add a graph's time: its kernels by category, the excess of a fitted GPU-time scale
    (`gpu_s` over the schedule's total), and what issuing the kernels adds (`host_s`)."""
    gpu_s = sched.total_s if gpu_s is None else gpu_s
    for cat, t in sched.categories.items():
        phase.add_category(cat, t * times)
    if gpu_s != sched.total_s:
        phase.add_category(PREFILL_SCALE, (gpu_s - sched.total_s) * times)
    phase.add_category(HOST_KERNELS, (host_s - gpu_s) * times)
    phase.time_s += host_s * times
    for op in timed:
        start, end = sched.spans[op.name]
        phase.add_op(op.name, op.category, (end - start) * times, times)


def step_overhead(host: Host, software: SoftwareProfile, phase: str, batch: int,
                  tp: int, captured: bool | None = None) -> float:
    """Host work of one step that the GPU waits for: the per-step part (with the part that
    drives the other ranks when `tp` > 1: `Host.per_step_s`), the per-sequence part for each
    of the `batch` sequences the step carries, and the graph launch if captured (`captured`;
    None: as the profile captures the phase)."""
    graphs = (software.graphs.prefill if phase == "prefill" else software.graphs.decode) \
        if captured is None else captured
    return host.per_step_s(phase, tp) + batch * host.per_sequence_s + \
        (host.graph_launch_s if graphs else 0.0)


def _finish_step(phase: PhaseResult, gpu_s: float, overhead_s: float, overlaps: bool) -> float:
    """Add the per-step host work; return the step's wall time."""
    extra = max(0.0, overhead_s - gpu_s) if overlaps else overhead_s
    phase.add_category(HOST_STEP, extra)
    phase.time_s += extra
    return gpu_s + extra


def _graph_options(software: SoftwareProfile, attention: str, mode: str) -> GraphOptions:
    fused = attention == "fused"
    if mode == "tile":  # the template world: plain graph, fused attention at any head size
        return GraphOptions(fused_attention=fused)
    return GraphOptions(fused_attention=fused, max_head_dim=software.attention.max_head_dim,
                        add_norm=software.fusions.add_norm,
                        rope_in_attention=software.fusions.rope_in_attention,
                        row_bias_after_reduce=software.fusions.row_bias_after_reduce,
                        attention_kernel=software.attention.kernel,
                        fused_context=software.attention.context_fused,
                        kv_append=software.attention.kv_append,
                        eager_bytes_per_element=(
                            software.issued_kernels.elementwise_bytes_per_element()))


def padded_graphs(real: list[Graph], padded: list[Graph]) -> list[Graph]:
    """A step that replays a CUDA graph captured for more tokens than it holds
    (`Graphs.padded_tokens`): the graphs of `padded` (built at the padded token count), with
    each fused attention operator and the LM head's graph (`HEAD_GRAPH`) taken from `real` (the
    padded rows hold no KV and sample nothing: vllm-v0.yaml VCG0, vllm.yaml VCG). `real`
    itself where the two do not line up operator for operator (an unfused attention)."""
    if len(real) != len(padded) or any(
            a.name != b.name or [o.name for o in a.ops] != [o.name for o in b.ops]
            for a, b in zip(real, padded)) or not any(
            o.model in ATTENTION_MODELS for g in real for o in g.ops):
        return real
    out = []
    for r, p in zip(real, padded):
        if r.name == HEAD_GRAPH:
            out.append(r)
            continue
        ops = [ro if ro.model in ATTENTION_MODELS else po for ro, po in zip(r.ops, p.ops)]
        out.append(dataclasses.replace(p, ops=ops))
    return out


def _prefill(graphs: list[Graph], timer: OpTimer, scheduler: _Scheduler,
             software: SoftwareProfile, batch: int, tp: int,
             captured: bool) -> tuple[PhaseResult, dict[str, float], float]:
    """The prefill step; `captured` whether it replays a CUDA graph (kernels issued from the
    host otherwise, `_host_bound`, at the rate `SoftwareProfile.issuing_host` gives a step
    above the largest captured graph)."""
    phase = PhaseResult()
    layer: dict[str, float] = {}
    scale = software.host.prefill_gpu_time_scale
    per_kernel = software.issuing_host(software.host,
                                       software.graphs.prefill and not captured).per_kernel_s
    timer.prime(spec for g in graphs for spec in g.ops)
    for g in graphs:
        timed = [timer(spec) for spec in g.ops]
        sched = scheduler(timed)
        gpu = sched.total_s * scale
        kernels = issued_kernels(g, software, "prefill")
        host = float(_host_bound(gpu, kernels, per_kernel, captured))
        _add_graph(phase, g, timed, sched, g.count, host, gpu)
        phase.graphs.append(GraphTime(g.name, kernels, g.count, np.array([sched.total_s])))
        if "layer" in g.name:
            layer = dict(sched.categories)
            if gpu > sched.total_s:
                layer[PREFILL_SCALE] = gpu - sched.total_s
            if host > gpu:
                layer[HOST_KERNELS] = host - gpu
    step = _finish_step(phase, phase.time_s,
                        step_overhead(software.host, software, "prefill", batch, tp, captured),
                        software.host.step_overlaps_gpu)
    return phase, layer, step


def _depends(ops: list[OpSpec]) -> dict[str, set[str]]:
    """Transitive dependencies of every op: explicit deps plus program order on its stream."""
    direct: dict[str, set[str]] = {}
    last: dict[str, str] = {}
    for op in ops:
        direct[op.name] = set(op.deps) | ({last[op.stream]} if op.stream in last else set())
        last[op.stream] = op.name
    closure: dict[str, set[str]] = {}
    for op in ops:  # program order is topological
        seen = set(direct[op.name])
        for d in direct[op.name]:
            seen |= closure.get(d, set())
        closure[op.name] = seen
    return closure


def _overlap_free(ops: list[OpSpec], varying: set[str]) -> bool:
    """True when no collective can ever run beside an op in `varying`: every collective is
    ordered before or after each of them by the dependencies, whatever the durations."""
    deps = _depends(ops)
    for c in ops:
        if c.stream != "comm":
            continue
        for v in varying:
            if not (v in deps[c.name] or c.name in deps[v]):
                return False
    return True


def _decode(config: ModelConfig, tp: int, batch: int, prompt: int, steps: int, b: int,
            opts: GraphOptions, timer: OpTimer, scheduler: _Scheduler,
            software: SoftwareProfile, exact: bool, largest: int,
            captured: bool) -> tuple[PhaseResult, dict[str, float], str]:
    """The decode phase; `largest` the largest captured graph (a batch up to it replays the
    padded size's, `Graphs.padded_tokens`), `captured` whether the batch replays a graph
    (kernels issued from the host otherwise, `_host_bound`)."""
    phase = PhaseResult()
    if steps <= 0:
        return phase, {}, "none"
    kv = np.arange(prompt + 1, prompt + steps + 1)
    base = model_graphs(config, tp, batch, 1, int(kv[0]), "decode", b, options=opts)
    other = model_graphs(config, tp, batch, 1, int(kv[0]) + 1, "decode", b, options=opts)
    padded = software.graphs.padded_tokens(batch, False, largest)
    if padded != batch:  # the batch replays a larger captured graph
        base, other = (padded_graphs(g, model_graphs(config, tp, padded, 1, k, "decode", b,
                                                     options=opts))
                       for g, k in ((base, int(kv[0])), (other, int(kv[0]) + 1)))
    per_kernel = software.issuing_host(software.host,
                                       software.graphs.decode and not captured).per_kernel_s
    overhead = step_overhead(software.host, software, "decode", batch, tp, captured)
    overlaps = software.host.step_overlaps_gpu

    timer.prime(spec for g in base for spec in g.ops)
    step_gpu = np.zeros(steps)
    methods = set()
    layer: dict[str, float] = {}
    for g, g2 in zip(base, other):
        varying = [i for i, (a, c) in enumerate(zip(g.ops, g2.ops)) if a != c]
        timed = [timer(spec) for spec in g.ops]
        sched = scheduler(timed)
        if "layer" in g.name and not layer:
            layer = dict(sched.categories)
        kernels = issued_kernels(g, software, "decode")
        if not varying:
            phase.graphs.append(GraphTime(g.name, kernels, g.count, np.full(steps, sched.total_s)))
            t = _host_bound(np.full(steps, sched.total_s), kernels, per_kernel, captured)
            step_gpu += t * g.count
            _add_graph(phase, g, timed, sched, g.count * steps, float(t[0]))
            continue
        # times of the kv-length-dependent ops at every step (vectorised where possible)
        var_times = {i: timer.time_steps(g.ops[i], g2.ops[i], kv) for i in varying}
        delta = sum(var_times[i] - var_times[i][0] for i in varying)
        if exact or not _overlap_free(g.ops, {g.ops[i].name for i in varying}):
            total, method = _scheduled_steps(g, varying, var_times, timer, scheduler, kv, exact)
        else:
            total, method = sched.total_s + delta, "exact (no overlap with attention)"
        methods.add(method)
        phase.graphs.append(GraphTime(g.name, kernels, g.count, np.asarray(total, float)))
        t = _host_bound(total, kernels, per_kernel, captured)
        step_gpu += t * g.count
        # categories and per-op times: the first step's, plus the attention time added since
        for cat, s in sched.categories.items():
            phase.add_category(cat, s * g.count * steps)
        phase.add_category("attention", float(delta.sum()) * g.count)
        phase.add_category(HOST_KERNELS, float((t - total).sum()) * g.count)
        # a longer attention hides more of an overlapped collective: the exposed part shrinks
        phase.add_category("exposed AllReduce", float((total - sched.total_s - delta).sum()) * g.count)
        for i, op in enumerate(timed):
            start, end = sched.spans[op.name]
            span = (end - start) * steps if i not in var_times else float(var_times[i].sum())
            phase.add_op(op.name, op.category, span * g.count, g.count * steps)
    step_total = step_gpu + (np.maximum(0.0, overhead - step_gpu) if overlaps else overhead)
    phase.add_category(HOST_STEP, float((step_total - step_gpu).sum()))
    phase.time_s = float(step_total.sum())
    phase.step_times_s = step_total
    return phase, layer, ", ".join(sorted(methods)) or "exact (no kv-dependent ops)"


def _scheduled_steps(g: Graph, varying: list[int], var_times: dict[int, np.ndarray],
                     timer: OpTimer, scheduler: _Scheduler, kv: np.ndarray,
                     exact: bool) -> tuple[np.ndarray, str]:
    """Schedule the graph at sampled steps (every step when `exact`); interpolate the rest."""
    steps = len(kv)
    base = [timer(spec) for spec in g.ops]
    if exact or steps <= 2 * DECODE_SAMPLE_STRIDE:
        sample = np.arange(steps)
    else:
        sample = np.unique(np.r_[np.arange(0, steps, DECODE_SAMPLE_STRIDE), steps - 1])
    totals = np.empty(len(sample))
    for j, k in enumerate(sample):
        timed = list(base)
        for i in varying:
            timed[i] = _with_time(base[i], float(var_times[i][k]))
        totals[j] = scheduler(timed).total_s
    if len(sample) == steps:
        return totals, "exact (every step scheduled)"
    var_sum = sum(var_times[i] for i in varying)
    residual = totals - var_sum[sample]
    interp = np.interp(np.arange(steps), sample, residual) + var_sum
    return interp, f"scheduled every {DECODE_SAMPLE_STRIDE}th step, overlap interpolated"


def _with_time(op: TimedOp, seconds: float) -> TimedOp:
    return TimedOp(op.name, op.category, op.stream, seconds, op.bound, op.deps, op.memory_share)


# --------------------------------------------------------------------------------------- API
class Simulator:
    """A session: one system, software profile, mode and dtype, queried many times.

    It keeps its operator timings and schedules between queries, so a sweep over models,
    batches and lengths pays for each distinct operator once (the warm API that
    benchmarks/sim_speed.py times). `simulate()` is a session of one query.

        sim = Simulator("h100-80gb-x8", software="vllm")
        for prompt in (128, 512, 2048):
            r = sim.run(get_preset("llama3-70b"), tp=8, batch=1, prompt_tokens=prompt,
                        gen_tokens=1024)
    """

    def __init__(self, system: System | str, software: SoftwareProfile | str | None = None,
                 mode: str = "simulate", *, dtype: str = "fp16", attention: str = "fused",
                 calibration: Calibration | None = None,
                 gpu_calibration: DeviceCalibration | None = None,
                 comm_core_share: float = COMM_CORE_SHARE):
        if isinstance(system, str):
            system = load_system(system)
        if mode not in MODES:
            raise SimulationError(f"mode {mode!r} is not one of {MODES}")
        if attention not in ("fused", "unfused"):
            raise SimulationError(f"attention {attention!r} is not 'fused' or 'unfused'")
        if dtype not in DTYPE_BYTES:
            raise SimulationError(f"dtype {dtype!r} is not one of {tuple(DTYPE_BYTES)}")
        if not 0.0 <= comm_core_share < 1.0:
            raise SimulationError(f"comm_core_share must be in [0, 1), got {comm_core_share}")
        profile = software if isinstance(software, SoftwareProfile) else load_software(software)
        profile = dataclasses.replace(profile, host=profile.host_for(system.name))
        system.device.matrix_rate(dtype)  # fails early, naming the field, if the dtype is missing
        self.precision = (lambda op: profile.precision(op, dtype)) if mode != "tile" \
            else (lambda op: profile.kv_cache_dtype if op == "kv_cache"
                  and profile.kv_cache_dtype != "auto" else dtype)
        for op in ("gemm", "attention"):
            system.device.matrix_rate(self.precision(op))
        self.system, self.profile, self.mode, self.dtype = system, profile, mode, dtype
        self.options = _graph_options(profile, attention, mode)
        gpu = _kernel_calibration(system, gpu_calibration, mode)
        # no calibration: the package's template constants, parsed if an operator needs them
        self.timer = OpTimer(system, profile, mode, dtype, calibration, gpu)
        if mode == "tile":
            self.timer.software = _tile_software(profile)
        self.scheduler = _Scheduler(comm_core_share)

    def largest_captured(self, tp: int, max_num_seqs: int | None = None,
                         max_num_batched_tokens: int | None = None,
                         capture_max: int | None = None) -> int:
        """The largest CUDA graph the profile's engine captures on this system at TP `tp`
        under its knobs (`Graphs.largest_captured`; a knob not given is the engine's
        default), reading the device's memory as the engine does: what the runtime reports
        where the hardware file knows it, else the datasheet capacity."""
        memory = self.system.device.memory
        return self.profile.graphs.largest_captured(
            max_num_seqs, max_num_batched_tokens,
            device_memory_bytes=memory.runtime_visible_bytes or memory.capacity_bytes, tp=tp,
            capture_max=capture_max)

    def run(self, config: ModelConfig, tp: int, batch: int, prompt_tokens: int,
            gen_tokens: int, *, check_memory: bool = True, check_context: bool = True,
            model_name: str = "model", exact_decode: bool = False,
            capture_max: int | None = None) -> Result:
        """Simulate one static batch. `capture_max`: the engine's knob for its largest CUDA
        graph (vLLM V1 `--max-cudagraph-capture-size`, SGLang `--cuda-graph-max-bs`;
        `Graphs.largest_captured`), a step above it running without a graph; None: the
        engine's default. No graphs at all is another profile
        (`SoftwareProfile.without_cuda_graphs`, what `simulate(cuda_graph_max=0)` runs)."""
        started = time.perf_counter()
        system, profile, opts = self.system, self.profile, self.options
        if config.lm_head_width is not None:
            raise SimulationError(
                f"model {model_name!r} widens its LM head (lm_head_width {config.lm_head_width}),"
                " a training ablation the simulator does not model; simulate it without "
                "lm_head_width")
        for name, value, low in (("batch", batch, 1), ("prompt", prompt_tokens, 1),
                                 ("gen", gen_tokens, 1), ("tp", tp, 1)):
            if value < low:
                raise SimulationError(f"--{name} must be at least {low}, got {value}")
        # The last generated token is never fed back, so it needs no position of its own.
        positions = prompt_tokens + gen_tokens - 1
        if check_context and positions > config.context_len:
            raise SimulationError(
                f"--prompt {prompt_tokens} + --gen {gen_tokens} needs {positions} positions but "
                f"{model_name} has a context of {config.context_len} tokens; shorten the prompt or "
                "generation, or pass --beyond-context to time it as if the context were longer")
        if tp > system.device_count:
            raise SimulationError(f"--tp {tp} exceeds the {system.device_count} devices of "
                                  f"{system.name}")
        use = memory_use(config, system, tp, batch, prompt_tokens, gen_tokens, self.dtype,
                         opts.attention_path(config.head_dim, "prefill") == "fused",
                         self.precision)
        if check_memory:
            check_fits(use, model_name, system, tp)
        if capture_max is not None:
            if capture_max == 0:
                raise SimulationError(
                    "capture_max 0 (no CUDA graphs) is another profile: simulate with "
                    "software=profile.without_cuda_graphs() (simulate(cuda_graph_max=0))")
            profile.check_cuda_graph_max(capture_max)
        b = DTYPE_BYTES[self.precision("all_reduce")]
        # a step up to it replays a padded graph
        largest = self.largest_captured(tp, capture_max=capture_max)
        graphs_of = profile.graphs
        # the prompt's one step replays a graph only up to the largest captured one, where the
        # engine's sizes are read (a mixed step: `pad_mixed`); above it, no graph
        prefill_captured = graphs_of.prefill and not (
            graphs_of.pads and graphs_of.pad_mixed
            and batch * (prompt_tokens - int(profile.prefill.last_token_in_decode)) > largest)
        # a decode batch above the largest captured graph runs without one (`Graphs.pads`: the
        # engine's sizes are read; a profile without them times every batch as captured)
        decode_captured = graphs_of.decode and not (graphs_of.pads and batch > largest)
        # an engine that decodes the prompt's last token prefills one token less and takes
        # one decode step more, whose time belongs to the first token
        split = profile.prefill.last_token_in_decode
        prefilled = prompt_tokens - 1 if split else prompt_tokens
        decode_steps = gen_tokens if split else gen_tokens - 1
        if prefilled:
            graphs = model_graphs(config, tp, batch, prefilled, prefilled, "prefill", b,
                                  options=opts)
            padded = profile.graphs.padded_tokens(batch * prefilled, True, largest)
            if padded != batch * prefilled:  # a prompt step replays a larger captured graph
                graphs = padded_graphs(graphs, model_graphs(config, tp, 1, padded, padded,
                                                            "prefill", b, options=opts))
            prefill, prefill_layer, ttft = _prefill(graphs, self.timer, self.scheduler, profile,
                                                    batch, tp, prefill_captured)
        else:  # a one-token prompt goes straight to its decode step
            prefill, prefill_layer, ttft = PhaseResult(), {}, 0.0
        decode, decode_layer, method = _decode(config, tp, batch, prefilled, decode_steps,
                                               b, opts, self.timer, self.scheduler, profile,
                                               exact_decode, largest, decode_captured)
        steps = gen_tokens - 1
        first_s = 0.0  # a decode step counted in the TTFT
        if split:
            first_s = float(decode.step_times_s[0])
            ttft += first_s
            tpot = (decode.time_s - first_s) / steps if steps else 0.0
        else:
            tpot = decode.time_s / steps if steps else 0.0
        layer_cats = {"prefill": prefill_layer}
        if steps:
            layer_cats["decode"] = decode_layer
        e2e = ttft + decode.time_s - first_s
        interval = prediction_interval(system.device.name, tp, batch, prompt_tokens,
                                       {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e}) \
            if self.mode == "simulate" else None
        return Result(model=model_name, system=system.name, arch=config.arch, tp=tp,
                      batch=batch, prompt_tokens=prompt_tokens, gen_tokens=gen_tokens,
                      mode=self.mode, dtype=self.dtype, ttft_s=ttft, tpot_s=tpot,
                      e2e_s=e2e, memory=use, prefill=prefill, decode=decode,
                      layer_categories=layer_cats, software=profile.name,
                      attention_path=opts.attention_path(config.head_dim),
                      kernel_sources=dict(self.timer.sources),
                      kernel_calibration=None if self.timer.gpu is None else
                      self.timer.gpu.device_key, decode_method=method,
                      simulated_in_s=time.perf_counter() - started, profile=profile,
                      interval=interval, graph_largest=largest,
                      prefill_captured=prefill_captured, decode_captured=decode_captured)


def simulate(config: ModelConfig, system: System | str, tp: int, batch: int,
             prompt_tokens: int, gen_tokens: int, mode: str = "simulate", *,
             dtype: str = "fp16", attention: str = "fused",
             software: SoftwareProfile | str | None = None,
             calibration: Calibration | None = None,
             gpu_calibration: DeviceCalibration | None = None,
             check_memory: bool = True, check_context: bool = True, model_name: str = "model",
             exact_decode: bool = False, comm_core_share: float = COMM_CORE_SHARE,
             cuda_graph_max: int | None = None) -> Result:
    """Simulate serving `config` on `system` with tensor parallelism `tp` (one query; for many,
    keep a `Simulator`).

    mode "simulate": fitted GPU kernel models where the device has them, template models
    otherwise; "tile": the template tile models only; "roofline": peak rates and minimal
    traffic. `software`: a profile name or path (default: trtllm) or a SoftwareProfile.
    attention "fused" (the software's fused kernel, unfused beyond its head-size limit) or
    "unfused". `comm_core_share`: the fraction of the cores a running collective takes from
    compute beside it (schedule.py). `cuda_graph_max`: the engine's knob for its largest CUDA
    graph (`Simulator.run`'s `capture_max`); 0: no CUDA graphs (vLLM `--enforce-eager`, SGLang
    `--disable-cuda-graph`: `SoftwareProfile.without_cuda_graphs`). Raises SimulationError /
    ModelDoesNotFit / SoftwareError (KrakenError) for bad requests.
    """
    if cuda_graph_max is not None:
        profile = software if isinstance(software, SoftwareProfile) else load_software(software)
        profile.check_cuda_graph_max(cuda_graph_max)
        if cuda_graph_max == 0:
            software, cuda_graph_max = profile.without_cuda_graphs(), None
    session = Simulator(system, software, mode, dtype=dtype, attention=attention,
                        calibration=calibration, gpu_calibration=gpu_calibration,
                        comm_core_share=comm_core_share)
    return session.run(config, tp, batch, prompt_tokens, gen_tokens, check_memory=check_memory,
                       check_context=check_context, model_name=model_name,
                       exact_decode=exact_decode, capture_max=cuda_graph_max)


def _tile_software(profile: SoftwareProfile) -> SoftwareProfile:
    """Tile mode keeps the template world's assumptions: every operator in the model dtype."""
    import dataclasses

    from .constants.software import Fp8Policy
    return dataclasses.replace(profile, fp8=Fp8Policy("fp8", "fp8", "fp8", "fp8", "fp8"))


def resolve_model(name_or_path: str) -> tuple[str, ModelConfig]:
    """A preset name or a path to a config.json (Hugging Face or krakenlm format)."""
    from pathlib import Path

    from ..models import PRESETS
    from ..models.config import ConfigError
    from ..models.hf import load_model_config

    if name_or_path in PRESETS:
        return name_or_path, PRESETS[name_or_path]
    if Path(name_or_path).suffix == ".json" or Path(name_or_path).exists():
        return Path(name_or_path).stem if Path(name_or_path).name != "config.json" else \
            Path(name_or_path).resolve().parent.name, load_model_config(name_or_path)
    raise ConfigError(f"unknown model {name_or_path!r}: not a preset (run `krakenlm models`) nor "
                      "a path to a config.json")


KRAKEN_RULES = ("engine", "head-count")


def arch_variant(config: ModelConfig, arch: str | None, tp: int,
                 rule: str = "engine") -> ModelConfig:
    """The same model as another architecture. gpt <-> parallel swap the block on the same
    shape; gpt/parallel -> kraken builds the parameter-matched Kraken with degree = tp (same
    layers, FFN expansion 2, sub-layer width chosen so the parameter count matches). `rule`
    "engine" (default) uses heads of 128 or 64 that fused attention kernels run
    (models.kraken_engine_for_params); "head-count" keeps the total head count (the spec's
    rule, heads that may exceed the kernels' limit). A Kraken config cannot be turned back."""
    from ..models import kraken_engine_for_params, kraken_width_for_params

    if arch is None or arch == config.arch:
        return config
    if arch not in ("gpt", "parallel", "kraken"):
        raise SimulationError(f"--arch {arch!r} is not one of gpt, parallel, kraken")
    if rule not in KRAKEN_RULES:
        raise SimulationError(f"--kraken-rule {rule!r} is not one of {KRAKEN_RULES}")
    if config.arch == "kraken":
        raise SimulationError(f"--arch {arch} cannot be derived from a Kraken config (its widths "
                              "are its own); pick the GPT or parallel model instead")
    if arch in ("gpt", "parallel"):
        return config.replace(arch=arch)
    common = dict(context_len=config.context_len, vocab_size=config.vocab_size)
    if rule == "engine":
        return kraken_engine_for_params(config.num_params(), degree=tp,
                                        n_layers=config.n_layers, **common)
    if config.n_heads % tp:
        raise SimulationError(f"--arch kraken with --tp {tp}: the {config.n_heads} heads must "
                              f"split evenly over {tp} sub-layers; use a --tp that divides them")
    return kraken_width_for_params(config.num_params(), degree=tp, n_layers=config.n_layers,
                                   n_heads=config.n_heads // tp, **common)
