"""The serving configuration search (`sim serve-search`): the best of a space whose answer is
known by construction, determinism across worker counts, a configuration that cannot run, and
the written files."""

from __future__ import annotations

import csv

import pytest

from krakenlm.serving.config_search import (
    ConfigSpaceError,
    evaluate_config,
    load_space,
    parse_space,
)
from krakenlm.studies.serving_search import search_configs

# a light load every configuration serves within the SLOs: goodput is the offered rate for all
# of them, so goodput per $ ranks by cost: one replica beats two (twice the GPUs), and the
# A100 beats the H100 (the cheaper device)
FIXED = {"trace": "synthetic", "model": "gpt2-124m", "rate": 2.0, "requests": 40,
         "lengths": "fixed:64,16", "seed": 3, "slo_ttft_s": 2.0, "slo_tpot_s": 0.5}
SPACE = {**FIXED, "space": {"system": ["h100-80gb-x8", "a100-80gb-x8"], "replicas": [2, 1]}}


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    out = tmp_path_factory.mktemp("search")
    return search_configs(parse_space(SPACE, "test"), processes=1, out=out), out


def test_best_configuration_is_the_one_known_by_construction(searched):
    report, _ = searched
    assert report.best["cfg_system"] == "a100-80gb-x8" and report.best["cfg_replicas"] == 1
    worst = report.rows[-1]
    assert (worst["cfg_system"], worst["cfg_replicas"]) == ("h100-80gb-x8", 2)
    by = {(r["cfg_system"], r["cfg_replicas"]): r for r in report.rows}
    for system in ("a100-80gb-x8", "h100-80gb-x8"):
        one, two = by[(system, 1)], by[(system, 2)]
        assert one["attainment"] == two["attainment"] == 1.0
        assert two["usd_per_hour"] == pytest.approx(2 * one["usd_per_hour"])
        assert two["goodput_requests_per_usd"] == pytest.approx(
            one["goodput_requests_per_usd"] / 2, rel=0.05)
    # the cheapest configuration is on the goodput/$-per-hour front
    assert report.front[0]["key"] == report.best["key"]


def test_rows_do_not_depend_on_worker_count(searched):
    report, _ = searched
    again = search_configs(parse_space(SPACE, "test"), processes=2)
    assert again.rows == report.rows and again.front == report.front


def test_files_written(searched):
    report, out = searched
    rows = list(csv.DictReader((out / "configs.csv").read_text().splitlines()))
    assert [r["key"] for r in rows] == [r["key"] for r in report.rows]
    front = list(csv.DictReader((out / "front.csv").read_text().splitlines()))
    assert len(front) == len(report.front)
    assert (out / "search.png").read_bytes()[:4] == b"\x89PNG"
    assert {"cfg_system", "cfg_replicas", "goodput_requests_per_usd"} <= set(rows[0])


def test_a_configuration_that_cannot_run_is_a_row_with_its_error():
    row = evaluate_config({**FIXED, "system": "a100-80gb-x8"}, {"tp": 16})
    assert "--tp 16 must be between 1 and the 8 devices" in row["error"]
    assert row["goodput_requests_per_usd"] is None


