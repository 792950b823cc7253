"""The lm-evaluation-harness adapter against direct computation with the model."""

import json
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("lm_eval")

from krakenlm.data.tokenizer import Tokenizer  # noqa: E402
from krakenlm.evaluation.lm_eval_adapter import KrakenLMEval, _rolling_windows  # noqa: E402
from krakenlm.models import ModelConfig  # noqa: E402
from krakenlm.models.transformer import Transformer  # noqa: E402


@pytest.fixture(scope="module")
def adapter():
    torch.manual_seed(0)
    cfg = ModelConfig(arch="kraken", n_layers=2, d_model=32, n_heads=2, ffn_dim=64, degree=2,
                      vocab_size=50304, context_len=16)
    return KrakenLMEval(Transformer(cfg), batch_size=3)


def request(*args):
    return SimpleNamespace(args=args)


def direct_logprob(model, ids, n):
    with torch.no_grad():
        logp = F.log_softmax(model(torch.tensor([ids[:-1]]))[0], dim=-1)
    return sum(logp[len(ids) - 1 - n + k, ids[len(ids) - n + k]].item() for k in range(n))


def test_loglikelihood_equals_direct_computation(adapter):
    tok = Tokenizer()
    pairs = [("The king is", " dead"), ("O Romeo, Romeo,", " wherefore art thou"), ("", " Hello")]
    results = adapter.loglikelihood([request(c, x) for c, x in pairs])
    for (context, cont), (logprob, _) in zip(pairs, results):
        ctx = tok.encode(context) if context else [tok.eot_id]
        ids = ctx + tok.encode(cont)
        assert logprob == pytest.approx(direct_logprob(adapter.model, ids, len(tok.encode(cont))),
                                        abs=1e-4)


def test_rolling_windows_predict_every_token_once():
    ids = list(range(40))
    windows = list(_rolling_windows(ids, 16))
    predicted = [t for w, n in windows for t in w[-n:]]
    assert predicted == ids[1:]
    assert all(len(w) <= 17 for w, _ in windows)


def test_rolling_loglikelihood_of_a_short_text_is_minus_total_cross_entropy(adapter):
    tok = Tokenizer()
    text = "Now is the winter of our discontent"
    ids = [tok.eot_id] + tok.encode(text)
    (value,) = adapter.loglikelihood_rolling([request(text)])
    assert value == pytest.approx(direct_logprob(adapter.model, ids, len(ids) - 1), abs=1e-4)


def test_simple_evaluate_runs_a_local_task(adapter, tmp_path):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager
    docs = [{"context": "One, two,", "choices": [" three", " banana"], "label": 0},
            {"context": "Red, green,", "choices": [" blue", " seven"], "label": 0},
            {"context": "Up and", "choices": [" down", " left"], "label": 0}]
    task_dir = write_toy_task(tmp_path, docs)  # defined with the CLI tests below
    results = simple_evaluate(model=adapter, tasks=["toy_choice"], log_samples=False,
                              task_manager=TaskManager(include_path=str(task_dir),
                                                           include_defaults=False),
                              bootstrap_iters=0)
    acc = results["results"]["toy_choice"]["acc,none"]
    # the accuracy is what our loglikelihoods imply, item by item
    expected = 0
    for d in docs:
        scores = adapter.loglikelihood([request(d["context"], c) for c in d["choices"]])
        expected += int(max(range(2), key=lambda i: scores[i][0]) == d["label"])
    assert acc == pytest.approx(expected / 3)


# ------------------------------------------------------------------ counts, errors, the CLIs
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from conftest import run_cli  # noqa: E402

from krakenlm.errors import KrakenError  # noqa: E402
from krakenlm.runtime import checkpoint  # noqa: E402

TOY_DOCS = [{"context": "One, two,", "choices": [" three", " banana"], "label": 0},
            {"context": "Red, green,", "choices": [" blue", " seven", " up"], "label": 0},
            {"context": "Up and", "choices": [" down", " left"], "label": 1},
            {"context": "Salt and", "choices": [" pepper", " glass", " moon", " car"], "label": 0}]


