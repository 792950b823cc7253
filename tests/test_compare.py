"""`study compare`: learning-rate sweep, paired ratios with t intervals, gap against tokens."""

from __future__ import annotations

import json
import math

import pytest

from krakenlm.studies.compare import RunSpec, run_comparison
from krakenlm.studies.stats import mean_interval, ratio_interval, t_975
from krakenlm.training.trainer import TrainConfig


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    """20 short documents (document 10 is validation): the whole-split evaluation every run
    ends with stays a fraction of a second."""
    from krakenlm.data.sources import shakespeare_documents

    directory = tmp_path_factory.mktemp("compare") / "plays"
    directory.mkdir()
    for i, (_, text) in zip(range(20), shakespeare_documents()):
        (directory / f"doc{i:02d}.txt").write_text(text[:4000])
    return str(directory)


def test_t_intervals_have_the_textbook_values():
    iv = mean_interval([1.0, 2.0, 3.0])  # mean 2, sd 1, t(2) = 4.303
    assert iv.mean == 2.0 and iv.low == pytest.approx(2 - 4.303 / math.sqrt(3))
    assert iv.high == pytest.approx(2 + 4.303 / math.sqrt(3))
    assert mean_interval([5.0]).low is None and mean_interval([5.0]).text() == "5.000 (1 seed)"
    same = ratio_interval([0.1, 0.1])  # no spread: the interval is the point
    assert same.mean == same.low == same.high == pytest.approx(math.exp(0.1))
    assert t_975(1) == 12.706 and t_975(100) == 1.96
    with pytest.raises(ValueError):
        t_975(0)


@pytest.mark.slow
def test_each_preset_runs_at_its_own_best_rate_and_ratios_are_paired(tmp_path, small_corpus):
    template = TrainConfig(out_dir=tmp_path, data=small_corpus, tokenizer="bpe-4k", max_steps=3, batch_size=2, seq_len=32,
                           warmup_steps=1, eval_interval=1, eval_batches=2, log_interval=1,
                           checkpoint_interval=3, progress=False)
    presets, seeds, lrs = ["gpt-tiny", "kraken-tiny-2way"], [1, 2], [1e-3, 1e-2]
    report = run_comparison([RunSpec(p, s) for s in seeds for p in presets], template, tmp_path,
                            title="t", lrs=lrs)
    summary = json.loads((tmp_path / "summary.json").read_text())
    runs = {r["run"]: r for r in summary["runs"]}
    for preset in presets:
        sweep = summary["lr_sweep"][preset]
        best = min(lrs, key=lambda lr: sweep[str(lr)])
        # the first seed's best run and the second seed at that same rate are the final runs
        assert {f"{preset}-lr{best:g}-seed1", f"{preset}-lr{best:g}-seed2"} <= set(runs)
        assert (tmp_path / f"{preset}-lr{best:g}-seed2").is_dir()
        assert not any((tmp_path / f"{preset}-lr{lr:g}-seed2").exists() for lr in lrs
                       if lr != best)
    # the ratio is exp(mean over seeds of the paired loss differences)
    final = {(r["preset"], r["seed"]): r for r in summary["runs"]}
    diffs = [final[("kraken-tiny-2way", s)]["val_loss"] - final[("gpt-tiny", s)]["val_loss"]
             for s in seeds]
    ratio = summary["models"]["kraken-tiny-2way"]["ratio_to_baseline"]
    assert ratio["mean"] == pytest.approx(math.exp(sum(diffs) / 2))
    assert ratio["low"] < ratio["mean"] < ratio["high"]
    assert summary["baseline"] == "gpt-tiny"
    gaps = summary["gap_by_tokens"]["kraken-tiny-2way"]
    assert [g["step"] for g in gaps] == [1, 2, 3] and all(g["seeds"] == 2 for g in gaps)
    assert [g["tokens"] for g in gaps] == [64, 128, 192]
    text = report.read_text()
    assert "Learning-rate sweep" in text and "non-embedding" in text
    assert (tmp_path / "gap_vs_tokens.png").stat().st_size > 0
    # non-embedding parameters and FLOPs per token are reported next to the totals
    gpt = final[("gpt-tiny", 1)]
    assert 0 < gpt["non_embedding_params"] < gpt["params"] and gpt["train_flops_per_token"] > 0


@pytest.mark.slow
def test_parallel_jobs_train_the_same_models_as_one_at_a_time(tmp_path, small_corpus):
    # One thread each way: the same seeds must give bit-identical runs whether the runs are
    # trained one after another here or two at a time in worker processes.
    template = TrainConfig(out_dir=tmp_path, data=small_corpus, tokenizer="bpe-4k", max_steps=3, batch_size=2,
                           seq_len=32, warmup_steps=1, eval_interval=3, eval_batches=2,
                           log_interval=1, checkpoint_interval=3, progress=False, threads=1)
    specs = [RunSpec("gpt-tiny", 1), RunSpec("kraken-tiny-2way", 1)]
    one = run_comparison(specs, template, tmp_path / "serial", title="t")
    two = run_comparison(specs, template, tmp_path / "jobs", title="t", jobs=2)
    assert one.is_file() and two.is_file()
    serial = json.loads((tmp_path / "serial" / "summary.json").read_text())["runs"]
    jobs = json.loads((tmp_path / "jobs" / "summary.json").read_text())["runs"]
    assert [r["run"] for r in serial] == [r["run"] for r in jobs]
    for a, b in zip(serial, jobs):
        assert (a["train_loss"], a["val_loss"]) == (b["train_loss"], b["val_loss"]), a["run"]



