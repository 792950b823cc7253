"""The shared-memory all-reduce: its protocol on arenas attached in this process, then on real
ranks (ordering, counts, timeouts, no /dev/shm file left behind). Exactness of whole models:
test_dist_exact.py."""

import glob
import os
import subprocess
import sys

import pytest
import torch

from krakenlm.cli import main
from krakenlm.distributed.comm import ASYNC, BLOCKING, PeerError
from krakenlm.distributed.comm_backend import shared_memory_obstacle
from krakenlm.distributed.launch import run_ranks
from krakenlm.distributed.shm_arena import (
    FILE_PREFIX,
    PID,
    SHM_DIR,
    SharedMemoryArena,
    create_arena_file,
    new_arena_path,
    sweep_arena_files,
)
from krakenlm.distributed.shm_comm import SharedMemoryComm
from krakenlm.errors import KrakenError

SLOT_BYTES = 1 << 16


def arena_files() -> set[str]:
    return set(glob.glob(os.path.join(SHM_DIR, FILE_PREFIX + "*")))


@pytest.fixture
def attach():
    """attach(n) -> n arenas on one file, as ranks 0..n-1 would see it, in this process."""
    opened = []

    def _attach(world_size: int) -> list[SharedMemoryArena]:
        path = new_arena_path(f"test{os.getpid()}")
        create_arena_file(path, world_size, SLOT_BYTES)
        try:
            arenas = [SharedMemoryArena(path, r, world_size, SLOT_BYTES) for r in range(world_size)]
        finally:
            os.unlink(path)
        opened.extend(arenas)
        return arenas

    yield _attach
    for arena in opened:
        arena.close()


# --------------------------------------------------------------- the protocol, in-process
def test_sums_are_in_rank_order_and_bit_identical_on_every_rank(attach):
    """fp32 addition is not associative: ((1e8 + 1) - 1e8) + 1 = 1, other orders give 0 or 2.
    Every rank must get the rank-order result, so that all ranks decode the same tokens."""
    arenas = attach(3)
    values = [1e8, 1.0, -1e8]
    ops = [a.launch(torch.tensor([v, 2.0 * r]), timeout_s=10) for r, (a, v)
           in enumerate(zip(arenas, values))]
    sums = [a.complete(op, timeout_s=10) for a, op in zip(arenas, ops)]
    for got in sums:
        assert got.tolist() == [0.0, 6.0]  # (1e8 + 1) rounds to 1e8, then - 1e8
    reordered = (torch.tensor(-1e8) + torch.tensor(1e8)) + torch.tensor(1.0)
    assert reordered.item() == 1.0  # the order matters, so the test above can fail


def test_two_collectives_in_flight_complete_in_launch_order(attach):
    rank0, rank1 = attach(2)
    a0 = rank0.launch(torch.full((4,), 1.0), timeout_s=10)
    a1 = rank1.launch(torch.full((4,), 2.0), timeout_s=10)
    b0 = rank0.launch(torch.full((3,), 10.0), timeout_s=10)
    b1 = rank1.launch(torch.full((3,), 20.0), timeout_s=10)
    assert rank0.complete(b0, timeout_s=10).tolist() == [30.0] * 3
    assert a0.done  # waiting for the second completed the first one first
    assert rank0.complete(a0, timeout_s=10).tolist() == [3.0] * 4
    assert rank1.complete(a1, timeout_s=10).tolist() == [3.0] * 4
    assert rank1.complete(b1, timeout_s=10).tolist() == [30.0] * 3
    # A third launch reuses the first one's slots: fine once both ranks have read them.
    c0 = rank0.launch(torch.full((2,), 5.0), timeout_s=10)
    c1 = rank1.launch(torch.full((2,), 7.0), timeout_s=10)
    assert rank0.complete(c0, 10).tolist() == rank1.complete(c1, 10).tolist() == [12.0] * 2


def test_a_slot_is_not_overwritten_before_every_peer_has_read_it(attach):
    """Rank 0 runs ahead: its third reduction would reuse the slot of its first, which rank 1
    has not read yet, so it must wait (here: until its timeout) instead of overwriting it."""
    rank0, rank1 = attach(2)
    first0 = rank0.launch(torch.full((2,), 1.0), timeout_s=10)
    first1 = rank1.launch(torch.full((2,), 2.0), timeout_s=10)
    rank0.complete(first0, timeout_s=10)
    rank0.launch(torch.full((2,), 10.0), timeout_s=10)
    with pytest.raises(PeerError, match=r"all-reduce #3 failed \(timeout 0.2 s\): rank 1 did "
                                        r"not finish reading all-reduce #1, whose slot this one "
                                        "reuses, in time"):
        rank0.launch(torch.full((2,), 100.0), timeout_s=0.2)
    assert rank1.complete(first1, timeout_s=10).tolist() == [3.0, 3.0]


def test_a_peer_that_never_publishes_is_a_timeout_error(attach):
    rank0, _ = attach(2)
    op = rank0.launch(torch.ones(3), timeout_s=0.2)
    with pytest.raises(PeerError, match=r"shared-memory all-reduce #1 failed \(timeout 0.2 s\): "
                                        r"rank 1 did not publish its data for it in time\. "
                                        r"Another rank failed"):
        rank0.complete(op, timeout_s=0.2)


@pytest.mark.timeout(60)
def test_a_dead_peer_is_reported_without_waiting_for_a_timeout(attach):
    rank0, rank1 = attach(2)
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
    rank1._counters[1, PID] = int(finished.stdout)  # rank 1 "was" that process: it has exited
    rank0.check_liveness = True
    op = rank0.launch(torch.ones(3), timeout_s=None)  # no timeout: only liveness can end this
    with pytest.raises(PeerError, match=rf"rank 1 \(pid {int(finished.stdout)}\) exited before "
                                        "it could publish its data for it"):
        rank0.complete(op, timeout_s=None)


