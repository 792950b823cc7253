"""benchmarks/vllm_v0_frontend/run.py: the arithmetic behind the `vllm-v0` profile's measured
API-server hand-over (the servers themselves need setup.sh's vLLM environments)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from benchmark_module import load_benchmark

run = load_benchmark("vllm_v0_frontend/run", "benchmarks_vllm_v0_frontend_run")
DATA = Path(__file__).parent.parent / "docs/data/vllm-v0-frontend.json"


def _fig(n, mean_s):
    return {"n": n, "first_s": mean_s / 2, "mean_s": mean_s, "last_s": mean_s * 1.1,
            "ttft_mean_s": mean_s + 0.05}


def test_the_fit_recovers_a_time_per_request_and_per_prompt_token():
    # c = 2 ms + 1 us a token; two servers each, the second's arrivals 1 % late and the
    # first's 1 % early, so the medians and the fit sit on the line; the 10-request burst
    # is tabled but not fitted
    c = {"short": 2e-3 + 1e-6 * 100, "long": 2e-3 + 1e-6 * 1000}
    raw = {v: {"short": [_fig(160, 160 * c["short"] * k) for k in (0.99, 1.01)],
               "long": [_fig(160, 160 * c["long"] * k) for k in (0.99, 1.01)],
               "small": [_fig(10, 0.5), _fig(10, 0.7)]}
           for v in ("0.5.4", "0.6.0")}
    table, (fixed, per_token), rows = run.summarise(
        raw, {"short": 100.0, "long": 1000.0, "small": 137.0})
    assert rows == 8
    assert fixed == pytest.approx(2e-3) and per_token == pytest.approx(1e-6)
    assert table["0.6.0"]["long"]["c_s"] == pytest.approx(c["long"])
    assert table["0.5.4"]["small"]["mean_s"] == pytest.approx(0.6)
    assert table["0.5.4"]["small"]["c_s"] == pytest.approx(0.06)


def test_the_committed_figures_are_their_own_fit():
    # docs/data/vllm-v0-frontend.json: its medians and fit follow from its raw servers
    data = json.loads(DATA.read_text())
    lengths = {name: fig["mean_prompt_tokens"] for name, fig in data["medians"]["0.6.0"].items()}
    table, (fixed, per_token), rows = run.summarise(data["reps"], lengths)
    for version, figs in data["medians"].items():
        for name, fig in figs.items():
            assert table[version][name] == pytest.approx(fig), (version, name)
    assert (fixed, per_token, rows) == pytest.approx(
        (data["fit"]["request_s"], data["fit"]["per_prompt_token_s"], data["fit"]["rows"]))


def test_the_two_jobs_of_0_5_4_are_recovered_from_first_and_last_arrivals():
    # servers that follow serving/frontend.py's front loop exactly: handler 1.2 ms + 1 us a
    # prompt token, send 1.5 ms; the first request arrives after every handler and one send
    a1, t, c2, n = 1.2e-3, 1e-6, 1.5e-3, 160
    raw = {"0.5.4": {name: [{"n": n, "first_s": n * (a1 + t * length) + c2,
                             "last_s": n * (a1 + t * length + c2)}] * 2
                     for name, length in (("x", 100.0), ("y", 1000.0))}}
    assert run.fit_front_loop(raw, {"x": 100.0, "y": 1000.0}) == pytest.approx((a1, t, c2))


def test_the_committed_front_loop_fit_follows_from_its_servers(tmp_path):
    data = json.loads(DATA.read_text())
    lengths = {name: fig["mean_prompt_tokens"] for name, fig in data["medians"]["0.5.4"].items()}
    fit = data["fit_front_loop_054"]
    assert run.fit_front_loop(data["reps"], lengths) == pytest.approx(
        (fit["request_s"], fit["per_prompt_token_s"], fit["send_s"]))
    # summarising the same servers again rewrites the summary, never the servers
    out = tmp_path / "again.json"
    run.main(["--from-json", str(DATA), "--json", str(out)])
    again = json.loads(out.read_text())
    assert again["reps"] == data["reps"] and again["fit_front_loop_054"] == pytest.approx(fit)
    assert again["summarised_by"].endswith(f"--json {out}")


def test_arrivals_are_the_ones_inside_the_burst_window(tmp_path):
    log = tmp_path / "arrivals.jsonl"
    log.write_text("".join(json.dumps({"id": i, "t": t}) + "\n"
                           for i, t in enumerate((9.0, 10.2, 10.1, 11.5, 12.0))))
    assert list(run.arrivals(log, 10.0, 12.0)) == pytest.approx([0.1, 0.2, 1.5])


def test_the_pr6883_client_sends_when_the_replay_does():
    # benchmarks/vllm_v0_frontend/pr6883.py sends the 600 requests at the replay's own Poisson
    # arrivals of the source (run_trace, seed 0), so the two see one workload
    from krakenlm.serving.validation import load_runs, run_trace
    pr = load_benchmark("vllm_v0_frontend/pr6883", "benchmarks_vllm_v0_frontend_pr6883")
    _, runs = load_runs()
    by_id = {r.id: r for r in runs}
    trace, first = run_trace(by_id["vllm-pr6883-h100-tp1-llama3-8b-qps-10-zmq"], by_id)
    arrivals = [r.arrival_s for r in trace.requests[first:]]
    assert pr.sends() == pytest.approx([a - arrivals[0] for a in arrivals])


def test_the_client_means_count_streams_of_two_chunks_or_more():
    pr = load_benchmark("vllm_v0_frontend/pr6883", "benchmarks_vllm_v0_frontend_pr6883")
    requests = [{"ttft": 0.1, "e2e": 1.1, "chunks": 11}, {"ttft": 0.3, "e2e": 0.8, "chunks": 6},
                {"ttft": 0.2, "e2e": 0.2, "chunks": 1}, {"status": 400}]
    ttft, tpot, n = pr.client_means(requests)
    assert (ttft, tpot, n) == pytest.approx((0.2, 0.1, 2))


@pytest.mark.parametrize("argv, message", [
    (["--envs", "/nonexistent"], "error: no vLLM 0.5.4 environment at /nonexistent/vllm-0.5.4"),
    (["--reps", "0"], "error: --reps 0: at least one server per version")])
def test_a_missing_environment_or_no_servers_is_one_error_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_the_bootstrap_interval_collapses_when_every_server_agrees():
    raw = {v: {"short": [_fig(160, 160 * 2.1e-3)] * 3, "long": [_fig(160, 160 * 3.0e-3)] * 3}
           for v in ("0.5.4", "0.6.0")}
    low, high = run.bootstrap(raw, {"short": 100.0, "long": 1000.0}, 100.0, draws=50)
    assert low == pytest.approx(2.1e-3) and high == pytest.approx(2.1e-3)


def test_the_committed_fit_lies_inside_its_bootstrap_interval(capsys):
    run.main(["--from-json", str(DATA)])
    out = capsys.readouterr().out
    fit = json.loads(DATA.read_text())["fit"]
    c = fit["request_s"] + fit["per_prompt_token_s"] * 212.8125
    line = next(x for x in out.splitlines() if "interval over the servers" in x)
    low, high = (float(x) / 1e3 for x in line.split("servers ")[1].split(" ms")[0].split("-"))
    assert low < c < high


@pytest.mark.skipif(shutil.which("taskset") is None, reason="the client runs under taskset")
def test_a_failed_burst_is_one_error_line_naming_the_server_log(tmp_path, capsys):
    # a client that fails as burst.py does when the server drops a stream
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    python = env / "bin/python"
    python.write_text("#!/bin/sh\necho 'Traceback (most recent call last):' >&2\n"
                      "echo 'aiohttp.ClientPayloadError: Response payload is not completed' >&2\n"
                      "exit 1\n")
    python.chmod(0o755)
    with pytest.raises(SystemExit) as exit_info:
        run.client(env, tmp_path, tmp_path / "sharegpt10.json", tmp_path / "result.json")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == (f"error: the client's burst sharegpt10.json failed (aiohttp.ClientPayloadError: "
                   f"Response payload is not completed); see {tmp_path}/server.log\n")


delivery = load_benchmark("vllm_v0_frontend/delivery", "benchmarks_vllm_v0_frontend_delivery")
DELIVERY = Path(__file__).parent.parent / "docs/data/vllm-v0-delivery.json"


def test_a_prompt_step_gives_first_tokens_to_the_next_arrivals_in_order():
    steps = [{"t": 0.01, "gpu_s": 0.005, "prompts": 1}, {"t": 0.02, "gpu_s": 0.01, "prompts": 3}]
    assert delivery.first_token_s(steps, 3) == pytest.approx([0.015, 0.03, 0.03])


def test_a_token_waits_for_the_jobs_ready_before_it():
    ready = np.array([0.0, 0.0, 0.002, 0.004])
    done = np.array([0.001, 0.002, 0.003, 0.005])
    # made at 0.0015 it waits for the two jobs ready at 0 (to 0.002); at 0.0045 for all four
    assert delivery.through_front_loop(np.array([0.0015, 0.0045, 0.01]), ready, done) == \
        pytest.approx([0.002, 0.005, 0.01])


def test_the_committed_delivery_figures_follow_from_their_servers():
    data = json.loads(DELIVERY.read_text())
    lengths = {name: list(p) for name, (p, _) in delivery.run.bursts().items()}
    table = delivery.table(data["servers"], lengths)
    assert table.keys() == data["medians"].keys()
    for name, figs in data["medians"].items():
        assert table[name] == pytest.approx(figs), name


stand_in = load_benchmark("vllm_v0_frontend/replay_stand_in",
                          "benchmarks_vllm_v0_frontend_replay_stand_in")
STAND_IN = Path(__file__).parent.parent / "docs/data/vllm-v0-stand-in.json"
GAPS = {"prefill": [3e-3, 4e-4, 10], "decode": [2e-3, 2e-4, 10]}


def test_the_stand_in_timer_charges_the_stand_in_gpu_and_the_host_gaps():
    timer = stand_in.StandInTimer(GAPS)
    # a prefill of 3 prompts, 600 tokens: 5 ms + 600 x 15 us, then 3 ms + 3 x 0.4 ms
    assert timer.step_s(600, 3, 3, 0.0, True) == pytest.approx(5e-3 + 9e-3 + 3e-3 + 1.2e-3)
    # a decode of 10: 7 ms + 10 x 20 us, then 2 ms + 10 x 0.2 ms; without its host work
    assert timer.step_s(10, 10, 10, 0.0, False) == pytest.approx(7.2e-3 + 4e-3)
    assert timer.step_s(10, 10, 10, 0.0, False, host=False) == pytest.approx(7.2e-3)
    assert timer.decode_steps_list(10, 50.0, 3) == pytest.approx([11.2e-3] * 3)


def test_a_lone_request_takes_its_way_in_and_one_prefill_step():
    from krakenlm.simulator.constants.software import load_software
    front = load_software("vllm-v0").frontend
    way_in = front.front_loop_request_s + front.front_loop_token_s * 100 + front.front_loop_send_s
    ttft = stand_in.replay_burst([100], [8], stand_in.StandInTimer(GAPS), "0.5.4")
    assert ttft == pytest.approx(way_in + 5e-3 + 100 * 1.5e-5 + 3e-3 + 4e-4)
    # a request the server refuses (no output tokens, or past max_model_len) is left out
    assert stand_in.replay_burst([100, 2000, 50], [8, 100, 0], stand_in.StandInTimer(GAPS),
                                 "0.5.4") == pytest.approx(ttft)


def test_the_committed_stand_in_comparison_is_reproduced():
    data = json.loads(STAND_IN.read_text())
    again = stand_in.compare()
    assert again["host_gaps"] == data["host_gaps"]
    for name, row in data["bursts"].items():
        assert again["bursts"][name] == pytest.approx(row), name


multi = load_benchmark("vllm_v0_frontend/multi_step_host",
                       "benchmarks_vllm_v0_frontend_multi_step_host")
MULTI_DATA = Path(__file__).parent.parent / "docs/data/vllm-v0-multi-step-host.json"


def test_a_later_step_is_launch_to_launch_inside_one_round():
    # a round of 4 steps at batch 8, then the next round's first: steps 1 and 2 are later
    # steps followed inside the round; step 0 schedules, step 3 is the round's last
    log = [{"t": 0.0, "seqs": 8, "step": 0, "last": False, "host_s": 1e-3},
           {"t": 0.010, "seqs": 8, "step": 1, "last": False, "host_s": 2e-4},
           {"t": 0.0125, "seqs": 8, "step": 2, "last": False, "host_s": 3e-4},
           {"t": 0.0155, "seqs": 8, "step": 3, "last": True, "host_s": 4e-4},
           {"t": 0.020, "seqs": 8, "step": 0, "last": False, "host_s": 1e-3}]
    rows = multi.later_steps(log)
    assert [(n, round(s, 6), h) for n, s, h in rows] == [(8, 0.0025, 2e-4), (8, 0.003, 3e-4)]
    # a prompt step between two decode steps breaks the pairing
    assert multi.later_steps([log[1], {"t": 0.011, "seqs": 8, "prompts": 8}, log[2]]) == []


def test_the_host_time_per_sequence_is_the_least_squares_line_through_the_origin():
    rows = [(10, 0.0, 10 * 3e-5), (100, 0.0, 100 * 3e-5), (200, 0.0, 200 * 3e-5)]
    assert multi.per_sequence(rows) == pytest.approx(3e-5)
    noisy = [(10, 0.0, 4e-4), (20, 0.0, 5e-4)]
    # sum(n y) / sum(n^2) = (10 * 4e-4 + 20 * 5e-4) / 500
    assert multi.per_sequence(noisy) == pytest.approx(2.8e-5)


def test_the_shipped_multi_step_host_constant_is_the_committed_servers_fit():
    from krakenlm.simulator.constants.software import load_software

    data = json.loads(MULTI_DATA.read_text())
    summary = multi.summarise(data["servers"])
    assert summary["gpu_bound"]["host_to_sampler_per_seq_s"] == pytest.approx(
        data["gpu_bound"]["host_to_sampler_per_seq_s"], rel=1e-12)
    assert summary["host_bound"]["host_paced_per_seq_s"] == pytest.approx(
        data["host_bound"]["host_paced_per_seq_s"], rel=1e-12)
    # the floor is the host's cycle where it sets the pace (the 0.5 ms servers' paced steps),
    # not its part before the sampler's launch on the GPU-bound servers (34.3 us), which is less
    shipped = load_software("vllm-v0").host.multi_step_host_seq_s
    assert shipped == pytest.approx(summary["host_bound"]["host_paced_per_seq_s"], rel=5e-3)
    assert summary["gpu_bound"]["host_to_sampler_per_seq_s"] == pytest.approx(3.43e-5, rel=5e-3)
    assert summary["host_bound"]["host_paced_steps"] > 1000
    # the GPU-bound servers' steps are the stand-in GPU's until the host's work outgrows it
    by_batch = summary["gpu_bound"]["by_batch"]
    assert by_batch["80"]["step_s"] == pytest.approx(0.012, rel=1e-3)
    assert by_batch["256"]["step_s"] > 0.012
