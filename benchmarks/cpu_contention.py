"""How much fp32 matmul throughput 1 and 2 concurrent single-thread processes get here.

Tensor parallelism over 2 processes can only cut compute time if the two processes really run
on two cores' worth of arithmetic units. On a VM whose vCPUs share physical cores with each
other or with other tenants, two concurrent processes each get less than one alone; this
measures it, to explain `krakenlm bench tp` figures.

    python benchmarks/cpu_contention.py
"""

from __future__ import annotations

import multiprocessing as mp
import time

M, K, N, ROUNDS = 512, 768, 3072, 100  # a GPT-2-small FFN-in matmul over 512 tokens


def measure(start_together, results) -> None:
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(M, K), torch.randn(K, N)
    for _ in range(3):
        a @ b
    start_together.wait()  # both processes are warm before either starts the clock
    start = time.perf_counter()
    for _ in range(ROUNDS):
        a @ b
    results.put(ROUNDS * 2 * M * K * N / (time.perf_counter() - start) / 1e9)


def run(processes: int) -> list[float]:
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    procs = [ctx.Process(target=measure, args=(barrier, results)) for _ in range(processes)]
    for proc in procs:
        proc.start()
    out = [results.get() for _ in procs]
    for proc in procs:
        proc.join()
    return out


if __name__ == "__main__":
    alone, together = run(1), run(2)
    print(f"1 process, 1 thread: {alone[0]:.0f} GFLOP/s")
    print(f"2 concurrent processes, 1 thread each: {together[0]:.0f} + {together[1]:.0f} GFLOP/s")
