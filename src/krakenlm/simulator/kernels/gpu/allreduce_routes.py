"""Which kernel a serving framework's all-reduce runs for a message: the frameworks' own rules.

A framework's tensor-parallel all-reduce is not one kernel. By message size (and GPU count,
GPU generation and framework version) it picks its own one-shot or two-shot kernel, PyTorch's
symmetric-memory kernels, or hands the message to NCCL. `route_for` returns that rule as a
function of (n, bytes); collectives.py's `custom_all_reduce/framework` form then times each
row with the chosen kernel's model. The rules below are read from the frameworks' sources
(cited per rule), not fitted: only the kernels' constants are. A framework or version without a
known rule gets no route, and the calibration falls back on reading its NCCL hand-off off the
fit half (`collectives.detect_handoff`).

Message sizes are the whole buffer in bytes (16-bit elements), as aiconfigurator's collector
measures them. Its tensors are [tokens, 4096] (hidden 4096; [1, elements] up to 4096
elements), which matters where a framework decides by token count (TensorRT-LLM): the rules
convert bytes to tokens with that factorisation (`HIDDEN`).

TensorRT-LLM (torch op `AllreduceOp`, strategy AUTO, no fusion; cpp/tensorrt_llm/thop/
allreduceOp.cpp, common/customAllReduceUtils.h)
* up to 1.0: PR #5432 ("use 128 tokens as the NCCL/MIN_LATENCY threshold"): more than 128
  tokens go to NCCL, otherwise MIN_LATENCY, whose kernel is one-shot up to kOneShotMaxToken =
  128 tokens, i.e. one-shot up to 1 MiB at hidden 4096, NCCL above (as PR #5432 states it;
  a main-branch snapshot of that time, commit 4bb1ef8, exempts two GPUs).
* from 1.1 (PR #7870, Sept 2025): AllReduceBestStrategyTable [SM][TP][fusion][hidden][tokens]
  (SM90 table before Blackwell, SM100 on it; tokens beyond 16384 -> NCCL; TRT_LUT: fusion
  NONE, hidden 4096), and messages larger than the 64 MiB fusion workspace (PR #9145) -> NCCL.

vLLM (vllm/distributed/device_communicators: cuda_communicator.py all_reduce, custom_all_reduce,
symm_mem, all_reduce_utils; read at 0.24.0, the Hopper and Blackwell tables' version)
* its custom all-reduce for messages below max_size = 8 MiB (`inp_size < max_size`), and with
  symmetric memory available (Hopper "9.0", Blackwell "10.0") below
  min(8 MiB, CUSTOM_ALL_REDUCE_MAX_SIZES[cc][n]); one-shot or two-shot by ONESHOT_BELOW
  (csrc/custom_all_reduce.cuh);
* else, on Hopper/Blackwell, PyTorch symmetric memory up to SYMM_MEM_ALL_REDUCE_MAX_SIZES
  [cc][n] (`<=`): torch.ops.symm_mem.multimem_all_reduce_ (NVLink SHARP: n in 4, 6, 8 on
  Hopper, 6, 8 on Blackwell) or two_shot_all_reduce_, input copied in and out;
* else NCCL. Ampere has no symmetric-memory path: custom below 8 MiB, NCCL from it.

SGLang (python/sglang/srt/distributed/parallel_state.py, device_communicators/)
* up to 0.5.11: CustomAllreduce (vLLM's kernel, the same one-/two-shot switch) for messages
  up to _MAX_CAR_SIZE = 8 MiB (`inp_size <= max_size`), NCCL above;
* from 0.5.12 (PRs #24363, #24742: CustomAllReduceV2 by default): V2's kernels up to
  max_pull_size = 16 MiB, NCCL above: one-shot push (each GPU writes its input into every
  peer's workspace), one-shot pull or two-shot pull by per-GPU-count thresholds measured on
  H200 and B200 (THRESHOLD_2_SHOT_MAP; read at 0.5.10, where V2 was opt-in).
(aiconfigurator's collector turns SGLang's torch symmetric-memory and MSCCL++ paths off.)
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

# kernel codes per row. PULL_*: SGLang V2's pull kernels, which in eager calls stage the input
# through their workspace (copy in, kernel, copy out); in CUDA graphs they read the peers'
# inputs in place and time like ONESHOT / TWOSHOT.
NCCL, ONESHOT, TWOSHOT, FASTER, SYMM_MULTIMEM, SYMM_TWOSHOT, PULL_ONESHOT, PULL_TWOSHOT = range(8)

MiB = 1024 * 1024
HIDDEN = 4096  # aiconfigurator's collector: tensors [tokens, 4096]
ELEMENT_BYTES = 2

# vLLM / SGLang custom all-reduce: one-shot below these sizes, two-shot from them (vLLM
# csrc/custom_all_reduce.cuh: 2 GPUs always one-shot; full NVLink: <= 4 GPUs below 512 KiB,
# <= 8 GPUs below 256 KiB). SGLang's CustomAllreduce (V1) carries the same kernel.
ONESHOT_BELOW = {2: np.inf, 4: 512 * 1024, 8: 256 * 1024}

# TensorRT-LLM AllReduceBestStrategyTable, fusion NONE, hidden 4096, tokens 1, 2, 4, ..., 16384
# (customAllReduceUtils.h): 4 ONESHOT, 5 TWOSHOT, 0 NCCL.
TRT_LUT = {
    "sm90": {2: (4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0),
             4: (4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 0, 0, 0, 0),
             8: (4, 4, 4, 4, 4, 4, 4, 0, 5, 5, 0, 0, 0, 0, 0)},
    "sm100": {2: (4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0),
              4: (4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 0, 0, 0),
              8: (4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 0, 0)},
}
TRT_LUT_CODES = {4: ONESHOT, 5: TWOSHOT, 0: NCCL}
TRT_WORKSPACE_BYTES = 64 * MiB  # PR #9145: fusion workspace 64 MiB, larger messages -> NCCL
TRT_MIN_LATENCY_MAX_TOKENS = 128  # PR #5432 threshold and ar_fusion::kOneShotMaxToken

# vLLM all_reduce_utils.py (0.24.0): per compute capability and GPU count
VLLM_CA_MAX_BYTES = 8 * MiB
VLLM_CA_MAX = {"9.0": {2: 64 * MiB, 4: 32 * MiB, 6: MiB // 2, 8: MiB // 4},
               "10.0": {2: 2 * MiB, 4: 2 * MiB, 6: 1 * MiB, 8: 1 * MiB}}
VLLM_SYMM_MAX = {"9.0": {2: 64 * MiB, 4: 32 * MiB, 6: 64 * MiB, 8: 64 * MiB},
                 "10.0": {2: 8 * MiB, 4: 32 * MiB, 6: 128 * MiB, 8: 128 * MiB}}
VLLM_MULTIMEM_N = {"9.0": (4, 6, 8), "10.0": (6, 8)}

SGLANG_V1_MAX_BYTES = 8 * MiB  # CustomAllreduce._MAX_CAR_SIZE
SGLANG_V2_MAX_BYTES = 16 * MiB  # CustomAllReduceV2 max_pull_size (16 MiB default)
SGLANG_V2_FROM = (0, 5, 12)
KiB = 1024
# CustomAllReduceV2 THRESHOLD_2_SHOT_MAP (custom_all_reduce_v2.py, read at 0.5.10): per GPU
# count (one-shot push up to, one-shot pull up to) bytes; two-shot pull above both. "Based on
# benchmarks on H200 GPUs" (before Blackwell) and "on B200 GPUs" (SM100).
SGLANG_V2_THRESHOLDS = {
    "hopper": {2: (2 * MiB, np.inf), 4: (384 * KiB, 256 * KiB), 6: (192 * KiB, 192 * KiB),
               8: (160 * KiB, 160 * KiB)},
    "blackwell": {2: (4 * MiB, np.inf), 4: (2 * MiB, 2 * MiB), 6: (1 * MiB, 1 * MiB),
                  8: (720 * KiB, 720 * KiB)},
}
TRT_LUT_FROM = (1, 1)

# the fabric generation (collectives.nccl_arch) -> CUDA compute capability of its GPUs
CAPABILITY = {"ampere": "8.0", "hopper": "9.0", "blackwell": "10.0"}


@functools.cache  # a pure parse, asked for every row at every step of a host fit
def version_tuple(version: str) -> tuple[int, ...]:
    """(1, 3, 0) for "1.3.0rc20", (0, 5, 6) for "0.5.6.post2"."""
    parts = []
    for piece in version.split("."):
        m = re.match(r"\d+", piece)
        if m is None:
            break
        parts.append(int(m.group()))
        if m.end() < len(piece):
            break
    return tuple(parts)


@dataclass(frozen=True)
class Route:
    """A framework's kernel choice per row; `source` says where the rule comes from."""

    framework: str
    source: str
    choose: Callable[[np.ndarray, np.ndarray], np.ndarray]

    def __call__(self, n: np.ndarray, size_bytes: np.ndarray) -> np.ndarray:
        return self.choose(np.asarray(n, float), np.asarray(size_bytes, float))


