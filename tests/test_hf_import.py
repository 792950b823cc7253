"""`krakenlm import hf`: local GPT-2 / Llama / Mistral models become krakenlm runs with the same
logits; export(import(x)) gives x's logits back; what does not map exactly is refused."""

import json
import re

import pytest
import torch
from safetensors.torch import load_file, save_file

transformers = pytest.importorskip("transformers")

from krakenlm.cli import main  # noqa: E402
from krakenlm.evaluation.generate import SamplingConfig, generate  # noqa: E402
from krakenlm.interop.hf_export import export_hf  # noqa: E402
from krakenlm.interop.hf_import import import_hf  # noqa: E402
from krakenlm.models.config import ModelConfig  # noqa: E402
from krakenlm.models.transformer import Transformer  # noqa: E402
from krakenlm.training.checkpoint import load_model, read_train_state, save_checkpoint  # noqa: E402

VOCAB = 50304  # covers GPT-2's tokenizer, so `krakenlm generate` can decode


def _perturb(model):
    with torch.no_grad():  # HF starts norms at 1 and biases at 0: make every tensor informative
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def gpt2(tie: bool = True):
    torch.manual_seed(0)
    return _perturb(transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, n_inner=48, vocab_size=VOCAB, n_positions=64,
        tie_word_embeddings=tie)))


def llama(**extra):
    torch.manual_seed(1)
    fields = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=40, vocab_size=VOCAB,
                  max_position_embeddings=64, rope_theta=5000.0, rms_norm_eps=1e-5)
    fields.update(extra)
    return _perturb(transformers.LlamaForCausalLM(transformers.LlamaConfig(**fields)))


def mistral(**extra):
    torch.manual_seed(2)
    fields = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                  num_key_value_heads=1, intermediate_size=40, vocab_size=VOCAB,
                  max_position_embeddings=64, sliding_window=None)
    fields.update(extra)
    return _perturb(transformers.MistralForCausalLM(transformers.MistralConfig(**fields)))


MODELS = {
    "gpt2": gpt2, "gpt2-untied": lambda: gpt2(tie=False), "llama": llama,
    "llama-bias-tied": lambda: llama(attention_bias=True, mlp_bias=True,
                                     tie_word_embeddings=True, num_key_value_heads=4),
    "mistral": mistral,
}


def _tokens(n_rows=2, n=30, seed=0):
    return torch.randint(0, VOCAB, (n_rows, n), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module", params=sorted(MODELS))
def imported(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    hf = MODELS[request.param]()
    hf.save_pretrained(root / "hf")
    result = import_hf(root / "hf", root / "run")
    return request.param, hf, result, root


def test_imported_run_has_the_same_logits(imported):
    _, hf, result, _ = imported
    ours = load_model(result.out_dir)
    idx = _tokens()
    with torch.no_grad():
        torch.testing.assert_close(ours(idx), hf(idx).logits, rtol=1e-5, atol=1e-5)


def test_imported_run_generates_like_transformers(imported):
    _, hf, result, _ = imported
    ours = load_model(result.out_dir)
    prompt = _tokens(1, 6, seed=1)
    expected = hf.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)[:, 6:]
    assert torch.equal(generate(ours, prompt, SamplingConfig(max_new_tokens=12, greedy=True)),
                       expected)


def test_imported_run_is_a_step_zero_checkpoint(imported):
    name, _, result, root = imported
    state = read_train_state(result.out_dir)
    assert state["step"] == 0 and state["model_type"] == name.split("-")[0]
    assert state["imported_from"] == str((root / "hf").resolve())


def test_export_of_import_gives_the_original_logits(imported):
    name, hf, result, root = imported
    back = export_hf(result.out_dir, root / "back", force=True)
    assert back.family == ("gpt2" if name.startswith("gpt2") else "llama")
    again = transformers.AutoModelForCausalLM.from_pretrained(root / "back").eval()
    idx = _tokens(seed=2)
    with torch.no_grad():
        torch.testing.assert_close(again(idx).logits, hf(idx).logits, rtol=1e-5, atol=1e-5)


def test_pytorch_model_bin_and_sharded_safetensors(tmp_path):
    hf = llama()
    hf.save_pretrained(tmp_path / "src")
    state = load_file(str(tmp_path / "src" / "model.safetensors"))
    config = (tmp_path / "src" / "config.json").read_text()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "config.json").write_text(config)
    torch.save(state, tmp_path / "bin" / "pytorch_model.bin")
    (tmp_path / "sharded").mkdir()
    (tmp_path / "sharded" / "config.json").write_text(config)
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for file, keys in shards.items():
        save_file({k: state[k] for k in keys}, str(tmp_path / "sharded" / file))
    index = {"weight_map": {k: f for f, keys in shards.items() for k in keys}}
    (tmp_path / "sharded" / "model.safetensors.index.json").write_text(json.dumps(index))
    idx = _tokens(seed=3)
    with torch.no_grad():
        expected = hf(idx).logits
        for layout in ("bin", "sharded"):
            run = import_hf(tmp_path / layout, tmp_path / f"run-{layout}").out_dir
            torch.testing.assert_close(load_model(run)(idx), expected, rtol=1e-5, atol=1e-5)


def test_half_precision_weights_are_widened(tmp_path):
    hf = gpt2().to(torch.bfloat16)
    hf.save_pretrained(tmp_path / "hf")
    ours = load_model(import_hf(tmp_path / "hf", tmp_path / "run").out_dir)
    assert ours.tok_emb.weight.dtype == torch.float32
    assert torch.equal(ours.tok_emb.weight, hf.transformer.wte.weight.float())


