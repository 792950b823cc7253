"""Collectives: algorithm chosen by topology, and its cost structure."""

import dataclasses

import pytest

from krakenlm.hardware import load_system
from krakenlm.simulator.kernels.template.collectives import (
    Protocol,
    collective_time,
    plan_collective,
)

IC = load_system("a100-80gb-x4").interconnect


def topo(**changes):
    return dataclasses.replace(IC, **changes)


def test_fully_connected_uses_direct_two_steps():
    (plan,) = plan_collective("all_reduce", IC, 1e6)
    assert plan.algorithm == "direct" and plan.steps == 2
    # 4 links to each of 3 peers: 300 GB/s per direction per device
    assert plan.bandwidth_bytes_per_s == pytest.approx(300e9)


def test_switch_direct_and_in_switch_reduction():
    sw = topo(topology="switch", device_count=8)
    (plan,) = plan_collective("all_reduce", sw, 8e6)
    assert plan.algorithm == "direct" and plan.wire_bytes == pytest.approx(2 * 7 / 8 * 8e6)
    (nvls,) = plan_collective("all_reduce", dataclasses.replace(sw, in_switch_reduction=True), 8e6)
    assert nvls.algorithm == "switch-reduce" and nvls.wire_bytes < plan.wire_bytes


def test_ring_topology_picks_tree_for_small_and_ring_for_large():
    ring = topo(topology="ring", device_count=8, links_per_device=2)
    assert collective_time("all_reduce", ring, 1e3)[1] == "tree"
    assert collective_time("all_reduce", ring, 1e9)[1] == "ring"
    ring_plan = plan_collective("all_reduce", ring, 1e9)[0]
    assert ring_plan.steps == 2 * 7


def test_torus_two_dimensional_steps():
    torus = topo(topology="torus2d", device_count=8, torus_shape=(2, 4), links_per_device=4)
    (plan,) = plan_collective("reduce_scatter", torus, 1e6)
    assert plan.algorithm == "torus2d-ring" and plan.steps == 1 + 3


def test_direct_beats_ring_formula_on_fully_connected():
    direct = collective_time("all_reduce", IC, 1e4)[0]
    ring = collective_time("all_reduce", topo(topology="ring"), 1e4)[0]
    assert direct < ring


def test_single_device_needs_no_communication():
    assert collective_time("all_reduce", IC, 1e9, 1) == (0.0, "none")


def test_slower_protocol_costs_more_and_fastest_protocol_is_used():
    fast = collective_time("all_reduce", IC, 1e8, 4, (Protocol(0.0, 1.0),))[0]
    slow = collective_time("all_reduce", IC, 1e8, 4, (Protocol(0.0, 0.5),))[0]
    both = collective_time("all_reduce", IC, 1e8, 4, (Protocol(0.0, 0.5), Protocol(0.0, 1.0)))[0]
    assert slow > fast and both == fast


def test_reduce_scatter_and_all_gather_are_half_an_all_reduce_in_bandwidth():
    ar = plan_collective("all_reduce", IC, 1e9)[0]
    rs = plan_collective("reduce_scatter", IC, 1e9)[0]
    ag = plan_collective("all_gather", IC, 1e9)[0]
    assert rs.wire_bytes == ag.wire_bytes == pytest.approx(ar.wire_bytes / 2)
