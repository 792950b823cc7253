"""`krakenlm export hf`: every architecture loads in transformers with our logits and tokens."""

import json
import re
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

from krakenlm.cli import main  # noqa: E402
from krakenlm.data.tokenizer import Tokenizer  # noqa: E402
from krakenlm.errors import KrakenError  # noqa: E402
from krakenlm.evaluation.generate import SamplingConfig, generate  # noqa: E402
from krakenlm.interop import hf_export  # noqa: E402
from krakenlm.interop.hf_export import export_hf  # noqa: E402
from krakenlm.interop.native import native_family  # noqa: E402
from krakenlm.models.config import ModelConfig  # noqa: E402
from krakenlm.models.transformer import Transformer  # noqa: E402
from krakenlm.runtime.checkpoint import save_checkpoint  # noqa: E402

VOCAB = 50304  # holds GPT-2's tokenizer, which the checkpoints record (none: GPT-2)
LLAMA_LIKE = dict(norm="rmsnorm", activation="swiglu", position="rope")
CONFIGS = {
    # native GPT-2: trained without biases (written as zeros), and with biases + untied head
    "gpt": dict(arch="gpt", n_layers=2, d_model=32, n_heads=4, ffn_dim=64),
    "gpt-bias-untied": dict(arch="gpt", n_layers=2, d_model=32, n_heads=4, ffn_dim=48, bias=True,
                            tie_embeddings=False),
    # native Llama: grouped-query attention, biases, untied head, a non-default RoPE base
    "llama": dict(arch="gpt", n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, ffn_dim=40,
                  bias=True, tie_embeddings=False, rope_theta=500.0, **LLAMA_LIKE),
    # a standard block no native class computes: LayerNorm + GELU with RoPE -> remote code
    "gpt-mixed": dict(arch="gpt", n_layers=2, d_model=32, n_heads=4, ffn_dim=64, position="rope"),
    "parallel": dict(arch="parallel", n_layers=2, d_model=32, n_heads=4, ffn_dim=64, bias=True),
    "parallel-rope": dict(arch="parallel", n_layers=2, d_model=32, n_heads=4, n_kv_heads=1,
                          ffn_dim=64, tie_embeddings=False, **LLAMA_LIKE),
    "kraken-2way": dict(arch="kraken", degree=2, n_layers=3, d_model=24, n_heads=2, ffn_dim=48),
    "kraken-4way": dict(arch="kraken", degree=4, n_layers=3, d_model=16, n_heads=2, ffn_dim=32,
                        bias=True),
    "kraken-4way-llama": dict(arch="kraken", degree=4, n_layers=2, d_model=16, n_heads=4,
                              n_kv_heads=2, ffn_dim=24, bias=True, tie_embeddings=False,
                              **LLAMA_LIKE),
}
EXPECTED_FAMILY = {"gpt": "gpt2", "gpt-bias-untied": "gpt2", "llama": "llama"}


def random_model(fields: dict, seed: int = 0, vocab: int = VOCAB) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(vocab_size=vocab, context_len=48, **fields))
    with torch.no_grad():  # norms start at 1 and biases at 0: make every tensor informative
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def checkpoint_of(model: Transformer, directory) -> object:
    save_checkpoint(directory, model, None, {"step": 7})
    return directory


def load_hf(directory, remote: bool):
    return transformers.AutoModelForCausalLM.from_pretrained(
        directory, trust_remote_code=remote).eval()


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def exported(request, tmp_path_factory):
    name = request.param
    ours = random_model(CONFIGS[name])
    root = tmp_path_factory.mktemp(name)
    result = export_hf(checkpoint_of(ours, root / "ckpt"), root / "hf")
    return name, ours, result, load_hf(result.out_dir, result.remote_code)


def test_family_follows_the_rule(exported):
    name, ours, result, hf = exported
    assert result.family == EXPECTED_FAMILY.get(name, "krakenlm")
    assert native_family(ours.config) == EXPECTED_FAMILY.get(name)
    expected_class = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM",
                      "krakenlm": "KrakenLMForCausalLM"}[result.family]
    assert type(hf).__name__ == expected_class
    files = set(result.files)
    assert {"model.safetensors", "config.json", "generation_config.json", "vocab.json",
            "merges.txt", "tokenizer_config.json"} <= files
    assert ({"configuration_krakenlm.py", "modeling_krakenlm.py"} <= files) == result.remote_code


