"""A server's host time scale: the profile scaled, the CLI knob, and the leave-one-source-out fit
the validation replays with (serving/host_fit.py, validation.host_scale)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from fuzz_parsers import cli_one_line_or_success

from krakenlm.serving import host_fit
from krakenlm.serving.validation import (
    HOST_SCALES_FILE,
    ValidationDataError,
    host_scale,
    load_host_scales,
    load_runs,
    replay_run,
)
from krakenlm.simulator.constants.software import Frontend, Host, load_software


def test_host_time_scaled_scales_every_host_and_front_end_time_and_nothing_else():
    base = load_software("vllm-v0")
    scaled = base.host_time_scaled(1.5)
    for section, cls in (("host", Host), ("frontend", Frontend)):
        for f in dataclasses.fields(cls):
            before, after = getattr(getattr(base, section), f.name), \
                getattr(getattr(scaled, section), f.name)
            if f.name.endswith("_s") and isinstance(before, float):
                assert after == pytest.approx(1.5 * before, rel=1e-15), f.name
            else:
                assert after == before, f.name
    assert scaled.host.multi_step_host_seq_s == pytest.approx(1.5 * 4.73e-5)
    assert scaled.host.prefill_gpu_time_scale == base.host.prefill_gpu_time_scale
    assert (scaled.attention, scaled.collectives, scaled.sampler, scaled.kv_profile) == \
        (base.attention, base.collectives, base.sampler, base.kv_profile)
    assert base.host_time_scaled(1.0) is base
    fitted = load_software("vllm")  # a profile with per-system host fits scales them too
    for name, host in fitted.host_time_scaled(2.0).host_systems.items():
        assert host.decode_step_s == pytest.approx(2 * fitted.host_systems[name].decode_step_s)


def _run(run_id: str):
    _, runs = load_runs()
    by_id = {r.id: r for r in runs}
    return by_id[run_id], by_id


def test_a_slower_host_delays_a_bursts_first_tokens_through_the_front_end():
    run, by_id = _run("lambda-v060-a100-tp1-llama3-8b-inf-n20")
    _, one = replay_run(run, by_id, scale=1.0)
    _, two = replay_run(run, by_id, scale=2.0)
    assert two["ttft_s"]["mean"] > one["ttft_s"]["mean"] * 1.05


def test_the_validation_replays_a_run_with_its_servers_scale_fitted_without_its_source():
    scales = {"srv": {"a": 1.5, "b": 0.9}}
    run, _ = _run("lambda-v060-a100-tp1-llama3-8b-inf-n20")
    assert host_scale(dataclasses.replace(run, server="srv", source="a"), scales) == 1.5
    assert host_scale(dataclasses.replace(run, server="srv", source="b"), scales) == 0.9
    assert host_scale(dataclasses.replace(run, server="srv", source="c"), scales) == 1.0
    assert host_scale(dataclasses.replace(run, server=None), scales) == 1.0
    assert host_scale(dataclasses.replace(run, server="other"), scales) == 1.0


def test_the_shipped_scales_are_each_fitted_without_the_source_they_serve():
    """Every server the shipped file fits is named by runs of two or more sources, and each
    source's scale is the fit on the others' runs: its objective curve (recorded per source
    left out) has its minimum at that scale."""
    data = json.loads(HOST_SCALES_FILE.read_text())
    _, runs = load_runs()
    for server, fit in data["servers"].items():
        sources = {r.source for r in runs if r.server == server}
        assert len(sources) >= 2 and set(fit["without"]) == sources
        for left_out, scale in fit["without"].items():
            curve = {float(s): v for s, v in fit["objective"][left_out].items()}
            assert min(curve, key=lambda s: (curve[s], abs(math.log(s)))) == \
                pytest.approx(scale, abs=1e-4)
    assert load_host_scales() == {s: f["without"] for s, f in data["servers"].items()}


def test_the_fit_never_sees_the_source_it_is_for(monkeypatch):
    """fit_servers fits each source's scale on the other sources' runs only; the grid search
    finds a known minimum."""
    _, runs = load_runs()
    seen: dict[float, set] = {}
    a100 = [r for r in runs if r.server == "lambdalabs-8xA100-80GB-SXM"]
    best = {"lambda": 1.3, "lambda_v060": 0.8}  # each source's runs prefer their own scale

    def fake(runs_, by_id, scale, metrics=host_fit.OBJECTIVE_METRICS):
        sources = {r.source for r in runs_}
        seen.setdefault(scale, set()).update(sources)
        (src,) = sources
        return abs(math.log(scale / best[src]))

    monkeypatch.setattr(host_fit, "objective", fake)
    out = host_fit.fit_servers(a100)
    fit = out["lambdalabs-8xA100-80GB-SXM"]
    # lambda's scale comes from lambda_v060's runs (0.8 on the grid), and the other way round
    assert fit["without"]["lambda"] == pytest.approx(2 ** (-5 / 16))  # 0.806, nearest 0.8
    assert fit["without"]["lambda_v060"] == pytest.approx(2 ** (6 / 16))  # 1.297, nearest 1.3
    assert fit["runs"] == {"lambda": sum(r.source == "lambda" for r in a100),
                           "lambda_v060": sum(r.source == "lambda_v060" for r in a100)}


def test_a_bad_host_scales_file_is_one_error(tmp_path):
    path = tmp_path / "scales.json"
    path.write_text('{"servers": {"x": {"without": {"a": -1}}}}')
    with pytest.raises(ValidationDataError, match="not a positive number") as e:
        load_host_scales(path)
    assert "\n" not in str(e.value)
    path.write_text('{"servers": 3}')
    with pytest.raises(ValidationDataError, match="not a host scales file"):
        load_host_scales(path)
    assert load_host_scales(tmp_path / "absent.json") == {}


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_sim_serve_refuses_a_host_time_scale_that_is_not_positive(value):
    err = cli_one_line_or_success([
        "sim", "serve", "--trace", "synthetic", "--rate", "1", "--requests", "4",
        "--model", "gpt3-1.3b", "--system", "h100-80gb-x8", f"--host-time-scale={value}"])
    assert "error: --host-time-scale" in err and "must be a positive number" in err, err


def test_sim_serve_with_a_slower_host_reports_later_first_tokens(capsys):
    from krakenlm.cli import main

    argv = ["sim", "serve", "--trace", "synthetic", "--rate", "20", "--requests", "40",
            "--model", "gpt3-1.3b", "--system", "h100-80gb-x8", "--software", "vllm-v0",
            "--client-side", "--json", "--seed", "3"]
    ttft = {}
    for scale in ("1", "3"):
        with pytest.raises(SystemExit) as info:
            main(argv + ["--host-time-scale", scale])
        out = capsys.readouterr()
        assert info.value.code == 0, out.err
        ttft[scale] = json.loads(out.out)["summary"]["ttft_s"]["mean"]
    assert ttft["3"] > ttft["1"]
