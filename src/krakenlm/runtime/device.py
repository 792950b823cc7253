"""Which device a process runs on ($KRAKENLM_DEVICE), the cores it may use and the memory a new
allocation can get."""

from __future__ import annotations

import os

import torch

from ..errors import KrakenError

DEVICE_ENV = "KRAKENLM_DEVICE"
DEVICES = ("auto", "cpu", "cuda")


def wanted_device() -> str:
    """$KRAKENLM_DEVICE as one of DEVICES (unset or empty: auto; case and spaces ignored), or a
    one-line error naming the values krakenlm runs on."""
    raw = os.environ.get(DEVICE_ENV, "")
    wanted = raw.strip().lower() or "auto"
    if wanted not in DEVICES:
        raise KrakenError(f"{DEVICE_ENV}={raw} is not a device krakenlm runs on: use cpu, cuda "
                          "or auto (or unset it)")
    return wanted


def pick_device(local_rank: int = 0, local_world_size: int = 1) -> torch.device:
    """The GPU of this local rank when torch sees one for each of the `local_world_size`
    processes of this host, else the CPU; $KRAKENLM_DEVICE=cpu forces the CPU, =cuda insists
    on the GPUs (an error without them, not a silent CPU run)."""
    wanted = wanted_device()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if wanted != "cpu" and gpus and gpus >= local_world_size:
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    if wanted == "cuda" and gpus:
        raise KrakenError(f"{DEVICE_ENV}=cuda but torch sees {gpus} GPU(s) for "
                          f"{local_world_size} processes on this host (one GPU each); start "
                          f"at most {gpus} local processes, or unset it to run on the CPU")
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
