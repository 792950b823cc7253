"""Training throughput: krakenlm's models against Hugging Face GPT2LMHeadModel, side by side.

Every model trains (forward, backward, AdamW step) on the same random token batches, with the
same dtype policy and thread count, in one process. Models are measured in interleaved rounds
(A B C ... A B C ...) so that a slow patch of the machine hits all of them alike; the reported
figure is the median over rounds. MFU divides the model FLOPs per second (6N + 12·L·T·e per
token, the PaLM convention, from `ModelConfig.forward_flops_per_token`) by the rate of a large
matmul of the same dtype timed in the same run.

    python benchmarks/train_throughput.py --rounds 5 --steps 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from krakenlm.interop.native import config_from_native
from krakenlm.models import get_preset
from krakenlm.models.transformer import Transformer
from krakenlm.training.optim import build_optimizer


def matmul_peak_flops(dtype: torch.dtype, n: int = 4096, repeats: int = 5) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n**3 * repeats / (time.perf_counter() - start)


class Ours:
    def __init__(self, name: str, config):
        self.name, self.config = name, config
        self.model = Transformer(config)
        self.opt = build_optimizer(self.model, lr=1e-4, weight_decay=0.1, betas=(0.9, 0.95))

    def step(self, x, y, amp):
        with amp():
            loss = self.model(x, y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


class HuggingFaceGPT2:
    def __init__(self, config):
        import transformers
        hf_config = transformers.GPT2Config(
            n_layer=config.n_layers, n_embd=config.d_model, n_head=config.n_heads,
            n_inner=config.ffn_dim, vocab_size=config.vocab_size, n_positions=config.context_len,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new",
            attn_implementation="sdpa")
        self.name = "HF GPT2LMHeadModel"
        self.config = config_from_native(hf_config.to_dict(), "GPT2Config")
        self.model = transformers.GPT2LMHeadModel(hf_config)
        self.model.train()
        # Same optimizer as ours (fused AdamW, same grouping rule) so only the model differs.
        decay = [p for n, p in self.model.named_parameters() if p.dim() >= 2]
        rest = [p for n, p in self.model.named_parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                      {"params": rest, "weight_decay": 0.0}],
                                     lr=1e-4, betas=(0.9, 0.95), fused=True)

    def step(self, x, y, amp):
        with amp():
            loss = self.model(input_ids=x, labels=x).loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--no-hf", action="store_true", help="skip transformers")
    parser.add_argument("--json", help="write the rows here as JSON")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32

    def amp():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16)

    tiny = get_preset("gpt-tiny")
    models = []
    if not args.no_hf:
        models.append(HuggingFaceGPT2(tiny))
    models += [Ours("ours gpt-tiny + biases (= HF's architecture)", tiny.replace(bias=True)),
               Ours("ours gpt-tiny", tiny)]
    for name in ("parallel-tiny", "kraken-tiny-2way", "kraken-tiny-4way"):
        models.append(Ours(f"ours {name}", get_preset(name)))

    x = torch.randint(0, 50257, (args.batch_size, args.seq_len))
    y = torch.roll(x, -1, dims=1)
    for m in models:  # warm-up: allocator, oneDNN kernels, optimizer state
        for _ in range(2):
            m.step(x, y, amp)
    rates: dict[str, list[float]] = {m.name: [] for m in models}
    tokens = args.batch_size * args.seq_len * args.steps
    for _ in range(args.rounds):
        for m in models:
            start = time.perf_counter()
            for _ in range(args.steps):
                m.step(x, y, amp)
            rates[m.name].append(tokens / (time.perf_counter() - start))
    peak = matmul_peak_flops(dtype)

    rows = []
    for m in models:
        tok_s = statistics.median(rates[m.name])
        flops_per_token = 3 * m.config.forward_flops_per_token(args.seq_len)
        rows.append({"model": m.name, "params": sum(p.numel() for p in m.model.parameters()),
                     "tokens_per_s": tok_s, "mfu": tok_s * flops_per_token / peak})
    hf = rows[0]["tokens_per_s"] if not args.no_hf else None
    ours_gpt = next(r for r in rows if r["model"] == "ours gpt-tiny")["tokens_per_s"]
    print(f"batch {args.batch_size} x {args.seq_len} tokens, {args.dtype}, {args.threads} threads, "
          f"median of {args.rounds} rounds x {args.steps} steps; matmul peak "
          f"{peak / 1e9:,.0f} GFLOP/s ({args.dtype}, 4096^3)\n")
    print("| model | params | tokens/s | vs HF | vs our gpt-tiny | MFU |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        vs_hf = f"{r['tokens_per_s'] / hf:.2f}x" if hf else "-"
        print(f"| {r['model']} | {r['params'] / 1e6:.2f}M | {r['tokens_per_s']:,.0f} | {vs_hf} | "
              f"{r['tokens_per_s'] / ours_gpt:.2f}x | {100 * r['mfu']:.1f} % |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "matmul_peak_flops": peak, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
