"""The measured kernel tables as datasets: per GPU, framework, kernel family and variant, the
rows a kernel model describes and the model that predicts them.

For each framework measured on the system (TensorRT-LLM, vLLM, SGLang) and each family with a
GPU kernel model (GEMM per dtype, context and generation attention per dtype, the streaming
elementwise kernels, the framework's custom all-reduce) plus NCCL's collectives, `datasets()`
selects the rows and drops the physically implausible ones (a row implying more than the
device's peak is a measurement artefact; how many were dropped is recorded). A dataset may
declare structural variants (`structures`, fitted in turn by calibration/gpu.py, the lowest
fit-half error wins) and extra starting points (`starts`). Calibration fits them; `krakenlm sim
validate --level operators` re-reads the same datasets and scores the shipped constants.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ...hardware import load_system
from ...hardware.identity import calibration_is_file, lookup
from ...hardware.schema import System
from ..kernels.gpu import elementwise, gemm
from ..kernels.gpu.custom_allreduce_args import route_args
from ..kernels.params import Param
from . import aiconfigurator as aic
from .split import fit_half

GEMM_DTYPES = ("bf16", "fp8")


PEAK_MARGIN = 1.05  # a kernel may not beat the datasheet peak by more than measurement noise


@dataclass
class Dataset:
    """The measured rows of one (framework, family, variant) and the model that predicts them."""

    framework: str
    version: str
    family: str
    variant: str
    cols: dict[str, np.ndarray]
    latency_s: np.ndarray
    params: tuple[Param, ...]
    predict: Callable[[dict[str, np.ndarray], dict[str, float]], np.ndarray]
    keys: list[str]
    notes: list[str] = field(default_factory=list)
    # structural choices (not fitted constants) tried in turn; the lowest fit-half error wins
    structures: tuple[dict[str, float], ...] = ({},)
    # starting points of the fit besides the initial values (screened on the fit half, fit.py)
    starts: tuple[dict[str, float], ...] = ()
    # the data's own fit rows (Vidur's file marks them), instead of the CRC-32 split of keys
    split: np.ndarray | None = None


def device_key(system_name: str) -> str:
    """The key a calibration of the system's device is stored under: the calibration name its
    identity declares (`calibration: H100`), else the device's name."""
    device = load_system(system_name).device
    declared = lookup(device).calibration
    return declared if declared and not calibration_is_file(declared) else device.name


