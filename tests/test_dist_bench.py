"""`bench tp` and the tensor-parallel demo, on tiny models (behaviour, never timings)."""

import json
import math

import pytest

from krakenlm.cli import main
from krakenlm.distributed.bench import BenchPlan, bench_config, kraken_preset
from krakenlm.distributed.demo import run_tp_demo
from krakenlm.errors import KrakenError
from krakenlm.models import get_preset

ROW_KEYS = {"arch", "preset", "world_size", "prompt_tokens", "ttft_s", "tpot_s", "exposed_comm_s"}


def test_kraken_preset_has_the_fewest_sublayers_the_world_size_divides():
    assert kraken_preset("125m", 1) == "kraken-125m-2way"
    assert kraken_preset("125m", 2) == "kraken-125m-2way"
    assert kraken_preset("125m", 3) == "kraken-125m-6way"
    assert kraken_preset("125m", 4) == "kraken-125m-4way"
    assert kraken_preset("760m", 2) == "kraken-760m-4way"
    with pytest.raises(KrakenError, match="no 125m Kraken preset has a degree divisible by "
                                          r"world size 5 \(degrees \[2, 4, 6\]\)"):
        kraken_preset("125m", 5)


def test_exposed_communication_is_never_negative():
    """Noise can make the runs with communication the faster ones: that is no communication
    the machine can resolve (0), not negative time; the measured median is kept beside it."""
    from types import SimpleNamespace

    from krakenlm.distributed.bench import _row

    def runs(*ttfts):
        return [SimpleNamespace(ttft_s=t, tpot_s=t / 10, prefill_comm_blocked_s=0.001,
                                prefill_comm_peer_wait_s=None) for t in ttfts]
    config = get_preset("kraken-tiny-2way")
    row = _row("tiny", "kraken", "kraken-tiny-2way", config, 2, 8, "both", "gloo",
               on=runs(0.010, 0.011, 0.009), off=runs(0.012, 0.012, 0.012),
               blocking=runs(0.0115, 0.0125, 0.0115))
    assert row["exposed_comm_s"] == 0.0 and row["tpot_exposed_comm_s"] == 0.0
    assert row["exposed_comm_raw_s"] == pytest.approx(-0.002)
    assert row["exposed_comm_if_blocking_s"] == 0.0
    slower = _row("tiny", "gpt", "gpt-tiny", config, 2, 8, "both", "gloo",
                  on=runs(0.015, 0.016), off=runs(0.012, 0.012), blocking=None)
    assert slower["exposed_comm_s"] == pytest.approx(0.0035) == slower["exposed_comm_raw_s"]


def test_plan_rejects_what_would_fail_in_the_ranks():
    with pytest.raises(KrakenError, match="n_heads \\(12\\) to be divisible by 8"):
        BenchPlan(world_size=8, sizes=("125m",), archs=("gpt",)).validate()
    with pytest.raises(KrakenError, match="unknown size 'huge'"):
        BenchPlan(world_size=2, sizes=("huge",)).validate()
    with pytest.raises(KrakenError, match="--new-tokens must be >= 2"):
        BenchPlan(world_size=2, new_tokens=1).validate()
    with pytest.raises(KrakenError, match="--comm-backend takes distinct backend names"):
        BenchPlan(world_size=2, comm_backends=("shm", "shm")).validate()
    with pytest.raises(KrakenError, match="--comm-backend must be one of auto, shm, gloo, nccl"):
        BenchPlan(world_size=2, comm_backends=("shm", "tcp")).validate()


def test_plan_starts_the_ranks_with_shared_memory_if_any_backend_needs_it():
    assert BenchPlan(world_size=2, comm_backends=("gloo", "shm")).launch_backend == "shm"
    assert BenchPlan(world_size=2, comm_backends=("gloo", "auto")).launch_backend == "auto"
    assert BenchPlan(world_size=2, comm_backends=("gloo",)).launch_backend == "gloo"


def test_bench_config_grows_the_context_only_when_needed():
    preset = get_preset("gpt2-124m")
    assert bench_config(preset, 1000) is preset
    grown = bench_config(preset, 1033)
    assert grown.context_len == 1033 and grown.replace(context_len=1024) == preset


def test_bad_world_size_is_a_one_line_error_before_any_process_starts(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "tp", "--world-size", "5", "--sizes", "125m"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("error: no 125m Kraken preset has a degree")


@pytest.mark.slow
def test_bench_tp_json_rows_and_plot(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "tp", "--world-size", "2", "--sizes", "tiny", "--prompt-tokens", "8,16",
              "--new-tokens", "3", "--warmup", "0", "--repeats", "1", "--json",
              "--comm-backend", "auto,gloo", "--out", str(tmp_path)])
    assert exit_info.value.code == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows == json.loads((tmp_path / "rows.json").read_text())
    assert (tmp_path / "ttft.png").stat().st_size > 0
    # `auto` is shared memory here (all ranks on this host); both backends are interleaved.
    assert [(r["arch"], r["prompt_tokens"], r["comm_backend"]) for r in rows] == [
        (arch, t, backend) for t in (8, 16) for arch in ("gpt", "parallel", "kraken")
        for backend in ("shm", "gloo")]
    assert {r["preset"] for r in rows} == {"gpt-tiny", "parallel-tiny", "kraken-tiny-2way"}
    for r in rows:
        assert ROW_KEYS <= set(r)
        assert r["world_size"] == 2 and r["ttft_s"] > 0 and r["tpot_s"] > 0
        if r["comm_backend"] == "shm":  # waiting for peers is part of the time in comm
            assert r["prefill_comm_blocked_s"] >= r["prefill_comm_peer_wait_s"] >= 0
        else:
            assert r["prefill_comm_peer_wait_s"] is None
        assert math.isclose(r["exposed_comm_raw_s"], r["ttft_s"] - r["ttft_comm_off_s"])
        assert r["exposed_comm_s"] == max(0.0, r["exposed_comm_raw_s"])
        # Kraken alone is also timed with its overlapped reductions made blocking.
        assert (r["exposed_comm_if_blocking_s"] is not None) == (r["arch"] == "kraken")


@pytest.mark.slow
def test_tp_demo_reports_identical_tokens_for_kraken_and_gpt():
    report = run_tp_demo(world_size=2, new_tokens=5, repeats=1)
    assert report.ok and [row["arch"] for row in report.rows] == ["kraken", "gpt"]
    assert all(row["ttft_single_s"] > 0 and row["ttft_sharded_s"] > 0 for row in report.rows)
    lines = report.text().splitlines()
    assert lines[0].startswith("Greedy generation sharded over 2 processes against one device")
    # auto: shared memory on one x86-64 host, gloo where that is impossible
    assert report.comm_backend in ("shm", "gloo")
    assert f"all-reduce {report.comm_backend}," in lines[0]
    assert sum("tokens identical: yes" in line for line in lines) == 2
