"""benchmarks/aic_gemm_fixed_part.py: the fixed part and stream of a GEMM table's small-M rows."""

import numpy as np
import pytest
from benchmark_module import load_benchmark


def test_the_fit_gives_back_the_line_that_made_the_latencies():
    afp = load_benchmark("aic_gemm_fixed_part")
    weight = np.array([25e6, 50e6, 100e6, 400e6])
    latency = 9e-6 + weight / 1.7e12
    fixed, stream = afp.fit(weight, latency)
    assert fixed == pytest.approx(9e-6) and stream == pytest.approx(1.7e12)