def write_toy_task(directory: Path, docs=TOY_DOCS) -> Path:
    """A local multiple-choice task whose YAML (deliberately) names no aggregation."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "toy.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (directory / "toy.yaml").write_text(
        f"task: toy_choice\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: "
        f"{directory / 'toy.jsonl'}\noutput_type: multiple_choice\ntest_split: test\n"
        "doc_to_text: context\ndoc_to_choice: choices\ndoc_to_target: label\n"
        "target_delimiter: ''\nmetric_list:\n  - metric: acc\n")
    return directory


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    cfg = ModelConfig(arch="kraken", n_layers=2, d_model=32, n_heads=2, ffn_dim=64, degree=2,
                      vocab_size=50304, context_len=32)
    model = Transformer(cfg)
    model.reset_parameters(seed=3)
    directory = tmp_path_factory.mktemp("lm-eval") / "ckpt"
    checkpoint.save_checkpoint(directory, model, None, {"step": 0})
    return directory


@pytest.fixture(scope="module")
def bpe_checkpoint(tmp_path_factory):
    """A checkpoint trained with a small BPE (as `--tokenizer bpe-4k` records it): its
    vocabulary of 320 cannot hold GPT-2's ids."""
    from krakenlm.data.bpe import BpeTokenizer, train_bpe_json
    from krakenlm.data.vocab import tokenizer_files, tokenizer_record
    text = [d["context"] + c for d in TOY_DOCS for c in d["choices"]] * 4
    tokenizer = BpeTokenizer("bpe-4k", train_bpe_json(iter(text), 300))
    torch.manual_seed(0)
    model = Transformer(ModelConfig(arch="gpt", n_layers=2, d_model=32, n_heads=2, ffn_dim=64,
                                    vocab_size=320, context_len=32))
    model.reset_parameters(seed=4)
    directory = tmp_path_factory.mktemp("lm-eval-bpe") / "run"
    checkpoint.save_checkpoint(directory, model, None,
                               {"step": 2, "tokenizer": tokenizer_record(tokenizer)},
                               files=tokenizer_files(tokenizer))
    return directory, tokenizer


def toy_accuracy(model, tokenizer=None) -> float:
    """Accuracy on TOY_DOCS from the model's loglikelihoods, computed directly."""
    adapter = KrakenLMEval(model, batch_size=4, progress=False, tokenizer=tokenizer)
    right = 0
    for d in TOY_DOCS:
        scores = adapter.loglikelihood([request(d["context"], c) for c in d["choices"]])
        right += int(max(range(len(scores)), key=lambda i: scores[i][0]) == d["label"])
    return right / len(TOY_DOCS)


def test_task_counts_give_documents_and_chance_level(adapter):
    def req(task, doc_id, idx):
        r = request("x", " y")
        r.task_name, r.doc_id, r.idx = task, doc_id, idx
        return r
    counting = KrakenLMEval(adapter.model, batch_size=4, progress=False)
    counting.loglikelihood([req("mc", 0, i) for i in range(2)] + [req("mc", 1, i) for i in range(4)]
                           + [req("lambada", 0, 0), req("lambada", 1, 0), req("lambada", 2, 0)])
    counts = counting.task_counts()
    assert counts["mc"].documents == 2 and counts["mc"].mean_choices == 3
    assert counts["mc"].chance_level == pytest.approx((1 / 2 + 1 / 4) / 2)
    assert counts["lambada"].documents == 3 and counts["lambada"].chance_level is None


@pytest.mark.parametrize("value,message", [(0, "batch_size must be >= 1 (got 0)"),
                                           ("many", "batch_size='many' is not a whole number")])
def test_bad_batch_size_is_a_kraken_error(adapter, value, message):
    with pytest.raises(KrakenError, match=message.replace("(", r"\(").replace(")", r"\)")):
        KrakenLMEval(adapter.model, batch_size=value)


def test_importing_the_adapter_keeps_lm_evals_own_models():
    from lm_eval.api.registry import model_registry
    assert "krakenlm" in model_registry and "hf" in model_registry


