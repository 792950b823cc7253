"""Whole-model inference: prefill (TTFT), every decode step (TPOT), memory per device.

Every operator of every graph (graph.py) is timed by its model (matmul.py, attention.py,
elementwise.py, collectives.py) with the fitted efficiencies (calibration.py) plus the device's
per-kernel launch overhead, then each graph is scheduled on two streams (schedule.py). Identical
layers are scheduled once and multiplied; every decode step is simulated (its attention reads a
longer KV cache), not a sample of them. Operator timings are memoised by (op, shape, dtype,
device, constants), so the 1024 decode steps of a 175B model cost milliseconds each.

Token accounting: prefill processes the prompt and yields the first token (TTFT); each of the
gen - 1 decode steps then yields one more token, attending to prompt + tokens so far. TPOT is
the mean decode step; end-to-end = TTFT + sum of decode steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..hardware import load_system
from ..hardware.schema import DTYPE_BYTES, System
from ..models import ModelConfig
from .attention import flash_decode, flash_prefill
from .calibration import Calibration, default_calibration
from .collectives import IDEAL, collective_time, memory_traffic_bytes
from .elementwise import roofline_stream, simulate_stream
from .graph import Graph, OpSpec, SimulationError, model_graphs
from .matmul import roofline_matmul, simulate_matmul
from .memory import MemoryUse, check_fits, memory_use
from .schedule import COMM_CORE_SHARE, TimedOp, schedule

MODES = ("simulate", "roofline")


@dataclass
class PhaseResult:
    time_s: float = 0.0
    categories: dict[str, float] = field(default_factory=dict)
    ops: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> category, time, count

    def add(self, graph_time: float, categories: dict[str, float], timed: list[TimedOp],
            spans: dict[str, tuple[float, float]], times: int) -> None:
        self.time_s += graph_time * times
        for cat, t in categories.items():
            self.categories[cat] = self.categories.get(cat, 0.0) + t * times
        for op in timed:
            start, end = spans[op.name]
            entry = self.ops.setdefault(op.name, {"category": op.category, "time_s": 0.0,
                                                  "count": 0})
            entry["time_s"] += (end - start) * times
            entry["count"] += times


@dataclass
class Result:
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
    simulated_in_s: float = 0.0

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
                "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s,
                "memory_bytes_per_device": self.memory.total_bytes,
                "memory": self.memory.to_dict(), "breakdown": self.breakdown(),
                "categories": {"prefill": self.prefill.categories,
                               "decode": self.decode.categories},
                "layer_categories": self.layer_categories,
                "simulated_in_s": self.simulated_in_s}


class _Timer:
    """Times operator specs on one system; memoised per spec."""

    def __init__(self, system: System, calibration: Calibration, mode: str, dtype: str):
        self.system, self.dev = system, system.device
        self.calibration, self.mode, self.dtype = calibration, mode, dtype
        self.cache: dict[OpSpec, TimedOp] = {}

    def __call__(self, spec: OpSpec) -> TimedOp:
        hit = self.cache.get(spec)
        if hit is None:
            hit = self.cache[spec] = self._time(spec)
        return hit

    def _time(self, spec: OpSpec) -> TimedOp:
        dev, dtype, roof = self.dev, self.dtype, self.mode == "roofline"
        model, args = spec.model, spec.args
        launch = 0.0 if roof else dev.launch_overhead_s
        if model == "collective":
            kind, size, n = args
            c = self.calibration.get(dev, kind)
            t, _ = collective_time(kind, self.system.interconnect, float(size), n,
                                   IDEAL if roof else c.protocols)
            share = memory_traffic_bytes(kind, size, n) / max(t, 1e-12) / \
                dev.memory.bandwidth_bytes_per_s
            return TimedOp(spec.name, spec.category, "comm", t + launch, deps=spec.deps,
                           memory_share=share)
        if model == "matmul":
            M, N, K, batch = args
            c = self.calibration.get(dev, "matmul")
            r = roofline_matmul(dev, M, N, K, batch, dtype) if roof else simulate_matmul(
                dev, M, N, K, batch, dtype, c.compute_efficiency, c.memory_efficiency)
        elif model == "stream":
            op, rows, cols = args
            c = self.calibration.get(dev, op)
            r = roofline_stream(dev, op, rows, cols, dtype) if roof else simulate_stream(
                dev, op, rows, cols, dtype, c.memory_efficiency, c.single_pass_row_bytes)
        elif model in ("flash_prefill", "flash_decode"):
            c = self.calibration.get(dev, "attention")
            eff = (1.0, 1.0) if roof else (c.compute_efficiency, c.memory_efficiency)
            if model == "flash_prefill":
                batch, heads, kv_heads, q_len, kv_len, hd = args
                r = flash_prefill(dev, batch, heads, kv_heads, q_len, kv_len, hd, True, dtype, *eff)
            else:
                batch, heads, kv_heads, kv_len, hd = args
                r = flash_decode(dev, batch, heads, kv_heads, kv_len, hd, dtype, *eff)
            if roof:  # roofline of the fused kernel: its FLOPs and its minimal traffic
                t = max(r.flops / dev.matrix_rate(dtype),
                        r.bytes / dev.memory.bandwidth_bytes_per_s)
                return TimedOp(spec.name, spec.category, "compute", t, r.bound, spec.deps)
        else:
            raise ValueError(f"unknown op model {model!r}")
        return TimedOp(spec.name, spec.category, "compute", r.time_s + launch, r.bound, spec.deps)


def _run_graphs(graphs: list[Graph], timer: _Timer, phase: PhaseResult,
                schedules: dict) -> dict[str, float]:
    """Schedule every graph, add it to `phase`; return the categories of the last layer graph."""
    last_layer: dict[str, float] = {}
    for g in graphs:
        timed = [timer(spec) for spec in g.ops]
        key = tuple(timed)
        sched = schedules.get(key)
        if sched is None:
            sched = schedules[key] = schedule(timed, COMM_CORE_SHARE)
        phase.add(sched.total_s, sched.categories, timed, sched.spans, g.count)
        if "layer" in g.name:
            last_layer = sched.categories
    return last_layer


def simulate(config: ModelConfig, system: System | str, tp: int, batch: int,
             prompt_tokens: int, gen_tokens: int, mode: str = "simulate", *,
             dtype: str = "fp16", attention: str = "fused",
             calibration: Calibration | None = None, check_memory: bool = True,
             model_name: str = "model") -> Result:
    """Simulate serving `config` on `system` with tensor parallelism `tp`.

    mode "simulate" uses the tile models and fitted constants; "roofline" uses peak rates and
    minimal traffic only. attention "fused" (FlashAttention) or "unfused" (eager kernels).
    Raises SimulationError / ModelDoesNotFit (KrakenError) with a message for bad requests.
    """
    started = time.perf_counter()
    if isinstance(system, str):
        system = load_system(system)
    if mode not in MODES:
        raise SimulationError(f"mode {mode!r} is not one of {MODES}")
    if attention not in ("fused", "unfused"):
        raise SimulationError(f"attention {attention!r} is not 'fused' or 'unfused'")
    if dtype not in DTYPE_BYTES:
        raise SimulationError(f"dtype {dtype!r} is not one of {tuple(DTYPE_BYTES)}")
    for name, value, low in (("batch", batch, 1), ("prompt", prompt_tokens, 1),
                             ("gen", gen_tokens, 1), ("tp", tp, 1)):
        if value < low:
            raise SimulationError(f"--{name} must be at least {low}, got {value}")
    if tp > system.device_count:
        raise SimulationError(f"--tp {tp} exceeds the {system.device_count} devices of "
                              f"{system.name}")
    system.device.matrix_rate(dtype)  # fails early, naming the field, if the dtype is missing
    fused = attention == "fused"
    calibration = calibration or default_calibration()
    use = memory_use(config, system, tp, batch, prompt_tokens, gen_tokens, dtype, fused)
    if check_memory:
        check_fits(use, model_name, system, tp)

    b = DTYPE_BYTES[dtype]
    timer = _Timer(system, calibration, mode, dtype)
    schedules: dict = {}
    prefill = PhaseResult()
    graphs = model_graphs(config, tp, batch, prompt_tokens, prompt_tokens, "prefill", b, fused)
    layer_cats = {"prefill": _run_graphs(graphs, timer, prefill, schedules)}
    decode = PhaseResult()
    steps = gen_tokens - 1
    for step in range(steps):
        kv_len = prompt_tokens + step + 1
        graphs = model_graphs(config, tp, batch, 1, kv_len, "decode", b, fused)
        cats = _run_graphs(graphs, timer, decode, schedules)
        if step == 0:
            layer_cats["decode"] = cats
    ttft = prefill.time_s
    tpot = decode.time_s / steps if steps else 0.0
    return Result(model=model_name, system=system.name, arch=config.arch, tp=tp, batch=batch,
                  prompt_tokens=prompt_tokens, gen_tokens=gen_tokens, mode=mode, dtype=dtype,
                  ttft_s=ttft, tpot_s=tpot, e2e_s=ttft + decode.time_s, memory=use,
                  prefill=prefill, decode=decode, layer_categories=layer_cats,
                  simulated_in_s=time.perf_counter() - started)


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


def arch_variant(config: ModelConfig, arch: str | None, tp: int) -> ModelConfig:
    """The same model as another architecture. gpt <-> parallel swap the block on the same
    shape; gpt/parallel -> kraken builds the spec's parameter-matched Kraken with degree = tp
    (same layers and total heads, FFN expansion 2, sub-layer width chosen so the parameter
    count matches: the inference study's rule). A Kraken config cannot be turned back."""
    from ..models import kraken_width_for_params

    if arch is None or arch == config.arch:
        return config
    if arch not in ("gpt", "parallel", "kraken"):
        raise SimulationError(f"--arch {arch!r} is not one of gpt, parallel, kraken")
    if config.arch == "kraken":
        raise SimulationError(f"--arch {arch} cannot be derived from a Kraken config (its widths "
                              "are its own); pick the GPT or parallel model instead")
    if arch in ("gpt", "parallel"):
        return config.replace(arch=arch)
    if config.n_heads % tp:
        raise SimulationError(f"--arch kraken with --tp {tp}: the {config.n_heads} heads must "
                              f"split evenly over {tp} sub-layers; use a --tp that divides them")
    return kraken_width_for_params(config.num_params(), degree=tp, n_layers=config.n_layers,
                                   n_heads=config.n_heads // tp, context_len=config.context_len,
                                   vocab_size=config.vocab_size)
