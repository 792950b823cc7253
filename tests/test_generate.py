import pytest
import torch

from krakenlm.errors import KrakenError
from krakenlm.evaluation.generate import SamplingConfig, generate
from krakenlm.models import ModelConfig
from krakenlm.models.transformer import Transformer


def model_for(arch: str, degree: int = 1, **kw) -> Transformer:
    torch.manual_seed(1)
    cfg = ModelConfig(arch=arch, n_layers=2, d_model=32, n_heads=4, ffn_dim=64, degree=degree,
                      vocab_size=101, context_len=40, **kw)
    return Transformer(cfg)


@pytest.mark.parametrize("arch,degree,kw", [("gpt", 1, {}), ("parallel", 1, {}),
                                            ("kraken", 2, {}), ("kraken", 4, {}),
                                            ("gpt", 1, dict(position="rope", n_kv_heads=2))])
def test_greedy_with_cache_equals_without(arch, degree, kw):
    model = model_for(arch, degree, **kw)
    prompt = torch.randint(0, 101, (2, 7))
    sampling = SamplingConfig(max_new_tokens=20, greedy=True)
    with_cache = generate(model, prompt, sampling, use_cache=True)
    without = generate(model, prompt, sampling, use_cache=False)
    assert with_cache.shape == (2, 20)
    assert torch.equal(with_cache, without)


def test_cached_logits_equal_full_forward():
    model = model_for("kraken", 2)
    seq = torch.randint(0, 101, (1, 12))
    full = model(seq)
    cache = model.new_cache(1, 12)
    parts = [model(seq[:, :5], cache=cache, start_pos=0),
             model(seq[:, 5:9], cache=cache, start_pos=5),  # a chunk after cached context
             model(seq[:, 9:10], cache=cache, start_pos=9),
             model(seq[:, 10:], cache=cache, start_pos=10)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-4, atol=1e-5)


def test_sampling_is_reproducible_with_seed_and_respects_top_k():
    model = model_for("gpt")
    prompt = torch.randint(0, 101, (1, 4))
    s = SamplingConfig(max_new_tokens=15, temperature=0.8, top_k=5, seed=123)
    a, b = generate(model, prompt, s), generate(model, prompt, s)
    assert torch.equal(a, b)
    # every sampled token is among the 5 most likely at its step
    tokens = torch.cat([prompt, a], dim=1)
    logits = model(tokens)
    for step in range(15):
        top5 = logits[0, 3 + step].topk(5).indices
        assert a[0, step] in top5


def test_prompt_longer_than_context_is_a_clear_error():
    model = model_for("gpt")
    with pytest.raises(KrakenError, match="prompt has 41 tokens but the model's context is 40"):
        generate(model, torch.zeros(1, 41, dtype=torch.long), SamplingConfig(max_new_tokens=1))
    with pytest.raises(KrakenError, match="use --max-new-tokens 10 or less"):
        generate(model, torch.zeros(1, 30, dtype=torch.long), SamplingConfig(max_new_tokens=11))


def test_non_finite_logits_are_a_clear_error_not_a_sampling_crash():
    from krakenlm.evaluation.generate import next_token

    logits = torch.zeros(1, 10)
    logits[0, 4] = float("nan")
    for sampling in (SamplingConfig(greedy=True), SamplingConfig(temperature=0.7, top_k=3)):
        with pytest.raises(KrakenError, match="the model produced non-finite logits"):
            next_token(logits, sampling, None)


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("nan"), float("inf")])
def test_sampling_temperature_must_be_finite_and_positive(temperature):
    with pytest.raises(KrakenError, match="temperature must be > 0"):
        SamplingConfig(temperature=temperature)
