"""Which all-reduce the ranks use (`--comm-backend`), decided collectively at start-up.

    auto  shared memory on CPU when every rank is on this host (and there is more than one),
          else the process group's own all-reduce: gloo on CPU, NCCL on CUDA
    shm   shared memory; an error if the ranks cannot share it
    gloo  the gloo process group (CPU), the path before shared memory existed
    nccl  the NCCL process group (CUDA)

The process group (gloo or NCCL) is formed in every case: rendezvous, barriers and anything but
the model's all-reduces still go through it.
"""

from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist

from ..errors import KrakenError
from .comm import peer_error
from .shm_arena import (DEFAULT_SLOT_BYTES, SharedMemoryArena, create_arena_file, new_arena_path,
                        platform_supported)

COMM_BACKENDS = ("auto", "shm", "gloo", "nccl")
RUN_TOKEN_VAR = "KRAKENLM_SHM_RUN_TOKEN"  # set by the spawning launcher, which sweeps its files


def check_comm_backend(name: str) -> str:
    if name not in COMM_BACKENDS:
        raise KrakenError(f"--comm-backend must be one of {', '.join(COMM_BACKENDS)}, "
                          f"got {name!r}")
    return name


def setup_comm_backend(requested: str, rank: int, world_size: int, device: torch.device,
                       timeout_s: float) -> tuple[str, SharedMemoryArena | None]:
    """(backend, arena or None) for this rank. Collective: every rank of the freshly formed
    default process group calls it, and all reach the same decision."""
    check_comm_backend(requested)
    if device.type == "cuda":
        if requested not in ("auto", "nccl"):
            raise KrakenError(f"--comm-backend {requested} needs CPU ranks, and these ranks run "
                              "on GPUs; use auto or nccl, or force the CPU with "
                              "KRAKENLM_DEVICE=cpu")
        return "nccl", None
    if requested == "nccl":
        raise KrakenError("--comm-backend nccl needs one GPU per local rank; use auto, shm or gloo")
    if requested == "gloo" or (requested == "auto" and world_size == 1):
        return "gloo", None
    try:
        arena, reason = _open_shared_arena(rank, world_size)
    except RuntimeError as exc:  # a peer died or timed out during set-up
        raise peer_error(exc, "setting up the shared-memory all-reduce", timeout_s) from None
    if arena is not None:
        return "shm", arena
    if requested == "shm":
        raise KrakenError(f"--comm-backend shm is not possible here: {reason}; use "
                          "--comm-backend gloo (or auto)")
    return "gloo", None


def _host_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def _all_gather(value) -> list:
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def shared_memory_obstacle(views: list[tuple[str, bool, str]]) -> str | None:
    """Why the ranks cannot share memory, from every rank's (host id, platform supported,
    reason); None if they can."""
    for rank, (_, supported, reason) in enumerate(views):
        if not supported:
            return f"rank {rank}: {reason}"
    hosts = sorted({host for host, _, _ in views})
    if len(hosts) > 1:
        return f"the ranks are on {len(hosts)} hosts ({', '.join(hosts)})"
    return None


def _open_shared_arena(rank: int, world_size: int) -> tuple[SharedMemoryArena | None, str]:
    obstacle = shared_memory_obstacle(_all_gather((_host_id(), *platform_supported())))
    if obstacle:
        return None, obstacle

    path, arena, failure = None, None, None
    try:
        if rank == 0:
            run_token = os.environ.get(RUN_TOKEN_VAR) or f"p{os.getpid()}"
            try:
                path = new_arena_path(run_token)
                create_arena_file(path, world_size, DEFAULT_SLOT_BYTES)
            except OSError as exc:
                path, failure = None, f"rank 0 could not create {path}: {exc.strerror}"
        shared = [path, failure]
        dist.broadcast_object_list(shared, src=0)
        path, failure = shared
        if path is not None:
            try:
                arena = SharedMemoryArena(path, rank, world_size, DEFAULT_SLOT_BYTES)
            except (OSError, KrakenError) as exc:
                failure = f"rank {rank} could not map {path}: {exc}"
        # Doubles as the barrier after which nobody needs the file's name any more.
        failures = [f for f in _all_gather(failure) if f]
    finally:
        if rank == 0 and path is not None:
            try:
                os.unlink(path)  # from now on only the mappings hold it: a dead rank leaks nothing
            except FileNotFoundError:
                pass
    if failures:
        if arena is not None:
            arena.close()
        return None, failures[0]
    dist.barrier()  # so that on return the file is gone on every rank, not only on rank 0
    arena.check_liveness = arena.peer_pids_visible()
    return arena, ""
