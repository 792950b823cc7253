"""Engine startup logs that state the KV cache size, and the sizing's prediction of each.

`data/kv_cache_logs.json` holds public logs (sources in `data/SOURCES.md`) that give the KV
block count (vLLM V0 `# GPU blocks: N`, TensorRT-LLM `Number of blocks in KV cache primary
pool: N`; SGLang's `max_total_num_tokens=N` with its page of 1 token) or its token count (vLLM V1 `GPU KV cache size: N tokens`, N = blocks x
block_size) together with the model, GPU, tensor parallelism, memory utilisation (TensorRT-LLM:
its share of the free memory), dtype, KV cache dtype (optional, "auto" when not given) and
engine version. `predict` sizes each with the code `sim serve` runs
(`replay.default_options` for the engine, then `kv_cache.size_kv_cache` with the logged knobs),
so the comparison scores exactly what a replay would be given. `profile_charges` (optional)
names the accounting of the log's engine version where it differs from its software
profile's `kv_profile.accounting` (`kv_cache.PROFILE_CHARGES`: vLLM up to v0.2.4 charged only
torch's allocation peak, V0 from v0.2.5 and V1 before vllm-project/vllm#19312 the memory in
use, V1 since #19312 only what grows after the worker's first snapshot, SGLang its share of the
free memory less the weights; the `vllm` profile is V1 since #19312, `vllm-v0` V0 from v0.2.5,
`sglang` "free-share").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import KrakenError
from ..hardware import load_system
from ..models import get_preset
from ..simulator import Simulator
from ..simulator.constants.software import SoftwareProfile, load_software
from .kv_cache import (KV_CACHE_DTYPES, PROFILE_CHARGES, KVSizing, kv_cache_software,
                       size_kv_cache, with_accounting)
from .log_files import read_log_entries
from .replay import default_options

LOGS_FILE = Path(__file__).resolve().parent / "data" / "kv_cache_logs.json"
# the engine a log names -> (software profile, scheduler whose defaults apply)
ENGINES = {"vllm-v1": ("vllm", "vllm-v1"), "vllm-v0": ("vllm-v0", "vllm-v0"),
           "trtllm": ("trtllm", "trtllm"), "sglang": ("sglang", "sglang")}
FIELDS = ("id", "source", "locator", "line", "engine", "engine_version", "model", "dtype",
          "system", "tp", "gpu_memory_utilization", "block_size", "max_num_batched_tokens",
          "logged_blocks")


class KVLogDataError(KrakenError, ValueError):
    """A KV-cache-logs file that cannot be used; the message names the log and the field."""


@dataclass(frozen=True)
class KVLog:
    """One engine start-up log line from data/kv_cache_logs.json (module docstring): its id, source
    and where in it (`locator`), the line itself, the engine and version, the model, dtype,
    system and TP, the engine knobs it ran with (memory utilisation 0-1, block size in tokens,
    token budget), the KV blocks it logged, the KV cache dtype, and what that version's memory
    profile charges (kv_cache.PROFILE_CHARGES)."""
    id: str
    source: str
    locator: str
    line: str
    engine: str
    engine_version: str
    model: str
    dtype: str
    system: str
    tp: int
    gpu_memory_utilization: float
    block_size: int
    max_num_batched_tokens: int
    logged_blocks: int
    kv_cache_dtype: str = "auto"
    profile_charges: str | None = None  # None: the software profile's accounting


def load_logs(path: Path | str = LOGS_FILE) -> tuple[KVLog, ...]:
    """The logs of a KV-cache-logs file, checked."""
    path = Path(path)
    logs = []
    for name, entry in read_log_entries(path, "KV cache logs file", KVLogDataError, FIELDS):
        if entry["engine"] not in ENGINES:
            raise KVLogDataError(f"{path}: log {name}: engine {entry['engine']!r} is not one "
                                 f"of {', '.join(ENGINES)}")
        if not (isinstance(entry["logged_blocks"], int) and entry["logged_blocks"] > 0):
            raise KVLogDataError(f"{path}: log {name}: logged_blocks must be a positive "
                                 "integer")
        kv_dtype = entry.get("kv_cache_dtype", "auto")
        if kv_dtype not in KV_CACHE_DTYPES:
            raise KVLogDataError(f"{path}: log {name}: kv_cache_dtype {kv_dtype!r} is not one "
                                 f"of {', '.join(KV_CACHE_DTYPES)}")
        charges = entry.get("profile_charges")
        if charges is not None and charges not in PROFILE_CHARGES:
            raise KVLogDataError(f"{path}: log {name}: profile_charges {charges!r} is not one "
                                 f"of {', '.join(PROFILE_CHARGES)}")
        logs.append(KVLog(**{f: entry[f] for f in FIELDS}, kv_cache_dtype=kv_dtype,
                          profile_charges=charges))
    return tuple(logs)


def log_software(log: KVLog):
    """The software profile the log's engine version ran: its engine's profile, with the
    logged KV cache dtype and the version's accounting where the log names one."""
    software, _scheduler = ENGINES[log.engine]
    return with_accounting(kv_cache_software(software, log.kv_cache_dtype), log.profile_charges)


def accounting(log: KVLog) -> str:
    """The profile accounting the log is sized with (`kv_cache.PROFILE_CHARGES`)."""
    software = log_software(log)
    profile = software if isinstance(software, SoftwareProfile) else load_software(software)
    return profile.kv_profile.accounting


def predict(log: KVLog) -> KVSizing:
    """The KV sizing `sim serve` computes for the log's setup."""
    _software, scheduler = ENGINES[log.engine]
    system = load_system(log.system)
    config = get_preset(log.model)
    sim = Simulator(system, log_software(log), dtype=log.dtype)
    opt = replace(default_options(scheduler, system, config), block_size=log.block_size,
                  gpu_memory_utilization=log.gpu_memory_utilization,
                  max_num_batched_tokens=log.max_num_batched_tokens)
    return size_kv_cache(sim, config, log.tp, block_size=opt.block_size,
                         gpu_memory_utilization=opt.gpu_memory_utilization,
                         max_num_batched_tokens=opt.max_num_batched_tokens,
                         model_name=log.model, of_free_memory=scheduler == "trtllm",
                         max_num_seqs=opt.max_num_seqs)


def relative_error(predicted_blocks: int, log: KVLog) -> float:
    return predicted_blocks / log.logged_blocks - 1