@pytest.mark.parametrize("arch", ["kraken", "parallel"])
def test_import_of_a_krakenlm_export_is_exact(arch, tmp_path):
    torch.manual_seed(3)
    fields = dict(degree=4, n_heads=2, d_model=16, ffn_dim=32) if arch == "kraken" else \
        dict(n_heads=4, d_model=32, ffn_dim=64)
    model = _perturb(Transformer(ModelConfig(arch=arch, n_layers=2, vocab_size=300,
                                             context_len=32, bias=True, **fields)))
    save_checkpoint(tmp_path / "c", model, None, {"step": 3})
    export_hf(tmp_path / "c", tmp_path / "hf")
    back = load_model(import_hf(tmp_path / "hf", tmp_path / "run").out_dir)
    assert back.config == model.config
    original = model.state_dict()
    assert all(torch.equal(t, original[n]) for n, t in back.state_dict().items())


def test_cli_import_then_eval_and_generate(tmp_path, capsys):
    gpt2().save_pretrained(tmp_path / "hf")
    run = tmp_path / "run"
    for args in (["import", "hf", str(tmp_path / "hf"), "--out", str(run)],
                 ["generate", "--checkpoint", str(run), "--prompt", "To be", "--greedy",
                  "--max-new-tokens", "4"],
                 ["eval", "--checkpoint", str(run), "--max-batches", "1", "--batch-size", "1",
                  "--seq-len", "32", "--json"]):
        with pytest.raises(SystemExit) as exc:
            main(args)
        captured = capsys.readouterr()
        assert exc.value.code == 0, captured.err
    assert json.loads(captured.out)["tokens"] == 32


# --------------------------------------------------------------------------- bad inputs
def _write_hf(directory, model=None, edit=None):
    (model or gpt2()).save_pretrained(directory)
    if edit is not None:
        path = directory / "config.json"
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return directory


def _nan_weights(directory):
    _write_hf(directory)
    path = directory / "model.safetensors"
    state = load_file(str(path))
    state["transformer.h.1.mlp.c_fc.weight"][0, 0] = float("nan")
    save_file(state, str(path), metadata={"format": "pt"})


BAD = {
    "missing-dir": (lambda d: None, "does not exist; give a local Hugging Face model directory"),
    "no-config": (lambda d: d.mkdir(), "has no config.json: it is not a Hugging Face model"),
    "bad-json": (lambda d: (d.mkdir(), (d / "config.json").write_text("{")),
                 "is not valid JSON"),
    "unsupported-model-type": (
        lambda d: _write_hf(d, edit=lambda c: c.update(model_type="t5")),
        "model_type 't5' cannot be imported; `krakenlm import hf` supports gpt2, llama"),
    "weights-do-not-match": (
        lambda d: _write_hf(d, edit=lambda c: c.update(n_embd=64)),
        r"the weights do not match config.json \(h.0.attn.c_attn.bias is \(96,\) but "
        r"config.json implies \(192,\), .* and 23 more\)"),
    "missing-tensors": (
        lambda d: _write_hf(d, edit=lambda c: c.update(n_layer=3)),
        r"missing h.2.attn.c_attn.bias, h.2.attn.c_attn.weight, h.2.attn.c_proj.bias and 9 more"),
    "no-weights": (lambda d: (_write_hf(d), (d / "model.safetensors").unlink()),
                   "holds no weights: expected one of model.safetensors"),
    "truncated-weights": (
        lambda d: (_write_hf(d), (d / "model.safetensors").write_bytes(b"\x10\x00" * 8)),
        "cannot read the weights .* the file may be truncated"),
    "nan-weights": (_nan_weights, r"NaN or infinite values \(layers.1.ffn.up.weight\)"),
    "erf-gelu": (lambda d: _write_hf(d, edit=lambda c: c.update(activation_function="gelu")),
                 "cannot compute exactly: activation_function='gelu'"),
    "rope-scaling": (
        lambda d: _write_hf(d, llama(), edit=lambda c: c.update(rope_parameters={
            "rope_type": "linear", "factor": 2.0, "rope_theta": 1e4})),
        "cannot compute exactly: rope scaling 'linear'"),
    "mixed-biases": (
        lambda d: _write_hf(d, llama(), edit=lambda c: c.update(mlp_bias=True)),
        "attention_bias=False with mlp_bias=True"),
    "sliding-window": (
        lambda d: _write_hf(d, mistral(), edit=lambda c: c.update(sliding_window=16)),
        "sliding_window=16 below max_position_embeddings=64"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_inputs_are_one_line_errors(case, tmp_path, capsys):
    make, message = BAD[case]
    source = tmp_path / "hf"
    make(source)
    capsys.readouterr()  # transformers' own output while writing the bad input
    with pytest.raises(SystemExit) as exc:
        main(["import", "hf", str(source), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert re.search(message, err), err
    assert not (tmp_path / "run").exists()
    assert [p.name for p in tmp_path.iterdir()] == (["hf"] if source.exists() else [])


def test_refuses_to_overwrite_a_run_unless_forced(tmp_path):
    _write_hf(tmp_path / "hf")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(Exception, match="already exists and is not empty.*--force"):
        import_hf(tmp_path / "hf", run)
    import_hf(tmp_path / "hf", run, force=True)
    assert not (run / "metrics.jsonl").exists()  # the old run is gone, not mixed in
    assert load_model(run).config.n_layers == 2


def test_refuses_to_replace_its_own_source(tmp_path):
    _write_hf(tmp_path / "hf")
    for out in (tmp_path / "hf", tmp_path):
        with pytest.raises(Exception, match="would replace the model being read"):
            import_hf(tmp_path / "hf", out, force=True)
    assert (tmp_path / "hf" / "model.safetensors").is_file()
