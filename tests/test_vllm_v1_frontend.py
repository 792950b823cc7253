"""benchmarks/vllm_v1_frontend/: the arithmetic behind the V1 harness's figures (the servers
themselves need setup.sh's vLLM environment)."""

import json
from pathlib import Path

import pytest
from benchmark_module import load_benchmark

handover = load_benchmark("vllm_v1_frontend/handover", "benchmarks_vllm_v1_frontend_handover")
closed = load_benchmark("vllm_v1_frontend/closed_loop", "benchmarks_vllm_v1_frontend_closed_loop")
serial = load_benchmark("vllm_v1_frontend/serial_step", "benchmarks_vllm_v1_frontend_serial_step")
DATA = Path(__file__).parent.parent / "docs/data"


def _server(arrivals_of: dict) -> dict:
    return {name: {"arrivals_s": a, "ttft_mean_s": 0.1} for name, a in arrivals_of.items()}


def test_one_at_a_time_recovers_c_from_a_queue():
    # arrivals exactly (k + 1) x 3 ms in every 160-request burst; the 10-request one is not fitted
    queue = [(k + 1) * 3e-3 for k in range(160)]
    servers = [_server({"sharegpt160": queue, "sharegpt10": [1.0] * 10})] * 2
    c, rows = handover.fit(servers)
    assert c == pytest.approx(3e-3) and rows == 320


def test_the_medians_are_per_burst_over_the_servers():
    servers = [_server({"x": [0.01, 0.02, 0.05]}), _server({"x": [0.03, 0.04, 0.07]}),
               _server({"x": [0.02, 0.03, 0.09]})]
    row = handover.table(servers)["x"]
    assert row["first_s"] == pytest.approx(0.02) and row["last_s"] == pytest.approx(0.07)
    assert row["mean_s"] == pytest.approx(0.14 / 3) and row["n"] == 3  # the servers' means 0.027, 0.047, 0.047


def test_the_shipped_profile_carries_the_handlers_then_sends_fit():
    from krakenlm.simulator.constants.software import load_software
    fit = json.loads((DATA / "vllm-v1-frontend.json").read_text())["fit_two_phase"]
    front = load_software("vllm").frontend
    assert front.front_loop_request_s == float(f"{fit['handler_s']:.2g}")
    assert front.front_loop_token_s == float(f"{fit['per_prompt_token_s']:.3g}")
    assert front.front_loop_send_s == float(f"{fit['send_s']:.3g}")
    assert front.front_loop(None) and front.after_engine_s() == pytest.approx(8.7e-3 - 3.05e-3)


def test_the_committed_figures_follow_from_their_servers():
    data = json.loads((DATA / "vllm-v1-frontend.json").read_text())
    c, rows = handover.fit(data["servers"])
    assert (c, rows) == pytest.approx((data["fit"]["one_at_a_time_s"], data["fit"]["arrivals"]))
    two = handover.fit_two_phase(data["servers"])
    assert two == pytest.approx(tuple(data["fit_two_phase"].values()))
    for name, row in handover.table(data["servers"]).items():
        assert row == pytest.approx(data["medians"][name]), name


def test_the_stand_in_timer_charges_its_gpu_time_and_the_gap():
    timer = closed.StandInTimer(2e-3)
    assert timer.step_s(200, 10, 10, 0.0, True) == pytest.approx(0.011 + 200 * 2.5e-5 + 2e-3)
    assert timer.step_s(10, 10, 10, 0.0, False, host=False) == pytest.approx(0.011 + 10 * 2.5e-5)
    assert timer.decode_steps_list(4, 100.0, 3) == pytest.approx([0.011 + 1e-4 + 2e-3] * 3)


def test_a_replayed_closed_loop_of_one_equals_request_s_and_one_prefill_step():
    ttfts = closed.replay_loop(1, 3, 2e-3, 0.03, front_loop=False)
    assert ttfts == pytest.approx([0.03 + 0.011 + 128 * 2.5e-5 + 2e-3] * 3)
    # through the shipped loop: request_s holds its handler and hand-over, not the handler's
    # per-token part (128 x 1.24 us)
    shipped = closed.replay_loop(1, 3, 2e-3, 0.03)
    assert shipped == pytest.approx([0.03 + 0.011 + 128 * 2.5e-5 + 2e-3 + 128 * 1.24e-6] * 3)


