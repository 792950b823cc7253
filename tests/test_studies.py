from krakenlm.studies.kraken_ttft import geomean_reduction, run_grid, write_report


def test_kraken_ttft_study_on_a_small_grid(tmp_path):
    rows = run_grid("a100-80gb-x8", 1, shapes=("gpt3-1.3b",), prompts=(128,), degrees=(4, 8))
    assert len(rows) == 2
    for row in rows:
        # the parallel block halves the blocking all-reduces; Kraken hides them behind attention
        assert row.ttft_s["kraken"] < row.ttft_s["parallel"] < row.ttft_s["gpt"]
        assert "GEMM overlapped with AllReduce" in row.layer_s["kraken"]
        assert "GEMM overlapped with AllReduce" not in row.layer_s["gpt"]
        assert row.layer_s["gpt"]["exposed AllReduce"] > row.layer_s["parallel"]["exposed AllReduce"]
    assert 0 < geomean_reduction(rows) < 1
    report = write_report(rows, tmp_path, system="a100-80gb-x8", batch=1)
    text = report.read_text()
    assert "| gpt3-1.3b | 128 | 4 |" in text and "Geometric-mean TTFT reduction" in text
    assert (tmp_path / "ttft.png").stat().st_size > 10_000
    assert (tmp_path / "layer_breakdown.png").stat().st_size > 10_000
