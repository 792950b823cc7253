import json

import pytest

from krakenlm.cli import main
from krakenlm.models import PRESETS, ConfigError, ModelConfig, get_preset

# spec/kraken.md, "Trained configurations": parameters in millions.
SPEC_KRAKEN_PARAMS_M = {
    "kraken-125m-2way": 124.01, "kraken-125m-4way": 124.48, "kraken-125m-6way": 123.21,
    "kraken-350m-2way": 350.04, "kraken-350m-4way": 353.36, "kraken-760m-4way": 760.94,
}


@pytest.mark.parametrize("name,millions", SPEC_KRAKEN_PARAMS_M.items())
def test_kraken_presets_match_spec_table(name, millions):
    cfg = get_preset(name)
    assert cfg.num_params() == pytest.approx(millions * 1e6, rel=1e-3)
    # and the spec's closed form, term by term
    d, L, e = cfg.degree, cfg.n_layers, cfg.d_model
    assert cfg.num_params() == d * L * (8 * e * e + 2 * e) + 50304 * e + 1024 * e + d * e * e + e


def test_tiny_presets_are_parameter_matched():
    base = get_preset("gpt-tiny").num_params()
    for name in ("parallel-tiny", "kraken-tiny-2way", "kraken-tiny-4way"):
        assert abs(get_preset(name).num_params() - base) / base < 0.02, name


@pytest.mark.parametrize("size", ["1.3b", "6.7b", "13b", "175b"])
@pytest.mark.parametrize("degree", [4, 8])
def test_large_kraken_engines_follow_param_matching_rules(size, degree):
    gpt = get_preset(f"gpt3-{size}")
    # head-count rule (the spec's): total heads kept, parameters within 1 %
    hc = get_preset(f"kraken-gpt3-{size}-{degree}way-hc")
    assert hc.n_layers == gpt.n_layers and hc.total_heads == gpt.n_heads
    assert hc.ffn_dim == 2 * hc.d_model
    assert abs(hc.num_params() - gpt.num_params()) / gpt.num_params() < 0.01
    # engine rule (default): heads of 128 or 64, width a multiple of 64, within 2.5 %
    engine = get_preset(f"kraken-gpt3-{size}-{degree}way")
    assert engine.n_layers == gpt.n_layers and engine.ffn_dim == 2 * engine.d_model
    assert engine.head_dim == (128 if engine.d_model % 128 == 0 else 64)
    assert engine.d_model % 64 == 0
    assert abs(engine.num_params() - gpt.num_params()) / gpt.num_params() < 0.025
    # and no multiple of 64 is closer in parameters
    for e in (engine.d_model - 64, engine.d_model + 64):
        other = engine.replace(d_model=e, n_heads=e // (128 if e % 128 == 0 else 64), ffn_dim=2 * e)
        assert abs(other.num_params() - gpt.num_params()) >= abs(engine.num_params() - gpt.num_params())


def test_gpt2_124m_is_the_known_shape():
    # 12 layers of 12*768^2 + 2*768, embeddings 50304*768 + 1024*768, final norm 768
    assert get_preset("gpt2-124m").num_params() == 12 * (12 * 768**2 + 2 * 768) + 51328 * 768 + 768


def test_config_round_trips_through_json(tmp_path):
    cfg = get_preset("llama3-8b")
    cfg.save(tmp_path / "c.json")
    assert ModelConfig.load(tmp_path / "c.json") == cfg
    (tmp_path / "bad.json").write_text('{"arch": "gpt", "n_layers": 2, "width": 3}')
    with pytest.raises(ConfigError, match=r"unknown model config field\(s\) \['width'\]"):
        ModelConfig.load(tmp_path / "bad.json")


def test_models_json_cli(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["models", "--json"])
    assert exit_info.value.code == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} == set(PRESETS)
    by_name = {r["name"]: r for r in rows}
    assert by_name["kraken-125m-2way"] == {"name": "kraken-125m-2way", "arch": "kraken",
                                           "params": 124012302}


