"""benchmarks/vllm_v0_frontend/run.py: the arithmetic behind the `vllm-v0` profile's measured
API-server hand-over (the servers themselves need setup.sh's vLLM environments)."""

import json
import shutil
from pathlib import Path

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
    line = out.strip().splitlines()[-1]
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
