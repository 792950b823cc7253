"""The two costs behind the `krakenlm bench tp` figures at 125M parameters, measured alone.

1. One gloo all-reduce of a prefill activation between 2 local processes (wall and CPU time
   per call, per rank): the price of each of GPT's 2L, the parallel block's L and Kraken's L-1
   reductions.
2. One layer's causal attention on one rank of TP 2 at 1024 tokens: GPT-2 124M keeps 6 heads
   of 64, Kraken-125m-2way keeps one whole sub-layer of 6 heads of 113.

    python benchmarks/tp_costs.py
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from krakenlm.distributed.launch import run_ranks

SHAPES = {"gpt2-124m, 1024 x 768": (1024, 768), "kraken-125m-2way, 1024 x 678": (1024, 678),
          "gpt2-124m, 128 x 768": (128, 768), "kraken-125m-2way, 128 x 678": (128, 678)}
CALLS = 20


def all_reduce_costs(ctx) -> dict[str, tuple[float, float]]:
    comm = ctx.new_comm()
    out = {}
    for name, (tokens, width) in SHAPES.items():
        x = torch.randn(1, tokens, width)
        for _ in range(3):
            comm.all_reduce(x.clone())
        ctx.barrier()
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(CALLS):
            comm.all_reduce(x.clone())
        out[name] = ((time.perf_counter() - wall) / CALLS, (time.process_time() - cpu) / CALLS)
    return out


def attention_ms(heads: int, head_dim: int, tokens: int = 1024, repeats: int = 5) -> float:
    q = torch.randn(1, heads, tokens, head_dim)
    k, v = torch.randn_like(q), torch.randn_like(q)
    F.scaled_dot_product_attention(q, k, v, is_causal=True)
    start = time.perf_counter()
    for _ in range(repeats):
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return (time.perf_counter() - start) / repeats * 1000


if __name__ == "__main__":
    results = run_ranks(all_reduce_costs, world_size=2)
    print("gloo all-reduce, 2 processes (ms per call: wall / CPU of the process), rank 0 | rank 1")
    for name in SHAPES:
        cells = " | ".join(f"{1000 * results[r][name][0]:.2f} / {1000 * results[r][name][1]:.2f}"
                           for r in (0, 1))
        print(f"  {name}: {cells}")
    torch.set_num_threads(1)
    print("causal attention, one layer on one rank of TP 2, 1024 tokens, 1 thread:")
    print(f"  gpt2-124m (6 heads x 64): {attention_ms(6, 64):.1f} ms")
    print(f"  kraken-125m-2way (6 heads x 113): {attention_ms(6, 113):.1f} ms")
