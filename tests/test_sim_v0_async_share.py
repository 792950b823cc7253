"""benchmarks/sim_v0_async_share.py: the share of vLLM V0's per-sequence host time that stays
between the steps once output processing is asynchronous, and the profile constant it gives."""

import numpy as np
import pytest
from benchmark_module import load_benchmark

from krakenlm.simulator.constants.software import load_software


def test_slopes_give_back_the_lines_that_made_the_times():
    share = load_benchmark("sim_v0_async_share")
    batch = np.array([8, 16, 32, 64])
    rows = [(b, 0.1 + 0.01 * b, 0.8 + 0.005 * b, 0.2 + 0.02 * b, 0.5 + 0.06 * b) for b in batch]
    s = share.slopes_us(rows)
    assert s["schedule"] == pytest.approx(10.0) and s["process outputs"] == pytest.approx(60.0)
    assert s["between steps"] == pytest.approx(35.0) and s["total"] == pytest.approx(95.0)


def test_the_profile_carries_the_tp1_share_of_vidurs_split():
    share = load_benchmark("sim_v0_async_share")
    s = share.slopes_us(share.VIDUR_A100_MEDIANS_MS[share.SHIPPED])
    host = load_software("vllm-v0").host
    assert host.per_sequence_async_s == pytest.approx(round(s["between steps"], 0) * 1e-6)
    # the two shares add up to the per-sequence time the profile carries before 0.6.0
    assert s["total"] * 1e-6 == pytest.approx(host.per_sequence_s, rel=0.01)
