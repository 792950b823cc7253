"""The serving replays' outputs are pinned: every row, the summary and the timeline of each
case in tests/serving_golden.py hash to the digest the engines gave before their hot path was
restructured for speed (commit 7e27c65), so the faster engines provably change nothing. A
change of the model re-pins its cases, saying why: "vllm-v0 preempting" since the vllm-v0
profile carries its sourced per-sequence host time (0.10 ms per sequence per step); every case since h100-80gb-x8 carries the device total
vLLM logs on an H100 (79.22 GiB, `memory.runtime_visible_bytes`), which sizes the KV cache;
"vllm-v1 roomy 3 replicas least-loaded" since the vllm profile sizes its KV cache as V1 since
vllm-project/vllm#19312 does (accounting "since-init": no runtime reserve, 23,492 blocks
instead of 22,809); the two tight V1 cases keep their pools (and digests) by naming the
accounting of V1 before #19312, and the two SGLang cases keep theirs (and their retraction)
by naming the accounting SGLang was sized with before its own "free-share"; every case since hardware.cost prices memory per GiB (the
summary's cost.usd and $/Mtok fall 1.6 % with the H100 system's price, $43,758 -> $43,051;
every row and the timeline are unchanged)."""

from __future__ import annotations

import pytest
from serving_golden import cases, digest, run

PINNED = {
    "vllm-v1 preempting":
        "43bb512f11186a4facfd40dd55130ae156527f8d016305de6f83e9cf7a750b19",
    "vllm-v1 prefix cache 2 replicas prefix-affinity":
        "3ed083a0d6d89247d2fac41516ac5798b2419e0dce0cafe2c785c094d6540983",
    "vllm-v1 roomy 3 replicas least-loaded":
        "bf247736d797449bf6181d002d75dd0e9a47a0ee7c7aa6e9644f64a05f5d5d43",
    "vllm-v0 preempting":
        "bc14f79d8b44c0ec5af163f12259cfde8550025c2f52bc2f70232778746e2fbe",
    "trtllm no-evict":
        "656152c471a426786cf52396b060c3f8bd4d7b9eb6794bbc3af8a80bc379d3e2",
    "trtllm max-utilization chunked":
        "b6e38597fb95924f2966475a5f04df9df7b17012b2f41f20db6c8b2ac29ed425",
    "sglang lpm prefix cache":
        "c743eb96f72e312c137a89ba73861911c0994e5f43597f00aa2e173bfd37e06b",
    "sglang fcfs preempting":
        "cbdeac64ad129c77c8c03fefd8ce42fdb2383e10c893eae431805653cebb5315",
}


def test_every_case_is_pinned():
    assert set(PINNED) == set(cases())


@pytest.mark.parametrize("name", list(PINNED))
def test_the_replay_is_unchanged(name):
    assert digest(run(name)) == PINNED[name]
