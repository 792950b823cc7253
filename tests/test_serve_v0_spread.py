"""benchmarks/serve_v0_spread.py: the lambda runs in 0.5.4's spread form and in the clump."""

import pytest
from benchmark_module import load_benchmark

from krakenlm.serving.validation import load_runs, replay_run, score

spread = load_benchmark("serve_v0_spread", "benchmarks_serve_v0_spread")


def test_the_spread_form_is_the_runs_own_and_the_clump_their_form_without_a_version():
    _, runs = load_runs()
    by_id = {r.id: r for r in runs}
    run = by_id["lambda-h100-tp1-mistral7b-inf-n20"]
    errors = spread.ttft_errors(run, by_id)
    assert errors["spread"] == score(run, replay_run(run, by_id, scale=1.0)[1])["ttft_mean"]["bias"]
    # the clump holds every request to the burst's last hand-over: later first tokens
    assert errors["clump"] > errors["spread"]
    assert errors["clump"] == pytest.approx(0.173, abs=0.01)  # stop 50's score of this run
