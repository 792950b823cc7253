"""`krakenlm sim calibrate --source aiconfigurator`: fit every kernel family of one GPU.

For each framework measured on the system (TensorRT-LLM, vLLM, SGLang) and each family with a
model in this package (GEMM per dtype, context and generation attention per dtype, the
streaming elementwise kernels, the framework's custom all-reduce) plus NCCL's collectives,
`datasets()` selects the rows and drops the physically implausible ones (a row implying more
than the device's peak is a measurement artefact; how many were dropped is recorded); the fit
uses one half of the shapes and is scored on the other (fit.py); the constants are stored with
their fit statistics (store.py). A family may declare structural variants (`structures`, fitted
in turn, the lowest fit-half error wins and is stored with the constants) and extra starting
points (`starts`, screened on the fit half): GEMM tables get the framework's kernel library and
the benchmark's weight copies as variants (gemm.fit_setup) and gemm.FIT_STARTS.
`krakenlm sim validate --level operators` re-reads the same datasets and scores the shipped
constants on both halves. `--family` refits some families of an existing file and keeps the
rest; `--variant` narrows that to some of their entries (a dtype), so a change that concerns one
entry costs that entry's fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ...hardware import load_system
from ...hardware.schema import System
from ..sources import aiconfigurator as aic
from . import elementwise, gemm
from .fit import FitError, FitResult, fit_half, fit_model
from .params import Param
from .store import DeviceCalibration, Entry, today

DEVICE_KEYS = {"a100_sxm": "A100", "h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200",
               "gb200": "GB200", "l40s": "L40S"}
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

    def fit(self, system_name: str) -> FitResult:
        best: FitResult | None = None
        for structure in self.structures:
            # constants a structure fixes are not fitted (no flat directions for the simplex)
            free = tuple(p for p in self.params if p.name not in structure)
            r = fit_model(f"{self.family} {self.variant} ({self.framework}, {system_name})",
                          lambda c, p, s=structure: self.predict(c, {**p, **s}), free,
                          self.cols, self.latency_s, self.keys,
                          starts=[{}, *self.starts] if self.starts else None, split=self.split)
            if best is None or r.mape_fit < best.mape_fit:
                r.params.update(structure)
                best = r
        assert best is not None
        return best


def device_key(system_name: str) -> str:
    return DEVICE_KEYS[aic.aic_system(system_name)]


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
        from . import attention
        return attention
    except ImportError:
        return None


def _collectives_module():
    try:
        from . import collectives
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


def route_args(module: Any, framework: str, version: str, system: System,
               p: dict[str, float]) -> dict[str, Any]:
    """How stored custom all-reduce constants choose kernels: the framework's route where the
    calibration used it (kernel_route 1), else the hand-off read off the fit half (handoff_<n>)
    and the framework's one-/two-shot switch."""
    route = module.route_for(framework, version, system) if p.get("kernel_route") else None
    if route is not None:
        return {"route": route}
    return {"handoff": handoff_of(p), "oneshot_below": module.oneshot_below_for(framework, system)}


def handoff_of(p: dict[str, float]) -> dict[int, float]:
    """The {n: bytes} hand-off stored with custom all-reduce constants as handoff_<n>."""
    return {int(k.split("_", 1)[1]): v for k, v in p.items() if k.startswith("handoff_")}


def check(system_name: str, frameworks: list[str] | None = None,
          root: str | None = None) -> list[str]:
    """The frameworks to calibrate; raises CalibrationSourceError naming what is missing."""
    load_system(system_name)
    aic.aic_system(system_name)  # fails early, naming the systems with tables
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


# Tables that contradict NVIDIA's own published measurements of the same system are not fitted;
# the simulator then times those families with the preset's template models, and the reason is
# recorded in the calibration file. L40S: the tables' 8-GPU all-reduce moves 8 MB in 12.8 ms
# (0.65 GB/s, i.e. through host memory without peer-to-peer), yet TensorRT-LLM 0.9's published
# Llama-2-70B TP 8 TTFT at 128 tokens is 70 ms in all, where its 160 all-reduces of 2 MB would
# take ~420 ms at the tables' speed (validation_data/model_measurements.csv, trtllm_v090).
UNREPRESENTATIVE = {
    "l40s-x8": (("nccl", "custom_all_reduce"),
                "the tables' 8-GPU all-reduce (0.65 GB/s at 8 MB: a machine without peer-to-peer) "
                "contradicts TensorRT-LLM's published L40S TP-8 latencies; collectives use the "
                "preset's template model"),
}


FAMILIES = ("gemm", "elementwise", "context_attention", "generation_attention", "nccl",
            "custom_all_reduce")


