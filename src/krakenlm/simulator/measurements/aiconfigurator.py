"""Adapter for NVIDIA's measured kernel tables in `aiconfigurator-core` (PyPI, Apache-2.0).

The package ships, per GPU system (`a100_sxm`, `h100_sxm`, `h200_sxm`, `b200_sxm`, ...),
Parquet tables of kernels measured on real GPUs, under
`aiconfigurator_core/systems/data/<system>/<family>/<framework>/<version>/<table>.parquet`:

* `gemm/<fw>/<v>/gemm_perf.parquet`: m, n, k, gemm_dtype, kernel_source, latency (ms).
* `attention/<fw>/<v>/context_attention_perf.parquet` (prefill, causal) and
  `generation_attention_perf.parquet` (one new token per sequence): batch_size, isl,
  num_heads, num_key_value_heads, head_dim, attn_dtype / kv_cache_dtype, step, latency (ms).
  A generation row attends to `isl + step` cached tokens. `kernel_source` (the backend the
  collector ran) is kept as the column `kernel` of the fastest row of each shape;
  TensorRT-LLM's generation rows also get the rotary dimension their collector applied
  (`rope_dim`, TRTLLM_ROPE_DIM).
* `comm/nccl/<nccl version>/nccl_perf.parquet`: op_name (all_reduce, all_gather,
  reduce_scatter, alltoall), nccl_dtype, num_gpus, message_size (an *element* count), latency.
* `comm/<fw>/<v>/custom_allreduce_perf.parquet`: the framework's own all-reduce (TensorRT-LLM
  one-/two-shot, vLLM and SGLang custom all-reduce), num_gpus, message_size (elements),
  latency; vLLM and SGLang tables also say whether the kernel ran inside a CUDA graph.
* `quantize/<fw>/<v>/scale_matrix_perf.parquet`: a static FP8 quantisation kernel (read a 16-bit
  m x k tensor, write it in FP8): the one purely memory-bound elementwise kernel in the tables,
  used to calibrate the streaming kernels (norms, activations, residual adds).

This module only reads and normalises: units become seconds and bytes, dtypes become krakenlm
names ("bf16" for the 16-bit tables, "fp8"), several kernels measured for the same shape keep
the fastest (what a framework's heuristic picks at best), and every table's columns are checked
so that a changed layout is an error naming the file and the missing columns, not silent
garbage. Which version of a framework is read follows the package's own `query_versions.yaml`
("current" per system and framework), or the newest one measured.

`root` (or `KRAKENLM_AIC_TABLES`) points at a directory in the same layout instead of the
installed package: tables you collected on your own GPUs with aiconfigurator's collector, or
the small fixtures of the tests.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...errors import KrakenError

INSTALL_HINT = ("install the optional extra: pip install 'krakenlm[calibrate]' (NVIDIA's "
                "aiconfigurator-core, Apache-2.0, with ~90 MB of measured kernel tables)")

# krakenlm system preset -> aiconfigurator system directory. The A100 40GB tables do not
# exist: its constants come from the 80GB part (same GA100 die and clocks); the memory
# bandwidth that differs is the preset's own, an input of every model.
SYSTEMS = {
    "a100-80gb-x8": "a100_sxm",
    "a100-80gb-x4": "a100_sxm",
    "a100-40gb-x8": "a100_sxm",
    "h100-80gb-x8": "h100_sxm",
    "h200-x8": "h200_sxm",
    "b200-x8": "b200_sxm",
    "gb200-nvl72": "gb200",
    "l40s-x8": "l40s",
}
FRAMEWORKS = ("trtllm", "vllm", "sglang")
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "bf16", "fp8": "fp8"}

# Columns each table must have (the 0.12 layout); extra columns are ignored.
GEMM_COLUMNS = ("m", "n", "k", "gemm_dtype", "kernel_source", "latency")
ATTENTION_COLUMNS = ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim",
                     "kv_cache_dtype", "step", "latency")
NCCL_COLUMNS = ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency")
CUSTOM_AR_COLUMNS = ("num_gpus", "message_size", "latency")
QUANT_COLUMNS = ("m", "k", "latency")
# aiconfigurator's TensorRT-LLM attention collector (collector/trtllm/collect_attn.py) builds
# every case with RopeParams(dim=128), whatever the head size: a rotary dimension the tables do
# not record, added to TensorRT-LLM generation rows as `rope_dim`
TRTLLM_ROPE_DIM = 128


class CalibrationSourceError(KrakenError, ValueError):
    """A calibration source is missing, or does not cover what was asked, or is malformed."""


@dataclass
class KernelTable:
    """One family of measured kernels, normalised: `columns` are numpy arrays of equal length."""

    family: str
    system: str
    framework: str
    version: str
    device: str
    columns: dict[str, np.ndarray]
    latency_s: np.ndarray
    paths: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.latency_s)

    def select(self, mask: np.ndarray, note: str | None = None) -> "KernelTable":
        out = KernelTable(self.family, self.system, self.framework, self.version, self.device,
                          {k: v[mask] for k, v in self.columns.items()}, self.latency_s[mask],
                          list(self.paths), list(self.notes))
        if note and (dropped := int((~mask).sum())):
            out.notes.append(f"{dropped} rows dropped: {note}")
        return out


# ------------------------------------------------------------------------------------ locating
def package_root() -> Path:
    """The `systems` directory of the installed aiconfigurator-core."""
    try:
        from importlib import resources

        import aiconfigurator_core  # noqa: F401
        root = Path(str(resources.files("aiconfigurator_core").joinpath("systems")))
    except ImportError:
        raise CalibrationSourceError(
            f"the calibration source 'aiconfigurator' is not installed; {INSTALL_HINT}") from None
    if not (root / "data").is_dir():
        raise CalibrationSourceError(f"aiconfigurator-core is installed but has no kernel tables "
                                     f"at {root / 'data'}; reinstall it ({INSTALL_HINT})")
    return root


TABLES_ENV = "KRAKENLM_AIC_TABLES"  # the --tables of every command, where it is not given


def tables_root(root: str | Path | None = None) -> Path:
    """A directory holding `data/<system>/...` (and optionally `query_versions.yaml`)."""
    fix = "check --tables" if root else f"it is ${TABLES_ENV}: fix the path or unset it"
    root = root or os.environ.get(TABLES_ENV)
    if root is None:
        return package_root()
    root = Path(root)
    if (root / "data").is_dir():
        return root
    raise CalibrationSourceError(f"{root} holds no data/<system>/... tables (the layout of "
                                 f"aiconfigurator_core/systems); {fix}")


def package_version() -> str:
    try:
        from importlib.metadata import version
        return version("aiconfigurator-core")
    except Exception:  # noqa: BLE001 - a local table directory has no version
        return "unknown"


def aic_system(system_name: str, root: str | Path | None = None) -> str:
    """The tables' directory name of a system: a preset's (SYSTEMS), else the system's own
    name when `root` (--tables) holds data/<name>/ (tables collected on your GPU)."""
    if system_name in SYSTEMS:
        return SYSTEMS[system_name]
    try:
        own = (tables_root(root) / "data" / system_name).is_dir()
    except CalibrationSourceError:  # no --tables and no aiconfigurator-core installed
        own = False
    if own:
        return system_name
    raise CalibrationSourceError(
        f"no aiconfigurator tables for system {system_name!r}; systems with tables: "
        f"{', '.join(sorted(SYSTEMS))}, or your own under --tables DIR as "
        f"DIR/data/{system_name}/ (the system's name)")


def covered_systems(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "data").iterdir() if p.is_dir())


def _current_versions(root: Path) -> dict:
    path = root / "query_versions.yaml"
    if not path.is_file():
        return {}
    import yaml
    return yaml.safe_load(path.read_text()) or {}


def _version_key(v: str) -> tuple:
    parts = []
    for token in v.replace("rc", ".").replace("post", ".").split("."):
        parts.append(int(token) if token.isdigit() else -1)
    return tuple(parts)


def _pick_version(root: Path, aic: str, family: str, framework: str, table: str,
                  version: str | None) -> Path:
    base = root / "data" / aic / family / framework
    if not base.is_dir():
        systems = covered_systems(root)
        if aic not in systems:
            raise CalibrationSourceError(f"the tables have no system {aic!r} (they cover "
                                         f"{', '.join(systems)})")
        have = sorted(p.name for p in (root / "data" / aic / family).glob("*")) \
            if (root / "data" / aic / family).is_dir() else []
        raise CalibrationSourceError(
            f"no {family} tables for framework {framework!r} on {aic}"
            + (f"; frameworks measured: {', '.join(have)}" if have else ""))
    measured = sorted((p.name for p in base.iterdir() if (p / f"{table}.parquet").is_file()),
                      key=_version_key)
    if not measured:
        raise CalibrationSourceError(f"no {table}.parquet under {base}")
    if version is None:
        slots = _current_versions(root)
        current = (slots.get("overrides", {}).get(aic, {}).get(framework)
                   or slots.get("defaults", {}).get(framework) or {}).get("current")
        version = current if current in measured else measured[-1]
    if version not in measured:
        raise CalibrationSourceError(f"{framework} version {version!r} has no {table} on {aic}; "
                                     f"measured versions: {', '.join(measured)}")
    return base / version / f"{table}.parquet"


# ------------------------------------------------------------------------------------ reading
def _read_parquet(path: Path, required: tuple[str, ...]) -> dict[str, np.ndarray]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise CalibrationSourceError(f"reading {path.name} needs pyarrow; {INSTALL_HINT}") from None
    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - any reader failure is a malformed file
        raise CalibrationSourceError(f"{path}: not a readable Parquet table ({exc})") from None
    missing = [c for c in required if c not in table.column_names]
    if missing:
        raise CalibrationSourceError(
            f"{path}: missing column(s) {missing} (has {table.column_names}); krakenlm reads "
            "the table layout of aiconfigurator-core 0.12")
    out = {}
    for name in table.column_names:
        col = table.column(name).to_numpy(zero_copy_only=False)
        out[name] = col.astype(object) if col.dtype.kind in "OUS" else col
    if len(out["latency"]) == 0:
        raise CalibrationSourceError(f"{path}: the table is empty")
    return out


def _device_name(cols: dict[str, np.ndarray]) -> str:
    names = cols.get("device")
    return str(names[0]) if names is not None and len(names) else "unknown"


def _fastest(keys: list[np.ndarray], latency: np.ndarray) -> np.ndarray:
    """Indices of the fastest row per distinct key (several kernels measured per shape)."""
    stacked = np.rec.fromarrays(keys)
    order = np.lexsort([latency] + keys[::-1])
    _, first = np.unique(stacked[order], return_index=True)
    return np.sort(order[first])


def _dtype(values: np.ndarray) -> np.ndarray:
    return np.array([DTYPES.get(str(v), str(v)) for v in values], dtype=object)


def _finite_positive(t: KernelTable) -> KernelTable:
    ok = np.isfinite(t.latency_s) & (t.latency_s > 0)
    return t.select(ok, "latency not a positive number")


def _read_table(system: str, family: str, framework: str, table: str, version: str | None,
                root: str | None, required: tuple[str, ...]
                ) -> tuple[str, Path, dict[str, np.ndarray]]:
    """The aiconfigurator name of `system`, the Parquet file of `table` (the version asked
    for, else the current one) and its columns, checked to hold `required`."""
    base = tables_root(root)
    aic = aic_system(system, root)
    path = _pick_version(base, aic, family, framework, table, version)
    return aic, path, _read_parquet(path, required)


def _kernel_table(family: str, aic: str, framework: str, path: Path,
                  read_columns: dict[str, np.ndarray], columns: dict[str, np.ndarray],
                  latency_s: np.ndarray) -> KernelTable:
    """The KernelTable of `columns` normalised from the table at `path`: its folder names the
    version, the `device` column of `read_columns` (the file's own columns) the device."""
    return KernelTable(family, aic, framework, path.parent.name, _device_name(read_columns),
                       columns, latency_s, [str(path)])


def _note_fastest_kept(t: KernelTable, rows: int, kept: int) -> None:
    """Say in `t.notes` how many of the `rows` read were slower kernels of a shape (`_fastest`
    kept `kept`)."""
    if kept < rows:
        t.notes.append(f"{rows - kept} rows were other kernels for a shape already "
                       "measured; the fastest kernel per shape is kept")


@functools.lru_cache(maxsize=64)
def read_gemm(system: str, framework: str, version: str | None = None,
              root: str | None = None) -> KernelTable:
    aic, path, cols = _read_table(system, "gemm", framework, "gemm_perf", version, root,
                                  GEMM_COLUMNS)
    dtype = _dtype(cols["gemm_dtype"])
    m, n, k = (cols[c].astype(np.int64) for c in ("m", "n", "k"))
    lat = cols["latency"].astype(float) * 1e-3
    keep = _fastest([dtype.astype(str), m, n, k], lat)
    t = _kernel_table("gemm", aic, framework, path, cols,
                      {"m": m[keep], "n": n[keep], "k": k[keep], "dtype": dtype[keep]}, lat[keep])
    _note_fastest_kept(t, len(lat), len(keep))
    return _finite_positive(t)


def _attention(system: str, framework: str, table: str, version: str | None,
               root: str | None) -> KernelTable:
    aic, path, cols = _read_table(system, "attention", framework, table, version, root,
                                  ATTENTION_COLUMNS)
    n = len(cols["latency"])
    window = cols["window_size"].astype(np.int64) if "window_size" in cols else np.zeros(n, np.int64)
    attn = _dtype(cols["attn_dtype"]) if "attn_dtype" in cols else np.full(n, "bf16", object)
    c = {"batch": cols["batch_size"].astype(np.int64), "isl": cols["isl"].astype(np.int64),
         "heads": cols["num_heads"].astype(np.int64),
         "kv_heads": cols["num_key_value_heads"].astype(np.int64),
         "head_dim": cols["head_dim"].astype(np.int64), "window": window,
         "dtype": attn, "kv_dtype": _dtype(cols["kv_cache_dtype"]),
         "step": cols["step"].astype(np.int64),
         # the backend the collector ran (e.g. "fa3", "triton", "trtllm_mha"): a framework
         # may serve some head sizes with another kernel (SGLang's Triton fallback)
         "kernel": (cols["kernel_source"].astype(str) if "kernel_source" in cols
                    else np.full(n, "", dtype=object)).astype(object)}
    lat = cols["latency"].astype(float) * 1e-3
    keys = [c[k] if c[k].dtype != object else c[k].astype(str)
            for k in ("batch", "isl", "heads", "kv_heads", "head_dim", "window", "dtype",
                      "kv_dtype", "step")]
    keep = _fastest(keys, lat)
    c = {k: v[keep] for k, v in c.items()}
    if table.startswith("generation"):
        c["kv_len"] = c["isl"] + c["step"]
        if framework == "trtllm":  # RoPE the op applied (it decides whether XQA fuses it)
            c["rope_dim"] = np.full(len(c["kv_len"]), TRTLLM_ROPE_DIM, np.int64)
    family = "context_attention" if table.startswith("context") else "generation_attention"
    t = _kernel_table(family, aic, framework, path, cols, c, lat[keep])
    _note_fastest_kept(t, len(lat), len(keep))
    return _finite_positive(t)


@functools.lru_cache(maxsize=64)
def read_context_attention(system: str, framework: str, version: str | None = None,
                           root: str | None = None) -> KernelTable:
    return _attention(system, framework, "context_attention_perf", version, root)


@functools.lru_cache(maxsize=64)
def read_generation_attention(system: str, framework: str, version: str | None = None,
                              root: str | None = None) -> KernelTable:
    return _attention(system, framework, "generation_attention_perf", version, root)


def _nccl_version(base: Path, aic: str) -> str | None:
    path = base / f"{aic}.yaml"
    if not path.is_file():
        return None
    import yaml
    data = yaml.safe_load(path.read_text()) or {}
    return str((data.get("misc") or {}).get("nccl_version") or "") or None


MESSAGE_SIZE_NOTE = "message_size is an element count; bytes = elements x 2 (16-bit)"


def _collective_table(aic: str, framework: str, path: Path, cols: dict[str, np.ndarray],
                      op: np.ndarray, library: str, graph: np.ndarray) -> KernelTable:
    """Every row of a table of 16-bit collectives (`op` per row, on `num_gpus` GPUs, of
    `message_size` elements), timed by `library` inside a CUDA graph where `graph` says so."""
    elements = cols["message_size"].astype(np.int64)
    c = {"op": op, "n": cols["num_gpus"].astype(np.int64), "elements": elements,
         "bytes": elements * 2, "library": np.full(len(elements), library, object),
         "graph": graph}
    return _kernel_table("collective", aic, framework, path, cols, c,
                         cols["latency"].astype(float) * 1e-3)


@functools.lru_cache(maxsize=64)
def read_nccl(system: str, version: str | None = None, root: str | None = None) -> KernelTable:
    """NCCL all-reduce, all-gather and reduce-scatter (16-bit messages only)."""
    base = tables_root(root)
    aic = aic_system(system, root)
    measured = base / "data" / aic / "comm" / "nccl"
    if version is None:
        preferred = _nccl_version(base, aic)
        if preferred and (measured / preferred / "nccl_perf.parquet").is_file():
            version = preferred
    path = _pick_version(base, aic, "comm", "nccl", "nccl_perf", version)
    cols = _read_parquet(path, NCCL_COLUMNS)
    op = cols["op_name"].astype(str)
    dtype = _dtype(cols["nccl_dtype"])
    keep = np.isin(op, ["all_reduce", "all_gather", "reduce_scatter"]) & (dtype == "bf16")
    t = _collective_table(aic, "nccl", path, cols, op.astype(object), "nccl",
                          np.ones(len(op), bool)).select(keep)
    t.notes.append(MESSAGE_SIZE_NOTE)
    return _finite_positive(t)


@functools.lru_cache(maxsize=64)
def read_custom_allreduce(system: str, framework: str, version: str | None = None,
                          root: str | None = None) -> KernelTable:
    """The framework's own all-reduce kernels (16-bit)."""
    aic, path, cols = _read_table(system, "comm", framework, "custom_allreduce_perf", version,
                                  root, CUSTOM_AR_COLUMNS)
    n = len(cols["latency"])
    backend = cols["backend"].astype(str) if "backend" in cols else np.full(n, "graph")
    # vLLM / SGLang tables time the kernel both inside a CUDA graph and eagerly.
    graph = np.array(["eager" not in b.lower() for b in backend])
    source = cols["kernel_source"].astype(str) if "kernel_source" in cols else np.full(n, "")
    # SGLang's directory also holds TensorRT-LLM's kernel measured under SGLang; keep its own.
    own = np.array(["trtllm" not in s.lower() for s in source]) if framework != "trtllm" \
        else np.ones(n, bool)
    t = _collective_table(aic, framework, path, cols, np.full(n, "all_reduce", object),
                          "custom", graph)
    t = t.select(own, "kernels of another framework measured in this framework's directory")
    t.notes.append(MESSAGE_SIZE_NOTE)
    return _finite_positive(t)


@functools.lru_cache(maxsize=64)
def read_elementwise(system: str, framework: str, version: str | None = None,
                     root: str | None = None) -> KernelTable:
    """Static FP8 quantisation (read m x k 16-bit values, write them as 8-bit): bytes moved."""
    aic, path, cols = _read_table(system, "quantize", framework, "scale_matrix_perf", version,
                                  root, QUANT_COLUMNS)
    m, k = cols["m"].astype(np.int64), cols["k"].astype(np.int64)
    elements = m * k
    c = {"rows": m, "cols": k, "elements": elements,
         "bytes_read": elements * 2, "bytes_written": elements * 1}
    t = _kernel_table("elementwise", aic, framework, path, cols, c,
                      cols["latency"].astype(float) * 1e-3)
    return _finite_positive(t)


def available_frameworks(system: str, family: str = "gemm", root: str | None = None) -> list[str]:
    base = tables_root(root)
    aic = aic_system(system, root)
    where = base / "data" / aic / family
    return [fw for fw in FRAMEWORKS if (where / fw).is_dir()]
