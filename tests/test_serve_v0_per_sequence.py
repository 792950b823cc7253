"""benchmarks/serve_v0_per_sequence.py: the what-if of vLLM V0's per-sequence host cost on both
V0 serving sources."""

import json

import pytest
from benchmark_module import load_benchmark


@pytest.fixture(scope="module")
def v0s():
    return load_benchmark("serve_v0_per_sequence")


@pytest.mark.parametrize("grid", ["a,b", "-1,2"])
def test_a_bad_grid_is_one_error_line(v0s, grid, capsys):
    assert v0s.main([f"--per-sequence-ms={grid}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --per-sequence-ms") and err.count("\n") == 1


def test_the_shipped_cost_reproduces_the_validation_and_more_slows_every_step(v0s, tmp_path):
    """At the profile's own 0.1 ms the what-if is the plain replay at the profile's own host
    times (scale 1, as the study replays); a larger cost can only lengthen the decode steps, so every TPOT rises."""
    from krakenlm.serving.validation import load_runs, replay_run, score

    out = tmp_path / "t.json"
    assert v0s.main(["--per-sequence-ms", "0.1,0.3", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    by_id = {r.id: r for r in load_runs()[1]}
    assert {r["source"] for r in rows} == {"lambda", "vllm_pr6883"}
    for row in rows:
        if row["per_sequence_ms"] != 0.1:
            continue
        run = by_id[row["run"]]
        plain = score(run, replay_run(run, by_id, seed=0, scale=1.0)[1])
        assert row["tpot_mean_signed_pct"] == round(100 * plain["tpot_mean"]["bias"], 1)
        more = next(r for r in rows if r["run"] == row["run"] and r["per_sequence_ms"] == 0.3)
        assert more["tpot_mean_signed_pct"] > row["tpot_mean_signed_pct"]
