"""benchmarks/serve_v0_hand_over.py: the measured V0 hand-over scaled, nothing else changed."""

import pytest
from benchmark_module import load_benchmark

from krakenlm.simulator.constants.software import load_software

hand = load_benchmark("serve_v0_hand_over", "benchmarks_serve_v0_hand_over")


def test_a_scale_multiplies_both_hand_over_times_and_nothing_else():
    base, half = load_software("vllm-v0"), hand.scaled(0.5)
    assert half.frontend.engine_loop_request_s == pytest.approx(
        base.frontend.engine_loop_request_s / 2)
    assert half.frontend.engine_loop_token_s == pytest.approx(
        base.frontend.engine_loop_token_s / 2)
    for name in ("front_loop_request_s", "front_loop_token_s", "front_loop_send_s"):
        assert getattr(half.frontend, name) == pytest.approx(getattr(base.frontend, name) / 2)
    assert half.frontend.front_loop_since == base.frontend.front_loop_since
    assert half.host == base.host and half.frontend.request_s == base.frontend.request_s


@pytest.mark.parametrize("scales", ["a,b", "-1,1"])
def test_bad_scales_are_one_error_line(scales, capsys):
    with pytest.raises(SystemExit) as exit_info:
        hand.main([f"--scales={scales}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --scales") and err.count("\n") == 1
