"""Public decode-progress log lines and the step-time oracle's prediction of their step
(serving/step_logs.py, data/step_logs.json)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from krakenlm.hardware import load_system
from krakenlm.models import get_preset
from krakenlm.serving.step_logs import (LOGS_FILE, StepLogDataError, load_logs,
                                        parse_sglang_line, predict, relative_error, timer_for)
from krakenlm.serving.step_time import StepTimer
from krakenlm.simulator import Simulator

KNOWN = "a100-40gb-llama3.1-8b-tp1-sglang-2026-04-n2-kv2140"


def _raw() -> dict:
    return json.loads(LOGS_FILE.read_text())


def _log(log_id):
    return next(log for log in load_logs() if log.id == log_id)


def _write(tmp_path, data) -> str:
    path = tmp_path / "step_logs.json"
    path.write_text(json.dumps(data))
    return str(path)


def _one_line_error(tmp_path, data, *words):
    with pytest.raises(StepLogDataError) as e:
        load_logs(_write(tmp_path, data))
    message = str(e.value)
    assert "\n" not in message
    for word in words:
        assert word in message
    return message


def test_every_log_names_its_source_and_setup():
    logs = load_logs()
    assert len(logs) == len(_raw()["logs"]) >= 2
    for log in logs:
        assert log.locator and log.engine_version and log.hf_model
        assert len(log.lines) == 2
        get_preset(log.model)
        load_system(log.system)


def test_derived_step_is_running_requests_over_throughput():
    log = _log(KNOWN)
    # "#running-req: 2, #token: 2100 ... 151.01" then "#running-req: 2, #token: 2180 ... 150.90"
    assert log.running_requests == 2 and log.kv_tokens == 2140
    assert log.gen_throughput_tok_s == 150.90
    assert log.measured_step_s == pytest.approx(2 / 150.90, rel=1e-12)
    assert log.kv_per_request == 1070 and log.batch == 2


def test_parser_reads_both_sglang_formats():
    new = parse_sglang_line("[2026-04-05 20:03:00] Decode batch, #running-req: 2, #token: 2180, "
                            "token usage: 0.02, cuda graph: False, gen throughput (token/s): "
                            "150.90, #queue-req: 0")
    assert (new.running_requests, new.kv_tokens, new.gen_throughput_tok_s,
            new.queued_requests, new.cuda_graph) == (2, 2180, 150.90, 0, False)
    old = parse_sglang_line("[2025-03-14 02:16:16 TP0] Decode batch. #running-req: 454, "
                            "#token: 175740, token usage: 0.42, gen throughput (token/s): "
                            "8831.39, largest-len: 0, #queue-req: 3, ")
    assert (old.running_requests, old.kv_tokens, old.gen_throughput_tok_s,
            old.queued_requests, old.cuda_graph) == (454, 175740, 8831.39, 3, None)
    assert parse_sglang_line("[2026-04-05 20:02:51] Prefill batch, #new-seq: 1, "
                             "#new-token: 158, #running-req: 31, #queue-req: 0") is None


def test_missing_field_is_a_one_line_error(tmp_path):
    data = _raw()
    del data["logs"][0]["measured_step_s"]
    _one_line_error(tmp_path, data, data["logs"][0]["id"], "lacks measured_step_s")


@pytest.mark.parametrize("field, value, words", [
    ("tp", 0, ["tp must be"]),
    ("engine", "tgi", ["engine 'tgi'"]),
    ("dtype", "int4", ["dtype 'int4'"]),
    ("measured_step_s", 0.0125, ["measured_step_s 0.0125", "its lines give"]),
    ("kv_tokens", 2180, ["kv_tokens 2180"]),
    ("cuda_graph", False, ["cuda_graph differs"]),
    ("gen_throughput_tok_s", "fast", ["gen_throughput_tok_s must be a positive number"]),
])
def test_bad_value_is_a_one_line_error(tmp_path, field, value, words):
    data = _raw()
    data["logs"][0][field] = value
    _one_line_error(tmp_path, data, data["logs"][0]["id"], *words)


def test_queued_or_foreign_lines_are_rejected(tmp_path):
    data = _raw()
    data["logs"][0]["lines"][1] = data["logs"][0]["lines"][1].replace("#queue-req: 0",
                                                                      "#queue-req: 5")
    _one_line_error(tmp_path, data, "queues requests")
    data = _raw()
    data["logs"][0]["lines"][0] = "[2026-04-05 20:02:51] Prefill batch, #new-seq: 1"
    _one_line_error(tmp_path, data, "not a sglang decode-progress line")


def test_duplicate_id_and_empty_file_are_rejected(tmp_path):
    data = _raw()
    data["logs"].append(data["logs"][0])
    _one_line_error(tmp_path, data, "appears twice")
    _one_line_error(tmp_path, {"logs": []}, "non-empty list 'logs'")


@pytest.fixture(scope="module")
def known_timer():
    return timer_for(_log(KNOWN))


def test_prediction_is_the_oracles_pure_decode_step(known_timer):
    log = _log(KNOWN)
    sim = Simulator(load_system("a100-40gb-x8"), "sglang", dtype="bf16")
    direct = StepTimer(sim, get_preset("llama3-8b"), 1, max_tokens=64, max_sequences=8,
                       max_context=4096).batch_s([], [1070, 1070])
    assert predict(log, known_timer) == pytest.approx(direct, rel=1e-12)
    assert relative_error(direct, log) == pytest.approx(direct / (2 / 150.90) - 1, rel=1e-9)


def test_lines_without_cuda_graph_decode_turn_the_profiles_graph_off(known_timer):
    assert known_timer.sim.profile.graphs.decode is True
    eager = timer_for(dataclasses.replace(_log(KNOWN), cuda_graph=False))
    assert eager.sim.profile.graphs.decode is False


def test_every_source_is_in_sources_md():
    text = (LOGS_FILE.parent / "SOURCES.md").read_text()
    section = text[text.index("# Sources of the decode step logs"):]
    for log in load_logs():
        assert f"`{log.source}`" in section
        assert log.locator.split(" ")[0] in section  # the repository#number
