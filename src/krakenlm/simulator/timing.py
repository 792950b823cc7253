"""Time one operator of a graph: the fitted GPU kernel model where the device has one, the
template tile model otherwise.

Order of preference per kernel family (GEMM, context / generation attention, streaming ops,
collectives), in `mode="simulate"`:
1. the constants fitted on the software profile's own framework for this device
   (krakenlm/simulator/calibrations, `krakenlm sim calibrate --source aiconfigurator`);
2. the same family measured under another framework on this device (said so in the sources);
3. the template models of the LLMCompass hardware template (matmul.py, attention.py,
   elementwise.py, collectives.py) with the template constants (calibration.yaml) and the
   device's `launch_overhead_s` per kernel: what hardware without measurements (an imagined
   design, a TPU, an AMD GPU) is timed with.
`mode="tile"` always takes 3; `mode="roofline"` takes peak rates and minimal traffic.
Every family used is recorded in `sources` (what was timed with what), for the report.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..hardware.schema import DTYPE_BYTES, System
from .constants.gpu_kernels import DeviceCalibration, Entry
from .constants.software import SoftwareProfile
from .constants.template import Calibration
from .graph import OpSpec
from .kernels.gpu import elementwise as gpu_elementwise
from .kernels.gpu import gemm as gpu_gemm
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
ELEMENTWISE_ORDER = ("vllm", "trtllm", "sglang")


@functools.lru_cache(maxsize=None)
def _gpu_attention():
    try:
        from .kernels.gpu import attention
        return attention
    except ImportError:  # the module is optional until its constants exist
        return None


@functools.lru_cache(maxsize=None)
def _gpu_collectives():
    try:
        from .kernels.gpu import collectives
        return collectives
    except ImportError:
        return None


class OpTimer:
    """Times operator specs on one system under one software profile; memoised per spec."""

    def __init__(self, system: System, software: SoftwareProfile, mode: str, dtype: str,
                 template: Calibration, gpu: DeviceCalibration | None):
        self.system, self.dev = system, system.device
        self.software, self.mode, self.dtype = software, mode, dtype
        self.template, self.gpu = template, gpu if mode == "simulate" else None
        self.cache: dict[OpSpec, TimedOp] = {}
        self.sources: dict[str, str] = {}

    # ------------------------------------------------------------------------------ lookup
    def precision(self, operator: str) -> str:
        return self.software.precision(operator, self.dtype)

    def entry(self, family: str, variant: str,
              order: tuple[str, ...] = FRAMEWORK_ORDER) -> tuple[Entry, str] | None:
        """The fitted constants for (family, variant), preferring the profile's framework,
        then the others in `order`; per framework the variant, else its "any" entry."""
        if self.gpu is None:
            return None
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
            self.sources[family] = (f"template model ({self.mode}), "
                                    f"{self.template.device_key(self.dev) or 'ideal'} constants")
            return
        e, fw = found
        version = self.gpu.frameworks.get(fw, {}).get("version", "")
        held = e.fit.get("mape_held_out_pct")
        borrowed = "" if fw in (self.software.kernels, "nccl") else \
            f", borrowed: no {self.software.kernels} measurement of this family"
        self.sources[family] = (f"measured kernels: {fw} {version} on {self.gpu.device_key} "
                                f"({variant}; held-out MAPE {held} %{borrowed})")

    # ------------------------------------------------------------------------------- timing
    def time_steps(self, first: OpSpec, second: OpSpec, kv: np.ndarray) -> np.ndarray:
        """Seconds of an operator at every KV length in `kv`: `first` and `second` are its specs
        at kv[0] and kv[0] + 1, so the arguments that differ are the KV length. Vectorised
        for the fitted GPU models; the template models are evaluated per length (memoised)."""
        moving = [i for i, (a, b) in enumerate(zip(first.args, second.args)) if a != b]
        offsets = [first.args[i] - int(kv[0]) for i in moving]

        def spec_at(k: int) -> OpSpec:
            args = list(first.args)
            for i, off in zip(moving, offsets):
                args[i] = int(k) + off
            return OpSpec(first.name, first.category, first.model, tuple(args), first.stream,
                          first.deps)

        fast = self._vectorised(first, moving, offsets, kv)
        if fast is not None:
            return fast
        return np.array([self(spec_at(k)).time_s for k in kv])

    def _vectorised(self, spec: OpSpec, moving: list[int], offsets: list[int],
                    kv: np.ndarray) -> np.ndarray | None:
        if self.mode != "simulate" or self.gpu is None:
            return None
        first = self(spec)  # also records the source of the family
        args = [np.full(len(kv), a) if not isinstance(a, str) else a for a in spec.args]
        for i, off in zip(moving, offsets):
            args[i] = kv + off
        if spec.model == "flash_decode":
            module = _gpu_attention()
            kv_dtype = self.precision("kv_cache")
            variant = kv_dtype if kv_dtype in ("bf16", "fp8") else "bf16"
            found = self.entry("generation_attention", variant) if module else None
            if found is None:
                return None
            batch, heads, kv_heads, kv_len, hd = args
            cols = {"batch": batch, "kv_len": kv_len, "heads": heads, "kv_heads": kv_heads,
                    "head_dim": hd}
            out = module.predict_generation(self.dev, cols, found[0].params, variant,
                                            warm_l2=False)
        elif spec.model == "matmul":
            operator = {"LM head": "lm_head", "attention": "attention"}.get(spec.category, "gemm")
            dtype = self.precision(operator)
            found = self.entry("gemm", dtype)
            if found is None:
                return None
            variant = dtype if dtype in ("bf16", "fp8") else "bf16"
            M, N, K, batch = args
            out = gpu_gemm.predict(self.dev, {"m": M, "n": N, "k": K, "batch": batch},
                                   found[0].params, variant, warm_l2=False)
        elif spec.model == "stream":
            op, rows, cols_ = args
            found = self.entry("elementwise", kind_of(op), ELEMENTWISE_ORDER)
            if found is None:
                return None
            dtype = self.precision("kv_cache" if op == "kv_append" else "elementwise")
            moved = rows * cols_ * DTYPE_BYTES[dtype] * (TENSORS_READ[op]
                                                         + TENSORS_WRITTEN.get(op, 1))
            out = gpu_elementwise.predict(self.dev, {"bytes": moved, "rows": rows},
                                          found[0].params)
        else:
            return None
        out = np.asarray(out, float)
        # the vectorised path must agree with the per-spec path it replaces
        if abs(out[0] - first.time_s) > 1e-9 * max(first.time_s, 1e-12):
            raise AssertionError(f"vectorised timing of {spec.name} disagrees with the scalar one")
        return out

    def __call__(self, spec: OpSpec) -> TimedOp:
        hit = self.cache.get(spec)
        if hit is None:
            hit = self.cache[spec] = self._time(spec)
        return hit

    def _time(self, spec: OpSpec) -> TimedOp:
        model = spec.model
        if model == "collective":
            return self._collective(spec)
        if model == "matmul":
            t, bound = self._matmul(spec)
        elif model == "stream":
            t, bound = self._stream(spec)
        elif model in ("flash_prefill", "flash_decode"):
            t, bound = self._attention(spec)
        else:
            raise ValueError(f"unknown op model {model!r}")
        return TimedOp(spec.name, spec.category, "compute", t, bound, spec.deps)

    def _matmul(self, spec: OpSpec) -> tuple[float, str]:
        M, N, K, batch = spec.args
        operator = {"LM head": "lm_head", "attention": "attention"}.get(spec.category, "gemm")
        dtype = self.precision(operator)
        dev = self.dev
        if self.mode == "roofline":
            r = roofline_matmul(dev, M, N, K, batch, dtype)
            return r.time_s, r.bound
        found = self.entry("gemm", dtype)
        self._note("gemm", found, dtype)
        if found is not None:
            variant = dtype if dtype in ("bf16", "fp8") else "bf16"
            t = float(gpu_gemm.predict(dev, {"m": np.array([M]), "n": np.array([N]),
                                             "k": np.array([K]), "batch": np.array([batch])},
                                       found[0].params, variant, warm_l2=False)[0])
            bound = "compute" if 2.0 * batch * M * N * K / dev.matrix_rate(variant) > \
                batch * (M * K + K * N + M * N) * DTYPE_BYTES[variant] / \
                dev.memory.bandwidth_bytes_per_s else "memory"
            return t, bound
        c = self.template.get(dev, "matmul")
        r = simulate_matmul(dev, M, N, K, batch, dtype, c.compute_efficiency, c.memory_efficiency)
        return r.time_s + dev.launch_overhead_s, r.bound

    def _stream(self, spec: OpSpec) -> tuple[float, str]:
        op, rows, cols = spec.args
        dtype = self.precision("kv_cache" if op == "kv_append" else "elementwise")
        dev = self.dev
        if self.mode == "roofline":
            r = roofline_stream(dev, op, rows, cols, dtype)
            return r.time_s, r.bound
        kind = kind_of(op)
        # vLLM's per-kind kernels (fitted on real layers) stand in for stacks without their own
        found = self.entry("elementwise", kind, ELEMENTWISE_ORDER)
        self._note(f"elementwise ({kind})", found, kind)
        if found is not None:
            moved = rows * cols * DTYPE_BYTES[dtype] * (TENSORS_READ[op] + TENSORS_WRITTEN.get(op, 1))
            t = float(gpu_elementwise.predict(dev, {"bytes": np.array([moved]),
                                                    "rows": np.array([rows])},
                                              found[0].params)[0])
            return t, "memory"
        c = self.template.get(dev, op)
        r = simulate_stream(dev, op, rows, cols, dtype, c.memory_efficiency,
                            c.single_pass_row_bytes)
        return r.time_s + dev.launch_overhead_s, r.bound

    def _attention(self, spec: OpSpec) -> tuple[float, str]:
        dev = self.dev
        prefill = spec.model == "flash_prefill"
        dtype = self.precision("attention")
        kv_dtype = self.precision("kv_cache")
        if prefill:
            batch, heads, kv_heads, q_len, kv_len, hd = spec.args
        else:
            batch, heads, kv_heads, kv_len, hd = spec.args
        if self.mode == "roofline":
            r = flash_prefill(dev, batch, heads, kv_heads, q_len, kv_len, hd, True, dtype) \
                if prefill else flash_decode(dev, batch, heads, kv_heads, kv_len, hd, kv_dtype)
            t = max(r.flops / dev.matrix_rate(dtype), r.bytes / dev.memory.bandwidth_bytes_per_s)
            return t, r.bound
        module = _gpu_attention()
        family = "context_attention" if prefill else "generation_attention"
        if prefill and module is not None:  # e.g. TensorRT-LLM computes in FP8 with an FP8 cache
            dtype = module.context_kernel_dtype(self.software.kernels, dtype, kv_dtype, dev)
        variant = dtype if prefill else kv_dtype
        variant = variant if variant in ("bf16", "fp8") else "bf16"
        found = self.entry(family, variant) if module is not None else None
        self._note(family, found, variant)
        if found is not None:
            if prefill:
                cols = {"batch": np.array([batch]), "isl": np.array([q_len]),
                        "heads": np.array([heads]), "kv_heads": np.array([kv_heads]),
                        "head_dim": np.array([hd])}
                # a graph that writes the KV cache in an op of its own (rope_in_attention
                # false) must not count vLLM's cache-write kernel twice
                t = float(module.predict_context(
                    dev, cols, found[0].params, variant,
                    cache_write=self.software.fusions.rope_in_attention)[0])
                return t, "compute"
            cols = {"batch": np.array([batch]), "kv_len": np.array([kv_len]),
                    "heads": np.array([heads]), "kv_heads": np.array([kv_heads]),
                    "head_dim": np.array([hd])}
            # in a model the other layers evict the cache from L2: it comes from HBM
            t = float(module.predict_generation(dev, cols, found[0].params, variant,
                                                warm_l2=False)[0])
            return t, "memory"
        c = self.template.get(dev, "attention")
        r = flash_prefill(dev, batch, heads, kv_heads, q_len, kv_len, hd, True, dtype,
                          c.compute_efficiency, c.memory_efficiency) if prefill else \
            flash_decode(dev, batch, heads, kv_heads, kv_len, hd, kv_dtype,
                         c.compute_efficiency, c.memory_efficiency)
        return r.time_s + dev.launch_overhead_s, r.bound

    def _collective(self, spec: OpSpec) -> TimedOp:
        kind, size, n = spec.args
        dev, ic = self.dev, self.system.interconnect
        t: float | None = None
        if self.mode == "roofline":
            t, _ = collective_time(kind, ic, float(size), n, IDEAL)
        else:
            module = _gpu_collectives()
            if module is not None and n > 1:
                t = self._fitted_collective(module, kind, float(size), n)
            if t is None:
                self._note(kind, None, "any")
                c = self.template.get(dev, kind)
                t, _ = collective_time(kind, ic, float(size), n, c.protocols)
                t += dev.launch_overhead_s if n > 1 else 0.0
        share = memory_traffic_bytes(kind, size, n) / max(t, 1e-12) / \
            dev.memory.bandwidth_bytes_per_s
        return TimedOp(spec.name, spec.category, "comm", t, deps=spec.deps, memory_share=share)

    def _fitted_collective(self, module: Any, kind: str, size: float, n: int) -> float | None:
        """The framework's custom all-reduce where the profile uses it (it hands large messages
        to NCCL itself), else NCCL, from the device's fitted constants."""
        from .kernels.gpu.custom_allreduce_args import route_args

        nccl = self.gpu.entry("nccl", "nccl", "any") if self.gpu else None
        cols = {"op": np.array([kind], dtype=object), "n": np.array([n]),
                "bytes": np.array([size]), "graph": np.array([True])}
        if kind == "all_reduce" and self.software.uses_custom_all_reduce(size) and self.gpu:
            for fw in [self.software.kernels] + list(FRAMEWORK_ORDER):
                e = self.gpu.entry(fw, "custom_all_reduce", "any")
                if e is None:
                    continue
                self._note("all_reduce", (e, fw), "custom")
                version = self.gpu.frameworks.get(fw, {}).get("version", "")
                return float(module.predict_custom(
                    self.system, cols, e.params, nccl_params=nccl.params if nccl else None,
                    **route_args(module, fw, version, self.system, e.params))[0])
        if nccl is None:
            return None
        self._note(kind, (nccl, "nccl"), "NCCL")
        return float(module.predict_nccl(self.system, cols, nccl.params)[0])
