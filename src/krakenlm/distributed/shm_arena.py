"""The shared-memory arena behind `SharedMemoryComm`: all-reduces between ranks on one host
without sockets, kernel copies or helper threads.

One file in /dev/shm, mapped by every rank and unlinked as soon as all have mapped it (so a
rank that dies later leaks nothing):

    line 0              magic, layout version, world size, slot bytes
    line 1 + r          rank r's counters, one 64-byte cache line per rank so that ranks
                        polling each other's counters do not share a line with their own:
                        PUBLISHED  the last collective whose data rank r has written
                        CONSUMED   the last collective whose peers' data rank r has read
                        NBYTES_0/1 the size of the collective published in slot 0 / 1
                        PID        rank r's process id (to tell a dead peer from a slow one)
    data                per rank, two slots of `slot_bytes` (collective n uses slot n % 2)

Collective n (numbered 1, 2, ... in call order, identical on every rank):
    launch:   wait until every peer has CONSUMED >= n - 2 (it finished reading the slot about to
              be overwritten), copy the tensor into the own slot n % 2, set NBYTES, publish
              PUBLISHED = n.
    complete: wait until every peer has PUBLISHED >= n, sum all ranks' slots in rank order
              (so every rank computes bit-identical sums), set CONSUMED = n.
Two slots per rank let a rank publish collective n + 1 while a slower peer still reads n, with
no second barrier. At most two collectives are in flight per rank: launching a third completes
the oldest first (completion is always in launch order).

Memory ordering: counters are aligned 8-byte stores and loads through numpy, each a single
instruction, and x86-64 keeps stores in program order as seen by other cores (and loads
likewise), so a peer that sees PUBLISHED = n also sees the data written before it. Other
architectures would need fences Python cannot issue; `platform_supported()` says no there.

The file is sparse: its virtual size is world size x 2 x `slot_bytes`, and a rank reserves its
own slots' pages with posix_fallocate as its largest tensor grows, so a full /dev/shm is a
clear error instead of a SIGBUS when a page is first touched.
"""

from __future__ import annotations

import errno
import glob
import mmap
import os
import platform
import secrets
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import KrakenError
from .comm import PeerError, peer_failure

SHM_DIR = "/dev/shm"
FILE_PREFIX = "krakenlm-shm-"
DEFAULT_SLOT_BYTES = 1 << 30  # per rank and slot; virtual (sparse) until used
RESERVE_STEP_BYTES = 1 << 20

MAGIC, LAYOUT_VERSION = 0x4B52414B454E534D, 1  # "KRAKENSM"
LINE_INT64S = 8  # 64 bytes
PUBLISHED, CONSUMED, NBYTES_0, NBYTES_1, PID = range(5)
PAGE_BYTES = 4096

# Waiting for a peer: poll for a few microseconds (a peer that is about to publish costs no
# system call), then yield the core for a while (if ranks outnumber cores, the peer being
# waited for may need this very core), then sleep with a growing interval so that a long wait
# (a slow or stuck peer) costs almost no CPU. Timeouts and dead peers are checked while asleep.
SPIN_POLLS = 200  # ~0.15 us per poll
YIELD_POLLS = 1000  # ~2.5 us per sched_yield when nothing else runs here
FIRST_SLEEP_S, MAX_SLEEP_S = 50e-6, 1e-3
LIVENESS_EVERY_S = 0.1


def platform_supported() -> tuple[bool, str]:
    """(True, "") where the arena's lock-free counters are correct and /dev/shm exists."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False, (f"the shared-memory all-reduce relies on x86-64 store ordering; this is "
                       f"{platform.machine()}")
    if not os.path.isdir(SHM_DIR):
        return False, f"{SHM_DIR} does not exist"
    return True, ""


def new_arena_path(run_token: str) -> str:
    """A fresh file name; `run_token` groups the files of one launch so its launcher can sweep
    them if a rank is killed in the short window between creating and unlinking."""
    return os.path.join(SHM_DIR, f"{FILE_PREFIX}{run_token}-{os.getpid()}-{secrets.token_hex(4)}")


def sweep_arena_files(run_token: str) -> list[str]:
    """Remove the arena files of a launch (normally none: every rank unlinks early)."""
    removed = []
    for path in glob.glob(os.path.join(SHM_DIR, f"{FILE_PREFIX}{run_token}-*")):
        try:
            os.unlink(path)
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed


def _header_bytes(world_size: int) -> int:
    raw = (1 + world_size) * LINE_INT64S * 8
    return -(-raw // PAGE_BYTES) * PAGE_BYTES


def arena_file_bytes(world_size: int, slot_bytes: int) -> int:
    return _header_bytes(world_size) + world_size * 2 * slot_bytes


def create_arena_file(path: str, world_size: int, slot_bytes: int) -> None:
    """Create the (sparse) file and write its preamble; ranks then `SharedMemoryArena(path...)`."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, arena_file_bytes(world_size, slot_bytes))
        os.pwrite(fd, np.array([MAGIC, LAYOUT_VERSION, world_size, slot_bytes],
                               dtype=np.int64).tobytes(), 0)
    finally:
        os.close(fd)


