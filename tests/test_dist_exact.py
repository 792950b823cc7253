"""Sharded models on 1, 2 and 4 processes, reducing over gloo and through shared memory,
against the single-device model (the cases and checks: dist_exact_cases.py).

`make test` runs gloo on 1 and 2 processes and shared memory on 2 and 4 (4 ranks on the CI's
2 cores is the slowest world, so once); gloo on 4 too: KRAKENLM_FULL_DIST_MATRIX=1 pytest
tests/test_dist_exact.py."""

import os

import pytest
from dist_exact_cases import (
    check_collectives_per_forward_pass,
    check_every_rank_reports_every_case,
    check_prefill_logits_match_single_device,
    check_tokens_match_single_device,
    run_world,
    single_device_results,
)

pytestmark = pytest.mark.slow

WORLDS = [("gloo", 1), ("gloo", 2), ("shm", 2), ("shm", 4)]
if os.environ.get("KRAKENLM_FULL_DIST_MATRIX"):
    WORLDS.insert(2, ("gloo", 4))
COMM_CLASSES = {"gloo": "ProcessGroupComm", "shm": "SharedMemoryComm"}


@pytest.fixture(scope="module", params=WORLDS, ids=lambda w: f"{w[0]}-world{w[1]}")
def world(request):
    backend, world_size = request.param
    world_size, results = run_world(world_size, backend)
    for rank in results.values():  # really this backend, not a silent fallback
        for got in rank.values():
            assert got["comm_backend"] == backend
            assert got["comm_class"] == COMM_CLASSES[backend]
    return world_size, results


@pytest.fixture(scope="module")
def single_device():
    return single_device_results()


def test_every_rank_reports_every_case(world):
    check_every_rank_reports_every_case(world)


def test_prefill_logits_match_single_device(world, single_device):
    check_prefill_logits_match_single_device(world, single_device)


def test_greedy_and_seeded_sampling_give_single_device_tokens(world, single_device):
    check_tokens_match_single_device(world, single_device)


def test_collectives_per_forward_pass(world):
    check_collectives_per_forward_pass(world)
