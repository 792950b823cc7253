"""Time one operator of a graph: the fitted GPU kernel form where the device has one, the
template tile model otherwise.

Order of preference per kernel family (GEMM, context / generation attention, streaming ops,
collectives), in `mode="simulate"`:
1. the constants fitted on the software profile's own framework for this device
   (constants/devices, `krakenlm sim calibrate --source aiconfigurator`);
2. the same family measured under another framework on this device (said so in the sources);
3. the template models of the LLMCompass hardware template (matmul.py, attention.py,
   elementwise.py, collectives.py) with the template constants (template.yaml) and the
   device's `launch_overhead_s` per kernel: what hardware without measurements (an imagined
   design, a TPU, an AMD GPU) is timed with.
`mode="tile"` always takes 3; `mode="roofline"` takes peak rates and minimal traffic.
Every family used is recorded in `sources` (what was timed with what), for the report.

One path times every operator: its arguments become column arrays (a single operator is
arrays of length 1, an operator at every KV length of a decode phase one array per argument),
a fitted entry's kernel form (kernels/base.py) predicts them all at once under SERVING
conditions (a served model: no benchmark harness), and the template models take the rows one
by one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..hardware.schema import DTYPE_BYTES, System
from .constants.gpu_kernels import DeviceCalibration, Entry
from .constants.software import SoftwareProfile
from .constants.template import Calibration, default_calibration
from .graph import ATTENTION_MODELS, OpSpec
from .kernels.base import SERVING, Setting
from .kernels.gpu.attention import context_kernel_dtype, splitting_mha
from .kernels.gpu.borrowed import kernel_system, same_links
from .kernels.gpu.collectives import nccl_timer
from .kernels.gpu.elementwise import kind_of
from .kernels.template.attention import flash_decode, flash_prefill
from .kernels.template.collectives import IDEAL, collective_time, memory_traffic_bytes
from .kernels.template.elementwise import (
    TENSORS_READ,
    TENSORS_WRITTEN,
    roofline_stream,
    simulate_stream,
)
from .kernels.template.matmul import roofline_matmul, simulate_matmul
from .schedule import TimedOp

FRAMEWORK_ORDER = ("trtllm", "vllm", "sglang")
# operator timings a session keeps before it starts afresh (a sweep of distinct queries adds
# about seven a query; they are memos, so forgetting them changes no number)
TIMER_MEMO_SIZE = 1 << 16
ELEMENTWISE_ORDER = ("vllm", "trtllm", "sglang")
COLLECTIVE_FAMILIES = ("all_reduce", "all_gather", "reduce_scatter")  # `_note` keys of collectives


class OpTimer:
    """Times operator specs on one system under one software profile; memoised per spec."""

    def __init__(self, system: System, software: SoftwareProfile, mode: str, dtype: str,
                 template: Calibration | None, gpu: DeviceCalibration | None):
        """`template`: the template models' constants; None for the package's, parsed when an
        operator first needs them (`template`)."""
        self.system, self.dev = system, system.device
        self.software, self.mode, self.dtype = software, mode, dtype
        self._template_constants, self.gpu = template, gpu if mode == "simulate" else None
        self.cache: dict[OpSpec, TimedOp] = {}
        self.sources: dict[str, str] = {}
        self._rows: dict[tuple, tuple[float, str]] = {}  # template model, per row
        self._settings: dict[tuple[str, str], Setting] = {}
        self._by_args: dict[tuple, tuple[float, str, float]] = {}  # `_timed_args`
        self._primed: dict[tuple, tuple] = {}  # `prime`: timed ahead, not yet asked for
        self._entries: dict[tuple, tuple[Entry, str] | None] = {}  # `entry`, per question
        # what the fitted forms time: the system, its memory rescaled where the constants
        # were fitted on another part of the die (kernels/gpu/borrowed.py)
        fitted_on = self.gpu.fitted_on() if self.gpu else None
        self.kernel_system = kernel_system(system, fitted_on)
        # the fitted collectives time this system only over the links they were fitted on
        # (borrowed.py `same_links`); else the template model times every collective
        self.fitted_collectives = self.gpu is not None and same_links(system, fitted_on)
        self._other_links = "" if self.gpu is None or self.fitted_collectives else (
            f"; not {self.gpu.device_key}'s fitted collectives: fitted on "
            f"{fitted_on.name}'s links ({_links(fitted_on)}), this system has {_links(system)}")

    @property
    def template(self) -> Calibration:
        """The template models' constants: the ones given, else the package's
        (`default_calibration`), parsed on first use: a query whose operators the GPU
        calibration times all (the usual one on a calibrated GPU) never reads them."""
        if self._template_constants is None:
            self._template_constants = default_calibration()
        return self._template_constants

    # ------------------------------------------------------------------------------ lookup
    def precision(self, operator: str) -> str:
        return self.software.precision(operator, self.dtype)

    def entry(self, family: str, variant: str,
              order: tuple[str, ...] = FRAMEWORK_ORDER) -> tuple[Entry, str] | None:
        """The fitted constants for (family, variant), preferring the profile's framework,
        then the others in `order`; per framework the variant, else its "any" entry. Looked
        up once per (framework, family, variant, order) and timer: every operator a query
        times asks. A split-KV decode table is returned as the profile's engine runs it
        (`attention.decode_splits_mha`: MHA rows split too, kernels/gpu/attention.py
        `splitting_mha`)."""
        if self.gpu is None:
            return None
        key = (self.software.kernels, family, variant, order)
        if key not in self._entries:
            found = self._find_entry(family, variant, order)
            if found is not None and family == "generation_attention" \
                    and self.software.attention.decode_splits_mha:
                found = splitting_mha(found)  # the engine's decode kernel splits MHA rows too
            self._entries[key] = found
        return self._entries[key]

    def _find_entry(self, family: str, variant: str,
                    order: tuple[str, ...]) -> tuple[Entry, str] | None:
        variants = [variant] + (["bf16"] if variant == "fp16" else [])
        frameworks = [self.software.kernels] + [f for f in order if f != self.software.kernels]
        for fw in frameworks:
            for v in variants:
                e = self.gpu.entry(fw, family, v) or self.gpu.entry(fw, family, "any")
                if e is not None:
                    return e, fw
        return None

    def _note(self, family: str, found: tuple[Entry, str] | None, variant: str) -> None:
        if family in self.sources:
            return
        if found is None:
            why = self._other_links if family in COLLECTIVE_FAMILIES else ""
            self.sources[family] = (f"template model ({self.mode}), "
                                    f"{self.template.device_key(self.dev) or 'ideal'} constants"
                                    f"{why}")
            return
        e, fw = found
        version = self.gpu.frameworks.get(fw, {}).get("version", "")
        held = e.fit.get("mape_held_out_pct")
        borrowed = "" if fw in (self.software.kernels, "nccl") else \
            f", borrowed: no {self.software.kernels} measurement of this family"
        memory = "" if self.kernel_system is self.system else (
            f"; fitted on {self.gpu.meta.get('system')}, memory at "
            f"{self.kernel_system.device.memory.bandwidth_bytes_per_s / 1e9:.0f} GB/s equivalent")
        self.sources[family] = (f"measured kernels: {fw} {version} on {self.gpu.device_key} "
                                f"({variant}; held-out MAPE {held} %{borrowed}{memory})")

    def _setting(self, framework: str, variant: str) -> Setting:
        """Where a fitted form runs: this system, the entry's framework (and its version) and
        variant; a framework's all-reduce hands large messages to the device's NCCL model."""
        key = (framework, variant)
        if key not in self._settings:
            version = self.gpu.frameworks.get(framework, {}).get("version", "")
            nccl = self.gpu.entry("nccl", "nccl", "any")
            self._settings[key] = Setting(
                self.kernel_system, framework, variant, version,
                nccl_timer(self.kernel_system, nccl.params, nccl.structure) if nccl else None)
        return self._settings[key]

    def _predict(self, found: tuple[Entry, str], variant: str, cols: dict) -> np.ndarray:
        """The entry's form on `cols` as a served model runs it: SERVING conditions always (a
        source's harness conditions belong to fits and validation, measurements/harness.py)."""
        e, fw = found
        return np.asarray(e.kernel.predict(self._setting(fw, variant), cols, e.params,
                                           e.structure, SERVING), float)

    # ------------------------------------------------------------------------------- timing
    def __call__(self, spec: OpSpec) -> TimedOp:
        hit = self.cache.get(spec)
        if hit is None:
            if len(self.cache) >= TIMER_MEMO_SIZE:
                self._forget()
            t, bound, share = self._timed_args(spec)
            if spec.model == "collective":
                hit = TimedOp(spec.name, spec.category, "comm", t, deps=spec.deps,
                              memory_share=share)
            else:
                hit = TimedOp(spec.name, spec.category, "compute", t, bound, spec.deps)
            self.cache[spec] = hit
        return hit

    def _forget(self) -> None:
        """Drop the per-spec, per-argument and per-row memos (`TIMER_MEMO_SIZE`): a long
        session's memory stays bounded, and what is asked again is timed again, the same."""
        self.cache.clear()
        self._by_args.clear()
        self._rows.clear()

    def _timed_args(self, spec: OpSpec) -> tuple[float, str, float]:
        """(seconds, bound, memory share) of the op `spec` names, memoised per model, category
        and arguments: a layer's two all-reduces or two norms are different specs (names,
        dependencies) of the same kernel call, timed once."""
        key = (spec.model, spec.category, spec.args)
        hit = self._by_args.get(key)
        if hit is None and key in self._primed:
            # timed ahead by `prime`; its family is noted at first use, as `_matmul` notes it
            hit, found, dtype = self._primed.pop(key)
            self._note("gemm", found, dtype)
            self._by_args[key] = hit
        if hit is None:
            t, bound = self._time(spec, [a if isinstance(a, str) else np.array([a])
                                         for a in spec.args])
            t = float(t[0])
            share = 0.0
            if spec.model == "collective":
                kind, size, n = spec.args
                share = memory_traffic_bytes(kind, size, n) / max(t, 1e-12) / \
                    self.dev.memory.bandwidth_bytes_per_s
            hit = self._by_args[key] = (t, bound, share)
        return hit

    def prime(self, specs: Iterable[OpSpec]) -> None:
        """Time, in one call per precision, every GEMM among `specs` that a fitted kernel form
        times and that is not timed yet, and memoise each as `_timed_args` would: a query's
        GEMMs (QKV, output, MLP, LM head) differ in their shapes only, and the form predicts
        rows independently (elementwise arithmetic and minima along each row), so one call
        with R rows gives the R values R calls give, for the fixed cost of one."""
        if self.mode != "simulate" or self.gpu is None:
            return
        pending: dict[str, dict[tuple, tuple]] = {}
        for spec in specs:
            if spec.model != "matmul":
                continue
            key = (spec.model, spec.category, spec.args)
            if key not in self._by_args and key not in self._primed:
                pending.setdefault(self.precision(_matmul_operator(spec)), {})[key] = spec.args
        for dtype, rows in pending.items():
            if len(rows) < 2:
                continue
            found = self.entry("gemm", dtype)
            if found is None:
                continue
            variant = _gemm_variant(dtype)
            M, N, K, B = (np.array([args[i] for args in rows.values()]) for i in range(4))
            t = self._predict(found, variant, {"m": M, "n": N, "k": K, "batch": B})
            for (key, args), seconds in zip(rows.items(), t):
                self._primed[key] = ((float(seconds), self._gemm_bound(variant, *args), 0.0),
                                     found, dtype)

    def _gemm_bound(self, variant: str, m, n, k, b) -> str:
        """"compute" when the GEMM's flops at the peak rate take longer than its minimal
        traffic at the memory bandwidth, else "memory"."""
        dev = self.dev
        return "compute" if 2.0 * b * m * n * k / dev.matrix_rate(variant) > \
            b * (m * k + k * n + m * n) * DTYPE_BYTES[variant] / \
            dev.memory.bandwidth_bytes_per_s else "memory"

    def time_steps(self, first: OpSpec, second: OpSpec, kv: np.ndarray) -> np.ndarray:
        """Seconds of an operator at every KV length in `kv`: `first` and `second` are its specs
        at kv[0] and kv[0] + 1, so the arguments that differ are linear in the KV length (the
        KV length itself, or e.g. batch x KV length rows of a cache copy): their step per token
        is second - first."""
        moving = [i for i, (a, b) in enumerate(zip(first.args, second.args)) if a != b]
        args = [a if isinstance(a, str) else np.full(len(kv), a) for a in first.args]
        for i in moving:
            slope = second.args[i] - first.args[i]
            args[i] = first.args[i] + (kv - int(kv[0])) * slope
        return self._time(first, args)[0]

    def _time(self, spec: OpSpec, args: list) -> tuple[np.ndarray, str]:
        """Seconds per row of the op `spec` names, its arguments given as column arrays
        (string arguments as they are), and the bound of the first row."""
        model = spec.model
        if model == "matmul":
            return self._matmul(spec, *args)
        if model == "stream":
            return self._stream(*args)
        if model in ATTENTION_MODELS:
            return self._attention(model == "flash_prefill", args)
        if model == "collective":
            return self._collective(*args), ""
        raise ValueError(f"unknown op model {model!r}")

    def _template(self, key: tuple, columns: list, compute) -> tuple[np.ndarray, str]:
        """`compute(*row)` -> (seconds, bound) for every row of `columns` (arrays; strings as
        they are), memoised under `key` and the row: the template models take scalars."""
        rows = len(next(a for a in columns if not isinstance(a, str)))
        # tolist(): the Python scalars a[i].item() gives, converted once per column
        lists = [a if isinstance(a, str) else a.tolist() for a in columns]
        out = []
        for i in range(rows):
            row = tuple(a if isinstance(a, str) else a[i] for a in lists)
            hit = self._rows.get((*key, *row))
            if hit is None:
                hit = self._rows[(*key, *row)] = compute(*row)
            out.append(hit)
        return np.array([t for t, _ in out], float), out[0][1]

    def _matmul(self, spec: OpSpec, M, N, K, batch) -> tuple[np.ndarray, str]:
        dtype = self.precision(_matmul_operator(spec))
        dev = self.dev
        if self.mode == "roofline":
            def roofline(m, n, k, b):
                r = roofline_matmul(dev, m, n, k, b, dtype)
                return r.time_s, r.bound
            return self._template(("roofline matmul", dtype), [M, N, K, batch], roofline)
        found = self.entry("gemm", dtype)
        self._note("gemm", found, dtype)
        if found is not None:
            variant = _gemm_variant(dtype)
            t = self._predict(found, variant, {"m": M, "n": N, "k": K, "batch": batch})
            return t, self._gemm_bound(variant, *(x[0].item() for x in (M, N, K, batch)))
        c = self.template.get(dev, "matmul")

        def tile(m, n, k, b):
            r = simulate_matmul(dev, m, n, k, b, dtype, c.compute_efficiency, c.memory_efficiency)
            return r.time_s + dev.launch_overhead_s, r.bound
        return self._template(("matmul", dtype), [M, N, K, batch], tile)

    def _stream(self, op: str, rows, cols, bytes_per_element=None) -> tuple[np.ndarray, str]:
        """A streaming op. With `bytes_per_element` (an eager stack's unfused kernels, graph.py
        `eager_elementwise`) it moves rows x cols x bytes per element, timed by the plain
        elementwise kind's constants ("residual": one pass of PyTorch's plain kernels, not the
        fused norm / RoPE / activation kernels); the template models scale their fused time by
        the ratio of the bytes."""
        dtype = self.precision("kv_cache" if op == "kv_append" else "elementwise")
        dev = self.dev
        fused_bytes = DTYPE_BYTES[dtype] * (TENSORS_READ[op] + TENSORS_WRITTEN.get(op, 1))
        scale = 1.0 if bytes_per_element is None else \
            float(np.asarray(bytes_per_element).flat[0]) / fused_bytes
        if self.mode == "roofline":
            def roofline(r, cc):
                res = roofline_stream(dev, op, r, cc, dtype)
                return res.time_s * scale, res.bound
            return self._template(("roofline stream", dtype, op, scale), [rows, cols], roofline)
        kind = kind_of(op) if bytes_per_element is None else kind_of("residual")
        # vLLM's per-kind kernels (fitted on real layers) stand in for stacks without their own
        found = self.entry("elementwise", kind, ELEMENTWISE_ORDER)
        self._note(f"elementwise ({kind})", found, kind)
        if found is not None:
            moved = rows * cols * fused_bytes * scale
            return self._predict(found, kind, {"bytes": moved, "rows": rows}), "memory"
        c = self.template.get(dev, op)

        def tile(r, cc):
            res = simulate_stream(dev, op, r, cc, dtype, c.memory_efficiency,
                                  c.single_pass_row_bytes)
            return res.time_s * scale + dev.launch_overhead_s, res.bound
        return self._template(("stream", dtype, op, scale), [rows, cols], tile)

    def _attention(self, prefill: bool, args: list) -> tuple[np.ndarray, str]:
        dev = self.dev
        dtype = self.precision("attention")
        kv_dtype = self.precision("kv_cache")
        if prefill:
            batch, heads, kv_heads, q_len, kv_len, hd = args
        else:
            batch, heads, kv_heads, kv_len, hd = args
            q_len = kv_len
            if not self.software.attention.decode_shares_kv:  # K and V read per query head
                kv_heads = heads
        if self.mode == "roofline":
            def roofline(b, h, kvh, q, kv, d):
                r = flash_prefill(dev, b, h, kvh, q, kv, d, True, dtype) if prefill else \
                    flash_decode(dev, b, h, kvh, kv, d, kv_dtype)
                return max(r.flops / dev.matrix_rate(dtype),
                           r.bytes / dev.memory.bandwidth_bytes_per_s), r.bound
            return self._template(("roofline attention", prefill, dtype, kv_dtype),
                                  [batch, heads, kv_heads, q_len, kv_len, hd], roofline)
        family = "context_attention" if prefill else "generation_attention"
        if prefill:  # e.g. TensorRT-LLM computes in FP8 with an FP8 cache
            dtype = context_kernel_dtype(self.software.kernels, dtype, kv_dtype, dev)
        variant = dtype if prefill else kv_dtype
        variant = variant if variant in ("bf16", "fp8") else "bf16"
        found = self.entry(family, variant)
        self._note(family, found, variant)
        if found is not None:
            if prefill:
                # a graph that writes the KV cache in an op of its own (rope_in_attention
                # false) must not count vLLM's cache-write kernel twice
                cols = {"batch": batch, "isl": q_len, "heads": heads, "kv_heads": kv_heads,
                        "head_dim": hd, "cache_write": np.full(
                            len(batch), bool(self.software.fusions.rope_in_attention))}
                return self._predict(found, variant, cols), "compute"
            cols = {"batch": batch, "kv_len": kv_len, "heads": heads, "kv_heads": kv_heads,
                    "head_dim": hd}
            # in a model the other layers evict the cache from L2: it comes from HBM
            return self._predict(found, variant, cols), "memory"
        c = self.template.get(dev, "attention")

        def tile(b, h, kvh, q, kv, d):
            r = flash_prefill(dev, b, h, kvh, q, kv, d, True, dtype, c.compute_efficiency,
                              c.memory_efficiency) if prefill else \
                flash_decode(dev, b, h, kvh, kv, d, kv_dtype, c.compute_efficiency,
                             c.memory_efficiency)
            return r.time_s + dev.launch_overhead_s, r.bound
        return self._template(("attention", prefill, dtype, kv_dtype),
                              [batch, heads, kv_heads, q_len, kv_len, hd], tile)

    def collective_s(self, kind: str, size_bytes: float, n: int) -> float:
        """Time of one collective `kind` ("all_reduce", "all_gather", "reduce_scatter") of
        `size_bytes` (nccl-tests' convention, kernels/gpu/collectives.py) over `n` devices, as
        an operator of a graph times it; 0 on one device."""
        if n <= 1:
            return 0.0
        return float(self._collective(kind, np.array([float(size_bytes)]), np.array([n]))[0])

    def _collective(self, kind: str, size, n) -> np.ndarray:
        dev, ic = self.dev, self.system.interconnect
        if self.mode == "roofline":
            return self._template(("roofline collective", kind), [size, n], lambda s, g: (
                collective_time(kind, ic, float(s), g, IDEAL)[0], ""))[0]
        t = self._fitted_collective(kind, np.asarray(size, float), np.asarray(n)) \
            if self.fitted_collectives else np.full(len(size), np.nan)
        missing = np.isnan(t)
        if missing.any():
            self._note(kind, None, "any")

            def tile(s, g):
                c = self._template_collective(kind, s)
                return collective_time(kind, ic, float(s), g, c.protocols)[0] + (
                    dev.launch_overhead_s if g > 1 else 0.0), ""
            t[missing] = self._template(("collective", kind), [size[missing], n[missing]],
                                        tile)[0]
        return t

    def _template_collective(self, kind: str, size_bytes: float):
        """The template constants of one collective. A device whose constants name its
        collective library's all-reduce (`nccl_all_reduce`: the MI300X's RCCL, fitted on a
        public rccl-tests curve) times with them every all-reduce the framework does not hand
        its custom kernel; any other collective takes the device's `kind` constants."""
        if kind == "all_reduce" and not self.software.uses_custom_all_reduce(size_bytes):
            library = self.template.find(self.dev, "nccl_all_reduce")
            if library is not None:
                return library
        return self.template.get(self.dev, kind)

    def _fitted_collective(self, kind: str, size: np.ndarray, n: np.ndarray) -> np.ndarray:
        """Per row, the framework's custom all-reduce where the profile uses it (it hands large
        messages to NCCL itself), else NCCL, from the device's fitted constants (NaN: none)."""
        t = np.full(len(size), np.nan)
        fitted = n > 1
        custom = fitted & np.array([kind == "all_reduce" and
                                    self.software.uses_custom_all_reduce(float(s)) for s in size])
        if custom.any():
            for fw in [self.software.kernels] + list(FRAMEWORK_ORDER):
                e = self.gpu.entry(fw, "custom_all_reduce", "any")
                if e is None:
                    continue
                self._note("all_reduce", (e, fw), "custom")
                t[custom] = self._predict((e, fw), "any", _collective_cols(
                    kind, size[custom], n[custom]))
                fitted = fitted & ~custom
                break
        nccl = self.gpu.entry("nccl", "nccl", "any")
        if nccl is not None and fitted.any():
            self._note(kind, (nccl, "nccl"), "NCCL")
            t[fitted] = self._predict((nccl, "nccl"), "any",
                                      _collective_cols(kind, size[fitted], n[fitted]))
        return t


def _links(system: System) -> str:
    ic = system.interconnect
    return f"{ic.links_per_device} x {ic.link_bandwidth_bytes_per_s / 1e9:g} GB/s"


def _collective_cols(kind: str, size: np.ndarray, n: np.ndarray) -> dict[str, Any]:
    return {"op": np.full(len(size), kind, dtype=object), "n": n, "bytes": size,
            "graph": np.ones(len(size), bool)}


def _matmul_operator(spec: OpSpec) -> str:
    """The operator whose precision a matmul runs at: the LM head, attention's, or a GEMM."""
    return {"LM head": "lm_head", "attention": "attention"}.get(spec.category, "gemm")


def _gemm_variant(dtype: str) -> str:
    """The fitted GEMM variant a precision is timed as (16-bit GEMMs by the bf16 constants)."""
    return dtype if dtype in ("bf16", "fp8") else "bf16"
