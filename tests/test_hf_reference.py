"""Our standard block against Hugging Face's GPT-2 implementation, token for token."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from krakenlm.evaluation.generate import SamplingConfig, generate  # noqa: E402
from krakenlm.interop.hf_import import convert  # noqa: E402
from krakenlm.interop.native import config_from_native  # noqa: E402


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    hf_config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=211,
                                        n_positions=48, resid_pdrop=0.0, embd_pdrop=0.0,
                                        attn_pdrop=0.0)
    hf = transformers.GPT2LMHeadModel(hf_config).eval()
    with torch.no_grad():  # HF initialises biases and LN to 0/1: make them informative
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    data = hf_config.to_dict()
    ours = convert(data, config_from_native(data, "GPT2Config"), hf.state_dict(), "GPT2LMHeadModel")
    return hf, ours


def test_logits_match_transformers_gpt2(pair):
    hf, ours = pair
    idx = torch.randint(0, 211, (3, 40))
    with torch.no_grad():
        torch.testing.assert_close(ours(idx), hf(idx).logits, rtol=1e-4, atol=1e-4)


def test_loss_matches_transformers_gpt2(pair):
    hf, ours = pair
    idx = torch.randint(0, 211, (2, 30))
    with torch.no_grad():
        hf_loss = hf(idx, labels=idx).loss  # HF shifts labels internally
        targets = torch.cat([idx[:, 1:], torch.full((2, 1), -1)], dim=1)
        torch.testing.assert_close(ours(idx, targets), hf_loss, rtol=1e-5, atol=1e-5)


def test_greedy_generation_matches_transformers_gpt2(pair):
    hf, ours = pair
    prompt = torch.randint(0, 211, (1, 6))
    expected = hf.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)[:, 6:]
    got = generate(ours, prompt, SamplingConfig(max_new_tokens=12, greedy=True))
    assert torch.equal(got, expected)
