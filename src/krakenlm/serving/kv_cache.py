"""The KV cache as the engines size it and vLLM V1 pages it, with prefix caching from a trace's
block ids.

Sizing (vllm-project/vllm@35d5cda1 `vllm/v1/worker/gpu_worker.py`,
`Worker.determine_available_memory`: the worker profiles a forward pass of
`max_num_batched_tokens` tokens, then gives the KV cache what is left of `total memory x
gpu_memory_utilization` after the weights, that peak and the memory outside torch):
blocks = (device memory x utilisation - weights - activation peak - runtime reserve) / bytes
per block on one TP shard. The weights are the simulator's own (`simulator.memory`), the
activation peak the engine's profile run as its software profile's `kv_profile` says it is
made (`profile_run_bytes`: the forward pass, a gated MLP's activation output, the dummy sampler
run), the reserve its CUDA context and workspaces (`RUNTIME_RESERVE_BYTES`);
a block holds `block_size` tokens of K and V for every layer on that shard. "Device memory" is
the total the runtime reports (`Worker.determine_available_memory` takes
`torch.cuda.mem_get_info()[1] x gpu_memory_utilization`, vllm-project/vllm@0012cf69
`vllm/v1/worker/gpu_worker.py`; vLLM logs it as `total_gpu_memory`), the hardware YAML's
`memory.runtime_visible_bytes` where it is known: on an A100 it is 1-1.3 % below the
datasheet capacity, on a MI300X 7 % above the YAML's decimal 192 GB.
Predicted against engine logs in `serving/kv_logs.py`.

What the profile charges besides the weights and the activation peak (`PROFILE_CHARGES`)
differs by engine version: the software profile's `kv_profile.accounting` (`vllm`: V1 since
vllm-project/vllm#19312, "since-init"; `sglang`: "free-share"; `vllm-v0`, `trtllm` and the
others "total-used"), which `sim serve` uses; a log or validation run of another version names
its own (`with_accounting`; `serving/kv_logs.py`, `serving/validation.py`):
- "total-used": the memory in use after profiling, everything outside torch included (CUDA
  context, NCCL, workspaces): `peak_memory = total - free` after `profile_run`
  (vllm-project/vllm#2031, V0 from v0.2.5; V1 at vllm-project/vllm@0012cf69
  `vllm/v1/worker/gpu_worker.py`, `determine_available_memory`: `non_torch_allocations =
  (total - free) - allocated_bytes.all.current`). The sizing charges `RUNTIME_RESERVE_BYTES`.
- "torch-peak": `torch.cuda.max_memory_allocated()` only, so nothing outside torch's
  allocator (vLLM up to v0.2.4, `Worker.profile_num_available_blocks`; a v0.1.0 copy,
  IrisMagicBox/vllm-v0.1.0@145ab060 `vllm/worker/worker.py`, and the description of
  vllm-project/vllm#2031, which replaced it). No reserve.
- "since-init": only what grows after the worker's first snapshot (`MemorySnapshot()` in
  `init_device`, taken after the CUDA context and the distributed environment, NCCL included,
  exist; `non_kv_cache_memory = weights + torch_peak_increase + non_torch_increase` with the
  non-torch increase measured from that snapshot, `vllm/utils/mem_utils.py`
  `memory_profiling`): vLLM V1 since vllm-project/vllm#19312 (2025-06; a stored copy at
  vllm-project/vllm@35d5cda1 `vllm/v1/worker/gpu_worker.py`). The context and NCCL live in
  the (1 - utilisation) slack; the non-torch memory that appears during the profile run
  itself (kernel modules loaded lazily, library handles) is not modelled, so no reserve.
- "free-share" (SGLang): no profile run. `ModelRunnerKVCacheMixin.profile_max_num_token`
  (sgl-project/sglang@001ccef0
  `python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py`) gives the pool
  `rest_memory = available_gpu_memory - total_gpu_memory x (1 - mem_fraction_static)`, where
  `available_gpu_memory` is the free memory after the weights are loaded and
  `total_gpu_memory` the free memory before them, once the CUDA context and the distributed
  environment exist (`self.pre_model_load_memory = self.init_torch_distributed()`, "Get
  available memory before model loading", then `init_memory_pool(self.pre_model_load_memory)`,
  sgl-project/sglang@0005834c `python/sglang/srt/model_executor/model_runner.py`; both the
  minimum over the ranks). So KV = (free - weights) - (1 - share) x free = share x free -
  weights, free = device total - context: the activations, CUDA graphs and workspaces live in
  the (1 - share) slack and the context outside the share; no activation term, no reserve.
  The context (with NCCL) is not sourced per device and is taken as 0: the pool is then
  overstated by share x context (0.57 GiB on a MI300X at 0.88, whose SGLang log shows 0.65
  GiB in use before the weights). The index's copies of SGLang's `ModelRunner` of late 2024
  (their fork not named) have the same line in `profile_max_num_token`. The share is the
  replay's `gpu_memory_utilization` (0.9 unless given, `replay.default_options`); SGLang's own
  default depends on its version: 0.88 / 0.87 / 0.85 / 0.81 / 0.79 at TP 1 / 2 / 4 / 8 / 16 in
  `ServerArgs.__post_init__` of 2024 (stored copies of `python/sglang/srt/server_args.py`,
  fork not named; the MI300X log's figures give 0.880 at TP 1), from the device memory less a
  reserve for activations and CUDA graphs in later versions (`_handle_gpu_memory_settings`:
  about 0.90 on an H200 at TP 4).

KV cache dtype (`--kv-cache-dtype`, `KV_CACHE_DTYPES`): the engines' spellings of the storage
dtypes the simulator models. vLLM's `CacheDType` (vllm-project/vllm@002f10e0
`vllm/config/cache.py`: "auto" uses the model dtype; "fp8" is fp8_e4m3; float16, bfloat16,
fp8_e5m2), SGLang's `--kv-cache-dtype` (sgl-project/sglang@0005834c
`python/sglang/srt/model_executor/model_runner.py`, `TORCH_DTYPE_TO_KV_CACHE_STR`: fp8_e4m3,
fp8_e5m2, bf16) and TensorRT-LLM's FP8 KV cache quantisation (`KV Cache Dtype: FP8` in
`trtllm-bench`'s engine details, NVIDIA/TensorRT-LLM@8809c33e `benchmarks/Suite.md`). Every
FP8 format stores one byte per value, the 16-bit ones two. The choice rides on the software
profile (`SoftwareProfile.kv_cache_dtype`), so the block size in bytes here and the KV bytes
the step-time model reads and writes in attention (`precision("kv_cache")`) follow it.

Paging (vllm-project/vllm@ace980e6 `vllm/v1/core/kv_cache_manager.py`): a request holds
ceil(tokens / block_size) blocks; `allocate_slots` fails when the free blocks do not cover
the new ones (the scheduler then preempts). Prefix caching: `get_computed_blocks` returns the
longest run of cached full blocks, at most prompt - 1 tokens (the last token is recomputed to
get logits); freed blocks keep their content and are evicted least recently used first, the
tail of a request first (it frees in reverse order). Traces carry one id per prefix block of
`hash_block_tokens` tokens (Mooncake: 512), so the cache is kept at that granularity: a cached
id stands for `hash_block_tokens / block_size` engine blocks.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, replace

from ..errors import KrakenError
from ..models import ModelConfig
from ..simulator import Simulator
from ..hardware.schema import DTYPE_BYTES
from ..simulator.constants.software import KVProfile, SoftwareProfile, load_software
from ..simulator.graph import shard
from ..simulator.memory import RUNTIME_RESERVE_BYTES, activation_bytes, kv_cache_bytes, memory_use


class KVCacheError(KrakenError, ValueError):
    """The configuration leaves no room for the KV cache, or a request can never fit."""


# an engine's --kv-cache-dtype spelling -> the simulator precision it stores ("auto": the
# profile's own); fp8 variants differ in their exponent/mantissa split, not in bytes
KV_CACHE_DTYPES = {"auto": "auto", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
                   "bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16"}


def kv_cache_software(software: SoftwareProfile | str | None,
                      kv_cache_dtype: str = "auto") -> SoftwareProfile | str | None:
    """The software profile whose KV cache is stored as `kv_cache_dtype` (an engine's
    spelling, `KV_CACHE_DTYPES`); "auto" returns `software` itself, so nothing changes."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise KVCacheError(f"--kv-cache-dtype {kv_cache_dtype!r} is not one of "
                           f"{', '.join(KV_CACHE_DTYPES)} (the engines' spellings of the KV "
                           "dtypes the simulator models)")
    precision = KV_CACHE_DTYPES[kv_cache_dtype]
    if precision == "auto":
        return software
    profile = software if isinstance(software, SoftwareProfile) else load_software(software)
    return replace(profile, kv_cache_dtype=precision)