def calibrate(system_name: str, frameworks: list[str] | None = None, root: str | None = None,
              command: str = "", base: DeviceCalibration | None = None,
              progress: Callable[[Dataset, FitResult | None, str], None] | None = None,
              families: list[str] | None = None,
              variants: list[str] | None = None) -> DeviceCalibration:
    """Fit every family; `base` (an existing file's content) keeps frameworks not refitted.
    With `families`, only those are refitted and every other entry of `base` stays as it was
    (a model change in one family then costs one family's fit, not the device's); `variants`
    narrows that to some variants (dtypes) of them, e.g. the one entry a change concerns."""
    if families:
        unknown = [f for f in families if f not in FAMILIES]
        if unknown:
            raise FitError(f"unknown family {unknown[0]!r}; use one of {', '.join(FAMILIES)}")
        if base is None:
            raise FitError("refitting some families needs the calibration file they belong to; "
                           "calibrate every family first (without --family)")
    system, sets, nccl = datasets(system_name, frameworks, root)
    key = device_key(system_name)
    cal = base if base is not None else DeviceCalibration(key)
    if families:
        sets = [ds for ds in sets if ds.family in families
                and (not variants or ds.variant in variants)]
        if "custom_all_reduce" in families and "nccl" not in families:
            # the custom all-reduce hands large messages to the file's fitted NCCL model
            entry = cal.entry("nccl", "nccl", "any")
            if entry is not None:
                nccl["params"] = entry.params
        return _refit_families(system_name, cal, sets, nccl, command, progress)
    results: list[tuple[Dataset, FitResult]] = []
    excluded_families, why = UNREPRESENTATIVE.get(system_name, ((), ""))
    for ds in sets:  # fit everything first: a failure leaves `base` untouched
        if ds.family in excluded_families:
            if progress:
                progress(ds, None, f"not fitted: {why}")
            continue
        try:
            result = ds.fit(system_name)
        except FitError as exc:
            if progress:
                progress(ds, None, str(exc))
            continue
        results.append((ds, result))
        if ds.family == "nccl":
            nccl["params"] = result.params
        if progress:
            progress(ds, result, "")
    if not results:
        raise FitError(f"nothing could be fitted for {system_name}")
    for fw in {ds.framework for ds, _ in results} | ({"nccl"} & set(excluded_families)):
        cal.frameworks.pop(fw, None)  # a refit (or excluded) framework is replaced whole
    for ds, result in results:
        cal.put(ds.framework, ds.version, ds.family, ds.variant,
                Entry(result.params, result.summary(), ds.notes + result.notes))
    device = aic.read_gemm(system_name, next(d.framework for d in sets if d.framework != "nccl"),
                           root=root).device
    cal.meta.update({
        "system": system_name,
        "device_measured": device,
        "source": f"aiconfigurator-core {aic.package_version()} (NVIDIA, Apache-2.0): "
                  f"systems/data/{aic.aic_system(system_name)}",
        "command": command,
        "created": today(),
        **({"excluded": f"{', '.join(excluded_families)}: {why}"} if excluded_families else {}),
        "split": "rows hashed by shape (CRC-32 of the shape key): even hashes are fitted, odd "
                 "ones held out; fits use a seeded sample of at most 4000 fit-half shapes",
    })
    return cal


def _refit_families(system_name: str, cal: DeviceCalibration, sets: list[Dataset],
                    nccl: dict[str, Any], command: str,
                    progress: Callable[[Dataset, FitResult | None, str], None] | None
                    ) -> DeviceCalibration:
    """Replace the entries of `sets` in `cal`, all fitted before any is replaced."""
    excluded_families, why = UNREPRESENTATIVE.get(system_name, ((), ""))
    results: list[tuple[Dataset, FitResult]] = []
    for ds in sets:
        if ds.family in excluded_families:
            if progress:
                progress(ds, None, f"not fitted: {why}")
            continue
        result = ds.fit(system_name)  # a FitError leaves the file as it was
        results.append((ds, result))
        if ds.family == "nccl":
            nccl["params"] = result.params
        if progress:
            progress(ds, result, "")
    if not results:
        raise FitError(f"nothing to refit for {system_name}: the tables have none of these "
                       "families for the frameworks asked")
    # entry by entry: other variants of a family (e.g. the Vidur-fitted streaming kernels next
    # to the tables' quantiser under `elementwise`) stay
    for ds, result in results:
        cal.put(ds.framework, ds.version, ds.family, ds.variant,
                Entry(result.params, result.summary(), ds.notes + result.notes))
    refits = list(cal.meta.get("refits") or [])
    refits.append({"command": command, "created": today()})
    cal.meta["refits"] = refits
    return cal


def mape_table(cal: DeviceCalibration) -> list[dict[str, Any]]:
    rows = []
    for fw, info in cal.frameworks.items():
        for fam, variants in info.get("families", {}).items():
            for variant, e in variants.items():
                rows.append({"framework": fw, "version": info.get("version", ""), "family": fam,
                             "variant": variant, **e.fit})
    return rows
