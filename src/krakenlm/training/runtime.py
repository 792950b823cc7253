"""Process set-up shared by training and inference: device, precision, threads, torchrun."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..errors import KrakenError

PRECISIONS = ("auto", "bf16", "fp32")


DEVICE_ENV = "KRAKENLM_DEVICE"
DEVICES = ("auto", "cpu", "cuda")


def pick_device(local_rank: int = 0) -> torch.device:
    """The GPU of this local rank when torch sees one, else the CPU; $KRAKENLM_DEVICE=cpu forces
    the CPU, =cuda insists on a GPU (an error without one, not a silent CPU run)."""
    raw = os.environ.get(DEVICE_ENV, "")
    wanted = raw.strip().lower() or "auto"
    if wanted not in DEVICES:
        raise KrakenError(f"{DEVICE_ENV}={raw} is not a device krakenlm runs on: use cpu, cuda "
                          "or auto (or unset it)")
    if wanted != "cpu" and torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    if wanted == "cuda":
        raise KrakenError(f"{DEVICE_ENV}=cuda but torch {torch.__version__} sees no GPU (no NVIDIA "
                          "driver or device, or a CPU-only torch build); unset it to run on the "
                          "CPU")
    return torch.device("cpu")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's or taskset's limit)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cpu_has_fast_bf16() -> bool:
    # bf16 matmuls are only faster than fp32 on CPUs with AMX or AVX512-BF16 units.
    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def resolve_precision(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for `precision` on `device` (None = plain fp32)."""
    if precision not in PRECISIONS:
        raise KrakenError(f"unknown precision {precision!r}; use one of {PRECISIONS}")
    if precision == "fp32":
        return None
    if device.type == "cuda":
        supported = torch.cuda.is_bf16_supported()
    else:
        supported = _cpu_has_fast_bf16()
    if precision == "bf16" and not supported and device.type == "cuda":
        raise KrakenError("this GPU has no bf16 support; use --precision fp32")
    if precision == "auto":
        return torch.bfloat16 if supported else None
    return torch.bfloat16


def available_memory_bytes(device: torch.device) -> int | None:
    """Memory a new allocation can get: free GPU memory, or the host's MemAvailable (page
    cache included, as the kernel would reclaim it). None where it cannot be read."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the file counts in KiB
    except OSError:
        pass
    return None


def autocast(device: torch.device, dtype: torch.dtype | None):
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


@dataclass(frozen=True)
class DistEnv:
    """What torchrun tells this process (rank 0 of 1 when run directly)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_environment(cls) -> "DistEnv":
        env = os.environ
        if "WORLD_SIZE" not in env:
            return cls()
        try:
            return cls(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)),
                       int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])))
        except (KeyError, ValueError):  # set by hand or by another tool, not by torchrun
            given = ", ".join(f"{name}={env[name]}" for name in
                              ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE") if name in env)
            raise KrakenError(f"the environment says {given}, which is not a torchrun launch "
                              "(RANK and WORLD_SIZE are whole numbers set together); start data "
                              "parallel runs with `torchrun --nproc-per-node N -m krakenlm train "
                              "...`, or unset WORLD_SIZE") from None


def init_distributed(env: DistEnv, device: torch.device) -> None:
    if env.world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")


def set_cpu_threads(env: DistEnv, threads: int | None) -> None:
    """Give each local process its share of the cores unless told otherwise: oversubscribed
    OpenMP pools make CPU data parallelism slower than one process."""
    if threads is None:
        threads = max(1, usable_cores() // env.local_world_size)
    torch.set_num_threads(threads)