@pytest.mark.slow
def test_cli_prints_stderr_n_and_chance_level(tiny_checkpoint, tmp_path):
    tasks = write_toy_task(tmp_path / "tasks")
    proc = run_cli("lm-eval", "--checkpoint", str(tiny_checkpoint), "--tasks", "toy_choice",
                   "--include-path", str(tasks), "--batch-size", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)["toy_choice"]
    acc, n = row["acc"], len(TOY_DOCS)
    assert acc == pytest.approx(toy_accuracy(checkpoint.load_model(tiny_checkpoint)))
    assert row["n"] == n
    assert row["chance_level"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 2 + 1 / 4) / 4)
    # the closed-form stderr of a mean of 0/1 outcomes (sample standard deviation / sqrt(n))
    assert row["acc_stderr"] == pytest.approx((acc * (1 - acc) / (n - 1)) ** 0.5)
    assert "scoring choices" in proc.stderr  # the progress bar
    assert "aggregation is not" not in proc.stderr and "higher_is_better is not" not in proc.stderr


def test_cli_scores_a_bpe_checkpoint_with_its_own_tokenizer(bpe_checkpoint, tmp_path, capsys,
                                                           monkeypatch):
    """`krakenlm lm-eval` builds the model as `krakenlm-lm-eval` does: with the checkpoint's
    own tokenizer (GPT-2's ids would index past its 320-token vocabulary). A run of local tasks
    only indexes the local directory, never lm-eval's ~15,000 task YAMLs."""
    import lm_eval.tasks

    from krakenlm.cli import main
    indexed = []
    real = lm_eval.tasks.TaskManager

    def recording(*args, include_defaults=True, **kwargs):
        indexed.append(include_defaults)
        return real(*args, include_defaults=include_defaults, **kwargs)

    monkeypatch.setattr(lm_eval.tasks, "TaskManager", recording)
    run, tokenizer = bpe_checkpoint
    tasks = write_toy_task(tmp_path / "tasks")
    with pytest.raises(SystemExit) as exc:
        main(["lm-eval", "--checkpoint", str(run), "--tasks", "toy_choice", "--include-path",
              str(tasks), "--json"])
    captured = capsys.readouterr()
    assert exc.value.code == 0, captured.err[-3000:]
    row = json.loads(captured.out)["toy_choice"]
    assert row["n"] == len(TOY_DOCS)
    assert row["acc"] == pytest.approx(toy_accuracy(checkpoint.load_model(run), tokenizer))
    assert indexed == [False]  # the local directory only


def test_adapter_from_a_checkpoint_scores_its_own_ids(bpe_checkpoint):
    run, tokenizer = bpe_checkpoint
    adapter = KrakenLMEval(checkpoint=str(run), progress=False)
    assert adapter.tokenizer.sha256 == tokenizer.sha256
    (score, _), = adapter.loglikelihood([request("Salt and", " pepper")])
    ids = tokenizer.encode("Salt and") + tokenizer.encode(" pepper")
    assert score == pytest.approx(direct_logprob(adapter.model, ids,
                                                 len(tokenizer.encode(" pepper"))), abs=1e-4)


def test_a_tokenizer_in_model_args_is_refused(bpe_checkpoint):
    with pytest.raises(KrakenError, match="always uses its checkpoint's own tokenizer"):
        KrakenLMEval(checkpoint=str(bpe_checkpoint[0]), tokenizer="gpt2")


