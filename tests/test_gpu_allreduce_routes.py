"""The frameworks' own all-reduce kernel choice (simulator/gpu/allreduce_routes.py): every rule
is the framework's source, so each test states a switch point the source gives."""

import numpy as np
import pytest

from krakenlm.simulator.kernels.gpu import allreduce_routes as R

MiB = 2 ** 20
KiB = 1024


def kernels(route, n, sizes):
    sizes = np.asarray(sizes, float)
    return route(np.full(len(sizes), n), sizes).tolist()


def test_versions_compare_by_their_numbers():
    assert R.version_tuple("1.3.0rc20") == (1, 3, 0)
    assert R.version_tuple("0.5.6.post2") == (0, 5, 6)
    assert R.version_tuple("1.0.0") < R.TRT_LUT_FROM <= R.version_tuple("1.1.0")
    assert R.version_tuple("0.5.10") < R.SGLANG_V2_FROM <= R.version_tuple("0.5.14")


def test_tensorrt_llm_1_0_hands_more_than_128_tokens_to_nccl():
    route = R.route_for("trtllm", "1.0.0", "ampere")
    for n in (2, 4, 8):  # 128 tokens of hidden 4096 are 1 MiB
        assert kernels(route, n, [256, 1 * MiB, 2 * MiB]) == [R.ONESHOT, R.ONESHOT, R.NCCL]


# (framework, version, GPU generation, GPUs, message sizes, the kernel the route picks for each)
SWITCH_POINTS = [
    # TensorRT-LLM's table: SM90, 8 GPUs: one-shot to 64 tokens, NCCL at 128, two-shot at
    # 256-512, NCCL from 1024
    pytest.param("trtllm", "1.3.0rc20", "hopper", 8,
                 [512 * KiB, 1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB],
                 [R.ONESHOT, R.NCCL, R.TWOSHOT, R.TWOSHOT, R.NCCL], id="trtllm-hopper-8"),
    pytest.param("trtllm", "1.3.0rc20", "hopper", 2, [16 * MiB, 32 * MiB], [R.ONESHOT, R.NCCL],
                 id="trtllm-hopper-2"),
    pytest.param("trtllm", "1.3.0rc20", "blackwell", 8, [2 * MiB, 4 * MiB, 32 * MiB, 64 * MiB],
                 [R.ONESHOT, R.TWOSHOT, R.TWOSHOT, R.NCCL], id="trtllm-blackwell-8"),
    # beyond the 64 MiB workspace every GPU count goes to NCCL
    pytest.param("trtllm", "1.3.0rc20", "blackwell", 4, [128 * MiB], [R.NCCL],
                 id="trtllm-blackwell-4-beyond-workspace"),
    # vLLM: its custom kernel, symmetric memory and NCCL
    pytest.param("vllm", "0.14.0", "ampere", 8, [128 * KiB, 256 * KiB, 4 * MiB, 8 * MiB],
                 [R.ONESHOT, R.TWOSHOT, R.TWOSHOT, R.NCCL], id="vllm-ampere-8"),
    pytest.param("vllm", "0.24.0", "hopper", 8, [128 * KiB, 256 * KiB, 64 * MiB, 128 * MiB],
                 [R.ONESHOT, R.SYMM_MULTIMEM, R.SYMM_MULTIMEM, R.NCCL], id="vllm-hopper-8"),
    pytest.param("vllm", "0.24.0", "hopper", 2, [4 * MiB, 8 * MiB, 64 * MiB, 128 * MiB],
                 [R.ONESHOT, R.SYMM_TWOSHOT, R.SYMM_TWOSHOT, R.NCCL], id="vllm-hopper-2"),
    pytest.param("vllm", "0.24.0", "hopper", 4, [1 * MiB, 8 * MiB, 64 * MiB],
                 [R.TWOSHOT, R.SYMM_MULTIMEM, R.NCCL], id="vllm-hopper-4"),
    # multimem only on 6 and 8 GPUs
    pytest.param("vllm", "0.24.0", "blackwell", 4, [1 * MiB, 2 * MiB, 32 * MiB, 64 * MiB],
                 [R.TWOSHOT, R.SYMM_TWOSHOT, R.SYMM_TWOSHOT, R.NCCL], id="vllm-blackwell-4"),
    # SGLang V1 and V2
    pytest.param("sglang", "0.5.10", "ampere", 4, [256 * KiB, 512 * KiB, 8 * MiB, 16 * MiB],
                 [R.ONESHOT, R.TWOSHOT, R.TWOSHOT, R.NCCL], id="sglang-v1-ampere-4"),
    pytest.param("sglang", "0.5.14", "hopper", 8, [160 * KiB, 256 * KiB, 16 * MiB, 32 * MiB],
                 [R.ONESHOT, R.PULL_TWOSHOT, R.PULL_TWOSHOT, R.NCCL], id="sglang-v2-hopper-8"),
    pytest.param("sglang", "0.5.14", "hopper", 2, [2 * MiB, 4 * MiB], [R.ONESHOT, R.PULL_ONESHOT],
                 id="sglang-v2-hopper-2"),
]


@pytest.mark.parametrize("framework, version, arch, n, sizes, expected", SWITCH_POINTS)
def test_route_switch_points(framework, version, arch, n, sizes, expected):
    assert kernels(R.route_for(framework, version, arch), n, sizes) == expected


@pytest.mark.parametrize("framework,version,arch", [("lmdeploy", "0.1", "hopper"),
                                                    ("vllm", "", "hopper"),
                                                    ("vllm", "0.24.0", "ada")])
def test_no_rule_without_a_known_framework_version_and_generation(framework, version, arch):
    assert R.route_for(framework, version, arch) is None