@dataclass(frozen=True)
class KVSizing:
    """size_kv_cache's result for one replica's device: the KV cache blocks and tokens per block,
    the bytes of one block on one TP shard, and the bytes it was sized from: weights, activations
    at the token budget, the runtime reserve (0 when the engine's profile does not charge it),
    the device memory the fraction applies to, and that fraction (gpu_memory_utilization, 0-1)."""
    blocks: int
    block_size: int
    bytes_per_block: int
    weights_bytes: int
    activation_bytes: int
    reserve_bytes: int
    capacity_bytes: int
    utilization: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


# an engine version's profile accounting -> whether it charges the runtime reserve (the keys
# are software.KV_ACCOUNTINGS, the values a profile may name: tests/test_serving_kv_logs.py)
PROFILE_CHARGES = {"total-used": True, "torch-peak": False, "since-init": False,
                   "free-share": False}
# the accountings whose share holds only the weights and the KV cache, so the profile run's
# activations are not charged (they live in the slack: "free-share", module docstring)
ACTIVATIONS_IN_SLACK = frozenset({"free-share"})


def with_accounting(software: SoftwareProfile | str | None,
                    accounting: str | None) -> SoftwareProfile | str | None:
    """The software profile with another engine version's profile accounting (a replay or
    log of an older version than the profile's: `PROFILE_CHARGES`); None returns `software`."""
    if accounting is None:
        return software
    if accounting not in PROFILE_CHARGES:
        raise KVCacheError(f"profile accounting {accounting!r} is not one of "
                           f"{', '.join(PROFILE_CHARGES)}")
    profile = software if isinstance(software, SoftwareProfile) else load_software(software)
    return replace(profile, kv_profile=replace(profile.kv_profile, accounting=accounting))