def test_logits_match_ours(exported):
    _, ours, _, hf = exported
    idx = torch.randint(0, VOCAB, (3, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(hf(idx).logits, ours(idx), rtol=1e-5, atol=1e-5)


def test_greedy_generate_matches_ours(exported):
    _, ours, _, hf = exported
    prompt = torch.randint(0, VOCAB, (1, 7), generator=torch.Generator().manual_seed(2))
    expected = generate(ours, prompt, SamplingConfig(max_new_tokens=20, greedy=True))
    for use_cache in (True, False):
        got = hf.generate(prompt, max_new_tokens=20, do_sample=False, use_cache=use_cache,
                          pad_token_id=0)[:, 7:]
        assert torch.equal(got, expected), f"use_cache={use_cache}"


def test_loss_with_labels_matches_ours(exported):
    _, ours, _, hf = exported
    idx = torch.randint(0, VOCAB, (2, 30), generator=torch.Generator().manual_seed(3))
    targets = torch.cat([idx[:, 1:], torch.full((2, 1), -1)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(hf(idx, labels=idx).loss, ours(idx, targets),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["kraken-4way-llama", "parallel"])
def test_remote_code_left_padded_batch_generates_like_single_prompts(name, tmp_path):
    ours = random_model(CONFIGS[name], seed=4)
    hf = load_hf(export_hf(checkpoint_of(ours, tmp_path / "c"), tmp_path / "hf").out_dir, True)
    gen = torch.Generator().manual_seed(5)
    prompts = [torch.randint(1, VOCAB, (1, n), generator=gen) for n in (9, 4)]
    batch = torch.zeros(2, 9, dtype=torch.long)  # left padding with token 0
    mask = torch.zeros(2, 9, dtype=torch.long)
    for row, p in enumerate(prompts):
        batch[row, 9 - p.shape[1]:], mask[row, 9 - p.shape[1]:] = p, 1
    got = hf.generate(batch, attention_mask=mask, max_new_tokens=8, do_sample=False,
                      pad_token_id=0)[:, 9:]
    for row, p in enumerate(prompts):
        expected = generate(ours, p, SamplingConfig(max_new_tokens=8, greedy=True))
        assert torch.equal(got[row:row + 1], expected), f"row {row}"


def test_remote_code_flag_forces_krakenlm_classes(tmp_path):
    ours = random_model(CONFIGS["llama"])
    result = export_hf(checkpoint_of(ours, tmp_path / "c"), tmp_path / "hf", remote_code=True)
    assert result.family == "krakenlm"
    hf = load_hf(result.out_dir, True)
    idx = torch.randint(0, VOCAB, (2, 20))
    with torch.no_grad():
        torch.testing.assert_close(hf(idx).logits, ours(idx), rtol=1e-5, atol=1e-5)


def test_autotokenizer_round_trip_gives_our_ids(tmp_path):
    ours = random_model(CONFIGS["kraken-2way"], vocab=50304)
    out = export_hf(checkpoint_of(ours, tmp_path / "c"), tmp_path / "hf").out_dir
    tok = transformers.AutoTokenizer.from_pretrained(out)
    text = "First Citizen:\nBefore we proceed any further, hear me speak.  Café 123 — ok?"
    ids = Tokenizer().encode(text)
    assert tok(text)["input_ids"] == ids
    assert tok.decode(ids) == text
    assert tok.eos_token_id == Tokenizer.eot_id
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == 50256


@pytest.mark.slow
def test_remote_code_does_not_need_krakenlm(tmp_path):
    ours = random_model(CONFIGS["kraken-2way"])
    out = export_hf(checkpoint_of(ours, tmp_path / "c"), tmp_path / "hf").out_dir
    idx = [[1, 2, 3, 4, 5]]
    script = (
        "import sys, json, torch\n"
        "sys.modules['krakenlm'] = None  # any import of krakenlm now fails\n"
        "from transformers import AutoModelForCausalLM\n"
        f"m = AutoModelForCausalLM.from_pretrained({str(out)!r}, trust_remote_code=True)\n"
        f"print(json.dumps(m(torch.tensor({idx})).logits[0, -1].tolist()))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    with torch.no_grad():
        expected = ours(torch.tensor(idx))[0, -1]
    torch.testing.assert_close(torch.tensor(json.loads(proc.stdout.splitlines()[-1])), expected,
                               rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------- the output directory
def test_refuses_a_non_empty_out_unless_forced(tmp_path):
    ckpt = checkpoint_of(random_model(CONFIGS["gpt"]), tmp_path / "c")
    out = tmp_path / "hf"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(KrakenError, match="already exists and is not empty.*--force"):
        export_hf(ckpt, out)
    assert (out / "keep.txt").read_text() == "mine"
    export_hf(ckpt, out, force=True)
    assert not (out / "keep.txt").exists() and (out / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "hf"]  # nothing left behind


def test_an_empty_out_directory_is_used(tmp_path):
    ckpt = checkpoint_of(random_model(CONFIGS["gpt"]), tmp_path / "c")
    (tmp_path / "hf").mkdir()
    assert export_hf(ckpt, tmp_path / "hf").family == "gpt2"


def test_a_failed_export_keeps_the_previous_one_and_cleans_up(tmp_path, monkeypatch):
    ckpt = checkpoint_of(random_model(CONFIGS["gpt"]), tmp_path / "c")
    out = tmp_path / "hf"
    export_hf(ckpt, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hf_export, "save_file", disk_full)
    with pytest.raises(KrakenError, match="No space left on device; nothing was changed"):
        export_hf(ckpt, out, force=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "hf"]


# ------------------------------------------------------------------------------------ CLI
def _cli(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    captured = capsys.readouterr()
    return exc.value.code, captured.err


def test_cli_export_then_load(tmp_path, capsys):
    ours = random_model(CONFIGS["kraken-2way"])
    ckpt = checkpoint_of(ours, tmp_path / "c")
    code, err = _cli(["export", "hf", "--checkpoint", str(ckpt), "--out", str(tmp_path / "hf")],
                     capsys)
    assert code == 0, err
    assert "trust_remote_code=True" in err
    hf = load_hf(tmp_path / "hf", True)
    idx = torch.randint(0, VOCAB, (1, 12))
    with torch.no_grad():
        torch.testing.assert_close(hf(idx).logits, ours(idx), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case, message", [
    ("missing", "checkpoint directory .* does not exist"),
    ("not-a-checkpoint", "is not a checkpoint: it holds no checkpoints/step-"),
    ("out-not-empty", "already exists and is not empty; choose another directory or pass --force"),
    ("out-is-file", "is a file; give a directory path"),
    ("out-is-the-checkpoint", "would replace the model being read"),
    ("widened-head", "widens its LM head \\(lm_head_width 32\\).*does not carry"),
])
def test_cli_export_errors_are_one_line(case, message, tmp_path, capsys):
    ckpt, out = tmp_path / "c", tmp_path / "hf"
    if case != "missing":
        ckpt.mkdir()
    if case in ("out-not-empty", "out-is-file"):
        checkpoint_of(random_model(CONFIGS["gpt"]), ckpt)
    if case == "out-not-empty":
        out.mkdir()
        (out / "x").write_text("x")
    if case == "out-is-file":
        out.write_text("x")
    if case == "out-is-the-checkpoint":
        checkpoint_of(random_model(CONFIGS["gpt"]), ckpt)
        out = ckpt
    if case == "widened-head":
        checkpoint_of(random_model({**CONFIGS["kraken-2way"], "lm_head_width": 32}), ckpt)
    code, err = _cli(["export", "hf", "--checkpoint", str(ckpt), "--out", str(out), "--force"]
                     if case == "out-is-the-checkpoint" else
                     ["export", "hf", "--checkpoint", str(ckpt), "--out", str(out)], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert re.search(message, err), err
    if case == "out-is-the-checkpoint":
        from krakenlm.runtime.checkpoint import is_checkpoint

        assert is_checkpoint(ckpt) and not (ckpt / "vocab.json").exists()
