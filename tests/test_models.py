"""The PyTorch models against references written straight from spec/kraken.md."""

import math

import pytest
import torch
import torch.nn.functional as F

from krakenlm.models import ConfigError, ModelConfig, get_preset
from krakenlm.models.transformer import Shard, Transformer, local_sizes, vocab_range


def tiny(arch: str, **kw) -> ModelConfig:
    base = dict(arch=arch, n_layers=3, d_model=32, n_heads=4, ffn_dim=64, vocab_size=97,
                context_len=24)
    base.update(kw)
    return ModelConfig(**base)


def ln(x, w, b=None):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def mha(x, wqkv, wout, heads):
    """Causal multi-head attention on one stream x [b, t, e] with x @ W weights."""
    b, t, e = x.shape
    q, k, v = (x @ wqkv).split(e, dim=-1)
    split = lambda y: y.view(b, t, heads, e // heads).transpose(1, 2)  # noqa: E731
    att = (split(q) @ split(k).transpose(-1, -2)) / math.sqrt(e // heads)
    att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
    y = (att.softmax(-1) @ split(v)).transpose(1, 2).reshape(b, t, e)
    return y @ wout


def ffn(x, w_up, w_down):
    return F.gelu(x @ w_up, approximate="tanh") @ w_down


def reference_logits(model: Transformer, idx: torch.Tensor) -> torch.Tensor:
    """A per-sub-layer Python loop over the spec's equations, using the model's weights."""
    cfg, sd = model.config, model.state_dict()
    t = idx.shape[1]
    x0 = sd["tok_emb.weight"][idx] + sd["pos_emb.weight"][:t]
    g = lambda name, i: sd[name][i]  # noqa: E731
    if cfg.arch == "kraken":
        xs = [x0] * cfg.degree
        for layer in range(cfg.n_layers):
            p = f"layers.{layer}."
            s = sum(xs)  # S = sum_j x_j of the previous layer
            new = []
            for i, x in enumerate(xs):
                m = mha(ln(x, g(p + "norm1.weight", i)), g(p + "attn.qkv.weight", i),
                        g(p + "attn.out.weight", i), cfg.n_heads)
                a = x + m
                ffn_in = a if layer == 0 else s + m  # layer 1 has no communication
                new.append(a + ffn(ln(ffn_in, g(p + "norm2.weight", i)), g(p + "ffn.up.weight", i),
                                   g(p + "ffn.down.weight", i)))
            xs = new
        z = sum(x @ sd["conj.weight"][i] for i, x in enumerate(xs))
    else:
        z = x0
        for layer in range(cfg.n_layers):
            p = f"layers.{layer}."
            h = ln(z, g(p + "norm1.weight", 0))
            att = mha(h, g(p + "attn.qkv.weight", 0), g(p + "attn.out.weight", 0), cfg.n_heads)
            if cfg.arch == "gpt":
                z = z + att
                z = z + ffn(ln(z, g(p + "norm2.weight", 0)), g(p + "ffn.up.weight", 0),
                            g(p + "ffn.down.weight", 0))
            else:  # parallel: attention and FFN both read the one norm
                z = z + att + ffn(h, g(p + "ffn.up.weight", 0), g(p + "ffn.down.weight", 0))
    return ln(z, sd["norm_f.weight"][0]) @ sd["tok_emb.weight"].t()


@pytest.mark.parametrize("arch,degree", [("gpt", 1), ("parallel", 1), ("kraken", 1),
                                         ("kraken", 2), ("kraken", 4)])
def test_forward_matches_spec_equations(arch, degree):
    torch.manual_seed(0)
    cfg = tiny(arch, degree=degree, ffn_dim=64 if arch != "kraken" else 64)
    model = Transformer(cfg)
    # Non-trivial norm scales, so a swapped norm would show.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    idx = torch.randint(0, cfg.vocab_size, (2, 11))
    torch.testing.assert_close(model(idx), reference_logits(model, idx), rtol=1e-4, atol=1e-5)


def test_kraken_first_layer_sublayers_do_not_interact():
    """Layer 1 has no communication: with one layer, perturbing sub-layer 1's weights must not
    change sub-layer 0's contribution (checked through the conjunction of stream 0 only)."""
    torch.manual_seed(0)
    cfg = tiny("kraken", degree=2, n_layers=1)
    model = Transformer(cfg)
    idx = torch.randint(0, cfg.vocab_size, (1, 8))
    with torch.no_grad():
        model.conj.weight[1].zero_()  # logits now depend on stream 0 alone
        before = model(idx)
        model.layers[0].ffn.up.weight[1].mul_(3.0)
        after = model(idx)
    torch.testing.assert_close(before, after)


@pytest.mark.parametrize("name", ["gpt-tiny", "parallel-tiny", "kraken-tiny-2way",
                                  "kraken-tiny-4way", "kraken-125m-2way", "kraken-125m-6way",
                                  "gpt2-124m", "parallel-124m", "kraken-mini8-2way-head128",
                                  "kraken-mini8-2way-untied"])
def test_module_parameter_count_equals_config(name):
    cfg = get_preset(name)
    with torch.device("meta"):
        model = Transformer(cfg)
    assert model.num_params() == cfg.num_params()


@pytest.mark.parametrize("kw", [dict(bias=True), dict(norm="rmsnorm", activation="swiglu",
                                                      position="rope", n_kv_heads=2,
                                                      tie_embeddings=False)])
@pytest.mark.parametrize("arch,degree", [("gpt", 1), ("kraken", 2)])
def test_optional_features_count_and_run(kw, arch, degree):
    cfg = tiny(arch, degree=degree, **kw)
    model = Transformer(cfg)
    assert model.num_params() == cfg.num_params()
    idx = torch.randint(0, cfg.vocab_size, (2, 9))
    assert model(idx).shape == (2, 9, cfg.vocab_size)


@pytest.mark.parametrize("kw", [dict(), dict(tie_embeddings=False), dict(bias=True)])
def test_widened_head_has_its_width_counts_and_trains_one_step(kw):
    """lm_head_width: the conjunction maps the streams to w, the head has rank w; a tied
    embedding is w wide and projected down to e; one AdamW step moves every parameter."""
    torch.manual_seed(0)
    cfg = tiny("kraken", degree=2, lm_head_width=48, **kw)
    model = Transformer(cfg)
    assert model.num_params() == cfg.num_params()
    assert model.head_weight.shape == (cfg.vocab_size, 48)
    assert torch.linalg.matrix_rank(model.head_weight).item() == 48
    assert model.conj.weight.shape == (2, 32, 48)
    tied = cfg.tie_embeddings
    assert model.tok_emb.weight.shape[1] == (48 if tied else 32)
    assert (model.emb_proj is not None) == tied
    if tied:  # the projection keeps the embedding's scale
        assert model.emb_proj(model.tok_emb.weight).std().item() == pytest.approx(0.02, rel=0.1)
    idx = torch.randint(0, cfg.vocab_size, (2, 9))
    assert model(idx).shape == (2, 9, cfg.vocab_size)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss = model(idx[:, :-1], idx[:, 1:])
    loss.backward()
    optimizer.step()
    assert math.isfinite(loss.item())
    unchanged = [n for n, p in model.named_parameters() if torch.equal(p, before[n])]
    assert unchanged == []


def test_widened_head_is_kraken_only():
    with pytest.raises(ConfigError, match="'lm_head_width': only Kraken"):
        tiny("gpt", lm_head_width=48)
    with pytest.raises(ConfigError, match="'lm_head_width': must be a positive integer"):
        tiny("kraken", degree=2, lm_head_width=0)


def test_init_follows_spec():
    cfg = get_preset("kraken-tiny-2way")
    model = Transformer(cfg)
    out_std = 0.02 / math.sqrt(2 * cfg.n_layers * cfg.degree)
    assert model.layers[0].attn.out.weight.std().item() == pytest.approx(out_std, rel=0.05)
    assert model.layers[0].ffn.down.weight.std().item() == pytest.approx(out_std, rel=0.05)
    assert model.layers[0].attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert model.tok_emb.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert torch.all(model.layers[0].norm1.weight == 1)


def test_weight_decay_groups_matrices_and_embeddings_only():
    model = Transformer(tiny("kraken", degree=2, bias=True))
    decay = model.decay_parameter_names()
    assert "tok_emb.weight" in decay and "pos_emb.weight" in decay and "conj.weight" in decay
    assert "layers.0.attn.qkv.weight" in decay
    assert not any("norm" in n or n.endswith("bias") for n in decay)
    assert "layers.0.norm1.weight" not in decay and "layers.0.attn.qkv.bias" not in decay


def test_loss_equals_cross_entropy_of_logits():
    torch.manual_seed(0)
    model = Transformer(tiny("kraken", degree=2))
    idx = torch.randint(0, 97, (2, 10))
    targets = torch.randint(0, 97, (2, 10))
    targets[0, :3] = -1
    expected = F.cross_entropy(model(idx).flatten(0, 1), targets.flatten(), ignore_index=-1)
    loss = model(idx, targets)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    fused = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    expected.backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(fused[n], p.grad, rtol=1e-4, atol=1e-6, msg=n)


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="n_heads"):
        tiny("gpt", n_heads=5)
    with pytest.raises(ConfigError, match="degree"):
        tiny("gpt", degree=2)
    with pytest.raises(ConfigError, match="arch"):
        tiny("mamba")
    with pytest.raises(ConfigError, match="unknown model preset 'gpt-huge'"):
        get_preset("gpt-huge")


def test_world_size_must_divide_kraken_degree():
    with pytest.raises(ConfigError, match="does not divide the Kraken degree 4.*1, 2, 4"):
        local_sizes(tiny("kraken", degree=4), Shard(0, 3))
    assert local_sizes(tiny("kraken", degree=4), Shard(1, 2)).sublayers == 2


def test_context_overflow_is_an_error():
    model = Transformer(tiny("gpt"))
    with pytest.raises(ConfigError, match="exceed the model's context of 24"):
        model(torch.zeros(1, 25, dtype=torch.long))


@pytest.mark.parametrize("vocab_size", [97, 50257, 50304, 3])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_vocab_blocks_tile_the_vocabulary(vocab_size, world_size):
    """The vocabulary-parallel head's blocks are disjoint, in rank order and cover every id."""
    blocks = [vocab_range(vocab_size, Shard(r, world_size)) for r in range(world_size)]
    assert blocks[0][0] == 0 and blocks[-1][1] == vocab_size
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    sizes = [hi - lo for lo, hi in blocks]
    assert max(sizes) == -(-vocab_size // world_size)  # near-equal: at most ceil(V / p)
