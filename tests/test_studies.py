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
    assert "| gpt3-1.3b | 128 | 4 |" in text and "| a100-80gb-x8 | 2 | **" in text
    assert (tmp_path / "ttft-a100-80gb-x8.png").stat().st_size > 10_000
    assert (tmp_path / "layer_breakdown.png").stat().st_size > 10_000


def test_kraken_ttft_rows_carry_the_interval_of_each_ttft(tmp_path):
    import json

    rows = run_grid("a100-80gb-x8", 1, shapes=("gpt3-1.3b",), prompts=(128,), degrees=(8,))
    low, high = rows[0].ttft_interval_s["kraken"]
    assert low < high and high > rows[0].ttft_s["kraken"] * 1.01
    write_report(rows, tmp_path, system="a100-80gb-x8", batch=1)
    assert f"({low * 1e3:.1f}-{high * 1e3:.1f})" in (tmp_path / "report.md").read_text()
    saved = json.loads((tmp_path / "rows.json").read_text())["rows"][0]
    assert saved["ttft_interval_s"]["kraken"] == [low, high]


def test_kraken_ttft_sensitivity_changes_one_assumption_at_a_time(tmp_path):
    from krakenlm.studies.kraken_ttft import sensitivity

    # a long prompt: compute, not the collective, bounds the overlapped layer (with or without
    # a GPU calibration), so the SM share taken by the collective shows
    grid = dict(shapes=("gpt3-1.3b",), prompts=(2048,), degrees=(8,))
    rows = sensitivity("a100-80gb-x8", 1, "trtllm", **grid)
    by = {r["variant"]: r["geomean_reduction"] for r in rows}
    assert by["as calibrated"] == geomean_reduction(run_grid("a100-80gb-x8", 1, **grid))
    # more SMs taken by the collective slows the compute it overlaps: Kraken gains less
    assert by["collective takes 20 % of the SMs"] < by["collective takes 5 % of the SMs (instead of 10 %)"]
    assert len(set(by.values())) > 3  # the variants do change the answer
    report = write_report(run_grid("a100-80gb-x8", 1, **grid), tmp_path, system="a100-80gb-x8",
                          batch=1, sensitivity_rows={"a100-80gb-x8": rows})
    text = report.read_text()
    assert "| variant | a100-80gb-x8 |" in text and "| **range** | " in text