@dataclass
class _Collective:
    """A launched, not yet completed all-reduce: its sequence number in the arena (its parity picks
    the slot half) and the caller's tensor, which receives the sum; `done` once summed."""
    seq: int
    tensor: torch.Tensor  # the caller's tensor: the sum is written into it
    done: bool = False


def _process_alive(pid: int) -> bool:
    """False once `pid` has exited (a zombie counts as exited: its parent may not have reaped
    it yet)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:
        return True  # cannot tell: assume alive, the timeout still applies
    return state not in (b"Z", b"X")


class SharedMemoryArena:
    """One rank's view of the arena file at `path` (see the module docstring for the protocol).

    Not thread-safe: one thread per rank launches and completes collectives.
    """

    def __init__(self, path: str, rank: int, world_size: int,
                 slot_bytes: int = DEFAULT_SLOT_BYTES):
        self.path, self.rank, self.world_size, self.slot_bytes = path, rank, world_size, slot_bytes
        self._fd = os.open(path, os.O_RDWR)
        try:
            self._map = mmap.mmap(self._fd, arena_file_bytes(world_size, slot_bytes))
        except BaseException:
            os.close(self._fd)
            raise
        lines = np.frombuffer(self._map, dtype=np.int64, count=(1 + world_size) * LINE_INT64S)
        lines = lines.reshape(1 + world_size, LINE_INT64S)
        preamble = [int(v) for v in lines[0, :4]]
        if preamble != [MAGIC, LAYOUT_VERSION, world_size, slot_bytes]:
            self.close()
            raise KrakenError(f"{path} is not a krakenlm shared-memory arena for {world_size} "
                              f"ranks of {slot_bytes} bytes (preamble {preamble})")
        self._counters = lines[1:]  # [rank, field]
        self._data = torch.frombuffer(self._map, dtype=torch.uint8,
                                      offset=_header_bytes(world_size),
                                      count=world_size * 2 * slot_bytes)
        self._counters[rank, PID] = os.getpid()
        self.peers = [r for r in range(world_size) if r != rank]
        self._reserved_bytes = 0
        self._next_seq = 1
        self._pending: deque[_Collective] = deque()
        self.peer_wait_s = 0.0  # wall time spent waiting for peers (not copying or summing)
        self.check_liveness = False  # set once every peer's pid is known to be visible here

    # ---------------------------------------------------------------------- set-up helpers
    def peer_pids_visible(self) -> bool:
        """Whether this rank can see every peer's process (same pid namespace), so that a
        vanished pid means a dead peer. Call after every rank has attached."""
        return all(_process_alive(int(self._counters[p, PID])) for p in self.peers)

    def close(self) -> None:
        """Unmap (the file itself was unlinked at set-up)."""
        self._counters = self._data = None
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # a tensor view is still referenced somewhere; the process exit unmaps
            self._map = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # ------------------------------------------------------------------------- protocol
    def _slot(self, rank: int, parity: int, nbytes: int) -> torch.Tensor:
        start = (rank * 2 + parity) * self.slot_bytes
        return self._data[start:start + nbytes]

    def _reserve(self, nbytes: int) -> None:
        """Back the own two slots with pages up to `nbytes` (ENOSPC here, not SIGBUS later)."""
        if nbytes <= self._reserved_bytes:
            return
        target = min(self.slot_bytes, max(nbytes, 2 * self._reserved_bytes))
        target = -(-target // RESERVE_STEP_BYTES) * RESERVE_STEP_BYTES
        target = min(target, self.slot_bytes)
        for parity in (0, 1):
            offset = _header_bytes(self.world_size) + (self.rank * 2 + parity) * self.slot_bytes
            try:
                os.posix_fallocate(self._fd, offset, target)
            except OSError as exc:
                if exc.errno in (errno.EOPNOTSUPP, errno.ENOSYS):
                    break  # no fallocate on this file system: pages are taken on first touch
                usage = os.statvfs(SHM_DIR)
                raise KrakenError(
                    f"{SHM_DIR} has no room for {target} bytes of all-reduce buffers "
                    f"({usage.f_bavail * usage.f_frsize} bytes free): {exc.strerror}. Enlarge "
                    "it (docker run --shm-size ...) or use --comm-backend gloo") from None
        self._reserved_bytes = target

    def launch(self, tensor: torch.Tensor, timeout_s: float | None) -> _Collective:
        """Publish this rank's contribution; `tensor` (contiguous) later receives the sum."""
        nbytes = tensor.numel() * tensor.element_size()
        if nbytes > self.slot_bytes:
            raise KrakenError(f"an all-reduce of {nbytes} bytes exceeds the shared-memory slot "
                              f"of {self.slot_bytes} bytes; use --comm-backend gloo")
        seq = self._next_seq
        while self._pending and self._pending[0].seq <= seq - 2:  # its slot is reused now
            self._finish(self._pending.popleft(), timeout_s)
        self._await_peers(CONSUMED, seq - 2, seq, timeout_s)
        self._reserve(nbytes)
        parity = seq % 2
        if nbytes:
            self._slot(self.rank, parity, nbytes).view(tensor.dtype).copy_(tensor.reshape(-1))
        self._counters[self.rank, NBYTES_0 + parity] = nbytes
        self._counters[self.rank, PUBLISHED] = seq  # after the data: x86 keeps the order
        self._next_seq = seq + 1
        op = _Collective(seq, tensor)
        self._pending.append(op)
        return op

    def complete(self, op: _Collective, timeout_s: float | None) -> torch.Tensor:
        """The sum of `op`, after every collective launched before it."""
        while not op.done:
            self._finish(self._pending.popleft(), timeout_s)
        return op.tensor

    def _finish(self, op: _Collective, timeout_s: float | None) -> None:
        self._await_peers(PUBLISHED, op.seq, op.seq, timeout_s)
        parity, tensor = op.seq % 2, op.tensor
        nbytes = tensor.numel() * tensor.element_size()
        for peer in self.peers:
            theirs = int(self._counters[peer, NBYTES_0 + parity])
            if theirs != nbytes:
                raise RuntimeError(f"collective #{op.seq}: rank {peer} reduced {theirs} bytes, "
                                   f"rank {self.rank} {nbytes}; the ranks are not making the "
                                   "same calls")
        if self.world_size > 1 and nbytes:
            # The own share is read back from the slot too: `tensor` is the output.
            _sum_in_rank_order(tensor.view(-1), [self._slot(r, parity, nbytes).view(tensor.dtype)
                                                 for r in range(self.world_size)])
        self._counters[self.rank, CONSUMED] = op.seq  # after the reads of the peers' slots
        op.done = True

    # -------------------------------------------------------------------------- waiting
    def _await_peers(self, counter: int, value: int, seq: int, timeout_s: float | None) -> None:
        for peer in self.peers:
            if self._counters[peer, counter] < value:
                self._wait_for(peer, counter, value, seq, timeout_s)

    def _wait_for(self, peer: int, counter: int, value: int, seq: int,
                  timeout_s: float | None) -> None:
        counters = self._counters
        start = time.perf_counter()
        try:
            for _ in range(SPIN_POLLS):
                if counters[peer, counter] >= value:
                    return
            for _ in range(YIELD_POLLS):
                os.sched_yield()
                if counters[peer, counter] >= value:
                    return
            sleep_s, next_liveness = FIRST_SLEEP_S, time.perf_counter() + LIVENESS_EVERY_S
            while counters[peer, counter] < value:
                time.sleep(sleep_s)
                sleep_s = min(2 * sleep_s, MAX_SLEEP_S)
                now = time.perf_counter()
                if timeout_s is not None and now - start > timeout_s:
                    raise self._peer_error(peer, counter, value, seq, timeout_s, exited=False)
                if self.check_liveness and now > next_liveness:
                    next_liveness = now + LIVENESS_EVERY_S
                    if (counters[peer, counter] < value
                            and not _process_alive(int(counters[peer, PID]))):
                        raise self._peer_error(peer, counter, value, seq, timeout_s, exited=True)
        finally:
            self.peer_wait_s += time.perf_counter() - start

    def _peer_error(self, peer: int, counter: int, value: int, seq: int,
                    timeout_s: float | None, exited: bool) -> PeerError:
        step = ("publish its data for it" if counter == PUBLISHED else
                f"finish reading all-reduce #{value}, whose slot this one reuses,")
        if exited:
            detail = (f"rank {peer} (pid {int(self._counters[peer, PID])}) exited before it "
                      f"could {step}")
            timeout_s = None
        else:
            detail = f"rank {peer} did not {step} in time"
        return peer_failure(f"shared-memory all-reduce #{seq}", detail, timeout_s)


def _sum_in_rank_order(out: torch.Tensor, operands: list[torch.Tensor]) -> None:
    """out = ((operands[0] + operands[1]) + operands[2]) + ... in that order on every rank, so
    the sums are bit-identical everywhere."""
    if out.dtype in (torch.float16, torch.bfloat16):
        total = operands[0].float()  # fp32 accumulation, as the single-device model would see
        for operand in operands[1:]:
            total += operand.float()
        out.copy_(total)
        return
    first, second, *rest = operands
    torch.add(first, second, out=out)
    for operand in rest:
        out.add_(operand)
