"""Sharded models on 2 and 4 processes reducing through shared memory, against the
single-device model: the same cases and checks as test_dist_exact.py (gloo)."""

import pytest
from dist_exact_cases import (check_collectives_per_forward_pass,
                              check_every_rank_reports_every_case,
                              check_prefill_logits_match_single_device,
                              check_tokens_match_single_device, run_world, single_device_results)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=[2, 4], ids=lambda p: f"world{p}")
def world(request):
    world_size, results = run_world(request.param, "shm")
    for rank in results.values():  # really shared memory, not a silent fallback
        for got in rank.values():
            assert (got["comm_backend"], got["comm_class"]) == ("shm", "SharedMemoryComm")
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
