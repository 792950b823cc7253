"""`krakenlm study serving`: the variants compared (a grouped-KV Kraken only when the model
groups its KV heads), the report's statements follow its numbers, and bad input is one
`error:` line with exit code 2 before any replay."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from krakenlm.cli import main
from krakenlm.models import get_preset
from krakenlm.studies.serving_load import (
    ServingPlan,
    ServingStudy,
    _at_capacity,
    _markdown,
    variants,
)


def test_a_grouped_kraken_only_for_a_model_that_groups_its_kv_heads():
    models, note = variants(get_preset("gpt3-1.3b"), 2)
    assert list(models) == ["gpt", "parallel", "kraken"]
    assert "no grouped KV heads" in note
    models, note = variants(get_preset("llama2-70b"), 4)
    assert list(models) == ["gpt", "parallel", "kraken", "kraken-gqa"]
    k, g = models["kraken"], models["kraken-gqa"]
    assert k.n_heads % g.n_kv_heads == 0 and g.n_kv_heads < k.n_heads
    assert g.replace(n_kv_heads=None) == k.replace(n_kv_heads=None)  # nothing else changes
    assert "81 heads per sub-layer) with 9 KV heads" in note


def _study(kraken_ttft_low, kraken_preempt) -> ServingStudy:
    plan = ServingPlan(rates=(2.0, 8.0), seeds=(0, 1), requests=100)
    study = ServingStudy(plan, "no grouping")
    for arch, ttft, pre in (("gpt", 0.10, 0), ("parallel", 0.09, 0),
                            ("kraken", kraken_ttft_low, kraken_preempt)):
        for seed in (0, 1):
            for rate in (2.0, 8.0):
                study.runs.append({"arch": arch, "seed": seed, "rate_per_s": rate,
                                   "ttft_p99_s": ttft * (1 if rate == 2.0 else 3) + seed * 1e-3,
                                   "preemptions": pre if rate == 8.0 else 0})
        study.capacity[arch] = [10.0 + seed for seed in (0, 1)]
        study.setup[arch] = {"kv_blocks": 1000, "bytes_per_block": 4096}
    return study


def test_the_report_says_which_way_the_numbers_point():
    faster = _markdown(_study(0.08, 0), "cmd")
    assert "Kraken's p99 TTFT is 20 % lower than GPT's" in faster
    assert "the cache is not the limit at these rates" in faster
    slower = _markdown(_study(0.12, 40), "cmd")
    assert "Kraken's p99 TTFT is 20 % higher than GPT's" in slower
    assert "preempt 40 (Kraken) and 0 (GPT)" in slower
    assert "overlap: no difference is shown" in slower


def _capacity(scale, evaluations, tpot_p50_s=0.01, kv=0.5, preemptions=0):
    summary = {"ttft_s": {"p99": 0.5}, "tpot_s": {"p50": tpot_p50_s, "p99": 0.02},
               "kv_cache": {"max_used": kv, "preemptions": preemptions}}
    return SimpleNamespace(rate_scale=scale, rate_per_s=10 * scale, evaluations=evaluations,
                           report=SimpleNamespace(summary=summary))


def _probe(scale, meets, ttft=None, tpot=None, stopped=False):
    return {"rate_scale": scale, "meets": meets, "ttft_p99_s": ttft, "tpot_p99_s": tpot,
            "stopped_early": stopped}


def test_the_slo_missed_first_is_the_nearest_failing_probe_above_the_capacity():
    plan = ServingPlan(slo_ttft_s=1.0, slo_tpot_s=0.05)
    below = _probe(0.5, False, ttft=3.0, tpot=0.01)  # below the capacity: not the one above it
    cases = [([below, _probe(1.0, True), _probe(1.1, False, ttft=0.9, tpot=0.06),
               _probe(2.0, False, ttft=5.0, tpot=0.01)], "tpot"),
             ([_probe(1.0, True), _probe(1.05, False, ttft=1.5, tpot=0.01)], "ttft"),
             ([_probe(1.0, True), _probe(1.05, False, ttft=1.5, tpot=0.09)], "both"),
             ([_probe(1.0, True), _probe(1.05, False, stopped=True)], "ttft"),
             ([_probe(1.0, True)], "")]
    for evaluations, missed in cases:
        row = _at_capacity(_capacity(1.0, evaluations), plan)
        assert row["missed_above"] == missed, evaluations
    row = _at_capacity(_capacity(1.0, [], tpot_p50_s=0.03, kv=1.0, preemptions=7), plan)
    assert (row["rate_per_s"], row["tpot_p50_s"], row["kv_max_used"], row["preemptions"]) == \
        (10.0, 0.03, 1.0, 7)


def test_the_report_says_what_limits_each_at_its_capacity():
    study = _study(0.08, 0)
    study.setup["kraken"] = {"kv_blocks": 400, "bytes_per_block": 10240}
    for arch, tpot, kv, pre, missed in (("gpt", 0.010, 0.3, 0, "ttft"),
                                        ("parallel", 0.009, 0.3, 0, "ttft"),
                                        ("kraken", 0.030, 1.0, 50, "tpot")):
        study.at_capacity[arch] = [{"rate_per_s": 10.0, "ttft_p99_s": 0.5, "tpot_p50_s": tpot,
                                    "tpot_p99_s": 2 * tpot, "kv_max_used": kv,
                                    "preemptions": pre, "missed_above": missed}] * 2
    text = _markdown(study, "cmd")
    assert "| kraken | 0.500 | 30.0 | 60.0 | 100% | 50 | tpot |" in text
    assert "GPT's median TPOT is 10.0 ms and Kraken's 30.0 ms (3.00x)" in text
    assert "miss the ttft SLO (GPT) and the tpot SLO (Kraken)" in text
    assert "Kraken's KV cache is full at its capacity: it holds 40% of GPT's blocks (2.5x" in text
    assert "the cache decides both" not in text
    study.at_capacity["kraken"] = [{**study.at_capacity["kraken"][0], "kv_max_used": 0.5,
                                    "missed_above": "ttft"}] * 2
    text = _markdown(study, "cmd")
    assert "2.5x GPT's bytes per token for Kraken, so its steps lengthen faster" in text
    assert "KV cache is full" not in text and "p99 TPOT crosses its SLO" not in text
    for arch in ("gpt", "kraken"):
        study.at_capacity[arch] = [{**study.at_capacity[arch][0], "missed_above": "tpot",
                                    "tpot_p50_s": 0.02}] * 2
    assert "the tail is the steps that carry prompt chunks" in _markdown(study, "cmd")


@pytest.mark.parametrize("extra,message", [
    (["--seeds", "1"], "--seeds needs at least two seeds"),
    (["--rates", "0,4"], "--rates must be positive request rates"),
    (["--rates", "a"], "--rates must be comma-separated request rates"),
    (["--requests", "5"], "--requests must be at least 20"),
    (["--slo-ttft-s", "0"], "--slo-ttft-s must be a positive number"),
    (["--trace", "missing.csv"], "trace missing.csv does not exist"),
])
def test_bad_input_is_one_error_line(extra, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as info:
        main(["study", "serving", "--out", str(tmp_path / "s"), *extra])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()


def test_the_recorded_command_names_the_trace(monkeypatch, tmp_path):
    """The report's command reproduces the study: a --trace given is part of it."""
    from krakenlm.errors import KrakenError
    from krakenlm.studies import serving_load

    seen = []

    def fake(out, plan, command, progress=None):
        seen.append(command)
        raise KrakenError("stopped")

    monkeypatch.setattr(serving_load, "run_serving_study", fake)
    trace = tmp_path / "code.csv"
    trace.write_text("x")
    for extra, expected in (([], None), (["--trace", str(trace)], f"--trace {trace} --out")):
        with pytest.raises(SystemExit):
            main(["study", "serving", "--out", str(tmp_path / "s"), *extra])
        assert ("--trace" in seen[-1]) == (expected is not None)
        assert expected is None or expected in seen[-1]
