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
every row and the timeline are unchanged); the four vLLM cases since the vllm and vllm-v0
profiles pad a step to the CUDA graph captured for it (`Graphs.padded_tokens`: V0's decode
batches to 1, 2, 4 or a multiple of 8, V1's steps of up to 512 tokens), whose layers then run
at the padded count; the three V1 cases again since V1 captures graphs only up to
min(2 x max_num_seqs, 512, max_num_batched_tokens) (`Graphs.largest_captured`: 32 tokens at
their max_num_seqs of 16, so their larger steps run unpadded); the two SGLang cases since the
sglang profile pads a decode batch to the CUDA graph SGLang 0.5.9 captures for it (1, 2, 4, 8,
12, then multiples of 8 to 256, 16 to 512, 32 above; up to its request pool, 16 here); the
three V1 cases again since a step above the largest captured graph runs without one (its
kernels issued from the host at the profile's rate, no graph launch: their steps above 32
tokens); the three V1 cases again since the vllm profile carries its engine core's host work
per step (0.487 ms + 9.66 us per running request, measured with vLLM 0.19's engine core,
source VS1), which a V1 engine without async scheduling, as these cases' options are, adds to
each step's GPU time (`replay.serial_session`; "vllm-v1 preempting" still preempts, 36 times)."""

from __future__ import annotations

import pytest
from serving_golden import cases, digest, run

PINNED = {
    "vllm-v1 preempting":
        "05181703740ae46ef0078c5e3f9818a01878f346089a069476cdc3410cf68406",
    "vllm-v1 prefix cache 2 replicas prefix-affinity":
        "27bc09de809718a7d51040d93de0e0159fdc5f7f29076167771c1dfcbc630aad",
    "vllm-v1 roomy 3 replicas least-loaded":
        "40d8a32a4ad8496d447779e2855494592d454939527807d171f0a1ef927d5b5a",
    "vllm-v0 preempting":
        "bb711b1dd122887ec7c3765c06fd53149847d51013ba1905f333b3cdbe91bb06",
    "trtllm no-evict":
        "656152c471a426786cf52396b060c3f8bd4d7b9eb6794bbc3af8a80bc379d3e2",
    "trtllm max-utilization chunked":
        "b6e38597fb95924f2966475a5f04df9df7b17012b2f41f20db6c8b2ac29ed425",
    "sglang lpm prefix cache":
        "eeff8deb360ed2daf56893786c7cdede0177a41628a5a27a786074c62643a573",
    "sglang fcfs preempting":
        "0f3e1eda7da45a66fb5df42548e91d1915e363443f81bc2fc6e0072cc797910e",
}


def test_every_case_is_pinned():
    assert set(PINNED) == set(cases())


@pytest.mark.parametrize("name", list(PINNED))
def test_the_replay_is_unchanged(name):
    assert digest(run(name)) == PINNED[name]
