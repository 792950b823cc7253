"""`krakenlm demo` end to end on a small local corpus (the real one trains for minutes)."""

from __future__ import annotations

import json
import re

import pytest

from krakenlm.studies import demo
from krakenlm.studies.kraken_ttft import geomean_reduction, run_grid


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    from itertools import islice

    from krakenlm.data.sources import bible_documents, shakespeare_documents

    directory = tmp_path_factory.mktemp("demo") / "classics-sample"
    directory.mkdir()
    # the first 12 plays and 10 books (the sources are generators: the rest are never parsed)
    plays = [text[:15000] for _, text in islice(shakespeare_documents(), 12)]
    books = [text[:15000] for _, text in islice(bible_documents(), 10)]
    for i, text in enumerate(plays + books):
        (directory / f"doc{i:02d}.txt").write_text(text)
    return directory


@pytest.mark.slow
def test_demo_writes_one_report_with_the_comparison_samples_sharding_and_ttft(
        tmp_path, small_corpus):
    plan = demo.DemoPlan(max_steps=2, batch_size=2, seq_len=32, seeds=(1, 2), jobs=2,
                         sample_tokens=6, data=str(small_corpus))
    report = demo.run_demo(tmp_path, plan)
    text = report.read_text()
    summary = json.loads((tmp_path / "summary.json").read_text())

    # 1. the comparison: both models, both seeds, each at its own LR; the headline ratio is
    # the paired one of summary.json
    runs = {r["run"] for r in summary["runs"]}
    assert runs == {f"{p}-lr{demo.PEAK_LR[p]:g}-seed{s}" for p in (demo.BASELINE, demo.KRAKEN)
                    for s in (1, 2)}
    ratio = summary["models"][demo.KRAKEN]["ratio_to_baseline"]
    assert f"**{ratio['mean']:.3f}** [95 % interval {ratio['low']:.3f}, {ratio['high']:.3f}]" in text
    assert "peak LR per model gpt-mini8 0.004, kraken-mini8-2way 0.004" in text
    # 2. samples: every prompt, for both models, continued in the checkpoint's own tokenizer
    for prompt in demo.SAMPLE_PROMPTS:
        assert text.count(f"```\n{prompt}") == 2, prompt
    # 3. the sharded run gave the single-device tokens for both architectures
    assert text.count("tokens identical: yes") == 2
    assert f"Sampled generation (seed 0, temperature {demo.SAMPLE_TEMPERATURE:g}, top-40)" in text
    # 4. the simulated study: its geometric means, recomputed here
    for system in demo.TTFT_SYSTEMS:
        expected = 100 * geomean_reduction(run_grid(system))
        assert re.search(rf"\| {system} \| {expected:.1f} % \|", text), system
    for png in ("loss_curves.png", "gap_vs_tokens.png", "ttft/ttft-a100-80gb-x8.png",
                "ttft/layer_breakdown.png"):
        assert (tmp_path / png).stat().st_size > 0, png
        assert png in text


def test_demo_help_shows_the_plans_defaults(capsys):
    # The CLI spells the defaults out (importing the plan there would slow every command's start).
    from krakenlm.cli import main

    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())  # rich wraps in a box
    plan = demo.DemoPlan()
    assert f"default: ({plan.max_steps}:" in text
    assert f"default: ({','.join(map(str, plan.seeds))})" in text
    assert f"default: ({plan.jobs})" in text
    assert f"Steps of {plan.batch_size} x {plan.seq_len} tokens" in text


def test_the_demo_says_in_words_what_its_interval_means():
    worse = demo.ratio_verdict({"mean": 1.19, "low": 1.04, "high": 1.36, "n": 3})
    assert "**1.190** [95 % interval 1.040, 1.360] over 3 seeds" in worse
    assert "measurably worse" in worse and "whole interval lies on one side of 1" in worse
    assert "19 times in 20" in worse and "2 degrees of freedom" in worse
    assert "nothing about other budgets or model sizes" in worse
    unclear = demo.ratio_verdict({"mean": 1.3, "low": 0.88, "high": 1.95, "n": 3})
    assert "contains 1" in unclear and "seeds alone" in unclear
    assert "measurably better" in demo.ratio_verdict({"mean": 0.9, "low": 0.85, "high": 0.95,
                                                      "n": 4})
    one = demo.ratio_verdict({"mean": 1.1, "low": None, "high": None, "n": 1})
    assert "one seed: no interval" in one
