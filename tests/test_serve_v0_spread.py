"""benchmarks/serve_v0_spread.py: the arithmetic of 0.5.4's spread hand-over (a what-if)."""

import pytest
from benchmark_module import load_benchmark

spread = load_benchmark("serve_v0_spread", "benchmarks_serve_v0_spread")


def test_a_burst_reaches_the_engine_after_every_first_part_then_one_send_at_a_time():
    # three prompts of 100, 200, 300 tokens: first parts 3 x 1 ms + 600 x 1 us = 3.6 ms,
    # then the sends 2 ms apart
    assert spread.spread_arrivals([100, 200, 300], 1e-3, 1e-6, 2e-3) == \
        pytest.approx([5.6e-3, 7.6e-3, 9.6e-3])


def test_the_stages_are_recovered_from_first_and_last_arrivals():
    # servers that follow the model exactly: a1 = 1.2 ms, t = 1 us, c2 = 1.5 ms
    a1, t, c2, n = 1.2e-3, 1e-6, 1.5e-3, 160
    harness = {"medians": {"0.5.4": {"x": {"mean_prompt_tokens": 100.0},
                                     "y": {"mean_prompt_tokens": 1000.0}}},
               "reps": {"0.5.4": {name: [{"n": n, "first_s": n * (a1 + t * length) + c2,
                                          "last_s": n * (a1 + t * length + c2)}] * 2
                                  for name, length in (("x", 100.0), ("y", 1000.0))}}}
    assert spread.fit_stages(harness) == pytest.approx((a1, t, c2))
