"""Model graphs: communication structure of the three architectures, sharding, memory."""

import pytest

from krakenlm.hardware import load_system
from krakenlm.models import get_preset
from krakenlm.simulator.graph import SimulationError, model_graphs
from krakenlm.simulator.kernels.template.attention import flash_decode
from krakenlm.simulator.memory import ModelDoesNotFit, kv_cache_bytes
from krakenlm.simulator.run import arch_variant, simulate

A100X4 = load_system("a100-80gb-x4")
GPT = get_preset("gpt3-13b")  # 40 layers


def _collectives(cfg, tp, phase="prefill"):
    """(blocking, overlapped) all-reduces of one forward pass, judged from the graph: an
    all-reduce overlaps when compute that does not wait for it follows it in program order."""
    blocking = overlapped = 0
    for g in model_graphs(cfg, tp, 2, 16 if phase == "prefill" else 1, 16, phase, 2):
        names = [o.name for o in g.ops]
        for i, op in enumerate(g.ops):
            if op.model != "collective" or op.args[0] != "all_reduce":
                continue
            waiter = next(j for j, o in enumerate(g.ops) if op.name in o.deps)
            independent = [o for o in g.ops[:waiter] if o.stream == "compute"
                           and names.index(o.name) > max([names.index(d) for d in op.deps] or [-1])]
            if independent:
                overlapped += g.count
            else:
                blocking += g.count
    return blocking, overlapped


def test_collective_structure_of_the_three_architectures():
    L = GPT.n_layers
    assert _collectives(GPT, 4) == (2 * L, 0)
    assert _collectives(GPT.replace(arch="parallel"), 4) == (L, 0)
    kraken = arch_variant(GPT, "kraken", 4)
    assert kraken.degree == 4 and kraken.n_layers == L
    assert _collectives(kraken, 4) == (1, L - 1)
    assert _collectives(kraken, 4, "decode") == (1, L - 1)


def test_kraken_allreduce_moves_tokens_times_e_values():
    kraken = get_preset("kraken-gpt3-13b-4way")
    graphs = model_graphs(kraken, 4, 2, 16, 16, "prefill", 2)
    (ar,) = [o for o in graphs[2].ops if o.model == "collective"]
    assert ar.args == ("all_reduce", 2 * 16 * kraken.d_model * 2, 4)
    assert not [o for o in graphs[1].ops if o.model == "collective"]  # layer 1: none


def test_kraken_hides_its_allreduces_gpt_does_not():
    kraken = get_preset("kraken-gpt3-13b-4way")
    rk = simulate(kraken, A100X4, 4, 8, 512, 2)
    rg = simulate(GPT, A100X4, 4, 8, 512, 2)
    layer = rk.layer_categories["prefill"]
    assert layer.get("exposed AllReduce", 0.0) == 0.0
    assert layer["GEMM overlapped with AllReduce"] > 0
    assert rg.layer_categories["prefill"]["exposed AllReduce"] > 0
    # only the final conjunction reduce is exposed for Kraken
    assert rk.prefill.ops["allreduce_conjunction"]["count"] == 1


def test_tp_not_dividing_heads_is_an_error():
    with pytest.raises(SimulationError, match="does not divide the model's 40 attention heads"):
        simulate(GPT, A100X4, 3, 1, 16, 2)
    with pytest.raises(SimulationError, match="must divide the degree 4"):
        simulate(get_preset("kraken-gpt3-13b-4way"), A100X4, 3, 1, 16, 2)


def test_model_that_does_not_fit_reports_the_numbers():
    with pytest.raises(ModelDoesNotFit) as exc:
        simulate(get_preset("gpt3-175b"), A100X4, 4, 8, 1024, 1024, model_name="gpt3-175b")
    msg = str(exc.value)
    assert "gpt3-175b does not fit on a100-80gb-x4" in msg
    assert "weights 88.3 GB" in msg and "KV cache 19.3 GB" in msg and "> 85.9 GB" in msg


def test_gqa_reduces_kv_bytes_by_the_group_factor():
    llama = get_preset("llama2-70b")  # 64 heads, 8 KV heads
    mha = llama.replace(n_kv_heads=None)
    assert kv_cache_bytes(mha, 8, 4, 1000, "fp16") == 8 * kv_cache_bytes(llama, 8, 4, 1000, "fp16")
    dev = A100X4.device
    q_and_o = 2 * 4 * 8 * 128 * 2
    gqa = flash_decode(dev, 4, 8, 1, 4096, 128).bytes - q_and_o
    full = flash_decode(dev, 4, 8, 8, 4096, 128).bytes - q_and_o
    assert full == pytest.approx(8 * gqa)
    assert flash_decode(dev, 4, 8, 1, 4096, 128).time_s < flash_decode(dev, 4, 8, 8, 4096, 128).time_s


def test_every_decode_step_is_simulated_with_a_growing_cache():
    r = simulate(get_preset("gpt3-1.3b"), A100X4, 2, 1, 100, 6)
    assert r.decode.ops["attention"]["count"] == 5 * 24
    short = simulate(get_preset("gpt3-1.3b"), A100X4, 2, 1, 100, 2).tpot_s
    long_context = get_preset("gpt3-1.3b").replace(context_len=8192)
    long = simulate(long_context, A100X4, 2, 1, 8000, 2).tpot_s
    assert long > short


def test_categories_add_up_and_roofline_is_faster():
    cfg = get_preset("llama3-8b")
    r = simulate(cfg, A100X4, 2, 4, 256, 4)
    assert sum(r.prefill.categories.values()) == pytest.approx(r.ttft_s)
    assert r.e2e_s == pytest.approx(r.ttft_s + 3 * r.tpot_s)
    roof = simulate(cfg, A100X4, 2, 4, 256, 4, mode="roofline")
    assert roof.ttft_s < r.ttft_s and roof.tpot_s < r.tpot_s


def test_unfused_attention_is_slower_for_long_prompts():
    cfg = get_preset("gpt3-6.7b")
    fused = simulate(cfg, A100X4, 4, 4, 2048, 1)
    unfused = simulate(cfg, A100X4, 4, 4, 2048, 1, attention="unfused")
    assert unfused.prefill.categories["attention"] > fused.prefill.categories["attention"]
