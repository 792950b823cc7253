"""benchmarks/serve_v0_loop.py: the in-sample attribution of `lambda`'s short TTFTs to vLLM V0's
API server on the engine's loop, and `replay_run`'s profile override it is built on."""

import dataclasses

import pytest
from benchmark_module import load_benchmark

from krakenlm.serving.validation import load_runs, replay_run
from krakenlm.simulator.constants.software import load_software


@pytest.fixture(scope="module")
def v0l():
    return load_benchmark("serve_v0_loop")


def test_best_loop_is_the_grid_value_with_the_smallest_median_error(v0l):
    rows = [{"loop_ms": c, "ttft_mean": e} for c, errs in
            {0.0: [-0.4, -0.3, -0.35], 1.0: [-0.1, 0.05, -0.02], 2.0: [0.2, 0.3, 0.1]}.items()
            for e in errs]
    assert v0l.best_loop(rows, [0.0, 1.0, 2.0]) == (1.0, pytest.approx(0.05))


def test_the_profile_carries_the_loop_time_and_nothing_else_changes(v0l):
    base = v0l.with_loop(0.0)
    loop = v0l.with_loop(1.5e-3)
    assert loop.frontend.engine_loop_request_s == 1.5e-3
    assert base.frontend.engine_loop_token_s == loop.frontend.engine_loop_token_s == 0.0
    assert loop.host == base.host and loop.frontend.request_s == base.frontend.request_s


def test_a_ten_prompt_burst_moves_by_ten_hand_overs(v0l):
    # lambda's 10-prompt H100 TP 1 burst (1,585 prompt tokens) fits one prefill step, so every
    # TTFT moves by exactly 10 x c at the override's c; the run's own (shipped) profile moves
    # it by 10 x its engine_loop_request_s + engine_loop_token_s x the burst's prompt tokens
    # (in the engine-loop form: the run's engine version, 0.5.4, left out)
    _, runs = load_runs()
    by_id = {r.id: r for r in runs}
    run = dataclasses.replace(by_id["lambda-h100-tp1-mistral7b-inf-n10"], engine_version=None)
    own = replay_run(run, by_id, scale=1.0)[0].rows
    zero = replay_run(run, by_id, software=v0l.with_loop(0.0), scale=1.0)[0].rows
    loop = replay_run(run, by_id, software=v0l.with_loop(1e-3), scale=1.0)[0].rows
    assert [b["ttft_s"] - a["ttft_s"] for a, b in zip(zero, loop)] == \
        pytest.approx([10e-3] * len(own))
    front = load_software("vllm-v0").frontend
    shift = 10 * front.engine_loop_request_s + front.engine_loop_token_s * sum(run.prompt_tokens)
    assert sum(run.prompt_tokens) == 1585
    assert [b["ttft_s"] - a["ttft_s"] for a, b in zip(zero, own)] == \
        pytest.approx([shift] * len(own))


@pytest.mark.parametrize("grid", ["a,b", "-1,2"])
def test_a_bad_grid_is_one_error_line(v0l, grid, capsys):
    with pytest.raises(SystemExit) as exit_info:
        v0l.main([f"--loop-ms={grid}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --loop-ms") and err.count("\n") == 1
