"""benchmarks/serve_v1_front_loop.py: the vllm profile's front-end loop scaled, nothing else."""

import pytest
from benchmark_module import load_benchmark

from krakenlm.simulator.constants.software import load_software

bench = load_benchmark("serve_v1_front_loop", "benchmarks_serve_v1_front_loop")


def test_a_scale_multiplies_the_loop_times_and_nothing_else():
    base, half, none = load_software("vllm"), bench.scaled(0.5), bench.scaled(0.0)
    for name in bench.TIMES:
        assert getattr(half.frontend, name) == pytest.approx(getattr(base.frontend, name) / 2)
    assert not none.frontend.front_loop(None)
    assert half.frontend.request_s == base.frontend.request_s and half.host == base.host


@pytest.mark.parametrize("scales", ["a,b", "-1,1"])
def test_bad_scales_are_one_error_line(scales, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main([f"--scales={scales}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --scales") and err.count("\n") == 1
