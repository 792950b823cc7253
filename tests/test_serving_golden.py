"""The serving replays' outputs are pinned: every row, the summary and the timeline of each
case in tests/serving_golden.py hash to the digest the engines gave before their hot path was
restructured for speed (commit 7e27c65), so the faster engines provably change nothing. A
change of the model re-pins its cases, saying why: "vllm-v0 preempting" since the vllm-v0
profile carries its sourced per-sequence host time (0.10 ms per sequence per step)."""

from __future__ import annotations

import pytest
from serving_golden import cases, digest, run

PINNED = {
    "vllm-v1 preempting":
        "4baef7ac59d4328634beb8355c69b71d72b7a13346dec74d6ff65b9b8a490425",
    "vllm-v1 prefix cache 2 replicas prefix-affinity":
        "5ece294296a0fafa71107e5d28dce86e96731d60fb6ee4056e09f388ceb3b73a",
    "vllm-v1 roomy 3 replicas least-loaded":
        "26f146a61274fba3014e04d00af1d0156d85b56dafac8ad1b5c84e20215c3fc5",
    "vllm-v0 preempting":
        "e2045993dd86ecfd30c5bca2d0b95b1bbce17f57f404e565bfe77889a6a94020",
    "trtllm no-evict":
        "7ff3ef81369150d79541f1da5f2bb658481dc5c408022f0342fa816bf32c7ff1",
    "trtllm max-utilization chunked":
        "aff39f9deace760148c88cdafd3474afc4e6e6d9bfefb4bc1603a7f6911791a2",
    "sglang lpm prefix cache":
        "14a2f1f5f8d4f115c8a75bc6d3033fc928a6451f3d0e6f4b552c6f38a8d469ee",
    "sglang fcfs preempting":
        "3100f884a2f6f0c6f3cbf678778944134ceee8f47ab6bee7f8653e2b1e66f1b8",
}


def test_every_case_is_pinned():
    assert set(PINNED) == set(cases())


@pytest.mark.parametrize("name", list(PINNED))
def test_the_replay_is_unchanged(name):
    assert digest(run(name)) == PINNED[name]