@pytest.mark.slow
def test_plugin_command_runs_lm_evals_cli_with_the_krakenlm_model(tiny_checkpoint, tmp_path):
    tasks = write_toy_task(tmp_path / "tasks")
    script = Path(sys.executable).with_name("krakenlm-lm-eval")
    proc = subprocess.run([str(script), "--model", "krakenlm", "--model_args",
                           f"checkpoint={tiny_checkpoint}", "--tasks", "toy_choice",
                           "--include_path", str(tasks), "--batch_size", "2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # lm-eval's own table: |toy_choice|Version|Filter|n-shot|acc|↑|value|±|stderr|
    (row,) = [line for line in proc.stdout.splitlines()
              if line.startswith("|") and line.split("|")[1].strip() == "toy_choice"
              and "acc" in line]
    cells = [c.strip() for c in row.strip("|").split("|")]
    acc = toy_accuracy(checkpoint.load_model(tiny_checkpoint))
    assert float(cells[6]) == pytest.approx(acc, abs=1e-4)
    assert float(cells[8]) == pytest.approx((acc * (1 - acc) / 3) ** 0.5, abs=1e-4)
    # krakenlm's table after it: documents and chance level
    assert "|toy_choice|4|2.75|0.3958|" in proc.stdout
    assert "aggregation is not" not in proc.stderr and "scoring choices" in proc.stderr


OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}  # tests never touch the network


@pytest.mark.parametrize("args,message", [
    (["--limit", "0"], "--limit must be >= 1 (got 0)"),
    (["--limit", "-2"], "--limit must be >= 1 (got -2)"),
    (["--batch-size", "0"], "--batch-size must be >= 1 (got 0)"),
    (["--batch-size", "-4"], "--batch-size must be >= 1 (got -4)"),
    (["--tasks", " , "], "--tasks is empty"),
    (["--tasks", "shakespeare_next_lin"],
     "unknown lm-eval task 'shakespeare_next_lin' (did you mean shakespeare_next_line?)"),
])
def test_cli_bad_input_is_one_line_and_exit_2(tiny_checkpoint, args, message, capsys):
    from krakenlm.cli import main

    # in this process (a subprocess costs seconds of torch and lm-eval imports); the hub row
    # below needs its offline variables before `datasets` is imported, so it has its own process
    with pytest.raises(SystemExit) as exc:
        main(["lm-eval", "--checkpoint", str(tiny_checkpoint), *args])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


@pytest.mark.slow
def test_cli_hub_task_without_a_network_is_one_line_and_exit_2(tiny_checkpoint):
    proc = run_cli("lm-eval", "--checkpoint", str(tiny_checkpoint), "--tasks", "copa",
                   env_extra=OFFLINE)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "Couldn't reach 'aps/super_glue' on the Hub" in lines[0], lines


def test_cli_refuses_a_directory_that_is_not_a_checkpoint(tmp_path, capsys):
    from krakenlm.cli import main

    with pytest.raises(SystemExit) as exc:  # in process: the bad-input table runs it as one
        main(["lm-eval", "--checkpoint", str(tmp_path)])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == (f"error: {tmp_path} is not a checkpoint: it holds no "
                                   "checkpoints/step-* directory nor model.safetensors and "
                                   "config.json (written by `krakenlm train --out DIR`)")


@pytest.mark.slow
def test_plugin_command_errors_are_one_line(tmp_path):
    script = Path(sys.executable).with_name("krakenlm-lm-eval")
    tasks = write_toy_task(tmp_path / "tasks")
    proc = subprocess.run([str(script), "--model", "krakenlm", "--model_args",
                           f"checkpoint={tmp_path}", "--tasks", "toy_choice",
                           "--include_path", str(tasks)], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, **OFFLINE))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path} is not a checkpoint: it holds no checkpoints/step-* directory nor "
        "model.safetensors and config.json (written by `krakenlm train --out DIR`)")
    assert "indexing" not in proc.stderr  # refused before lm-eval indexes its tasks


@pytest.mark.parametrize("limit", ["0", "-1", "-0.5"])
def test_plugin_command_refuses_a_limit_that_selects_nothing(tmp_path, limit):
    script = Path(sys.executable).with_name("krakenlm-lm-eval")
    proc = subprocess.run([str(script), "--model", "krakenlm", "--model_args",
                           f"checkpoint={tmp_path}", "--tasks", "x", f"--limit={limit}"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"error: --limit must be > 0 (got {limit}): a number of "
                                   "documents, or a fraction below 1; leave it out to evaluate "
                                   "every document")
