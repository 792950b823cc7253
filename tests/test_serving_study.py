"""`krakenlm study serving`: the variants compared (a grouped-KV Kraken only when the model
groups its KV heads), the report's statements follow its numbers, and bad input is one
`error:` line with exit code 2 before any replay."""

from __future__ import annotations

import pytest

from krakenlm.cli import main
from krakenlm.models import get_preset
from krakenlm.studies.serving_load import ServingPlan, ServingStudy, _markdown, variants


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