def test_validation_slices_alternate_blocks_and_cover_the_split():
    import numpy as np

    from krakenlm.studies import compare

    tokens = np.arange(5 * compare.VALIDATION_BLOCK_TOKENS + 100)
    select, report = compare.validation_slices(tokens, seq_len=128)
    block = compare.VALIDATION_BLOCK_TOKENS
    assert select[:block].tolist() == list(range(block))  # block 0 selects
    assert report[:block].tolist() == list(range(block, 2 * block))  # block 1 is reported
    assert not set(select.tolist()) & set(report.tolist())
    assert sorted(select.tolist() + report.tolist()) == tokens.tolist()
    short_select, short_report = compare.validation_slices(np.arange(1000), seq_len=32)
    assert short_select.tolist() == list(range(500)) and short_report.tolist() == list(range(500, 1000))
    with pytest.raises(compare.KrakenError, match="validation split has 60 tokens"):
        compare.validation_slices(np.arange(60), seq_len=32)


def test_the_sweep_chooses_the_rate_on_the_selection_slice_not_the_reported_one(tmp_path,
                                                                                 monkeypatch):
    from krakenlm.studies import compare

    def fake_outcome(spec):
        # the reported loss prefers 1e-3, the selection slice prefers 1e-2
        select = {1e-3: 5.0, 1e-2: 4.0}[spec.lr]
        val = {1e-3: 4.5, 1e-2: 4.9}[spec.lr]
        return compare.RunOutcome(spec=spec, params=1, non_embedding_params=1,
                                  train_flops_per_token=1, steps=1, tokens=1, train_loss=5.0,
                                  val_loss=val + 0.01 * spec.seed, val_perplexity=math.exp(val),
                                  select_loss=select, tokens_per_s=1.0, train_time_s=1.0)

    monkeypatch.setattr(compare, "_prepare_shared_data", lambda template: None)
    monkeypatch.setattr(compare, "_run_all",
                        lambda specs, template, out_dir, jobs: [fake_outcome(s) for s in specs])
    specs = [RunSpec("gpt-tiny", seed) for seed in (1, 2)]
    outcomes, sweep = compare.train_and_evaluate(specs, TrainConfig(out_dir=tmp_path), tmp_path,
                                                 lrs=[1e-3, 1e-2])
    assert [(o.spec.lr, o.spec.seed) for o in outcomes] == [(1e-2, 1), (1e-2, 2)]
    assert set(sweep["gpt-tiny"]) == {1e-3, 1e-2}


@pytest.mark.slow
def test_budgets_train_each_budget_to_its_own_end_with_welch_beside_paired(tmp_path,
                                                                          small_corpus):
    from krakenlm.studies.compare import run_budgets

    template = TrainConfig(out_dir=tmp_path, data=small_corpus, tokenizer="bpe-4k", max_steps=10, batch_size=2,
                           seq_len=32, warmup_steps=2, eval_interval=3, eval_batches=2,
                           log_interval=1, checkpoint_interval=3, progress=False, threads=1)
    specs = [RunSpec(p, s) for s in (1, 2) for p in ("gpt-tiny", "kraken-tiny-2way")]
    report = run_budgets(specs, template, tmp_path, [192, 384], title="t")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [(b["tokens"], b["steps"], b["warmup_steps"]) for b in summary["budgets"]] == [
        (192, 3, 1), (384, 6, 1)]
    short = [json.loads(line) for line in
             (tmp_path / "tokens-192" / "gpt-tiny-seed1" / "metrics.jsonl").read_text().splitlines()]
    long = [json.loads(line) for line in
            (tmp_path / "tokens-384" / "gpt-tiny-seed1" / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in short if "loss" in r) == 3
    assert max(r["step"] for r in long if "loss" in r) == 6
    lr_at = lambda rows, step: next(r["lr"] for r in rows if r.get("step") == step and "lr" in r)
    assert lr_at(short, 3) < lr_at(long, 3)  # the short run decays to its own end
    kraken = summary["budgets"][0]["models"]["kraken-tiny-2way"]
    per_budget = json.loads((tmp_path / "tokens-192" / "summary.json").read_text())
    assert kraken == per_budget["models"]["kraken-tiny-2way"]
    paired, welch = kraken["ratio_to_baseline"], kraken["ratio_to_baseline_welch"]
    assert welch["mean"] == pytest.approx(paired["mean"])  # same seeds: same point estimate
    assert welch["low"] < welch["mean"] < welch["high"] and welch["low"] != paired["low"]
    text = report.read_text()
    assert "| 192 | 3 |" in text and "| 384 | 6 |" in text
    assert (tmp_path / "gap_vs_budget.png").stat().st_size > 0
    assert "ratio, Welch" in (tmp_path / "tokens-384" / "report.md").read_text()
