"""`krakenlm generate`: only the generated text goes to stdout; everything else to stderr."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import typer

from ..errors import KrakenError
from . import app
from .train import one_value


@app.command("generate")
def generate_command(
    checkpoint_dirs: list[Path] = typer.Option(..., "--checkpoint", metavar="DIR", help="A run directory (a `train --out` DIR: its current checkpoint) or one of its checkpoints/step-* directories."),
    prompt: str = typer.Option(..., "--prompt", help="Text to continue."),
    tokenizer_name: str = typer.Option(None, "--tokenizer", help="Check that the checkpoint was trained with this tokenizer (its own is always used)."),
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
    from ..evaluation.generate import SamplingConfig

    checkpoint_dir = one_value(checkpoint_dirs, "--checkpoint", required=True)
    check_generate_options(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                           greedy=greedy, world_size=world_size, timeout_s=timeout_s)
    sampling = SamplingConfig(max_new_tokens=max_new_tokens, temperature=temperature,
                              top_k=top_k or None, greedy=greedy, seed=seed)
    text = continuation(checkpoint_dir, prompt, tokenizer_name, sampling, world_size, timeout_s,
                        comm_backend, vocab_parallel_head)
    if text is not None:  # None: a torchrun rank other than 0 (rank 0 prints)
        sys.stdout.write(text)
        sys.stdout.write("\n")


def continuation(checkpoint_dir: Path, prompt: str, tokenizer_name: str | None, sampling,
                 world_size: int | None, timeout_s: float, comm_backend: str,
                 vocab_parallel_head: bool) -> str | None:
    """The generated text: sharded over processes with --world-size or under torchrun (None
    on a rank other than 0), else on this process's device."""
    import torch

    from ..data.vocab import prompt_ids
    from ..distributed.engine import generate_sharded
    from ..evaluation.generate import generate
    from ..runtime.bootstrap import under_torchrun
    from ..runtime.device import pick_device
    from ..runtime.model_and_tokenizer import checkpoint_tokenizer, load_model_and_tokenizer

    if world_size is not None or under_torchrun():
        # each rank loads its shard of the weights; the prompt is encoded here, once
        tokenizer = checkpoint_tokenizer(checkpoint_dir, expected=tokenizer_name)
        ids = prompt_ids(tokenizer, prompt)
        new_ids = generate_sharded(checkpoint_dir, ids, sampling, world_size=world_size,
                                   timeout_s=timeout_s, comm_backend=comm_backend,
                                   vocab_parallel_head=vocab_parallel_head)
        if new_ids is None:
            return None
    else:
        device = pick_device()
        model, tokenizer = load_model_and_tokenizer(checkpoint_dir, device=device,
                                                    expected_tokenizer=tokenizer_name)
        prompt_tensor = torch.tensor([prompt_ids(tokenizer, prompt)], dtype=torch.long,
                                     device=device)
        new_ids = generate(model, prompt_tensor, sampling)[0].tolist()
    return tokenizer.decode(new_ids)


def check_generate_options(*, max_new_tokens: int, temperature: float, top_k: int, greedy: bool,
                           world_size: int | None, timeout_s: float) -> None:
    """Ranges of the options, named as the command line spells them."""
    if max_new_tokens < 1:
        raise KrakenError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    if not greedy and not (math.isfinite(temperature) and temperature > 0):
        raise KrakenError(f"--temperature must be a finite number > 0, got {temperature} (use "
                          "--greedy for deterministic decoding)")
    if top_k < 0:
        raise KrakenError(f"--top-k must be >= 0 (0: all tokens), got {top_k}")
    if world_size is not None and world_size < 1:
        raise KrakenError(f"--world-size must be >= 1, got {world_size}")
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise KrakenError(f"--timeout must be a finite number of seconds > 0, got {timeout_s}")
