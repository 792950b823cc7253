"""The process bootstrap of every krakenlm process, one rank of several or alone: what torchrun
says about it (`DistEnv`), its device and process-group backend, its share of the cores and its
process group. The trainer (`training/trainer.py`) and the ranks of the sharded runtime
(`distributed/launch.py`) both start here."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from .device import usable_cores

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


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
        return cls(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)),
                   int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])))


def under_torchrun() -> bool:
    """Whether this process is one rank of a group torchrun (or a spawning parent) started."""
    return all(name in os.environ for name in TORCHRUN_VARS)


def backend_for(device: torch.device) -> str:
    """The process-group backend of ranks on `device`: NCCL between GPUs, gloo between CPUs."""
    return "nccl" if device.type == "cuda" else "gloo"


def set_cpu_threads(env: DistEnv, threads: int | None) -> None:
    """Give each local process its share of the cores unless told otherwise: oversubscribed
    OpenMP pools make CPU data parallelism slower than one process."""
    if threads is None:
        threads = max(1, usable_cores() // env.local_world_size)
    torch.set_num_threads(threads)


def init_process_group(env: DistEnv, device: torch.device,
                       timeout_s: float | None = None) -> None:
    """Join the process group the torchrun variables describe, with `backend_for(device)`; a
    GPU rank binds its device. `timeout_s` bounds the rendezvous and every collective (None:
    torch's default). Raises torch's RuntimeError when the group cannot be formed."""
    timeout = None if timeout_s is None else timedelta(seconds=timeout_s)
    backend = backend_for(device)
    dist.init_process_group(backend, init_method="env://", rank=env.rank,
                            world_size=env.world_size, timeout=timeout,
                            device_id=device if backend == "nccl" else None)


def init_distributed(env: DistEnv, device: torch.device) -> None:
    """Join the process group when this process is one of several (and has not joined yet)."""
    if env.world_size > 1 and not dist.is_initialized():
        init_process_group(env, device)
