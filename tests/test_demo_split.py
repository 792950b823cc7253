"""benchmarks/demo_split.py: the arithmetic behind the demo's steps-against-seeds choice (pooled
seed spread, a published interval turned back into its spread, expected half-widths, CPU time
from /usr/bin/time -v) and its table from compare summaries."""

import json
import math
import statistics

import pytest
from benchmark_module import load_benchmark

from krakenlm.studies.stats import ratio_interval


@pytest.fixture(scope="module")
def ds():
    return load_benchmark("demo_split")


DIFFS = [0.31, 0.05, 0.44, 0.12, 0.27, 0.19]


def test_pooling_groups_gives_the_mean_and_sd_of_all_their_values(ds):
    whole = ds.pool([ds.Group(1, d, 0.0) for d in DIFFS])
    halves = ds.pool([ds.pool([ds.Group(1, d, 0.0) for d in DIFFS[:3]]),
                      ds.pool([ds.Group(1, d, 0.0) for d in DIFFS[3:]])])
    for g in (whole, halves):
        assert g.n == 6
        assert g.mean == pytest.approx(statistics.fmean(DIFFS))
        assert g.sd == pytest.approx(statistics.stdev(DIFFS))


def test_a_published_interval_gives_back_the_spread_that_made_it(ds):
    made = ratio_interval(DIFFS[:3])
    group = ds.group_from_interval(made.mean, made.low, made.high, 3)
    assert group.mean == pytest.approx(statistics.fmean(DIFFS[:3]))
    assert group.sd == pytest.approx(statistics.stdev(DIFFS[:3]))
    with pytest.raises(ds.KrakenError, match="n >= 2"):
        ds.group_from_interval(1.3, 0.9, 1.9, 1)


def test_expected_half_width_is_t_sd_over_root_n(ds):
    assert ds.expected_half_width(0.2, 3) == pytest.approx(4.303 * 0.2 / math.sqrt(3))
    assert ds.expected_half_width(0.2, 6) == pytest.approx(2.571 * 0.2 / math.sqrt(6))
    low, high = ds.sd_interval(0.2, 6)  # chi-square, 5 dof: 0.831 and 12.833
    assert low == pytest.approx(0.2 * math.sqrt(5 / 12.8325), rel=1e-4)
    assert high == pytest.approx(0.2 * math.sqrt(5 / 0.8312), rel=1e-4)
    low, high = ds.sd_ratio_interval(1.0, 6, 6)  # F(5, 5) 97.5 %: 7.146
    assert low == pytest.approx(1 / math.sqrt(7.1464), rel=1e-4)
    assert high == pytest.approx(math.sqrt(7.1464), rel=1e-4)


def test_cpu_seconds_adds_user_and_system_time(ds):
    text = ("\tCommand being timed: \"python x\"\n\tUser time (seconds): 812.40\n"
            "\tSystem time (seconds): 20.61\n\tPercent of CPU this job got: 95%\n")
    assert ds.cpu_seconds(text) == pytest.approx(833.01)
    assert ds.cpu_seconds(text + text) == pytest.approx(2 * 833.01)  # stopped, then resumed
    with pytest.raises(ds.KrakenError, match="User time"):
        ds.cpu_seconds("nothing here")


def _summary(steps: int, seeds: list[int], diffs: list[float]) -> dict:
    runs = []
    for seed, diff in zip(seeds, diffs):
        runs += [{"preset": "gpt-mini8", "seed": seed, "tokens": steps * 1024, "val_loss": 5.0},
                 {"preset": "kraken-mini8-2way", "seed": seed, "tokens": steps * 1024,
                  "val_loss": 5.0 + diff}]
    return {"runs": runs}


