"""The costs behind the `krakenlm bench tp` figures at 125M parameters, measured alone.

1. One all-reduce of a prefill activation between 2 local processes, over gloo (loopback TCP)
   and over shared memory (`--comm-backend shm`): wall and CPU time per call, per rank. CPU
   time is the whole process's (gloo's own threads included). The price of each of GPT's 2L,
   the parallel block's L and Kraken's L-1 reductions.
2. What an overlapped reduction costs Kraken: one asynchronous all-reduce of its 1024 x 678
   activation launched before one layer's attention (1024 tokens, one whole sub-layer of 6
   heads of 113) and waited for after it, against the attention alone. The difference is what
   the overlap does not hide.
3. One layer's causal attention on one rank of TP 2 at 1024 tokens: GPT-2 124M keeps 6 heads
   of 64, Kraken-125m-2way keeps one whole sub-layer of 6 heads of 113.

    python benchmarks/tp_costs.py
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from krakenlm.distributed.launch import run_ranks

SHAPES = {"gpt2-124m, 1024 x 768": (1024, 768), "kraken-125m-2way, 1024 x 678": (1024, 678),
          "gpt2-124m, 128 x 768": (128, 768), "kraken-125m-2way, 128 x 678": (128, 678),
          "decode, 1 x 768": (1, 768)}
BACKENDS = ("gloo", "shm")
CALLS = 20
OVERLAP_REPEATS = 15


def all_reduce_costs(ctx) -> dict[str, tuple[float, float]]:
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


def overlap_cost(ctx) -> dict[str, float]:
    """Median wall time of attention alone and of launch + attention + wait (Kraken's pattern),
    alternated so that drifts of the machine's speed hit both."""
    comm = ctx.new_comm()
    q = torch.randn(1, 6, 1024, 113)
    k, v = torch.randn_like(q), torch.randn_like(q)
    activation = torch.randn(1, 1024, 678)
    alone, overlapped = [], []
    for i in range(OVERLAP_REPEATS + 2):
        ctx.barrier()
        start = time.perf_counter()
        _attention(q, k, v)
        t_alone = time.perf_counter() - start
        tensor = activation.clone()
        ctx.barrier()
        start = time.perf_counter()
        pending = comm.all_reduce_async(tensor)
        _attention(q, k, v)
        pending.wait()
        t_overlapped = time.perf_counter() - start
        if i >= 2:
            alone.append(t_alone)
            overlapped.append(t_overlapped)
    return {"alone": statistics.median(alone), "overlapped": statistics.median(overlapped)}


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
          "all-reduce of 1024 x 678 launched before it and waited after it (ms, median, rank 0)")
    for backend in BACKENDS:
        got = run_ranks(overlap_cost, world_size=2, comm_backend=backend)[0]
        print(f"  {backend}: attention alone {1000 * got['alone']:.2f}, with the reduction "
              f"{1000 * got['overlapped']:.2f}, not hidden "
              f"{1000 * (got['overlapped'] - got['alone']):.2f}")
    torch.set_num_threads(1)
    print("causal attention, one layer on one rank of TP 2, 1024 tokens, 1 thread:")
    print(f"  gpt2-124m (6 heads x 64): {attention_ms(6, 64):.1f} ms")
    print(f"  kraken-125m-2way (6 heads x 113): {attention_ms(6, 113):.1f} ms")
