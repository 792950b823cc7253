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
    template = TrainConfig(out_dir=tmp_path, data=small_corpus, max_steps=3, batch_size=2, seq_len=32,
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
    template = TrainConfig(out_dir=tmp_path, data=small_corpus, max_steps=3, batch_size=2,
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