def test_space_file_grid_in_file_order(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("trace: synthetic\nmodel: gpt2-124m\nrate: 1\n"
                    "space:\n  system: [a100-80gb-x8]\n  tp: [1, 2]\n  arch: [gpt, kraken]\n")
    grid = load_space(path).grid()
    assert grid == [{"system": "a100-80gb-x8", "tp": t, "arch": a}
                    for t in (1, 2) for a in ("gpt", "kraken")]


def test_configurations_that_differ_in_engine_knobs_share_one_simulator_session(monkeypatch):
    """A search's configurations on one system, software and dtype build their step-time
    oracles on one simulator session (its operator timings are computed once), and a
    configuration replayed on the shared session gives the row it gives on a fresh one."""
    from krakenlm.serving import replay

    made = []
    real = replay.Simulator

    def counting(*args, **kwargs):
        made.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(replay, "Simulator", counting)
    monkeypatch.setattr(replay, "_SESSIONS", {})
    monkeypatch.setattr(replay, "_TIMERS", {})
    fixed = {**FIXED, "system": "h100-80gb-x8"}
    shared = [evaluate_config(fixed, {"max_num_batched_tokens": n, "max_num_seqs": s})
              for n, s in ((2048, 64), (512, 8))]
    assert len(made) == 1
    monkeypatch.setattr(replay, "_SESSIONS", {})
    monkeypatch.setattr(replay, "_TIMERS", {})
    fresh = evaluate_config(fixed, {"max_num_batched_tokens": 512, "max_num_seqs": 8})
    assert len(made) == 2
    assert fresh == shared[1] and fresh["error"] == ""


def test_the_kv_cache_dtype_can_be_searched():
    space = parse_space({**FIXED, "system": "h100-80gb-x8",
                         "space": {"kv_cache_dtype": ["auto", "fp8"]}}, "test")
    assert space.grid() == [{"kv_cache_dtype": "auto"}, {"kv_cache_dtype": "fp8"}]
    rows = [evaluate_config(space.fixed, c) for c in space.grid()]
    assert [r["error"] for r in rows] == ["", ""]
    assert rows[1]["cfg_kv_cache_dtype"] == "fp8"
    with pytest.raises(ConfigSpaceError, match="space option 'kv_cache_dtype' takes auto, "
                                               "fp8, .* got 'int4'"):
        parse_space({**FIXED, "system": "h100-80gb-x8",
                     "space": {"kv_cache_dtype": ["int4"]}}, "test")
    with pytest.raises(ConfigSpaceError, match="option 'kv_cache_dtype' takes auto, .* got "
                                               "'fp4'"):
        parse_space({**FIXED, "kv_cache_dtype": "fp4", "space": {"system": ["h100-80gb-x8"]}},
                    "test")


def test_configurations_share_one_synthetic_trace_equal_to_a_fresh_one(monkeypatch):
    """The search's configurations replay one synthetic trace built once per process (the
    same seed and options give the same frozen requests), equal to a freshly drawn one."""
    import numpy as np

    from krakenlm.serving import command
    from krakenlm.serving.traces import synthetic_trace

    drawn = []
    real = command.synthetic_trace

    def counting(*args, **kwargs):
        drawn.append(args[1:])
        return real(*args, **kwargs)

    monkeypatch.setattr(command, "synthetic_trace", counting)
    monkeypatch.setattr(command, "_SYNTHETIC_TRACES", {})
    fixed = {**FIXED, "system": "h100-80gb-x8"}
    for n in (2048, 512):
        evaluate_config(fixed, {"max_num_batched_tokens": n})
    assert drawn == [(40, 2.0, "fixed:64,16", "poisson", 1.0)]
    (kept,) = command._SYNTHETIC_TRACES.values()
    fresh = synthetic_trace(np.random.default_rng(3), 40, 2.0, "fixed:64,16")
    assert kept == fresh
    assert [type(r.arrival_s) for r in kept.requests[:2]] == [float, float]
    assert [type(r.prompt_tokens) for r in kept.requests[:2]] == [int, int]
    evaluate_config({**fixed, "seed": 4}, {})
    assert len(drawn) == 2


# the capacity objective: each configuration's largest rate meeting the p99 SLOs
CAPACITY_SPACE = {**FIXED, "requests": 200, "lengths": "fixed:256,64", "slo_ttft_s": 0.02,
                  "slo_tpot_s": 0.004,
                  "space": {"system": ["a100-80gb-x8", "h100-80gb-x8"], "replicas": [1, 2]}}


@pytest.fixture(scope="module")
def capacities(tmp_path_factory):
    out = tmp_path_factory.mktemp("capacity")
    return search_configs(parse_space(CAPACITY_SPACE, "test"), objective="capacity",
                          out=out), out


def test_capacity_objective_rows_are_the_capacity_searches_of_their_configurations(capacities):
    """Each row's capacity is what `sim serve --capacity` finds for that configuration (the
    same search, `capacity_command`), per $ is capacity x 3600 / $ per hour, and the rows
    rank by it, best first."""
    from krakenlm.serving.command import ServeOptions, capacity_command

    report, _ = capacities
    assert report.objective == "capacity" and len(report.rows) == 4
    for row in report.rows:
        config = {"system": row["cfg_system"], "replicas": row["cfg_replicas"]}
        options = ServeOptions(**{k: v for k, v in CAPACITY_SPACE.items() if k != "space"},
                               **config)
        expected = capacity_command(options, 99)
        assert row["error"] == ""
        assert row["capacity_requests_per_s"] == expected.rate_per_s
        assert row["capacity_requests_per_usd"] == pytest.approx(
            row["capacity_requests_per_s"] * 3600 / row["usd_per_hour"], rel=1e-12)
        assert row["capacity_requests_per_s_per_gpu"] == pytest.approx(
            row["capacity_requests_per_s"] / row["devices"], rel=1e-12)
        # the figures beside it are the replay's at the capacity, which meets the SLOs
        assert row["p99_ttft_s"] <= 0.02 and row["p99_tpot_s"] <= 0.004
    per_usd = [r["capacity_requests_per_usd"] for r in report.rows]
    assert per_usd == sorted(per_usd, reverse=True)
    # two replicas serve more than one on the same system
    by = {(r["cfg_system"], r["cfg_replicas"]): r["capacity_requests_per_s"] for r in report.rows}
    for system in ("a100-80gb-x8", "h100-80gb-x8"):
        assert by[(system, 2)] > by[(system, 1)]


def test_capacity_objective_files_and_json(capacities):
    report, out = capacities
    rows = list(csv.DictReader((out / "configs.csv").read_text().splitlines()))
    assert {"capacity_requests_per_s", "capacity_requests_per_usd"} <= set(rows[0])
    assert [r["key"] for r in rows] == [r["key"] for r in report.rows]
    data = report.to_json()
    assert data["objective"] == "capacity" and data["slo_percentile"] == 99
    best = report.best
    assert report.front and max(r["capacity_requests_per_s"] for r in report.front) == max(
        r["capacity_requests_per_s"] for r in report.rows)
    assert best["key"] in {r["key"] for r in report.front}


def test_capacity_objective_needs_an_slo_and_a_known_percentile():
    space = parse_space({k: v for k, v in CAPACITY_SPACE.items()
                         if k not in ("slo_ttft_s", "slo_tpot_s")}, "test")
    with pytest.raises(Exception, match="^--objective capacity needs an SLO: give slo_ttft_s"):
        search_configs(space, objective="capacity")
    with pytest.raises(Exception, match="^--slo-percentile 42 is not one of 50, 90, 95, 99"):
        search_configs(parse_space(CAPACITY_SPACE, "test"), objective="capacity", percentile=42)
    with pytest.raises(Exception, match="^--objective 'latency' is not one of goodput, capacity"):
        search_configs(space, objective="latency")


def test_a_configuration_whose_slos_no_rate_meets_ranks_last_with_its_error():
    fixed = {**FIXED, "slo_ttft_s": 1e-6, "slo_tpot_s": None}
    row = evaluate_config({**fixed, "system": "a100-80gb-x8"}, {}, objective="capacity")
    assert row["error"] and row["capacity_requests_per_s"] is None
