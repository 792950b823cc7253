"""The costs behind the `krakenlm bench tp` figures at 125M parameters, measured alone.

1. One all-reduce of a prefill activation between 2 local processes, over gloo (loopback TCP)
   and over shared memory (`--comm-backend shm`): wall and CPU time per call, per rank. CPU
   time is the whole process's (gloo's own threads included). The price of each of GPT's 2L,
   the parallel block's L and Kraken's L-1 reductions.
2. What an overlapped reduction costs Kraken: one asynchronous all-reduce of its 1024 x 678
   activation launched before one layer's attention (1024 tokens, one whole sub-layer of 6
   heads of 113) and waited for after it, against the attention alone (wall and CPU time). The
   difference is what the overlap does not hide. Over gloo (its own thread), over shared
   memory as implemented (copy at launch, sum in `wait()`), and over shared memory with the
   whole reduction on a helper thread (the design not taken).
3. How the shared-memory all-reduce waits for a peer (`shm_arena.py`): as implemented (poll,
   then yield, then sleep), sleeping at once, or polling only.
4. One layer's causal attention on one rank of TP 2 at 1024 tokens: GPT-2 124M keeps 6 heads
   of 64, Kraken-125m-2way keeps one whole sub-layer of 6 heads of 113.

    python benchmarks/tp_costs.py
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F

from krakenlm.distributed import shm_arena
from krakenlm.distributed.launch import run_ranks

SHAPES = {"gpt2-124m, 1024 x 768": (1024, 768), "kraken-125m-2way, 1024 x 678": (1024, 678),
          "gpt2-124m, 128 x 768": (128, 768), "kraken-125m-2way, 128 x 678": (128, 678),
          "decode, 1 x 768": (1, 768)}
BACKENDS = ("gloo", "shm")
CALLS = 20
OVERLAP_REPEATS = 15
# (SPIN_POLLS, YIELD_POLLS, FIRST_SLEEP_S) of shm_arena.
WAIT_POLICIES = {"poll, yield, then sleep (as implemented)": None,
                 "sleep at once": (0, 0, shm_arena.FIRST_SLEEP_S),
                 "poll only": (10**12, 0, shm_arena.FIRST_SLEEP_S)}
WAIT_SHAPES = ("gpt2-124m, 1024 x 768", "decode, 1 x 768")


def all_reduce_costs(ctx, wait_policy=None) -> dict[str, tuple[float, float]]:
    if wait_policy is not None:
        shm_arena.SPIN_POLLS, shm_arena.YIELD_POLLS, shm_arena.FIRST_SLEEP_S = wait_policy
    comm = ctx.new_comm()
    out = {}
    for name, (tokens, width) in SHAPES.items():
        x = torch.randn(1, tokens, width)
        for _ in range(3):
            comm.all_reduce(x.clone())
        inputs = [x.clone() for _ in range(CALLS)]  # cloned outside the timed loop
        ctx.barrier()
        wall, cpu = time.perf_counter(), time.process_time()
        for tensor in inputs:
            comm.all_reduce(tensor)
        out[name] = ((time.perf_counter() - wall) / CALLS, (time.process_time() - cpu) / CALLS)
    return out


def _attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class HelperThreadComm:
    """The shared-memory all-reduce run whole on a helper thread, as gloo runs its own."""

    def __init__(self, comm):
        self.comm, self.pool = comm, ThreadPoolExecutor(max_workers=1)

    def all_reduce_async(self, tensor):
        future = self.pool.submit(self.comm.all_reduce, tensor)
        return type("Pending", (), {"wait": lambda _self: future.result()})()


def overlap_cost(ctx, helper_thread: bool) -> dict[str, float]:
    """Medians over repeats of (launch + attention + wait) - (attention alone), wall and CPU,
    the two run back to back so that drifts of the machine's speed hit both."""
    comm = HelperThreadComm(ctx.new_comm()) if helper_thread else ctx.new_comm()
    q = torch.randn(1, 6, 1024, 113)
    k, v = torch.randn_like(q), torch.randn_like(q)
    activation = torch.randn(1, 1024, 678)
    alone, wall_extra, cpu_extra = [], [], []
    for i in range(OVERLAP_REPEATS + 2):
        ctx.barrier()
        wall, cpu = time.perf_counter(), time.process_time()
        _attention(q, k, v)
        wall_alone, cpu_alone = time.perf_counter() - wall, time.process_time() - cpu
        tensor = activation.clone()
        ctx.barrier()
        wall, cpu = time.perf_counter(), time.process_time()
        pending = comm.all_reduce_async(tensor)
        _attention(q, k, v)
        pending.wait()
        if i >= 2:
            alone.append(wall_alone)
            wall_extra.append(time.perf_counter() - wall - wall_alone)
            cpu_extra.append(time.process_time() - cpu - cpu_alone)
    return {"alone": statistics.median(alone), "wall_extra": statistics.median(wall_extra),
            "cpu_extra": statistics.median(cpu_extra)}


def attention_ms(heads: int, head_dim: int, tokens: int = 1024, repeats: int = 5) -> float:
    q = torch.randn(1, heads, tokens, head_dim)
    k, v = torch.randn_like(q), torch.randn_like(q)
    _attention(q, k, v)
    start = time.perf_counter()
    for _ in range(repeats):
        _attention(q, k, v)
    return (time.perf_counter() - start) / repeats * 1000


if __name__ == "__main__":
    for backend in BACKENDS:
        results = run_ranks(all_reduce_costs, world_size=2, comm_backend=backend)
        print(f"{backend} all-reduce, 2 processes (ms per call: wall / CPU of the process), "
              "rank 0 | rank 1")
        for name in SHAPES:
            cells = " | ".join(f"{1000 * results[r][name][0]:.2f} / "
                               f"{1000 * results[r][name][1]:.2f}" for r in (0, 1))
            print(f"  {name}: {cells}")
    print("Kraken's overlap: one layer's attention (1024 tokens, 6 heads x 113) with an async "
          "all-reduce of 1024 x 678 launched before it and waited after it; what it adds to the "
          "attention alone (ms, median of paired differences, rank 0)")
    for label, backend, helper_thread in (("gloo", "gloo", False),
                                          ("shm (copy at launch, sum in wait)", "shm", False),
                                          ("shm on a helper thread", "shm", True)):
        got = run_ranks(overlap_cost, (helper_thread,), world_size=2, comm_backend=backend)[0]
        print(f"  {label}: attention alone {1000 * got['alone']:.2f}, added wall "
              f"{1000 * got['wall_extra']:.2f}, added CPU {1000 * got['cpu_extra']:.2f}")
    print("shared-memory all-reduce by waiting policy (ms per call: wall / CPU), rank 0 | rank 1")
    for label, policy in WAIT_POLICIES.items():
        results = run_ranks(all_reduce_costs, (policy,), world_size=2, comm_backend="shm")
        for name in WAIT_SHAPES:
            cells = " | ".join(f"{1000 * results[r][name][0]:.2f} / "
                               f"{1000 * results[r][name][1]:.2f}" for r in (0, 1))
            print(f"  {label}, {name}: {cells}")
    torch.set_num_threads(1)
    print("causal attention, one layer on one rank of TP 2, 1024 tokens, 1 thread:")
    print(f"  gpt2-124m (6 heads x 64): {attention_ms(6, 64):.1f} ms")
    print(f"  kraken-125m-2way (6 heads x 113): {attention_ms(6, 113):.1f} ms")
