"""`krakenlm generate`: only the generated text goes to stdout; everything else to stderr."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from . import app


@app.command("generate")
def generate_command(
    checkpoint_dir: Path = typer.Option(..., "--checkpoint", help="A checkpoint directory (a `train --out` DIR)."),
    prompt: str = typer.Option(..., "--prompt", help="Text to continue."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", help="Tokens to generate at most."),
    temperature: float = typer.Option(0.8, "--temperature", help="Softmax temperature for sampling."),
    top_k: int = typer.Option(200, "--top-k", help="Sample among the k most likely tokens (0: all)."),
    greedy: bool = typer.Option(False, "--greedy", help="Always take the most likely token (deterministic)."),
    seed: int = typer.Option(None, "--seed", help="Seed for sampling (same seed, same text)."),
    world_size: int = typer.Option(None, "--world-size", help="Shard the model over N processes spawned here (under torchrun: its processes)."),
    timeout_s: float = typer.Option(300.0, "--timeout", help="With --world-size or torchrun: seconds to wait for a peer process."),
    comm_backend: str = typer.Option("auto", "--comm-backend", help="With --world-size or torchrun: all-reduces through auto (shared memory on CPU when all ranks are on this host, else gloo/NCCL), shm, gloo or nccl."),
    vocab_parallel_head: bool = typer.Option(False, "--vocab-parallel-head", help="With --world-size or torchrun: each rank computes 1/N of the vocabulary's logits (one more collective per token, less LM-head work per rank)."),
) -> None:
    """Continue a prompt with a trained model (KV-cached sampling)."""
    import torch

    from ..data.tokenizer import Tokenizer
    from ..distributed.engine import generate_sharded
    from ..distributed.launch import under_torchrun
    from ..evaluation.generate import SamplingConfig, generate
    from ..training.checkpoint import load_model
    from ..training.runtime import pick_device

    sampling = SamplingConfig(max_new_tokens=max_new_tokens, temperature=temperature,
                              top_k=top_k or None, greedy=greedy, seed=seed)
    tokenizer = Tokenizer()
    ids = tokenizer.encode(prompt)
    if world_size is not None or under_torchrun():
        new_ids = generate_sharded(checkpoint_dir, ids, sampling, world_size=world_size,
                                   timeout_s=timeout_s, comm_backend=comm_backend,
                                   vocab_parallel_head=vocab_parallel_head)
        if new_ids is None:
            return  # a torchrun rank other than 0: rank 0 prints
    else:
        device = pick_device()
        model = load_model(checkpoint_dir, device=device)
        prompt_ids = torch.tensor([ids], dtype=torch.long, device=device)
        new_ids = generate(model, prompt_ids, sampling)[0].tolist()
    sys.stdout.write(tokenizer.decode(new_ids))
    sys.stdout.write("\n")