def profile_run_bytes(config: ModelConfig, tp: int, tokens: int, max_num_seqs: int,
                      dtype: str, kv_profile: KVProfile) -> int:
    """The torch peak of the engine's profile run on one TP shard, as `kv_profile` says it
    is made (software profile, section `kv_profile`; sources in the profiles' YAML):

    forward = `memory.activation_bytes` (a `tokens`-token pass: residual stream, its norm, the
    widest GEMM output, one sequence's logits) + tokens x sharded ffn x dtype bytes when the
    MLP is gated and the engine's activation writes its output beside its input
    (`gated_mlp_output`: vLLM's `SiluAndMul.forward_cuda` allocates `out = torch.empty(...)`
    and calls `ops.silu_and_mul(out, x)`, vllm-project/vllm@00db0119
    `vllm/model_executor/layers/activation.py`; the gate/up output it reads is the widest GEMM
    output already counted);
    sampler = min(max_num_seqs, tokens) x vocabulary x `sampler_bytes_per_logit` + tokens x
    d_model x dtype bytes: the dummy sampler run on one token of each dummy sequence, after the
    forward pass, with the batch's last hidden states still referenced by the caller (vLLM V0
    `ModelRunner.profile_run` / `execute_model`, V1 `profile_run` then `_dummy_sampler_run`);
    the logits are the whole vocabulary on the rank that samples (V0 gathers them to the driver,
    whose count the executor takes as the minimum over workers; V1 gathers them to every rank).
    peak = max(forward, sampler): the sampler runs after the forward pass's activations are
    freed, so its tensors replace them rather than add to them. The bytes per logit: V0 32, at
    `_apply_top_k_top_p`'s re-sort (the profile run samples with top_p 0.99 and top_k
    vocab - 1; vllm-project/vllm@00f5ff34 `vllm/model_executor/layers/sampler.py`, @002a0ba9
    `vllm/worker/model_runner.py`), V1 14 (model-dtype logits, their fp32 copy, probabilities,
    exponential noise; @00ec9781 `vllm/v1/sample/sampler.py`, @01fa3fe7
    `vllm/v1/sample/ops/topk_topp_sampler.py`); the derivations are the profiles' sources
    KV0 and KV1."""
    b = DTYPE_BYTES[dtype]
    sh = shard(config, tp)
    forward = activation_bytes(config, tp, 1, tokens, dtype, True)
    if kv_profile.gated_mlp_output and config.activation == "swiglu":
        forward += tokens * sh.sublayers * sh.ffn * b
    if not kv_profile.sampler_bytes_per_logit:
        return forward
    sequences = min(max_num_seqs, tokens)
    sampler = sequences * config.vocab_size * kv_profile.sampler_bytes_per_logit \
        + tokens * sh.width * b
    return max(forward, sampler)