def test_the_table_compares_splits_with_the_spread_of_every_seed_at_their_steps(
        ds, tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps(_summary(200, [1, 2, 3, 4, 5, 6], DIFFS)))
    (tmp_path / "b.json").write_text(json.dumps(_summary(400, [4, 5, 6], [0.2, 0.3, 0.1])))
    (tmp_path / "time.txt").write_text("User time (seconds): 100.5\nSystem time (seconds): 2.5\n")
    published = ratio_interval([0.25, 0.15, 0.35])
    assert ds.main(["table", "--summary", str(tmp_path / "a.json"),
                    "--summary", str(tmp_path / "b.json"),
                    "--published", f"400={published.mean},{published.low},{published.high},3",
                    "--split", "200x6=200:1,2,3,4,5,6", "--split", "400x3b=400:4,5,6",
                    "--expect", "200x2=200:2", "--split", "400x6=400:published,4,5,6",
                    "--cpu", f"200={tmp_path / 'time.txt'}:3",
                    "--json", str(tmp_path / "out.json")]) == 0
    rows = {r["split"]: r for r in json.loads((tmp_path / "out.json").read_text())["rows"]}
    assert set(rows) == {"400x3", "200x6", "400x3b", "200x2", "400x6"}
    every400 = ratio_interval([0.25, 0.15, 0.35, 0.2, 0.3, 0.1])  # published seeds and 4-6
    assert rows["400x6"]["seeds"] == 6
    assert (rows["400x6"]["ratio"], rows["400x6"]["low"], rows["400x6"]["high"]) == pytest.approx(
        (every400.mean, every400.low, every400.high))
    sd400 = statistics.stdev([0.25, 0.15, 0.35, 0.2, 0.3, 0.1])
    for label in ("400x3", "400x3b"):
        assert rows[label]["seeds_for_sd"] == 6
        assert rows[label]["sd_log_ratio"] == pytest.approx(sd400)
        assert rows[label]["expected_half_width_log"] == pytest.approx(4.303 * sd400 / math.sqrt(3))
    assert rows["400x3"]["low"] == pytest.approx(published.low)
    assert rows["200x6"]["ratio"] == pytest.approx(math.exp(statistics.fmean(DIFFS)))
    assert rows["200x6"]["high"] == pytest.approx(ratio_interval(DIFFS).high)
    assert rows["200x6"]["cpu_s"] == pytest.approx(206.0)  # 103 s for 3 seeds, 6 seeds
    assert rows["400x3"]["cpu_s"] is None
    assert rows["200x2"]["ratio"] is None
    assert rows["200x2"]["expected_half_width_log"] == pytest.approx(
        12.706 * statistics.stdev(DIFFS) / math.sqrt(2))
    # against the first row (400x3): the same sd at 400 steps; at 200 steps the F(5, 5) range
    assert rows["400x3b"]["half_width_vs_first"] == pytest.approx(1.0)
    shape = (2.571 / math.sqrt(6)) / (4.303 / math.sqrt(3))
    sd_ratio = statistics.stdev(DIFFS) / sd400
    assert rows["200x6"]["half_width_vs_first"] == pytest.approx(shape * sd_ratio)
    low, high = rows["200x6"]["half_width_vs_first_95"]
    assert low == pytest.approx(shape * sd_ratio / math.sqrt(7.1464), rel=1e-4)
    assert high == pytest.approx(shape * sd_ratio * math.sqrt(7.1464), rel=1e-4)
    out = capsys.readouterr().out
    assert "| 200x6 | 6 | 200 | 1,200 |" in out
    assert "| 200x2 | 2 | 200 | 400 | not run |" in out


def test_a_split_with_seeds_no_summary_has_is_one_line_and_exit_2(ds, tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps(_summary(200, [1, 2], [0.1, 0.2])))
    assert ds.main(["table", "--summary", str(tmp_path / "a.json"),
                    "--split", "x=200:1,2,3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --split 'x=200:1,2,3': no summary has seeds [3] at 200 steps")
    assert err.count("\n") == 1


def test_a_split_that_repeats_a_seed_is_refused(ds, tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps(_summary(200, [1, 2], [0.1, 0.2])))
    assert ds.main(["table", "--summary", str(tmp_path / "a.json"),
                    "--split", "x=200:1,1,2"]) == 2
    assert capsys.readouterr().err == "error: seeds '1,1,2': give each seed once\n"
