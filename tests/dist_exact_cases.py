"""Used by test_dist_exact.py (over gloo and through shared memory): every
architecture sharded over N processes against the single-device model.

Each (world size, backend) is spawned once per test module; every rank runs all cases and ships
its results back, and the comparisons run in the test process.
"""

import torch

from krakenlm.distributed.comm import ASYNC, BLOCKING
from krakenlm.distributed.engine import build_local_model, random_state_dict
from krakenlm.distributed.launch import run_ranks
from krakenlm.evaluation.generate import SamplingConfig, generate
from krakenlm.models import ModelConfig
from krakenlm.models.transformer import Transformer

N_LAYERS = 3
BASE = dict(n_layers=N_LAYERS, d_model=32, n_heads=4, ffn_dim=64, vocab_size=97, context_len=32)
# (name, config): every architecture, Kraken with one and several sub-layers per rank, and the
# optional features whose sharding has its own rules (biases, SwiGLU halves, GQA, RoPE).
CASES = {
    "gpt": ModelConfig(arch="gpt", **BASE),
    "parallel": ModelConfig(arch="parallel", **BASE),
    "kraken-4way": ModelConfig(arch="kraken", degree=4, **BASE),
    "kraken-2way-bias": ModelConfig(arch="kraken", degree=2, bias=True, **BASE),
    "gpt-llama-style": ModelConfig(arch="gpt", **{**BASE, "n_heads": 8, "n_kv_heads": 4},
                                   norm="rmsnorm", activation="swiglu", position="rope",
                                   tie_embeddings=False),
    "parallel-bias-swiglu": ModelConfig(arch="parallel", bias=True, activation="swiglu", **BASE),
}
# Cases run again with the vocabulary-parallel LM head: name -> the case whose weights and
# single-device outputs they share. The vocabulary (97) is divisible by neither 2 nor 4, so the
# last rank's block is shorter. One more all-reduce per forward pass: the logits.
VOCAB_PARALLEL_CASES = {"gpt+vocab-head": "gpt", "kraken-4way+vocab-head": "kraken-4way",
                        "gpt-llama-style+vocab-head": "gpt-llama-style"}
PROMPT = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(0))
GREEDY = SamplingConfig(max_new_tokens=12, greedy=True)
SAMPLED = SamplingConfig(max_new_tokens=12, temperature=1.5, top_k=20, seed=7)


def _nudge_norms(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Norm scales and biases away from 1 and 0, so a mis-sharded norm or bias would show."""
    gen = torch.Generator().manual_seed(1)
    return {name: t + 0.3 * torch.randn(t.shape, generator=gen)
            if ("norm" in name or name.endswith("bias")) else t for name, t in state.items()}


def full_weights(name: str) -> dict[str, torch.Tensor]:
    return _nudge_norms(random_state_dict(CASES[name], seed=3))


def base_case(name: str) -> str:
    return VOCAB_PARALLEL_CASES.get(name, name)


def _rank_runs_every_case(ctx):
    out = {}
    for name in cases_for(ctx.world_size):
        model = build_local_model(ctx, CASES[base_case(name)],
                                  state_dict=full_weights(base_case(name)),
                                  vocab_parallel_head=name in VOCAB_PARALLEL_CASES)
        comm = model.comm
        with torch.no_grad():
            logits = model(PROMPT)
            prefill_counts = dict(comm.counts)
            comm.reset_stats()
            cache = model.new_cache(2, 10)
            model(PROMPT, cache=cache)
            comm.reset_stats()
            model(PROMPT[:, :1], cache=cache, start_pos=9)
            decode_counts = dict(comm.counts)
        out[name] = dict(logits=logits, prefill=prefill_counts, decode=decode_counts,
                         greedy=generate(model, PROMPT, GREEDY),
                         sampled=generate(model, PROMPT, SAMPLED),
                         comm_backend=ctx.comm_backend, comm_class=type(comm).__name__)
    return out


def run_world(world_size: int, comm_backend: str):
    return world_size, run_ranks(_rank_runs_every_case, world_size=world_size, timeout_s=120,
                                 comm_backend=comm_backend)


def single_device_results():
    out = {}
    for name, config in CASES.items():
        model = Transformer(config)
        model.load_state_dict(full_weights(name))
        model.eval()
        with torch.no_grad():
            out[name] = dict(logits=model(PROMPT), greedy=generate(model, PROMPT, GREEDY),
                             sampled=generate(model, PROMPT, SAMPLED))
    for name, base in VOCAB_PARALLEL_CASES.items():
        out[name] = out[base]  # the same function of the same weights, computed another way
    return out


def cases_for(world_size):
    return [n for n in [*CASES, *VOCAB_PARALLEL_CASES]
            if CASES[base_case(n)].arch != "kraken" or CASES[base_case(n)].degree % world_size == 0]


# ------------------------------------------------------------------- checks (both modules)
def check_every_rank_reports_every_case(world):
    world_size, results = world
    assert sorted(results) == list(range(world_size))
    for rank_results in results.values():
        assert sorted(rank_results) == sorted(cases_for(world_size))


def check_prefill_logits_match_single_device(world, single_device):
    _, results = world
    for rank, rank_results in results.items():
        for name, got in rank_results.items():
            torch.testing.assert_close(got["logits"], single_device[name]["logits"],
                                       rtol=1e-4, atol=1e-4, msg=f"{name} rank {rank}")


def check_tokens_match_single_device(world, single_device):
    _, results = world
    for rank, rank_results in results.items():
        for name, got in rank_results.items():
            assert torch.equal(got["greedy"], single_device[name]["greedy"]), (name, rank)
            assert torch.equal(got["sampled"], single_device[name]["sampled"]), (name, rank)


def check_collectives_per_forward_pass(world):
    """gpt: 2L blocking; parallel: L blocking; Kraken: L-1 async (overlapped) + 1 blocking;
    one more blocking one (the logits) with the vocabulary-parallel head."""
    _, results = world
    expected = {"gpt": {BLOCKING: 2 * N_LAYERS}, "parallel": {BLOCKING: N_LAYERS},
                "kraken": {BLOCKING: 1, ASYNC: N_LAYERS - 1}}
    for rank_results in results.values():
        for name, got in rank_results.items():
            want = dict(expected[CASES[base_case(name)].arch])
            if name in VOCAB_PARALLEL_CASES:
                want[BLOCKING] += 1
            assert got["prefill"] == want, name
            assert got["decode"] == want, name