def device_memory_bytes(system) -> float:
    """The device total a serving engine takes its memory fraction of: what the runtime
    reports (`memory.runtime_visible_bytes`), else the datasheet capacity."""
    memory = system.device.memory
    return memory.runtime_visible_bytes or memory.capacity_bytes


def size_kv_cache(sim: Simulator, config: ModelConfig, tp: int, *, block_size: int = 16,
                  gpu_memory_utilization: float = 0.9, max_num_batched_tokens: int = 8192,
                  model_name: str = "model", of_free_memory: bool = False,
                  max_num_seqs: int = 256) -> KVSizing:
    """Blocks of the KV cache per replica (every TP shard holds the same number).
    `of_free_memory`: the fraction applies to what the weights, activations and reserve leave
    (TensorRT-LLM's `free_gpu_memory_fraction`), not to the whole device (vLLM's
    `gpu_memory_utilization`). What the engine version's profile charges besides weights and
    activations is the software profile's `kv_profile.accounting` (`PROFILE_CHARGES`, module
    docstring): the runtime reserve for "total-used", nothing for "torch-peak",
    "since-init" and "free-share"; the activation peak is `profile_run_bytes` (its
    `max_num_seqs` dummy sequences sample one token each when the profile says the engine's
    profile run samples), except for "free-share" (SGLang), whose share holds the weights and
    the KV cache only: blocks = (device memory x mem_fraction_static - weights) / bytes per
    block, `gpu_memory_utilization` standing for `mem_fraction_static`."""
    kv_profile = sim.profile.kv_profile
    profile_charges = kv_profile.accounting
    if profile_charges not in PROFILE_CHARGES:
        raise KVCacheError(f"profile accounting {profile_charges!r} is not one of "
                           f"{', '.join(PROFILE_CHARGES)}")
    if not 0 < gpu_memory_utilization <= 1:
        raise KVCacheError(f"--gpu-memory-utilization must be in (0, 1], got "
                           f"{gpu_memory_utilization}")
    if block_size < 1:
        raise KVCacheError(f"--block-size must be at least 1, got {block_size}")
    use = memory_use(config, sim.system, tp, 1, 1, 1, sim.dtype, True, sim.precision)
    act = 0 if profile_charges in ACTIVATIONS_IN_SLACK else \
        profile_run_bytes(config, tp, max_num_batched_tokens, max_num_seqs,
                          sim.precision("elementwise"), kv_profile)
    per_block = kv_cache_bytes(config, tp, 1, block_size, sim.precision("kv_cache"))
    capacity = int(device_memory_bytes(sim.system))
    reserve = RUNTIME_RESERVE_BYTES if PROFILE_CHARGES[profile_charges] else 0
    left = capacity - use.weights_bytes - act - reserve
    free = left * gpu_memory_utilization if of_free_memory else \
        capacity * gpu_memory_utilization - use.weights_bytes - act - reserve
    blocks = int(free // per_block) if free > 0 else 0
    if blocks < 1:
        gb = 1e9
        raise KVCacheError(
            f"{model_name} leaves no KV cache on {sim.system.name} with --tp {tp}: "
            f"{capacity / gb:.1f} GB x {gpu_memory_utilization:g} - weights "
            f"{use.weights_bytes / gb:.1f} GB - activations {act / gb:.1f} GB - reserve "
            f"{reserve / gb:.1f} GB = {free / gb:.1f} GB; use a larger --tp, a "
            "higher --gpu-memory-utilization, a smaller --max-num-batched-tokens or a system "
            "with more memory")
    return KVSizing(blocks, block_size, per_block, use.weights_bytes, act, reserve, capacity,
                    gpu_memory_utilization)


class BlockPool:
    """Free blocks, and cached prefix blocks (by trace id) in use or evictable (LRU)."""

    def __init__(self, blocks: int, block_size: int, hash_block_tokens: int = 0,
                 prefix_caching: bool = True):
        self.total = blocks
        self.block_size = block_size
        self.free = blocks  # blocks holding nothing reusable
        self.hash_tokens = hash_block_tokens if prefix_caching else 0
        self.per_id = math.ceil(hash_block_tokens / block_size) if self.hash_tokens else 0
        self.refs: dict[int, int] = {}         # cached id -> requests using it
        self.lru: OrderedDict[int, None] = OrderedDict()  # cached ids nobody uses (evictable)

    @property
    def available(self) -> int:
        return self.free + self.per_id * len(self.lru)

    @property
    def used(self) -> int:
        return self.total - self.available

    def hit_ids(self, ids: tuple[int, ...], tokens: int) -> int:
        """How many leading prefix ids are cached, at most (tokens - 1) tokens' worth."""
        if not self.per_id or not ids:
            return 0
        limit = (tokens - 1) // self.hash_tokens
        n = 0
        refs, lru = self.refs, self.lru
        for h in ids[:limit]:
            if h in refs or h in lru:
                n += 1
            else:
                break
        return n

    def take(self, n: int) -> bool:
        """Allocate n blocks, evicting cached blocks nobody uses (least recent first)."""
        if n <= self.free:
            self.free -= n
            return True
        if n > self.available:
            return False
        lru = self.lru
        while self.free < n:
            lru.popitem(last=False)
            self.free += self.per_id
        self.free -= n
        return True

    def share(self, ids) -> None:
        """A request starts using cached ids (moved out of the evictable set)."""
        refs, lru = self.refs, self.lru
        for h in ids:
            if h in lru:
                del lru[h]
                refs[h] = 1
            else:
                refs[h] += 1

    def admit(self, ids: list[int], n: int) -> bool:
        """A waiting request starts: share its cached ids and take n blocks of its own; when
        the n blocks are not there, the ids are given back and nothing is held."""
        if ids:
            self.share(ids)
        if not self.take(n):
            self.release(0, ids)
            return False
        return True

    def publish(self, h: int) -> bool:
        """A request's own `per_id` blocks now hold prefix block h: cache them (unless another
        request cached h first). Returns whether the request now references h."""
        if h in self.refs or h in self.lru:
            return False
        self.refs[h] = 1
        return True

    def release(self, private_blocks: int, ids: list[int]) -> None:
        """A request frees its blocks: private ones become free, its cached ids evictable when
        nobody else uses them (the tail first: freed in reverse order)."""
        self.free += private_blocks
        if not ids:  # no cached ids (no reversed() object to build)
            return
        refs, lru = self.refs, self.lru
        for h in reversed(ids):
            left = refs[h] - 1
            if left:
                refs[h] = left
            else:
                del refs[h]
                lru[h] = None
