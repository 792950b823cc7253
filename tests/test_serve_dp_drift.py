"""benchmarks/serve_dp_drift.py: one DP engine's steps slower, under either balancer form."""

import json
from pathlib import Path

import pytest
from benchmark_module import load_benchmark

from krakenlm.serving import replay
from krakenlm.serving.validation import load_runs, replay_run, score

bench = load_benchmark("serve_dp_drift", "benchmarks_serve_dp_drift")
DATA = Path(__file__).resolve().parent.parent / "docs" / "data"
RUN = "scicom-vllm-h100-tp4-dp2-llama3-70b-in1024-c10"


class _Timer:
    def step_s(self, *args, **kwargs):
        return 2.0

    def decode_steps_list(self, *args, **kwargs):
        return [1.0, 3.0]

    other = "passed through"


def test_the_slower_timer_scales_every_step_and_passes_the_rest_through():
    t = bench.SlowerTimer(_Timer(), 0.25)
    assert t.step_s(1, 1, 1, 0.0, False) == 2.5
    assert t.decode_steps_list(2, 10.0, 2) == [1.25, 3.75]
    assert t.other == "passed through"


def test_the_what_if_is_undone_after_its_replays():
    engines, rule = replay.REPLAY_ENGINES["vllm-v1"], replay.dp_counts_published
    with bench.second_engine_slower(0.01, True):
        assert replay.REPLAY_ENGINES["vllm-v1"] is not engines
        assert replay.dp_counts_published("0.19.0") is True
    assert replay.REPLAY_ENGINES["vllm-v1"] is engines and replay.dp_counts_published is rule


def test_a_committed_row_is_reproduced_by_replaying_its_run():
    data = json.loads((DATA / "serve-dp-drift.json").read_text())
    row = next(r for r in data["rows"] if r["slower"] == 0.01 and r["balancer"].startswith("load"))
    _, runs = load_runs()
    run = next(r for r in runs if r.id == RUN)
    with bench.second_engine_slower(0.01, False):
        got = score(run, replay_run(run, runs, 0)[1])["ttft_mean"]["bias"]
    assert got == pytest.approx(row["ttft_mean_at_10"][RUN], rel=1e-9)
    # without the difference the two engines stay in phase: the grouped prompts' TTFT
    with bench.second_engine_slower(0.0, False):
        same = score(run, replay_run(run, runs, 0)[1])["ttft_mean"]["bias"]
    assert same > 1.0 and got < 0.5  # in phase: +128 %; 1 % apart: +11 %


@pytest.mark.parametrize("slower", ["a", "0.5,1", ""])
def test_bad_fractions_are_one_error_line(slower, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main([f"--slower={slower}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --slower") and err.count("\n") == 1
