"""Start the ranks: under torchrun (any number of nodes) or by spawning them on this machine.

`run_ranks(fn, args, world_size=N)` calls `fn(ctx, *args)` once per rank with a `RankContext`
(rank, device, backend, a communicator factory) and returns the results this process can see:

* under torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set), this process IS one rank;
  the result is `{rank: value}` for it alone. torchrun's agent tears the group down if a rank
  fails. Multi-node works through torchrun's rendezvous, e.g. on each node:
  `torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \
   -m krakenlm generate ...` (documented, not tested here: this machine has one node).
* otherwise `N` processes are spawned here with a free loopback port, and the parent returns
  `{rank: value}` for every rank. If a rank fails, the others are killed and its error is
  raised in the parent: a `KrakenError` stays a one-line user error, a bug keeps the rank's
  traceback.

Each rank starts through the process bootstrap of `runtime/bootstrap.py`: device and backend
are automatic, CUDA + NCCL when every local rank can have its own GPU, else CPU + gloo (force
CPU with KRAKENLM_DEVICE=cpu; =cuda insists on the GPUs). On CPU the model's all-reduces go through
shared memory when all ranks are on this host (`comm_backend.py`; `comm_backend="gloo"` keeps
them on gloo). A timeout bounds the rendezvous and every collective, so a peer that never joins
or stops answering gives a clear error, not a hang.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import pickle
import queue as queue_module
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ..errors import KrakenError
from ..runtime.bootstrap import (DistEnv, backend_for, init_process_group, set_cpu_threads,
                                 under_torchrun)
from ..runtime.device import pick_device
from .comm import BlockingComm, PeerError, ProcessGroupComm, peer_error, short_reason
from .comm_backend import RUN_TOKEN_VAR, check_comm_backend, setup_comm_backend
from .shm_arena import SharedMemoryArena, sweep_arena_files
from .shm_comm import SharedMemoryComm

DEFAULT_TIMEOUT_S = 300.0


class RankFailedError(KrakenError):
    """A spawned rank died without reporting (killed, out of memory, ...)."""


@dataclass(frozen=True)
class RankContext:
    """This process's place in a launched group: global and node-local rank and sizes, its device,
    the process group's backend (gloo or nccl), the timeout of collectives (seconds), the backend
    the model's all-reduces use (shm, gloo or nccl) and, for shm, the shared-memory arena."""
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str  # the process group's: gloo or nccl
    timeout_s: float
    comm_backend: str = "gloo"  # the model's all-reduces: shm, gloo or nccl
    shm_arena: SharedMemoryArena | None = None  # with comm_backend "shm"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def new_comm(self, overlap: bool = True,
                 backend: str | None = None) -> ProcessGroupComm | SharedMemoryComm:
        """A communicator over all ranks, through `backend` (default: the run's
        `comm_backend`; "gloo"/"nccl": the process group's, which always exists).
        `overlap=False`: asynchronous reductions complete before returning (Kraken without its
        overlap, for the benchmark)."""
        backend = backend or self.comm_backend
        if backend == "shm":
            if self.shm_arena is None:
                raise KrakenError("these ranks have no shared-memory arena; start them with "
                                  "comm_backend 'shm' or 'auto'")
            return SharedMemoryComm(self.shm_arena, timeout_s=self.timeout_s, overlap=overlap)
        if backend != self.backend:
            raise KrakenError(f"a {backend} communicator was asked for, but the process group "
                              f"of these ranks is {self.backend}")
        return (ProcessGroupComm if overlap else BlockingComm)(timeout_s=self.timeout_s)

    def barrier(self) -> None:
        try:
            if self.backend == "nccl":
                dist.barrier(device_ids=[self.device.index])
            else:
                dist.barrier()
        except RuntimeError as exc:
            raise peer_error(exc, "a barrier", self.timeout_s) from None


def _share_cpu_cores(env: DistEnv) -> None:
    """1 thread per rank with 2 ranks on 2 cores: more threads than cores per rank make the
    ranks (and gloo's own threads) fight for cores, and a collective waits for the slowest
    rank. OMP_NUM_THREADS (torchrun sets 1) wins when given."""
    if "OMP_NUM_THREADS" not in os.environ:
        set_cpu_threads(env, None)


def init_rank(timeout_s: float = DEFAULT_TIMEOUT_S, comm_backend: str = "auto") -> RankContext:
    """Join the process group described by the torchrun environment variables, and set up the
    all-reduce `comm_backend` asks for (see `comm_backend.py`)."""
    env = DistEnv.from_environment()
    rank, world_size = env.rank, env.world_size
    device = pick_device(env.local_rank, env.local_world_size)
    backend = backend_for(device)
    if device.type == "cpu":
        _share_cpu_cores(env)
    where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    try:
        init_process_group(env, device, timeout_s)
    except RuntimeError as exc:  # DistStoreError, DistNetworkError, gloo errors
        detail = short_reason(exc)
        raise PeerError(
            f"rank {rank} of {world_size} could not form the process group at {where} within "
            f"{timeout_s:g} s ({detail}). Start all {world_size} ranks (`torchrun "
            f"--nproc-per-node {world_size} ...`, or `--world-size {world_size}` without "
            "torchrun), check that MASTER_ADDR/MASTER_PORT are reachable and the port is free, "
            "or raise --timeout") from None
    chosen, arena = setup_comm_backend(comm_backend, rank, world_size, device, timeout_s)
    return RankContext(rank, world_size, env.local_rank, env.local_world_size, device, backend,
                       timeout_s, chosen, arena)


def shutdown(ctx: RankContext | None = None) -> None:
    if ctx is not None and ctx.shm_arena is not None:
        ctx.shm_arena.close()
    if dist.is_initialized():
        dist.destroy_process_group()


