"""Hugging Face config.json -> ModelConfig (the simulator's model input)."""

import json

import pytest

from krakenlm.models import ConfigError, get_preset
from krakenlm.models.hf import load_model_config

LLAMA2_70B = {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
              "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 80,
              "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
              "tie_word_embeddings": False}


def _write(tmp_path, data):
    path = tmp_path / "config.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_llama_config_matches_preset(tmp_path):
    cfg = load_model_config(_write(tmp_path, LLAMA2_70B))
    assert cfg == get_preset("llama2-70b")


def test_bloom_and_gpt2(tmp_path):
    bloom = load_model_config(_write(tmp_path, {"model_type": "bloom", "n_layer": 70,
                                                "hidden_size": 14336, "n_head": 112,
                                                "vocab_size": 250880}))
    assert bloom.num_params() == get_preset("bloom-176b").num_params()
    gpt2 = load_model_config(_write(tmp_path, {"model_type": "gpt2", "n_layer": 12, "n_embd": 768,
                                               "n_head": 12, "vocab_size": 50257,
                                               "n_positions": 1024}))
    assert gpt2.ffn_dim == 3072 and gpt2.bias


def test_neox_parallel_residual_is_the_parallel_block(tmp_path):
    cfg = load_model_config(_write(tmp_path, {"model_type": "gpt_neox", "num_hidden_layers": 2,
                                              "hidden_size": 64, "num_attention_heads": 4,
                                              "intermediate_size": 256, "vocab_size": 100}))
    assert cfg.arch == "parallel"


def test_malformed_json_names_file_and_line(tmp_path):
    with pytest.raises(ConfigError, match=r"config\.json is not valid JSON.*line 1"):
        load_model_config(_write(tmp_path, '{"model_type": "llama",'))


def test_missing_field_is_named(tmp_path):
    data = dict(LLAMA2_70B)
    del data["intermediate_size"]
    with pytest.raises(ConfigError, match="missing field 'intermediate_size'"):
        load_model_config(_write(tmp_path, data))


def test_unsupported_family(tmp_path):
    with pytest.raises(ConfigError, match="unsupported model_type 't5'"):
        load_model_config(_write(tmp_path, {"model_type": "t5"}))


MIXTRAL_AS_LLAMA = dict(LLAMA2_70B, num_local_experts=8, num_experts_per_tok=2)


@pytest.mark.parametrize("fields", [{"num_local_experts": 8, "num_experts_per_tok": 2},
                                    {"num_experts": 60}, {"n_routed_experts": 64}])
def test_a_mixture_of_experts_is_refused_not_simulated_dense(tmp_path, fields):
    with pytest.raises(ConfigError, match="a mixture-of-experts model .*not modelled"):
        load_model_config(_write(tmp_path, dict(LLAMA2_70B, **fields)))


def test_a_single_expert_or_a_null_field_is_dense(tmp_path):
    for fields in ({"num_local_experts": 1}, {"num_experts": None}, {"num_experts": 0}):
        cfg = load_model_config(_write(tmp_path, dict(LLAMA2_70B, **fields)))
        assert cfg == get_preset("llama2-70b")


@pytest.mark.parametrize("preset", ["kraken-tiny-2way", "parallel-tiny"])
def test_krakenlms_own_export_is_a_model_config(tmp_path, capsys, preset):
    """`export hf` writes a Kraken or parallel-block model as model_type "krakenlm" (remote
    code): the simulator and `train --config` read it back as the same model."""
    torch = pytest.importorskip("torch")
    from krakenlm.cli import main
    from krakenlm.cli.train import resolve_model_config
    from krakenlm.interop.hf_export import export_hf
    from krakenlm.models.transformer import Transformer
    from krakenlm.runtime.checkpoint import save_checkpoint

    torch.manual_seed(0)
    save_checkpoint(tmp_path / "ckpt", Transformer(get_preset(preset)), None, {"step": 0})
    export_hf(tmp_path / "ckpt", tmp_path / "hf")
    config_json = tmp_path / "hf" / "config.json"
    assert json.loads(config_json.read_text())["model_type"] == "krakenlm"
    assert load_model_config(config_json) == get_preset(preset)
    assert resolve_model_config(None, config_json) == get_preset(preset)
    with pytest.raises(SystemExit) as exc:
        main(["sim", "run", "--system", "a100-80gb-x8", "--model", str(config_json), "--tp", "2",
              "--prompt", "8", "--gen", "2", "--json"])
    assert exc.value.code == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["ttft_s"] > 0
