"""The LambdaLabsML vLLM 0.5.4 / 0.6.0 pairs and the per-step TP cost derived from them
(benchmarks/sim_vllm_v0_tp_step.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_module import ROOT, load_benchmark

tp_step = load_benchmark("sim_vllm_v0_tp_step")


def _doc() -> dict:
    return json.loads(tp_step.default_runs_path().read_text())


def test_every_used_gpu_tp_has_both_engines():
    runs = _doc()["runs"]
    keys = {(r["gpu"], r["tp"], r["engine_version"]) for r in runs}
    result = tp_step.derive({k: g[0] for k, g in tp_step.runs_by_key(runs).items()})
    used = [row for row in result["rows"] if row["d_ms"] is not None]
    assert len(used) == result["n_points"] >= 5
    for row in used:
        for tp in (1, row["tp"]):
            assert (row["gpu"], tp, "0.5.4") in keys and (row["gpu"], tp, "0.6.0") in keys
    # A100 TP8 has no single-step run in the source, so it must not enter the mean.
    assert ("A100-80GB-SXM", 8, "0.5.4") not in keys
    assert not any(r["gpu"] == "A100-80GB-SXM" and r["tp"] == 8 for r in used)


def test_runs_are_the_same_prompts_and_the_declared_regimes():
    for run in _doc()["runs"]:
        assert run["num_prompts"] == 10 and run["request_rate"] == "inf"
        assert run["input_lens"] == [14, 30, 28, 12, 375, 29, 487, 369, 5, 236]
        single = run["engine_version"] == "0.5.4"
        assert run["num_scheduler_steps"] == (1 if single else 10)
        assert run["date"].startswith("202408" if single else "2024090")
        assert run["has_mean_latency_ms"] is (not single)
        if not single:  # one ITL per 10 generated tokens (the first token is the TTFT)
            for chunk in run["itl_chunk_evidence"]:
                assert chunk["itl_count"] == -(-(chunk["output_tokens"] - 1) // 10)


def test_mean_matches_an_independent_recomputation():
    runs = _doc()["runs"]
    first: dict[tuple, dict] = {}
    for run in sorted(runs, key=lambda r: r["date"]):
        first.setdefault((run["gpu"], run["tp"], run["engine_version"]), run)

    def gap(gpu: str, tp: int) -> float:
        return (first[(gpu, tp, "0.5.4")]["median_itl_ms"]
                - first[(gpu, tp, "0.6.0")]["median_itl_ms"] / 10)

    def broadcast(gpu: str, tp: int) -> float:  # B(n), independently: 10 NCCL all-gathers
        from krakenlm.simulator import Simulator
        sim = Simulator(first[(gpu, tp, "0.6.0")]["system"], "vllm-v0")
        return 10 * sim.timer.collective_s("all_gather", 4096, tp) * 1e3

    pairs = [(gpu, tp) for (gpu, tp, version) in first
             if version == "0.5.4" and tp > 1 and (gpu, tp, "0.6.0") in first]
    d = [gap(gpu, tp) - gap(gpu, 1) for gpu, tp in pairs]
    t = [dn * 10 / 9 + broadcast(gpu, tp) for dn, (gpu, tp) in zip(d, pairs)]
    result = tp_step.derive({k: g[0] for k, g in tp_step.runs_by_key(runs).items()})
    assert result["tp_step_cost_ms"] == pytest.approx(sum(t) / len(t), rel=1e-12)
    assert 0.3 < result["tp_step_cost_ms"] < 1.0  # the source's size: tenths of a ms
    assert 0.03 < min(t[i] - d[i] * 10 / 9 for i in range(len(t))) < 0.2  # B: NCCL's floor x 10
    # without the broadcast (B = 0): the mean of d x 10 / 9
    bare = tp_step.derive({k: g[0] for k, g in tp_step.runs_by_key(runs).items()}, None)
    assert bare["tp_step_cost_ms"] == pytest.approx(sum(d) / len(d) * 10 / 9, rel=1e-12)


def test_a_run_without_median_itl_is_refused_in_one_line(tmp_path: Path):
    doc = _doc()
    del doc["runs"][3]["median_itl_ms"]
    bad = tmp_path / "pairs.json"
    bad.write_text(json.dumps(doc))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sim_vllm_v0_tp_step.py"),
                           "--runs", str(bad)], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "median_itl_ms" in lines[0] and doc["runs"][3]["path"] in lines[0]


def test_the_vllm_v0_profile_carries_the_derived_constant():
    """`vllm-v0`'s `host.tp_step_s` is this derivation's mean, to the 3 digits the YAML keeps."""
    from krakenlm.simulator.constants.software import load_software

    result = tp_step.derive({k: g[0] for k, g in tp_step.runs_by_key(_doc()["runs"]).items()})
    profile = load_software("vllm-v0")
    assert profile.host.tp_step_s == pytest.approx(float(f"{result['tp_step_cost_ms']:.3g}") * 1e-3,
                                                   rel=1e-12)
    assert "vllm_v0_tp_pairs.json" in profile.sources["VT"]


def test_gpu_only_check_times_every_multi_step_run_without_host_work():
    """`--simulate`: one row per chosen multi-step run, the simulator's step with every host
    constant at 0, which must be shorter than the same step with the profile's host work."""
    from krakenlm.hardware import load_system
    from krakenlm.models import get_preset
    from krakenlm.simulator.constants.software import load_software
    from krakenlm.simulator.run import simulate

    chosen = {k: g[0] for k, g in tp_step.runs_by_key(_doc()["runs"]).items()}
    rows = tp_step.gpu_only_check(chosen)
    multi = sorted((k[0], k[1]) for k in chosen if k[2] == tp_step.MULTI_STEP)
    assert sorted((r["gpu"], r["tp"]) for r in rows) == multi
    h100_tp2 = next(r for r in rows if r["system"] == "h100-80gb-x8" and r["tp"] == 2)
    with_host = simulate(get_preset("mistral-7b"), load_system("h100-80gb-x8"), 2, 2, 30, 900,
                         software=load_software("vllm-v0"), dtype="bf16")
    v0 = load_software("vllm-v0").host
    expected_host_ms = (v0.decode_step_s + v0.tp_step_s + 2 * v0.per_sequence_s
                        + v0.graph_launch_s) * 1e3
    assert with_host.tpot_s * 1e3 - h100_tp2["simulated_gpu_only_ms"] == pytest.approx(
        expected_host_ms, rel=1e-6)