def resolve_world_size(requested: int | None, default: int = 1) -> int:
    """torchrun's world size under torchrun (a disagreeing request is an error), else the
    requested one, else `default`."""
    if requested is not None and requested < 1:
        raise KrakenError(f"--world-size must be >= 1, got {requested}")
    if under_torchrun():
        env_world = int(os.environ["WORLD_SIZE"])
        if requested is not None and requested != env_world:
            raise KrakenError(f"--world-size {requested} disagrees with torchrun's world size "
                              f"{env_world}; drop --world-size under torchrun")
        return env_world
    return requested or default


def check_timeout(timeout_s: float) -> None:
    """--timeout as torch.distributed takes it: a zero, negative or NaN one fails every
    rendezvous with pages of C++ messages."""
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise KrakenError(f"--timeout must be a finite number of seconds > 0, got {timeout_s}")


def run_ranks(fn: Callable[..., Any], args: tuple = (), *, world_size: int | None = None,
              timeout_s: float = DEFAULT_TIMEOUT_S, comm_backend: str = "auto") -> dict[int, Any]:
    """Run `fn(ctx, *args)` on every rank; the results this process can see, by rank.

    `fn` must be a module-level function (it is pickled to spawned ranks), and its result is
    pickled back, so return plain data or CPU tensors.
    """
    check_timeout(timeout_s)
    world_size = resolve_world_size(world_size)
    check_comm_backend(comm_backend)
    if under_torchrun():
        ctx = init_rank(timeout_s, comm_backend)
        result = fn(ctx, *args)  # on failure torchrun's agent stops the other ranks
        shutdown(ctx)
        return {ctx.rank: result}
    return _spawn(fn, args, world_size, timeout_s, comm_backend)


# ----------------------------------------------------------------------------- spawning
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spawned_rank(rank: int, world_size: int, port: int, fn: Callable[..., Any], args: tuple,
                  timeout_s: float, comm_backend: str, run_token: str,
                  results: mp.Queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size), **{RUN_TOKEN_VAR: run_token})
    code = 0
    try:
        ctx = init_rank(timeout_s, comm_backend)
        # Pickled here with the plain pickler: tensors are copied, not shared through file
        # descriptors that die with this process.
        results.put(("ok", rank, pickle.dumps(fn(ctx, *args))))
        shutdown(ctx)
    except KeyboardInterrupt:
        code = 130
    except PeerError as exc:
        results.put(("peer", rank, str(exc)))
        code = 2
    except KrakenError as exc:
        results.put(("user", rank, str(exc)))
        code = 2
    except BaseException:  # noqa: BLE001 - a bug: ship the traceback to the parent
        results.put(("bug", rank, traceback.format_exc()))
        code = 1
    results.close()
    results.join_thread()  # the message must leave before the process does
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown, which can block on a dead peer


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name} (out of memory?)"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


# Root causes first: a rank's own error explains the "lost my peer" errors of the others.
_PRIORITY = {"user": 0, "bug": 0, "died": 1, "peer": 2}


def _raise_failure(failures: list[tuple[str, int, str]]) -> None:
    kind, rank, message = min(failures, key=lambda f: _PRIORITY[f[0]])
    if kind == "bug":
        raise RuntimeError(f"rank {rank} failed:\n{message}")
    if kind == "died":
        raise RankFailedError(f"rank {rank} {message}; the other ranks were stopped")
    raise (PeerError if kind == "peer" else KrakenError)(f"rank {rank}: {message}")


def _spawn(fn: Callable[..., Any], args: tuple, world_size: int, timeout_s: float,
           comm_backend: str) -> dict[int, Any]:
    context = mp.get_context("spawn")  # fork is unsafe with torch's threads
    messages = context.Queue()
    port = _free_port()
    run_token = f"s{os.getpid()}x{port}"  # names this launch's shared-memory files
    sys.stdout.flush()
    sys.stderr.flush()
    procs = [context.Process(target=_spawned_rank, name=f"krakenlm-rank{rank}", daemon=True,
                             args=(rank, world_size, port, fn, args, timeout_s, comm_backend,
                                   run_token, messages))
             for rank in range(world_size)]
    for proc in procs:
        proc.start()
    results: dict[int, Any] = {}
    failures: list[tuple[str, int, str]] = []
    reported: set[int] = set()
    finished = False

    def receive(wait_s: float) -> bool:
        try:
            kind, rank, payload = messages.get(timeout=wait_s)
        except queue_module.Empty:
            return False
        reported.add(rank)
        if kind == "ok":
            results[rank] = pickle.loads(payload)
        else:
            failures.append((kind, rank, payload))
        return True

    def note_dead_ranks() -> None:
        for rank, proc in enumerate(procs):
            if proc.exitcode not in (None, 0) and rank not in reported:
                while receive(1.0):  # its own message may still be in flight
                    pass
                if rank not in reported:
                    reported.add(rank)
                    failures.append(("died", rank, _exit_reason(proc.exitcode)))

    try:
        while len(results) < world_size and not failures:
            if not receive(0.1):
                note_dead_ranks()
        if failures:
            # Let the other ranks' errors (or deaths) arrive, so the root cause can be told
            # from its echoes: a rank that lost its peer reports first, the peer's story after.
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline and len(reported) < world_size:
                if not receive(0.1):
                    note_dead_ranks()
        finished = not failures
    finally:
        for proc in procs:  # after a failure (or Ctrl-C) nobody waits for stragglers
            proc.join(timeout=10 if finished else 0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        # Ranks unlink the arena as soon as all have mapped it; only a rank killed inside
        # that window could leave its file behind.
        sweep_arena_files(run_token)
    if failures:
        _raise_failure(failures)
    return results
