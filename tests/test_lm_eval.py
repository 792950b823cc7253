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
    (tmp_path / "toy.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "toy.yaml").write_text(
        f"task: toy_choice\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: "
        f"{tmp_path / 'toy.jsonl'}\noutput_type: multiple_choice\ntest_split: test\n"
        "doc_to_text: context\ndoc_to_choice: choices\ndoc_to_target: label\ntarget_delimiter: ''\n"
        "metric_list:\n  - metric: acc\n")
    results = simple_evaluate(model=adapter, tasks=["toy_choice"], log_samples=False,
                              task_manager=TaskManager(include_path=str(tmp_path)),
                              bootstrap_iters=0)
    acc = results["results"]["toy_choice"]["acc,none"]
    # the accuracy is what our loglikelihoods imply, item by item
    expected = 0
    for d in docs:
        scores = adapter.loglikelihood([request(d["context"], c) for c in d["choices"]])
        expected += int(max(range(2), key=lambda i: scores[i][0]) == d["label"])
    assert acc == pytest.approx(expected / 3)