def _tokens(size_bytes: np.ndarray) -> np.ndarray:
    return np.maximum(np.floor(size_bytes / (ELEMENT_BYTES * HIDDEN)), 1.0)


def _ca_kernel(n: np.ndarray, size_bytes: np.ndarray) -> np.ndarray:
    below = np.array([ONESHOT_BELOW.get(int(k), ONESHOT_BELOW[8]) for k in n], float)
    return np.where(size_bytes < below, ONESHOT, TWOSHOT)


def trtllm_route(version: str, arch: str) -> Route:
    if version_tuple(version) < TRT_LUT_FROM:
        def choose(n, size):
            return np.where(_tokens(size) <= TRT_MIN_LATENCY_MAX_TOKENS, ONESHOT, NCCL)
        return Route("trtllm", "TensorRT-LLM <= 1.0 AUTO: one-shot up to 128 tokens, NCCL above",
                     choose)
    table = TRT_LUT["sm100" if arch == "blackwell" else "sm90"]

    def choose(n, size):
        idx = np.floor(np.log2(_tokens(size))).astype(int)
        out = np.full(len(n), NCCL)
        for k, row in table.items():
            sel = (n == k) & (idx < len(row)) & (size <= TRT_WORKSPACE_BYTES)
            codes = np.array([TRT_LUT_CODES[c] for c in row])
            out[sel] = codes[idx[sel]]
        return out
    return Route("trtllm", "TensorRT-LLM >= 1.1 AllReduceBestStrategyTable (fusion NONE, hidden "
                 f"4096, {'SM100' if arch == 'blackwell' else 'SM90'}), NCCL above 64 MiB", choose)


