"""The measured kernel tables as datasets: per GPU, framework, kernel family and variant, the
rows the family's kernel forms describe.

For each framework measured on the system (TensorRT-LLM, vLLM, SGLang) and each family with
GPU kernel forms (GEMM per dtype, context and generation attention per dtype, the streaming
elementwise kernels, the framework's custom all-reduce) plus NCCL's collectives, `datasets()`
selects the rows and drops those the family's forms do not describe or the device's peaks
rule out (a row implying more than the device's peak is a measurement artefact; how many were
dropped is recorded). Calibration fits the registered forms offered for each dataset
(kernels/base.py, calibration/fit.py); `krakenlm sim validate --level operators` re-reads the
same datasets and scores the shipped constants, under the harness conditions of the source
(measurements/harness.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ...hardware import load_system
from ...hardware.identity import calibration_is_file, lookup
from ...hardware.schema import System
from ..kernels import base
from ..kernels.gpu.attention import context_kernel_dtype
from ..kernels.gpu.collectives import nccl_timer
from . import aiconfigurator as aic
from .harness import AICONFIGURATOR

GEMM_DTYPES = ("bf16", "fp8")


@dataclass
class Dataset:
    """The measured rows of one (framework, family, variant), where and how they were
    measured (`setting`, `source`: the harness, measurements/harness.py)."""

    source: str
    setting: base.Setting
    family: str
    cols: dict[str, np.ndarray]
    latency_s: np.ndarray
    keys: list[str]
    notes: list[str] = field(default_factory=list)

    @property
    def framework(self) -> str:
        return self.setting.framework

    @property
    def version(self) -> str:
        return self.setting.version

    @property
    def variant(self) -> str:
        return self.setting.variant

    def forms(self) -> tuple[base.KernelForm, ...]:
        """The registered forms of this family offered for its setting (the fit's candidates)."""
        return tuple(f for f in base.forms(self.family) if f.offered(self.setting))


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


def dataset(source: str, setting: base.Setting, family: str, cols: dict[str, np.ndarray],
            latency_s: np.ndarray, notes: list[str]) -> Dataset | None:
    """The rows every form of `family` offered for `setting` describes (`supported`), of them
    those the device allows (`plausible`); None when no form is offered."""
    forms = tuple(f for f in base.forms(family) if f.offered(setting))
    if not forms:
        return None
    notes = list(notes)
    n = len(latency_s)
    ok = np.logical_and.reduce([np.asarray(f.supported(setting, cols), bool)
                                & np.ones(n, bool) for f in forms])
    cols, latency_s = _keep(cols, latency_s, ok, notes, forms[0].unsupported_note(setting))
    ok = np.logical_and.reduce([np.asarray(f.plausible(setting, cols, latency_s), bool)
                                & np.ones(len(latency_s), bool) for f in forms])
    cols, latency_s = _keep(cols, latency_s, ok, notes, forms[0].implausible_note(setting))
    return Dataset(source, setting, family, cols, latency_s, forms[0].key(cols), notes)


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
        cols = {k: v[sel] for k, v in table.columns.items()}
        ds = dataset(AICONFIGURATOR, base.Setting(system, framework, dtype, table.version),
                     "gemm", cols, table.latency_s[sel], table.notes)
        out += [ds] if ds else []
    return out


def elementwise_datasets(system: System, framework: str, root: str | None) -> list[Dataset]:
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
    ds = dataset(AICONFIGURATOR, base.Setting(system, framework, "any", table.version),
                 "elementwise", cols, table.latency_s, notes)
    return [ds] if ds else []


def _table_or_none(read, system, framework: str, root: str | None):
    """`read`'s table of `framework` on `system`, None where the tables have none."""
    try:
        return read(system.name, framework, root=root)
    except aic.CalibrationSourceError:
        return None


def attention_datasets(system: System, framework: str, root: str | None) -> list[Dataset]:
    """Context attention per kernel dtype (TensorRT-LLM computes in FP8 whenever its KV cache is
    FP8) and generation attention per KV-cache dtype."""
    dev = system.device
    out = []
    ctx = _table_or_none(aic.read_context_attention, system, framework, root)
    if ctx is not None:
        c = ctx.columns
        kernel = np.array([context_kernel_dtype(framework, d, k, dev)
                           for d, k in zip(c["dtype"], c["kv_dtype"])], dtype=object)
        for dtype in ("bf16", "fp8"):
            sel = kernel == dtype
            if dtype == "bf16":
                sel &= c["kv_dtype"] == "bf16"
            if not sel.any() or dev.matrix_flops_per_s.get(dtype) is None:
                continue
            ds = dataset(AICONFIGURATOR, base.Setting(system, framework, dtype, ctx.version),
                         "context_attention", {k: v[sel] for k, v in c.items()},
                         ctx.latency_s[sel], ctx.notes)
            out += [ds] if ds else []
    gen = _table_or_none(aic.read_generation_attention, system, framework, root)
    if gen is not None:
        c = gen.columns
        for kv_dtype in ("bf16", "fp8"):
            sel = (c["kv_dtype"] == kv_dtype) & (c["dtype"] == "bf16")
            if not sel.any():
                continue
            ds = dataset(AICONFIGURATOR, base.Setting(system, framework, kv_dtype, gen.version),
                         "generation_attention", {k: v[sel] for k, v in c.items()},
                         gen.latency_s[sel], gen.notes)
            out += [ds] if ds else []
    return out


def nccl_datasets(system: System, root: str | None) -> list[Dataset]:
    """NCCL's all-reduce, all-gather and reduce-scatter on 2, 4 and 8 GPUs: one constant set
    per device (the protocol NCCL's own tuner picks, kernels/gpu/collectives.py)."""
    try:
        table = aic.read_nccl(system.name, root=root)
    except aic.CalibrationSourceError:
        return []
    ds = dataset(AICONFIGURATOR, base.Setting(system, "nccl", "any", table.version), "nccl",
                 table.columns, table.latency_s, table.notes)
    return [ds] if ds else []


def custom_allreduce_datasets(system: System, framework: str, root: str | None) -> list[Dataset]:
    """The framework's own all-reduce (CUDA-graph and eager rows), with NCCL's measured time at
    each row's size and GPU count (column `nccl_s`, NaN where not measured): the form reads
    the framework's hand-off to NCCL off it where its own rule is unknown or does not match
    (collectives.py). Fitting or scoring it needs the device's NCCL model (`Setting.nccl`,
    attached by the caller once NCCL's constants are known)."""
    try:
        table = aic.read_custom_allreduce(system.name, framework, root=root)
        ref_table = aic.read_nccl(system.name, root=root)
    except aic.CalibrationSourceError:
        return []
    cols, lat = dict(table.columns), table.latency_s
    ref = np.full(len(lat), np.nan)
    ar = ref_table.columns["op"] == "all_reduce"
    for i, (n, b) in enumerate(zip(cols["n"], cols["bytes"])):
        m = ar & (ref_table.columns["n"] == n) & (ref_table.columns["bytes"] == b)
        if m.any():
            ref[i] = np.median(ref_table.latency_s[m])
    cols["nccl_s"] = ref
    ds = dataset(AICONFIGURATOR, base.Setting(system, framework, "any", table.version),
                 "custom_all_reduce", cols, lat, table.notes)
    return [ds] if ds else []


def with_nccl(sets: list[Dataset], constants, structure) -> list[Dataset]:
    """`sets` with NCCL's model (these constants) taking the custom all-reduce's hand-off."""
    return [dataclasses.replace(ds, setting=dataclasses.replace(
        ds.setting, nccl=nccl_timer(ds.setting.system, constants, structure)))
        if ds.family == "custom_all_reduce" else ds for ds in sets]


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
             root: str | None = None) -> tuple[System, list[Dataset]]:
    """Every measured family of the system, ready to fit or to score, NCCL first (a framework's
    all-reduce hands its large messages to NCCL's model)."""
    wanted = check(system_name, frameworks, root)
    system = load_system(system_name)
    out: list[Dataset] = nccl_datasets(system, root)
    for fw in wanted:
        out += gemm_datasets(system, fw, root)
        out += elementwise_datasets(system, fw, root)
        out += attention_datasets(system, fw, root)
        out += custom_allreduce_datasets(system, fw, root)
    return system, out


FAMILIES = base.FAMILIES
