"""Two-stream schedule: overlap, blocking, contention and time attribution."""

import pytest

from krakenlm.simulator.schedule import TimedOp, schedule


def test_blocking_collective_serialises():
    ops = [TimedOp("a", "GEMM", "compute", 1.0),
           TimedOp("ar", "AllReduce", "comm", 2.0, deps=("a",)),
           TimedOp("b", "GEMM", "compute", 1.0, deps=("ar",))]
    s = schedule(ops, core_share=0.0)
    assert s.total_s == pytest.approx(4.0)
    assert s.categories == pytest.approx({"GEMM": 2.0, "exposed AllReduce": 2.0})


def test_independent_collective_overlaps_until_its_consumer():
    ops = [TimedOp("ar", "AllReduce", "comm", 2.0),
           TimedOp("a", "GEMM", "compute", 1.5, memory_share=0.0),
           TimedOp("attn", "attention", "compute", 1.0),
           TimedOp("ffn", "GEMM", "compute", 1.0, deps=("ar",))]
    s = schedule(ops, core_share=0.0)
    assert s.total_s == pytest.approx(3.5)  # the all-reduce is fully hidden
    assert s.categories["GEMM overlapped with AllReduce"] == pytest.approx(1.5)
    assert "exposed AllReduce" not in s.categories
    assert s.spans["ffn"][0] == pytest.approx(2.5)


def test_contention_slows_only_the_overlapped_part():
    ops = [TimedOp("ar", "AllReduce", "comm", 1.0, memory_share=0.5),
           TimedOp("mem", "elementwise", "compute", 2.0, bound="memory")]
    s = schedule(ops, core_share=0.1)
    # first second at half speed (0.5 s of work done), then 1.5 s alone
    assert s.total_s == pytest.approx(2.5)
    ops[1] = TimedOp("gemm", "GEMM", "compute", 2.0, bound="compute")
    s = schedule(ops, core_share=0.1)
    assert s.total_s == pytest.approx(1.0 + (2.0 - 0.9))


def test_categories_add_up_to_the_wall_time():
    ops = [TimedOp("ar0", "AllReduce", "comm", 0.7),
           TimedOp("n", "LayerNorm", "compute", 0.2),
           TimedOp("q", "GEMM", "compute", 0.3),
           TimedOp("x", "elementwise", "compute", 0.1, deps=("ar0",)),
           TimedOp("ar1", "AllReduce", "comm", 0.4, deps=("x",)),
           TimedOp("y", "GEMM", "compute", 0.5, deps=("ar1",))]
    s = schedule(ops)
    assert sum(s.categories.values()) == pytest.approx(s.total_s)