def vllm_route(version: str, arch: str) -> Route:
    from ....hardware.identity import compute_capability
    cc = compute_capability(arch)
    symm = cc in VLLM_SYMM_MAX

    def choose(n, size):
        ca_max = np.array([min(VLLM_CA_MAX_BYTES, VLLM_CA_MAX[cc].get(int(k), 0)) if symm
                           else VLLM_CA_MAX_BYTES for k in n], float)
        out = np.where(size < ca_max, _ca_kernel(n, size), NCCL)
        if symm:
            symm_max = np.array([VLLM_SYMM_MAX[cc].get(int(k), 0) for k in n], float)
            multimem = np.isin(n, VLLM_MULTIMEM_N[cc])
            use = (out == NCCL) & (size <= symm_max)
            out = np.where(use, np.where(multimem, SYMM_MULTIMEM, SYMM_TWOSHOT), out)
        return out
    what = (f"custom below min(8 MiB, CUSTOM_ALL_REDUCE_MAX_SIZES[{cc}]), torch symmetric "
            f"memory up to SYMM_MEM_ALL_REDUCE_MAX_SIZES[{cc}], NCCL above") if symm else \
        "custom below 8 MiB, NCCL from it (no symmetric-memory path before Hopper)"
    return Route("vllm", f"vLLM {version}: {what}", choose)


def sglang_route(version: str, arch: str) -> Route:
    if version_tuple(version) < SGLANG_V2_FROM:
        def choose(n, size):
            return np.where(size <= SGLANG_V1_MAX_BYTES, _ca_kernel(n, size), NCCL)
        return Route("sglang", f"SGLang {version} CustomAllreduce: custom up to 8 MiB, NCCL "
                     "above", choose)

    table = SGLANG_V2_THRESHOLDS["blackwell" if arch == "blackwell" else "hopper"]

    def choose(n, size):
        push = np.array([table.get(int(k), table[8])[0] for k in n], float)
        pull = np.array([table.get(int(k), table[8])[1] for k in n], float)
        kernel = np.where(size <= push, ONESHOT, np.where(size <= pull, PULL_ONESHOT,
                                                          PULL_TWOSHOT))
        return np.where(size <= SGLANG_V2_MAX_BYTES, kernel, NCCL)
    return Route("sglang", f"SGLang {version} CustomAllReduceV2 up to 16 MiB (one-shot push, "
                 "one-shot pull, two-shot pull by THRESHOLD_2_SHOT_MAP), NCCL above", choose)


RULES = {"trtllm": trtllm_route, "vllm": vllm_route, "sglang": sglang_route}


@functools.lru_cache(maxsize=64)
def route_for(framework: str, version: str, arch: str) -> Route | None:
    """The framework's rule for this version and fabric generation (collectives.nccl_arch), or
    None where none is known (the calibration then reads the hand-off off the fit half).
    Worked out once per (framework, version, arch): every all-reduce a query times asks."""
    from ....hardware.identity import compute_capability
    rule = RULES.get(framework)
    if rule is None or not version or not compute_capability(arch):
        return None
    return rule(version, arch)