def test_ranks_reducing_different_sizes_is_an_error_not_garbage(attach):
    rank0, rank1 = attach(2)
    op = rank0.launch(torch.ones(3), timeout_s=10)
    rank1.launch(torch.ones(4), timeout_s=10)
    with pytest.raises(RuntimeError, match="collective #1: rank 1 reduced 16 bytes, rank 0 12"):
        rank0.complete(op, timeout_s=10)


def test_a_tensor_larger_than_a_slot_is_a_clear_error(attach):
    rank0, _ = attach(2)
    with pytest.raises(KrakenError, match="exceeds the shared-memory slot of 65536 bytes; use "
                                          "--comm-backend gloo"):
        rank0.launch(torch.ones(SLOT_BYTES // 4 + 1), timeout_s=10)


def test_sweep_removes_only_the_files_of_its_launch():
    mine, other = new_arena_path("sweeptest1"), new_arena_path("sweeptest2")
    for path in (mine, other):
        create_arena_file(path, 2, SLOT_BYTES)
    try:
        assert sweep_arena_files("sweeptest1") == [mine]
        assert not os.path.exists(mine) and os.path.exists(other)
    finally:
        os.unlink(other)


def test_shared_memory_needs_one_host_and_a_supported_platform():
    assert shared_memory_obstacle([("a/1", True, ""), ("a/1", True, "")]) is None
    assert shared_memory_obstacle([("a/1", True, ""), ("b/2", True, "")]) == (
        "the ranks are on 2 hosts (a/1, b/2)")
    assert shared_memory_obstacle([("a/1", True, ""), ("a/1", False, "no /dev/shm")]) == (
        "rank 1: no /dev/shm")


def test_an_unknown_backend_is_a_one_line_error_before_any_process_starts(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "tp", "--sizes", "tiny", "--comm-backend", "tcp"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --comm-backend must be one of auto, shm, gloo, nccl, got 'tcp'")


# -------------------------------------------------------------------------- real ranks
def _rank_exercises_the_communicator(ctx):
    out = {"backend": ctx.comm_backend, "arena_file_exists": os.path.exists(ctx.shm_arena.path)}
    comm = ctx.new_comm()
    r = ctx.rank
    a = comm.all_reduce_async(torch.full((5,), 1.0 + r))
    b = comm.all_reduce_async(torch.full((2, 3), 10.0 * (r + 1)))
    # Ranks wait in different orders; completion stays in launch order on every rank.
    if r == 0:
        out["b"], out["a_done_after_b"], out["a"] = b.wait(), a._op.done, a.wait()
    else:
        out["a"], out["b"] = a.wait(), b.wait()
    # A blocking reduce while an asynchronous one is in flight, then three in flight.
    c = comm.all_reduce_async(torch.full((4,), 100.0 * (r + 1)))
    out["blocking"] = comm.all_reduce(torch.full((3,), 1000.0 * (r + 1)))
    out["c"] = c.wait()
    pending = [comm.all_reduce_async(torch.full((k + 1,), float(k * (r + 1)))) for k in range(3)]
    out["three"] = [p.wait() for p in reversed(pending)][::-1]
    out["counts"] = dict(comm.counts)
    out["blocked_s"], out["peer_wait_s"] = comm.blocked_s, comm.peer_wait_s
    blocking = ctx.new_comm(overlap=False)
    out["no_overlap"] = blocking.all_reduce_async(torch.full((2,), 1.0 + r)).wait()
    out["no_overlap_counts"] = dict(blocking.counts)
    return out


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_real_ranks_reduce_in_order_count_and_leave_no_file_behind():
    before = arena_files()
    results = run_ranks(_rank_exercises_the_communicator, world_size=2, timeout_s=60)
    assert arena_files() == before
    for rank, got in results.items():
        assert got["backend"] == "shm"  # `auto` on one host
        assert not got["arena_file_exists"], "unlinked as soon as every rank mapped it"
        assert got["a"].tolist() == [3.0] * 5
        assert got["b"].tolist() == [[30.0] * 3] * 2
        assert got["c"].tolist() == [300.0] * 4 and got["blocking"].tolist() == [3000.0] * 3
        assert [t.tolist() for t in got["three"]] == [[0.0], [3.0] * 2, [6.0] * 3]
        assert got["counts"] == {ASYNC: 6, BLOCKING: 1}
        assert got["blocked_s"] >= got["peer_wait_s"] >= 0
        assert got["no_overlap"].tolist() == [3.0, 3.0]
        assert got["no_overlap_counts"] == {ASYNC: 1}
    assert results[0]["a_done_after_b"]


def _rank1_never_publishes(ctx):
    message = None
    if ctx.rank == 0:
        try:
            SharedMemoryComm(ctx.shm_arena, timeout_s=1).all_reduce(torch.ones(8))
        except PeerError as exc:
            message = str(exc)
    ctx.barrier()  # rank 1 waits here, over gloo, until rank 0 has given up
    return message


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_rank_that_never_publishes_gives_a_peer_error_on_its_peer():
    results = run_ranks(_rank1_never_publishes, world_size=2, timeout_s=60, comm_backend="shm")
    assert results[0] == (
        "shared-memory all-reduce #1 failed (timeout 1 s): rank 1 did not publish its data for "
        "it in time. Another rank failed, was killed or never joined; look for its error above, "
        "check that every rank was started, and raise --timeout if ranks are just slow")
