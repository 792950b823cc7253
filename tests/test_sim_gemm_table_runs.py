"""benchmarks/sim_gemm_table_runs.py: two measurement runs of the same GEMMs, compared per m."""

import json

import pytest
from benchmark_module import load_benchmark


@pytest.fixture(scope="module")
def runs():
    return load_benchmark("sim_gemm_table_runs")


def _table(path, rows, dtype="float16"):
    lines = ["framework,version,device,op_name,kernel_source,gemm_dtype,m,n,k,latency"]
    lines += [f"VLLM,0,GPU,gemm,x,{dtype},{m},{n},{k},{ms}" for m, n, k, ms in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_ratio_and_rates_per_m_over_the_shapes_both_runs_measured(runs, tmp_path):
    a = _table(tmp_path / "a.txt", [(1, 4096, 4096, 0.02), (1, 8192, 4096, 0.04),
                                    (64, 4096, 4096, 0.03), (1, 1024, 1024, 0.01)])
    b = _table(tmp_path / "b.txt", [(1, 4096, 4096, 0.022), (1, 8192, 4096, 0.044),
                                    (64, 4096, 4096, 0.03), (1, 1024, 1024, 0.05),
                                    (2, 4096, 4096, 0.02)], dtype="bfloat16")
    out = tmp_path / "out.json"
    runs.main([str(a), str(b), "--json", str(out)])
    data = json.loads(out.read_text())
    # the small weight (1024^2) and the shape only B measured are left out
    assert data["shapes"] == 3 and set(data["by_m"]) == {"1", "64"}
    assert data["by_m"]["1"]["ratio_b_over_a"] == pytest.approx(1.1)
    assert data["by_m"]["64"]["ratio_b_over_a"] == pytest.approx(1.0)
    streamed = 2.0 * (4096 * 4096 + 64 * 4096 + 64 * 4096)
    assert data["by_m"]["64"]["tb_per_s_a"] == pytest.approx(streamed / 0.03e-3 / 1e12)
    assert data["b"]["dtype"] == ["bfloat16"]


def test_a_table_without_16_bit_rows_is_one_error_line(runs, tmp_path):
    a = _table(tmp_path / "a.txt", [(1, 4096, 4096, 0.02)], dtype="fp8")
    with pytest.raises(SystemExit, match="no 16-bit"):
        runs.main([str(a), str(a)])