@pytest.mark.parametrize("name", ["vllm-v1-closed-loop.json", "vllm-v1-closed-loop-long.json"])
def test_the_committed_closed_loop_comparison_is_reproduced(name):
    data = json.loads((DATA / name).read_text())
    again = closed.compare(data["loops"], data.get("prompt", closed.PROMPT), data["fake_gpu"])
    assert again["request_s"] == pytest.approx(data["comparison"]["request_s"])
    for n, row in data["comparison"]["loops"].items():
        for who in ("server", "replay_without_loop", "replay"):
            assert again["loops"][n][who] == pytest.approx(row[who]), (n, who)


def test_the_long_prompt_loops_replay_like_the_server_within_two_percent():
    """1,023-token prompts at 5 and 10 in flight: vLLM's server groups each wave's prompts
    (one alone, the rest together); the shipped replay does the same (docs/serving.md)."""
    data = json.loads((DATA / "vllm-v1-closed-loop-long.json").read_text())
    for n in ("5", "10"):
        row = data["comparison"]["loops"][n]
        assert row["replay"]["mean_s"] == pytest.approx(row["server"]["mean_s"], rel=0.02)


def test_loops_parse_with_one_in_flight_first_and_bad_ones_fail(capsys):
    assert list(closed.parse_loops("10:200,1:5,5:50").items()) == [(1, 5), (10, 200), (5, 50)]
    assert closed.parse_loops("5:50")[1] == closed.LOOPS[1]
    for bad in ("5", "5:2", "x:1"):
        with pytest.raises(SystemExit):
            closed.parse_loops(bad)
        assert capsys.readouterr().err.startswith("error: --loops")


@pytest.mark.parametrize("script", [handover, closed, serial])
def test_a_missing_environment_is_one_error_line(script, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--envs", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no vLLM 0.19.0 environment") and err.count("\n") == 1


def test_the_serial_gaps_are_decode_to_decode_and_fit_a_line():
    steps = [{"t": 0.0, "seqs": 4, "prompt_tokens": 0, "gpu_s": 0.01},
             {"t": 0.0106, "seqs": 4, "prompt_tokens": 0, "gpu_s": 0.01},  # gap 0.6 ms
             {"t": 0.0212, "seqs": 5, "prompt_tokens": 128, "gpu_s": 0.01},  # a prefill follows
             {"t": 0.0318, "seqs": 5, "prompt_tokens": 0, "gpu_s": 0.01}]
    assert serial.decode_gaps(steps) == [(4, pytest.approx(6e-4))]
    line = {str(n): [(n, 4e-4 + 1e-5 * n)] * 3 for n in (1, 10, 100)}
    line["7"] = [(7, 0.5)]  # a descheduled process: left out
    fit = serial.fit(line)
    assert (fit["per_step_s"], fit["per_sequence_s"]) == pytest.approx((4e-4, 1e-5))
    assert fit["gaps"] == 9 and fit["rms_s"] == pytest.approx(0.0, abs=1e-12)


def test_the_shipped_profile_carries_the_committed_serial_step_fit():
    from krakenlm.simulator.constants.software import load_software
    data = json.loads((DATA / "vllm-v1-serial-step.json").read_text())
    loops = {n: [tuple(p) for p in gaps] for n, gaps in data["loops"].items()}
    fit = serial.fit(loops)
    assert fit == pytest.approx(data["fit"])
    for n, row in serial.medians(loops).items():
        assert row == pytest.approx(data["medians"][n]), n
    host = load_software("vllm").host
    assert host.decode_step_s == host.prefill_step_s == float(f"{fit['per_step_s']:.3g}")
    assert host.per_sequence_s == float(f"{fit['per_sequence_s']:.3g}")
    assert host.step_overlaps_gpu  # beside the GPU unless the replay steps serially