def test_mini8_width_ablations_change_only_their_one_field():
    gpt, k2 = get_preset("gpt-mini8"), get_preset("kraken-mini8-2way")
    assert k2.d_model == 112 and gpt.d_model == 128
    w112 = get_preset("gpt-mini8-w112")
    assert w112 == gpt.replace(d_model=112, ffn_dim=448)
    untied = get_preset("kraken-mini8-2way-untied")
    assert untied == k2.replace(tie_embeddings=False)
    assert untied.num_params() - k2.num_params() == k2.vocab_size * k2.d_model
    h4 = get_preset("kraken-mini8-2way-h4")
    assert h4 == k2.replace(n_heads=gpt.n_heads) and h4.num_params() == k2.num_params()
    head128 = get_preset("kraken-mini8-2way-head128")
    assert head128 == k2.replace(lm_head_width=128)
    assert head128.head_width == gpt.head_width == 128 and k2.head_width == 112
    # a wider tied embedding, its 128 -> 112 projection, a wider conjunction and final norm
    assert head128.num_params() - k2.num_params() == 4096 * 16 + 128 * 112 + 2 * 112 * 16 + 16


def test_mini8_size_trend_presets_span_4x_and_are_parameter_matched():
    sizes = [get_preset(f"gpt-mini8-d{w}" if w != 128 else "gpt-mini8") for w in (64, 128, 160)]
    assert [g.d_model for g in sizes] == [64, 128, 160]
    assert sizes[-1].num_params() / sizes[0].num_params() >= 4
    for width, gpt in zip((64, 128, 160), sizes):
        kraken = get_preset(f"kraken-mini8-d{width}-2way" if width != 128 else "kraken-mini8-2way")
        assert kraken.degree == 2 and kraken.n_layers == gpt.n_layers == 8
        assert abs(kraken.num_params() - gpt.num_params()) / gpt.num_params() < 0.03, width


def test_a_parameter_matched_preset_is_searched_for_when_first_read():
    from krakenlm.models import kraken_engine_for_params
    from krakenlm.models.presets import PresetTable, _build

    table = PresetTable(_build())
    name = "kraken-gpt3-175b-8way"
    assert name in table and not isinstance(table._entries[name], ModelConfig)  # not yet
    found = table[name]
    assert table._entries[name] is found and table[name] is found  # searched once, then kept
    gpt3 = get_preset("gpt3-175b")
    assert found == kraken_engine_for_params(gpt3.num_params(), degree=8, n_layers=96,
                                             context_len=2048, vocab_size=gpt3.vocab_size)
    assert list(table) == list(PRESETS) and dict(table) == dict(PRESETS)


def test_qwen25_32b_is_the_qwen2_shape_without_qkv_biases():
    # per layer: 2 RMSNorms, q and o (5120^2 each), k and v (5120 x 1024 each: 8 KV heads of
    # 128), SwiGLU gate/up/down (3 x 5120 x 27648); untied 152064-token embedding and head;
    # final norm. Qwen2's q/k/v biases are left out of the preset.
    cfg = get_preset("qwen2.5-32b")
    layer = 2 * 5120 + 2 * 5120**2 + 2 * 5120 * 1024 + 3 * 5120 * 27648
    assert cfg.num_params() == 64 * layer + 2 * 152064 * 5120 + 5120
    assert (cfg.head_dim, cfg.kv_heads, cfg.tie_embeddings) == (128, 8, False)


@pytest.mark.parametrize("name,params", [("llama3.1-8b", 8_030_261_248),
                                         ("llama3.1-70b", 70_553_706_496),
                                         ("llama3.1-405b", 405_853_388_800)])
def test_llama31_presets_have_the_released_parameter_counts(name, params):
    # the safetensors totals of meta-llama/Llama-3.1-{8B,70B,405B}
    cfg = get_preset(name)
    assert cfg.num_params() == params
    assert cfg.context_len == 131072 and cfg.rope_scaling.factor == 8.0
    assert cfg.rope_scaling.original_context_len == 8192


def test_rope_scaling_round_trips_through_json_and_is_checked(tmp_path):
    cfg = get_preset("llama3.1-8b")
    cfg.save(tmp_path / "c.json")
    assert ModelConfig.load(tmp_path / "c.json") == cfg
    data = cfg.to_dict()
    data["rope_scaling"] = dict(data["rope_scaling"], high_freq_factor=0.5)
    with pytest.raises(ConfigError, match="rope_scaling.high_freq_factor.*must exceed"):
        ModelConfig.from_dict(data)
    data["rope_scaling"] = {"factor": 8.0}
    with pytest.raises(ConfigError, match="needs factor, low_freq_factor"):
        ModelConfig.from_dict(data)
    with pytest.raises(ConfigError, match="scales RoPE, but position is 'learned'"):
        get_preset("gpt2-124m").replace(rope_scaling=cfg.rope_scaling)
