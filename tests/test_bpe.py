"""The small BPE vocabularies (--tokenizer bpe-4k/bpe-8k), the classics corpus, the small8 presets."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from krakenlm.cli import main
from krakenlm.data import bpe
from krakenlm.data.prepare import prepare_corpus, resolve_corpus
from krakenlm.data.tokenizer import END_OF_TEXT
from krakenlm.data.vocab import TOKENIZER_FILE
from krakenlm.errors import KrakenError
from krakenlm.models import ModelConfig
from krakenlm.models.presets import PRESETS
from krakenlm.runtime.model_and_tokenizer import checkpoint_tokenizer

SECRET = "Zqxvwerty"  # only in the validation document: must never shape the vocabulary


def _corpus(directory, n_docs: int = 20):
    """A local corpus of 20 plays-like documents; document 10 is the validation one."""
    directory.mkdir()
    from krakenlm.data.sources import shakespeare_documents
    plays = [text for _, text in shakespeare_documents()]
    for i in range(n_docs):
        text = plays[i][:20000]
        if i == 10:
            text = (SECRET + " ") * 3000 + text
        (directory / f"doc{i:02d}.txt").write_text(text)
    return directory


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    return _corpus(tmp_path_factory.mktemp("bpe") / "plays")


def test_bpe_is_trained_on_the_training_split_only_and_round_trips(corpus_dir, tmp_path):
    corpus = prepare_corpus(str(corpus_dir), tokenizer="bpe-4k", cache_dir=tmp_path,
                            progress=False)
    tok = corpus.tokenizer
    assert tok.name == "bpe-4k" and tok.vocab_size <= 4096
    assert not any(SECRET.lower()[:4] in token.lower() for token in tok._tok.get_vocab())
    text = "ROMEO: But soft! what light — 'tis naïve, 日本語 " + END_OF_TEXT + " ok\n\n"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.eot_id not in ids  # written in a document, <|endoftext|> is ordinary text
    assert tok.decode([tok.eot_id]) == END_OF_TEXT
    # The prepared ids decode back to the corpus; validation holds document 10 only.
    val_text = tok.decode(corpus.split("val")[:50])
    assert val_text.startswith(SECRET + " " + SECRET)
    assert corpus.meta["tokenizer"] == "bpe-4k" and corpus.meta["tokenizer_sha256"] == tok.sha256
    assert corpus.meta["key"].startswith(resolve_corpus(str(corpus_dir)).key + "--bpe-4k-")


def test_bpe_training_is_deterministic_across_processes(corpus_dir, tmp_path):
    code = ("import sys; from krakenlm.data import bpe; from krakenlm.data.prepare import "
            "resolve_corpus; from pathlib import Path; "
            "t = bpe.load_or_train_bpe('bpe-4k', resolve_corpus(sys.argv[1]), Path(sys.argv[2]), "
            "progress=False); print(t.sha256)")
    hashes = {subprocess.run([sys.executable, "-c", code, str(corpus_dir), str(tmp_path / f"c{i}")],
                             capture_output=True, text=True, check=True).stdout.strip()
              for i in range(2)}
    assert len(hashes) == 1 and len(hashes.pop()) == 64


def test_cached_bpe_and_corpus_are_reused(corpus_dir, tmp_path, monkeypatch):
    first = prepare_corpus(str(corpus_dir), tokenizer="bpe-8k", cache_dir=tmp_path,
                           progress=False)
    gpt2 = prepare_corpus(str(corpus_dir), cache_dir=tmp_path, progress=False)
    assert gpt2.directory != first.directory  # the key includes the tokenizer

    def no_training(*args, **kwargs):
        raise AssertionError("the cached tokenizer should have been used")

    monkeypatch.setattr(bpe, "train_bpe_json", no_training)
    again = prepare_corpus(str(corpus_dir), tokenizer="bpe-8k", cache_dir=tmp_path,
                           progress=False)
    assert again.directory == first.directory and again.tokenizer.sha256 == first.tokenizer.sha256
    meta = json.loads((bpe.bpe_cache_dir(tmp_path, resolve_corpus(str(corpus_dir)).key, 8192)
                       / "meta.json").read_text())
    assert meta["sha256"] == first.tokenizer.sha256 and meta["trained_on"] == "training split only"


def _run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    captured = capsys.readouterr()
    return exc.value.code, captured.out, captured.err


def test_checkpoint_records_the_tokenizer_and_eval_generate_use_it(corpus_dir, tmp_path, capsys):
    out = tmp_path / "run"
    config = ModelConfig(arch="gpt", n_layers=2, d_model=32, n_heads=2, ffn_dim=64,
                         vocab_size=50304, context_len=32)
    config_path = tmp_path / "model.json"
    config_path.write_text(json.dumps(config.to_dict()))
    code, _, err = _run(["train", "--out", str(out), "--config", str(config_path), "--data",
                         str(corpus_dir), "--tokenizer", "bpe-4k", "--max-steps", "2",
                         "--batch-size", "2", "--eval-interval", "2", "--eval-batches", "1",
                         "--no-progress"], capsys)
    assert code in (0, None), err
    tok = checkpoint_tokenizer(out)
    step_dir = out / "checkpoints" / "step-00000002"
    state = json.loads((step_dir / "train_state.json").read_text())
    assert state["tokenizer"] == {"name": "bpe-4k", "sha256": tok.sha256}
    assert (step_dir / TOKENIZER_FILE).is_file()
    assert json.loads((step_dir / "config.json").read_text())["vocab_size"] == 4096

    # generate decodes with the checkpoint's BPE: greedy output equals decoding by hand
    from krakenlm.evaluation.generate import SamplingConfig, generate
    from krakenlm.runtime.checkpoint import load_model
    model = load_model(out)
    prompt = "KING:"
    new = generate(model, torch.tensor([tok.encode(prompt)]),
                   SamplingConfig(max_new_tokens=5, greedy=True))[0].tolist()
    code, stdout, err = _run(["generate", "--checkpoint", str(out), "--prompt", prompt,
                              "--max-new-tokens", "5", "--greedy"], capsys)
    assert code in (0, None), err
    assert stdout == tok.decode(new) + "\n"

    code, stdout, err = _run(["eval", "--checkpoint", str(out), "--data", str(corpus_dir),
                              "--max-batches", "1", "--batch-size", "1", "--json"], capsys)
    assert code in (0, None), err
    assert json.loads(stdout)["tokens"] == 32

    for command in (["eval", "--checkpoint", str(out), "--data", str(corpus_dir)],
                    ["generate", "--checkpoint", str(out), "--prompt", "x"],
                    ["train", "--out", str(out), "--resume", "--max-steps", "3"]):
        code, _, err = _run(command + ["--tokenizer", "gpt2"], capsys)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1, err
        assert "--tokenizer gpt2 does not match the checkpoint" in lines[0]
        assert "trained with bpe-4k" in lines[0]


def test_edited_tokenizer_file_is_refused(tmp_path):
    from krakenlm.runtime import checkpoint as ckpt
    model_config = ModelConfig(arch="gpt", n_layers=1, d_model=16, n_heads=2, ffn_dim=32,
                               vocab_size=512, context_len=8)
    from krakenlm.models.transformer import Transformer
    model = Transformer(model_config)
    model.reset_parameters(seed=0)
    tok_json = bpe.train_bpe_json(iter(["hello world " * 50]), 300)
    tok = bpe.BpeTokenizer("bpe-4k", tok_json)
    ckpt.save_checkpoint(tmp_path, model, None, {"step": 1, "tokenizer": {
        "name": "bpe-4k", "sha256": tok.sha256}}, files={TOKENIZER_FILE: tok_json.encode()})
    assert checkpoint_tokenizer(tmp_path).sha256 == tok.sha256
    path = tmp_path / "checkpoints" / "step-00000001" / TOKENIZER_FILE
    path.write_text(tok_json.replace("hello", "hellO"))
    with pytest.raises(KrakenError, match="sha256 differs"):
        checkpoint_tokenizer(tmp_path)
    path.unlink()
    with pytest.raises(KrakenError, match="holds no tokenizer.json"):
        checkpoint_tokenizer(tmp_path)


def test_corpus_smaller_than_one_window_is_one_line(tmp_path, capsys):
    small = tmp_path / "small"
    small.mkdir()
    for i in range(20):
        (small / f"{i}.txt").write_text(f"word {i}.")
    code, _, err = _run(["train", "--out", str(tmp_path / "run"), "--preset", "gpt-small8",
                         "--tokenizer", "bpe-4k", "--data", str(small), "--max-steps", "1",
                         "--no-progress"], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert "fewer than one window of 257" in lines[0]


def test_unknown_tokenizer_is_one_line(tmp_path, capsys):
    code, _, err = _run(["train", "--out", str(tmp_path / "r"), "--preset", "gpt-tiny",
                         "--tokenizer", "bpe-3k"], capsys)
    assert code == 2 and err.strip() == ("error: unknown tokenizer 'bpe-3k'; use one of gpt2, "
                                         "bpe-4k, bpe-8k")


def test_classics_corpus_splits_whole_plays_and_books():
    from krakenlm.data.sources import bible_documents
    books = list(bible_documents())
    assert len(books) == 66 and books[0][0] == "Genesis" and books[-1][0] == "Revelation"
    assert books[0][1].startswith("Genesis\n\nGenesis 1\n1:1 In the beginning God created")
    spec = resolve_corpus("classics")
    docs = list(spec.documents())
    assert len(docs) == 38 + 66
    held_out = [i for i in range(len(docs)) if spec.is_validation(i)]
    assert held_out == [10, 30, 50, 70, 90]
    assert [books[i - 38][0] for i in held_out[2:]] == ["1 Chronicles", "Micah", "2 Thessalonians"]


@pytest.mark.parametrize("size,max_share", [("small8", 0.15), ("mini8", 0.25)])
def test_small_bpe_presets_keep_the_embedding_a_minority(size, max_share):
    base = PRESETS[f"gpt-{size}"]
    for name in (f"gpt-{size}", f"parallel-{size}", f"kraken-{size}-2way", f"kraken-{size}-4way"):
        config = PRESETS[name]
        assert config.n_layers >= 8 and config.vocab_size == 4096
        embedding_share = config.vocab_size * config.d_model / config.num_params()
        assert embedding_share < max_share, (name, embedding_share)
        assert abs(config.num_params() / base.num_params() - 1) < 0.02, name
    tiny = PRESETS["gpt-tiny"]
    assert tiny.vocab_size * tiny.d_model / tiny.num_params() > 0.75  # what small8 fixes
