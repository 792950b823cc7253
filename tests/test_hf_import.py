"""`krakenlm import hf`: local GPT-2 / Llama / Mistral models become krakenlm runs with the same
logits; export(import(x)) gives x's logits back; what does not map exactly is refused."""

import hashlib
import json
import re

import pytest
import torch
from safetensors.torch import load_file, save_file

transformers = pytest.importorskip("transformers")

from krakenlm.cli import main  # noqa: E402
from krakenlm.data.bpe import BpeTokenizer, train_bpe_json  # noqa: E402
from krakenlm.data.vocab import prompt_ids, tokenizer_files, tokenizer_record  # noqa: E402
from krakenlm.evaluation.generate import SamplingConfig, generate  # noqa: E402
from krakenlm.interop.hf_export import export_hf  # noqa: E402
from krakenlm.interop.hf_import import import_hf  # noqa: E402
from krakenlm.models.config import ModelConfig  # noqa: E402
from krakenlm.models.transformer import Transformer  # noqa: E402
from krakenlm.runtime.checkpoint import load_model, read_train_state, save_checkpoint  # noqa: E402
from krakenlm.runtime.model_and_tokenizer import checkpoint_tokenizer  # noqa: E402

VOCAB = 50304  # covers GPT-2's tokenizer, so `krakenlm generate` can decode
SENTENCES = ["To be, or not to be, that is the question:",
             "Whether 'tis nobler in the mind to suffer",
             "The slings and arrows of outrageous fortune,",
             "Or to take arms against a sea of troubles"]


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
    # Llama 3.1's scaled RoPE: with head_dim 8 and original 64 tokens, the four frequencies fall
    # in all three bands (unchanged, smoothed, divided by the factor)
    "llama-rope-llama3": lambda: llama(max_position_embeddings=256, rope_parameters={
        "rope_type": "llama3", "rope_theta": 5000.0, "factor": 4.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
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
    # a run with a small BPE of its own (300 tokens cannot hold GPT-2's)
    bpe_json = train_bpe_json(iter(SENTENCES * 3), 280)
    tokenizer = BpeTokenizer("bpe-4k", bpe_json)
    save_checkpoint(tmp_path / "c", model, None,
                    {"step": 3, "tokenizer": tokenizer_record(tokenizer)},
                    files=tokenizer_files(tokenizer))
    export_hf(tmp_path / "c", tmp_path / "hf")
    assert (tmp_path / "hf" / "tokenizer.json").read_text() == bpe_json
    assert not (tmp_path / "hf" / "vocab.json").exists()
    run = import_hf(tmp_path / "hf", tmp_path / "run").out_dir
    back = load_model(run)
    assert back.config == model.config
    original = model.state_dict()
    assert all(torch.equal(t, original[n]) for n, t in back.state_dict().items())
    # the same ids and end-of-text, now recorded as the imported model's own tokenizer
    again = checkpoint_tokenizer(run)
    assert (again.name, again.sha256, again.eot_id) == ("hf", tokenizer.sha256, tokenizer.eot_id)
    assert again.encode(SENTENCES[0]) == tokenizer.encode(SENTENCES[0])


def test_cli_import_then_eval_and_generate(tmp_path, capsys):
    gpt2().save_pretrained(tmp_path / "hf")
    run = tmp_path / "run"
    errors = []
    for args in (["import", "hf", str(tmp_path / "hf"), "--out", str(run)],
                 ["generate", "--checkpoint", str(run), "--prompt", "To be", "--greedy",
                  "--max-new-tokens", "4"],
                 ["eval", "--checkpoint", str(run), "--max-batches", "1", "--batch-size", "1",
                  "--seq-len", "32", "--json"]):
        with pytest.raises(SystemExit) as exc:
            main(args)
        captured = capsys.readouterr()
        assert exc.value.code == 0, captured.err
        errors.append(captured.err)
    assert json.loads(captured.out)["tokens"] == 32
    # no tokenizer files, GPT-2's vocabulary size: GPT-2's tokenizer, said in one warning line
    warnings = [line for line in errors[0].splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "has no tokenizer files; its vocabulary of 50,304 tokens is " \
        "GPT-2's size, so GPT-2's tokenizer is used" in warnings[0], errors[0]
    assert "with tokenizer gpt2 (50,257 tokens, assumed: no tokenizer files)" in errors[0]


# ------------------------------------------------------------- the model's own tokenizer
def own_tokenizer():
    """A byte-level BPE of a few hundred tokens (not GPT-2's vocabulary) with Llama's special
    tokens and its template (BOS before every text), as transformers saves a fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(SENTENCES * 5, trainer=trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>",
                                                eos_token="</s>", unk_token="<unk>")


def llama_with_own_tokenizer(directory, vocab_size=None):
    """A Llama whose vocabulary is exactly its tokenizer's (every generated id decodes)."""
    tok = own_tokenizer()
    hf = llama(vocab_size=vocab_size or len(tok), bos_token_id=tok.bos_token_id,
               eos_token_id=tok.eos_token_id)
    hf.save_pretrained(directory)
    tok.save_pretrained(directory)
    return hf, tok


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    root = tmp_path_factory.mktemp("own-tokenizer")
    hf, tok = llama_with_own_tokenizer(root / "hf")
    result = import_hf(root / "hf", root / "run")
    return hf, tok, result, root


def _cli_out(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    captured = capsys.readouterr()
    assert exc.value.code == 0, captured.err
    return captured.out


def test_import_records_and_saves_the_models_own_tokenizer(own):
    hf, tok, result, root = own
    assert len(tok) != 50257 and hf.config.vocab_size == len(tok)  # not GPT-2's vocabulary
    assert result.warnings == () and result.tokenizer_source == "read from tokenizer.json"
    source = (root / "hf" / "tokenizer.json").read_bytes()
    state = read_train_state(result.out_dir)
    assert state["tokenizer"] == {"name": "hf", "sha256": hashlib.sha256(source).hexdigest(),
                                  "eot_id": tok.eos_token_id}
    step = result.out_dir / "checkpoints" / "step-00000000"
    assert (step / "tokenizer.json").read_bytes() == source
    ours = checkpoint_tokenizer(result.out_dir)
    assert ours.eot_id == tok.eos_token_id and ours.start_ids == (tok.bos_token_id,)
    for text in [*SENTENCES, "ROMEO: naïve café 日本語", "x"]:
        assert prompt_ids(ours, text) == tok(text)["input_ids"]  # with its BOS
        assert ours.encode(text) == tok(text, add_special_tokens=False)["input_ids"]
        assert ours.decode(ours.encode(text)) == text


def test_generate_uses_the_models_own_tokenizer(own, capsys):
    hf, tok, result, _ = own
    prompt = "To be, or not"
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    hf.generation_config.eos_token_id = None  # krakenlm generate runs to --max-new-tokens
    expected = hf.generate(ids, max_new_tokens=12, do_sample=False)[0, ids.shape[1]:]
    out = _cli_out(["generate", "--checkpoint", str(result.out_dir), "--prompt", prompt,
                    "--greedy", "--max-new-tokens", "12"], capsys)
    assert out == tok.decode(expected) + "\n" and out.strip()


def test_a_tokenizer_option_naming_another_is_one_line(own, capsys):
    _, _, result, _ = own
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--checkpoint", str(result.out_dir), "--prompt", "x",
              "--tokenizer", "gpt2"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "which was imported with its Hugging Face tokenizer (hf); drop --tokenizer (the " \
        "checkpoint's is used)" in err


def test_eval_scores_the_models_own_ids(own, tmp_path, capsys):
    hf, tok, result, _ = own
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    docs = [" ".join(SENTENCES[i % 4:] + SENTENCES[:i % 4]) for i in range(12)]
    for i, text in enumerate(docs):
        (corpus / f"{i:02d}.txt").write_text(text)
    out = _cli_out(["eval", "--checkpoint", str(result.out_dir), "--data", str(corpus),
                    "--seq-len", "16", "--batch-size", "1", "--max-batches", "1", "--json"],
                   capsys)
    # the validation split (document 10) in the model's ids, ended by its end-of-sequence
    ids = tok(docs[10], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    x, y = torch.tensor([ids[:16]]), torch.tensor(ids[1:17])
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(hf(x).logits[0], y).item()
    assert json.loads(out)["loss"] == pytest.approx(expected, abs=1e-4)


def test_one_tokenizer_json_with_two_end_of_texts_prepares_two_corpora(tmp_path):
    """A base model and its instruct variant can share tokenizer.json but end documents with
    different tokens: their prepared corpora must not be shared."""
    from krakenlm.data.json_tokenizer import HfTokenizer
    from krakenlm.data.prepare import prepare_corpus
    json_text = own_tokenizer().backend_tokenizer.to_str()
    (tmp_path / "docs").mkdir()
    for i in range(12):
        (tmp_path / "docs" / f"{i:02d}.txt").write_text(SENTENCES[i % 4])
    splits = [prepare_corpus(str(tmp_path / "docs"), tokenizer=HfTokenizer(json_text, eot),
                             cache_dir=tmp_path / "cache", progress=False).split("val")[-1]
              for eot in ("</s>", "<unk>")]
    tok = own_tokenizer()
    assert splits == [tok.convert_tokens_to_ids("</s>"), tok.convert_tokens_to_ids("<unk>")]


def test_lm_eval_scores_with_the_models_own_tokenizer(own):
    pytest.importorskip("lm_eval")
    from types import SimpleNamespace

    from krakenlm.evaluation.lm_eval_adapter import KrakenLMEval
    hf, tok, result, _ = own
    adapter = KrakenLMEval(checkpoint=str(result.out_dir), progress=False)
    pairs = [("To be, or not to be,", " that is the question"), ("", " Whether 'tis")]
    scores = adapter.loglikelihood([SimpleNamespace(args=pair) for pair in pairs])
    for (context, continuation), (score, _) in zip(pairs, scores):
        # what transformers computes with the model's own ids: BOS, context, continuation
        ctx = tok(context)["input_ids"]
        cont = tok(continuation, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([ctx + cont])
        with torch.no_grad():
            logp = torch.log_softmax(hf(ids).logits[0, :-1], dim=-1)
        expected = sum(logp[len(ctx) - 1 + k, t].item() for k, t in enumerate(cont))
        assert score == pytest.approx(expected, abs=1e-4)


def test_export_of_an_import_carries_its_tokenizer_back(own, tmp_path):
    hf, tok, result, root = own
    out = export_hf(result.out_dir, tmp_path / "hf").out_dir
    assert (out / "tokenizer.json").read_bytes() == (root / "hf" / "tokenizer.json").read_bytes()
    assert not (out / "vocab.json").exists() and not (out / "merges.txt").exists()
    config = json.loads((out / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (tok.bos_token_id,
                                                                tok.eos_token_id)
    again = transformers.AutoTokenizer.from_pretrained(out)
    assert again(SENTENCES[1])["input_ids"] == tok(SENTENCES[1])["input_ids"]
    assert again.eos_token_id == tok.eos_token_id
    back = import_hf(out, tmp_path / "run")
    assert read_train_state(back.out_dir)["tokenizer"] == \
        read_train_state(result.out_dir)["tokenizer"]


def test_slow_tokenizer_files_are_read(tmp_path):
    """vocab.json + merges.txt (no tokenizer.json) give the same ids as the fast tokenizer."""
    hf, tok = llama_with_own_tokenizer(tmp_path / "hf")
    (tmp_path / "hf" / "tokenizer.json").unlink()
    tok.backend_tokenizer.model.save(str(tmp_path / "hf"))  # vocab.json, merges.txt
    (tmp_path / "hf" / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}))
    result = import_hf(tmp_path / "hf", tmp_path / "run")
    assert result.tokenizer_source == "read from vocab.json and merges.txt"
    ours = checkpoint_tokenizer(result.out_dir)
    assert ours.eot_id == tok.eos_token_id
    for text in [*SENTENCES, "naïve café, 日本語"]:
        assert prompt_ids(ours, text) == tok(text)["input_ids"]  # with its BOS
    assert tok.eos_token_id not in ours.encode("a </s> b")  # in a text, it is plain text


@pytest.mark.parametrize("layout", ["slow", "fast"])
def test_gpt2s_own_tokenizer_is_recognised(layout, tmp_path):
    from krakenlm.interop.tokenizer_files import gpt2_tokenizer_files
    gpt2().save_pretrained(tmp_path / "hf")
    for name, content in gpt2_tokenizer_files(64).items():
        (tmp_path / "hf" / name).write_bytes(content)
    if layout == "fast":  # transformers' own tokenizer.json of GPT-2
        tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
        for name in ("vocab.json", "merges.txt", "special_tokens_map.json"):
            (tmp_path / "hf" / name).unlink()
        tok.save_pretrained(tmp_path / "hf")
        assert (tmp_path / "hf" / "tokenizer.json").is_file()
    result = import_hf(tmp_path / "hf", tmp_path / "run")
    assert result.warnings == ()
    assert read_train_state(result.out_dir)["tokenizer"] == {"name": "gpt2", "sha256": None}
    assert not (result.out_dir / "checkpoints" / "step-00000000" / "tokenizer.json").exists()


# --------------------------------------------------------------------------- bad inputs
def _write_hf(directory, model=None, edit=None):
    (model or gpt2()).save_pretrained(directory)
    if edit is not None:
        path = directory / "config.json"
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return directory


def _gpt2_files(directory):
    from krakenlm.interop.tokenizer_files import gpt2_tokenizer_files
    for name, content in gpt2_tokenizer_files(64).items():
        (directory / name).write_bytes(content)


def _nan_weights(directory):
    _write_hf(directory)
    path = directory / "model.safetensors"
    state = load_file(str(path))
    state["transformer.h.1.mlp.c_fc.weight"][0, 0] = float("nan")
    save_file(state, str(path), metadata={"format": "pt"})


def _own_tokenizer_dir(directory, vocab_size=None, edit=None):
    """A Llama with its own tokenizer; `edit(directory)` then damages the tokenizer files."""
    llama_with_own_tokenizer(directory, vocab_size)
    if edit is not None:
        edit(directory)


def _edit_json(path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


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
    # the model's tokenizer
    "no-tokenizer-files": (
        lambda d: _write_hf(d, llama(vocab_size=1000)),
        r"has no tokenizer files \(tokenizer.json, or vocab.json and merges.txt\) and its "
        r"vocabulary of 1,000 tokens is not GPT-2's; add the model's tokenizer files"),
    "tokenizer-bigger-than-vocab": (
        lambda d: _own_tokenizer_dir(d, vocab_size=300),
        r"the hf tokenizer has 3\d\d tokens but the model's vocabulary is 300 \(config.json "
        r"vocab_size\); the tokenizer files belong to another model"),
    "gpt2-tokenizer-in-a-small-vocab": (
        lambda d: (_write_hf(d, llama(vocab_size=1000)), _gpt2_files(d)),
        r"the gpt2 tokenizer has 50,257 tokens but the model's vocabulary is 1,000"),
    "sentencepiece-only": (
        lambda d: (_write_hf(d, llama(vocab_size=1000)), (d / "tokenizer.model").write_bytes(b"x")),
        r"has only a SentencePiece tokenizer model; krakenlm reads tokenizer.json: write it"),
    "vocab-without-merges": (
        lambda d: (_write_hf(d), _gpt2_files(d), (d / "merges.txt").unlink()),
        r"has vocab.json but no merges.txt; copy the model's whole tokenizer"),
    "damaged-tokenizer-json": (
        lambda d: _own_tokenizer_dir(d, edit=lambda d: (d / "tokenizer.json").write_text("{")),
        r"hf/tokenizer.json is not a valid tokenizer.json \(.*\); the tokenizer files in "
        r".* are damaged or not this model's"),
    "unknown-eos-token": (
        lambda d: _own_tokenizer_dir(d, edit=lambda d: _edit_json(
            d / "tokenizer_config.json", eos_token="</x>")),
        r"the end-of-text token '</x>' is not in this 3\d\d-token tokenizer"),
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