def _keep(cols: dict[str, np.ndarray], lat: np.ndarray, ok: np.ndarray, notes: list[str],
          why: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    if (~ok).any():
        notes.append(f"{int((~ok).sum())} of {len(lat)} rows dropped: {why}")
    return {k: v[ok] for k, v in cols.items()}, lat[ok]


def gemm_datasets(system: System, framework: str, root: str | None) -> list[Dataset]:
    dev = system.device
    table = aic.read_gemm(system.name, framework, root=root)
    out = []
    for dtype in GEMM_DTYPES:
        if dev.matrix_flops_per_s.get(dtype) is None:
            continue
        sel = table.columns["dtype"] == dtype
        if not sel.any():
            continue
        notes = list(table.notes)
        cols = {k: v[sel] for k, v in table.columns.items()}
        lat = table.latency_s[sel]
        peak = dev.matrix_rate(dtype)
        cols, lat = _keep(cols, lat, gemm.flops(cols) / lat <= PEAK_MARGIN * peak, notes,
                          f"faster than the {dtype} peak ({peak / 1e12:.0f} TFLOP/s)")
        params, structures = gemm.fit_setup(dev, framework, dtype)
        out.append(Dataset(framework, table.version, "gemm", dtype, cols, lat, params,
                           lambda c, p, dtype=dtype: gemm.predict(dev, c, p, dtype),
                           gemm.shape_key(cols), notes, structures, gemm.FIT_STARTS))
    return out


def elementwise_datasets(system: System, framework: str, root: str | None) -> list[Dataset]:
    dev = system.device
    if framework == "sglang":
        # SGLang's measured quantiser is a plain torch op (~10 % of HBM bandwidth), not the
        # fused kernels its norms and activations use: it would misstate them.
        return []
    try:
        table = aic.read_elementwise(system.name, framework, root=root)
    except aic.CalibrationSourceError:
        return []  # not every system has quantisation kernels measured (A100 has none)
    cols = dict(table.columns)
    cols["bytes"] = cols["bytes_read"] + cols["bytes_written"]
    notes = list(table.notes) + ["fitted on static FP8 quantisation (scale_matrix): read 16-bit, "
                                 "write 8-bit"]
    return [Dataset(framework, table.version, "elementwise", "any", cols, table.latency_s,
                    elementwise.params_for(dev), lambda c, p: elementwise.predict(dev, c, p),
                    elementwise.shape_key(cols), notes, elementwise.ROW_STRUCTURES)]


def _attention_module():
    try:
        from ..kernels.gpu import attention
        return attention
    except ImportError:
        return None


def _collectives_module():
    try:
        from ..kernels.gpu import collectives
        return collectives
    except ImportError:
        return None


def attention_datasets(system: System, framework: str, root: str | None) -> list[Dataset]:
    """Context attention per kernel dtype (TensorRT-LLM computes in FP8 whenever its KV cache is
    FP8) and generation attention per KV-cache dtype; rows the model does not describe (sliding
    windows, head sizes beyond 256, kernel fallbacks) and implausible rows are dropped."""
    module = _attention_module()
    if module is None:
        return []
    dev = system.device
    out = []
    try:
        ctx = aic.read_context_attention(system.name, framework, root=root)
    except aic.CalibrationSourceError:
        ctx = None
    if ctx is not None:
        c = ctx.columns
        kernel = np.array([module.context_kernel_dtype(framework, d, k, dev)
                           for d, k in zip(c["dtype"], c["kv_dtype"])], dtype=object)
        for dtype in ("bf16", "fp8"):
            sel = kernel == dtype
            if dtype == "bf16":
                sel &= c["kv_dtype"] == "bf16"
            if not sel.any() or dev.matrix_flops_per_s.get(dtype) is None:
                continue
            notes = list(ctx.notes)
            cols = {k: v[sel] for k, v in c.items()}
            lat = ctx.latency_s[sel]
            cols, lat = _keep(cols, lat, module.context_supported(dev, framework, cols, dtype),
                              notes, "not this kernel (sliding window, head dim > 256, "
                                     "Triton fallback, SGLang's padded head dim 192)")
            cols, lat = _keep(cols, lat, module.plausible_context(dev, cols, lat, dtype), notes,
                              "faster than the tensor peak allows")
            out.append(Dataset(framework, ctx.version, "context_attention", dtype, cols, lat,
                               module.context_params_for(framework),
                               lambda cc, p, dtype=dtype: module.predict_context(dev, cc, p, dtype),
                               module.context_key(cols), notes,
                               module.context_variants_for(framework)))
    try:
        gen = aic.read_generation_attention(system.name, framework, root=root)
    except aic.CalibrationSourceError:
        gen = None
    if gen is not None:
        c = gen.columns
        for kv_dtype in ("bf16", "fp8"):
            sel = (c["kv_dtype"] == kv_dtype) & (c["dtype"] == "bf16")
            if not sel.any():
                continue
            notes = list(gen.notes)
            cols = {k: v[sel] for k, v in c.items()}
            lat = gen.latency_s[sel]
            cols, lat = _keep(cols, lat, module.generation_supported(dev, framework, cols), notes,
                              "not this kernel (sliding window, head dim > 256, fallback kernels)")
            cols, lat = _keep(cols, lat, module.plausible_generation(dev, cols, lat, kv_dtype),
                              notes, "faster than the memory the KV cache comes from allows")
            out.append(Dataset(framework, gen.version, "generation_attention", kv_dtype, cols,
                               lat, module.generation_params_for(framework, dev),
                               lambda cc, p, kv=kv_dtype: module.predict_generation(dev, cc, p, kv),
                               module.generation_key(cols), notes,
                               module.generation_variants_for(framework, dev, kv_dtype),
                               module.generation_starts(framework, dev)))
    return out


def nccl_datasets(system: System, root: str | None) -> list[Dataset]:
    """NCCL's all-reduce, all-gather and reduce-scatter on 2, 4 and 8 GPUs: one constant set
    per device (the protocol NCCL's own tuner picks, see gpu/collectives.py)."""
    module = _collectives_module()
    if module is None:
        return []
    try:
        table = aic.read_nccl(system.name, root=root)
    except aic.CalibrationSourceError:
        return []
    cols = table.columns
    return [Dataset("nccl", table.version, "nccl", "any", cols, table.latency_s,
                    module.nccl_params_for(system, cols),
                    lambda c, p: module.predict_nccl(system, c, p), module.nccl_key(cols),
                    list(table.notes))]


def custom_allreduce_datasets(system: System, framework: str, root: str | None,
                              nccl: dict[str, Any]) -> list[Dataset]:
    """The framework's own all-reduce (CUDA-graph and eager rows). The framework's own rule
    (allreduce_routes, read from its source for the measured version) says which kernel runs
    for each message and which messages go to NCCL (`kernel_route` 1 in the stored constants).
    NCCL's messages are timed by the fitted NCCL model of the same device (`nccl["params"]`,
    filled in once NCCL is fitted, before this dataset is), which presumes the framework's
    NCCL is the one the NCCL tables measured. Where the fit half says otherwise (its NCCL
    messages more than 12 % off NCCL's measured times: GB200 vLLM's 2-GPU NCCL runs at a third
    of the tables' bandwidth), or no rule is known, the hand-off to NCCL is read off the fit
    half instead (where the measured time equals NCCL's, `handoff_<n>`) and the framework's
    kernels time everything below it."""
    module = _collectives_module()
    if module is None:
        return []
    try:
        table = aic.read_custom_allreduce(system.name, framework, root=root)
        ref_table = aic.read_nccl(system.name, root=root)
    except aic.CalibrationSourceError:
        return []
    cols, lat = table.columns, table.latency_s
    keys = module.custom_key(cols)
    notes = list(table.notes)
    has_eager = bool((~cols["graph"]).any())
    # NCCL's measured time at each custom row's size and GPU count (NaN where not measured)
    ref = np.full(len(lat), np.nan)
    ar = ref_table.columns["op"] == "all_reduce"
    for i, (n, b) in enumerate(zip(cols["n"], cols["bytes"])):
        m = ar & (ref_table.columns["n"] == n) & (ref_table.columns["bytes"] == b)
        if m.any():
            ref[i] = np.median(ref_table.latency_s[m])
    half = fit_half(keys)
    route = module.route_for(framework, table.version, system)
    if route is not None:
        kernels = route(cols["n"], cols["bytes"])
        odd = module.nccl_mismatch(cols, lat, ref, kernels, half)
        if odd:
            ratios = ", ".join(f"n={k}: x{v:.2f}" for k, v in sorted(odd.items()))
            notes.append(f"not the route of {framework} {table.version} ({route.source}): its "
                         f"NCCL messages on the fit half are not NCCL's measured times ({ratios})")
            route = None
    if route is not None:
        notes.append(f"kernel per message (kernel_route 1): {route.source}")
        structure = {"kernel_route": 1.0}
    else:
        handoff = module.detect_handoff(cols, lat, ref, mask=half)
        notes.append("hand-off to NCCL read off the fit half: " + (", ".join(
            f"n={k} above {v / 2**20:.3g} MiB" for k, v in sorted(handoff.items())) or "none"))
        structure = {f"handoff_{k}": float(v) for k, v in handoff.items()}
        kernels = module.legacy_kernels(cols, handoff,
                                        module.oneshot_below_for(framework, system))
    params = module.custom_params_for(has_eager, set(kernels.tolist()))

    def predict(c, p):
        return module.predict_custom(system, c, p, nccl_params=nccl.get("params"),
                                     **route_args(module, framework, table.version, system, p))

    return [Dataset(framework, table.version, "custom_all_reduce", "any", cols, lat, params,
                    predict, keys, notes, (structure,), module.CUSTOM_FIT_STARTS)]


def check(system_name: str, frameworks: list[str] | None = None,
          root: str | None = None) -> list[str]:
    """The frameworks to calibrate; raises CalibrationSourceError naming what is missing."""
    system_name = load_system(system_name).name  # a YAML path: the name its tables go by
    aic.aic_system(system_name, root)  # fails early, naming the systems with tables
    available = aic.available_frameworks(system_name, root=root)
    wanted = frameworks or available
    for fw in wanted:
        if fw not in aic.FRAMEWORKS:
            raise aic.CalibrationSourceError(f"unknown framework {fw!r}; use one of "
                                             f"{', '.join(aic.FRAMEWORKS)}")
        if fw not in available:
            raise aic.CalibrationSourceError(
                f"the tables have no {fw} kernels for {system_name}; measured frameworks: "
                f"{', '.join(available) or 'none'}")
    return list(wanted)


def datasets(system_name: str, frameworks: list[str] | None = None,
             root: str | None = None) -> tuple[System, list[Dataset], dict[str, Any]]:
    """Every measured family of the system, ready to fit or to score, NCCL first. The returned
    dict takes the NCCL constants (key "params") before the custom all-reduce is fitted or
    scored: that model hands large messages to NCCL."""
    wanted = check(system_name, frameworks, root)
    system = load_system(system_name)
    out: list[Dataset] = nccl_datasets(system, root)  # first: custom all-reduce hands off to it
    nccl: dict[str, Any] = {}
    for fw in wanted:
        out += gemm_datasets(system, fw, root)
        out += elementwise_datasets(system, fw, root)
        out += attention_datasets(system, fw, root)
        out += custom_allreduce_datasets(system, fw, root, nccl)
    return system, out, nccl


FAMILIES = ("gemm", "elementwise", "context_attention", "generation_attention", "nccl",
            "custom_all_reduce")
