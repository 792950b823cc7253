"""The software stack as part of the system: what differs between serving stacks and is measurable.

A `SoftwareProfile` (YAML in `krakenlm/simulator/software_profiles/`, or a user's file) says:

* `kernels`: whose measured kernels time the GEMMs, attention, collectives and streaming ops
  (a framework key of the GPU calibration files: trtllm, vllm, sglang);
* `graphs`: whether prefill and decode steps are replayed as CUDA graphs (no host cost per
  kernel, one launch per step) or issued kernel by kernel from the host, and the sizes the
  graphs were captured for, to which a replayed step is padded (`Graphs.padded_tokens`);
* `host`: the host's time per kernel it issues outside a graph, per forward step
  (scheduling, input preparation, sampling, output processing) and per sequence the step
  carries (the same work done for each sequence: a Python engine loops over them), and whether
  that per-step work overlaps the GPU's (an asynchronous scheduler) or adds to it;
* `collectives`: which all-reduce runs (the framework's custom one-/two-shot kernel up to a
  size, NCCL above it, or NCCL only);
* `attention`: the fused kernel and the largest head dimension it supports; larger heads run
  the unfused path (QK^T GEMM, softmax, AV GEMM), which the breakdown names; `context_fused:
  false` says the engine's context phase (prefill) runs that unfused path at every head size
  while decode keeps its fused kernel (an engine era: FasterTransformer 5.x, see
  `measurements.harness.engine_era`); `kv_append: concat` says each decode step appends the new
  token's K and V by concatenating it onto the layer's whole cache into a new tensor (reading
  the old cache, writing the new one) instead of writing one token in place (`in_place`, the
  default): an engine era too, Hugging Face transformers' tuple / DynamicCache cache;
* `fusions`: residual add fused into the next norm, RoPE and the KV-cache write inside the
  attention kernel, a row-parallel Linear's bias added by a kernel of its own after the
  all-reduce (Megatron-style layers) rather than in the GEMM's epilogue;
* `fp8`: with `--dtype fp8`, which operators actually run in FP8 (engines quantise the GEMMs
  and keep norms, the LM head and usually attention and the KV cache in 16-bit);
* `kv_profile`: how the engine sizes its KV cache at startup (its memory profile's
  accounting, and the tensors its profile run holds besides the forward pass's: serving's
  `kv_cache.size_kv_cache`);
* `issued_kernels`: how many kernels the host issues per layer part (norm, RoPE, attention
  block, gated MLP) and outside the layers where the stack issues more than the graph's
  operators (0: the graph's count; `eager` sets gpt-fast's counted kernels, and an engine era
  sets Hugging Face transformers' unfused eager Llama's, `measurements.harness.engine_era`);
* `frontend`: the API server in front of the engine (a fixed time per request, a time per
  prompt token on its way in, a time per
  output token of each running stream, and for an engine that runs on the server's own event
  loop the work per request done there, one request at a time, or for a front end in a process
  of its own the work per request on its loop), which only a client-side
  replay (`sim serve --client-side`) adds; 0 by default.

Every number carries its source (a document, or a fit on cited measurements with its
fit/held-out error) in the YAML's `sources` section. How a profile enters the timeline: a step
issued kernel by kernel takes max(GPU time, kernels x host per kernel) per layer (the host runs
ahead of the GPU when it can, so it only shows when it is the slower of the two); a step in a
CUDA graph takes its GPU time; then the per-step host time, per_step + batch x per_sequence, is
added (or overlapped).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable

import yaml

from ... import yamlio
from ...errors import KrakenError
from ...fileio import read_shipped_or_user_text
from ..kernels.gpu.allreduce_routes import version_tuple

PROFILE_PACKAGE = "krakenlm.simulator.constants.software_profiles"
DEFAULT_SOFTWARE = "trtllm"
PRECISIONS = ("fp8", "bf16", "fp16", "fp32", "int8")
FP8_OPERATORS = ("gemm", "attention", "kv_cache", "lm_head", "all_reduce")


class SoftwareError(KrakenError, ValueError):
    """A software profile is unknown or malformed; the message names the field."""


@dataclass(frozen=True)
class Host:
    """The host (CPU) side of a serving stack: the time it spends issuing kernels and
    running each step, per system where fitted, and the prefill GPU-time scale."""
    per_kernel_s: float = 0.0        # host time to issue one kernel outside a CUDA graph
    # host time per kernel with the engine's CUDA graphs switched off (vLLM --enforce-eager,
    # SGLang --disable-cuda-graph), when the model runs in PyTorch's eager dispatch: at least
    # this (`SoftwareProfile.without_cuda_graphs`); 0: `per_kernel_s` (a C++ runtime)
    eager_per_kernel_s: float = 0.0
    prefill_step_s: float = 0.0      # per prefill forward pass
    decode_step_s: float = 0.0       # per decode step
    per_sequence_s: float = 0.0      # per sequence a step carries (prefill and decode alike)
    # per step when the model is split over more than one rank (TP > 1): the driver's work to
    # hand each step's inputs to the other ranks before the forward pass (vLLM V0's
    # `broadcast_tensor_dict`), on the GPU's critical path like the per-step work
    tp_step_s: float = 0.0
    # vLLM V0's multi-step rounds (0.6.x) at TP > 1: the GPU tensors of the model input the
    # driver broadcasts again before every later step of a round, one NCCL broadcast each,
    # which the GPU runs between the steps (serving/vllm_v0.py; 0: none)
    multi_step_broadcast_tensors: int = 0
    # vLLM V0's multi-step rounds (0.6.x): the host's whole cycle per sequence in each later
    # step of a round (its loop, the forward pass's launch, the asynchronous output processor
    # and the pythonizing of the round's previous step, the sampler's launch), measured where
    # the host sets the pace, which the GPU hides until it is longer: a later step lasts at
    # least this x the batch (serving/vllm_v0.py; 0: never binds)
    multi_step_host_seq_s: float = 0.0
    graph_launch_s: float = 0.0      # per CUDA-graph replay
    step_overlaps_gpu: bool = False  # per-step host work runs beside the GPU (async scheduler)
    # the first engine version whose output processing runs beside the GPU (vLLM 0.6.0's
    # asynchronous output processor): a measurement of that version or later carries
    # `per_sequence_async_s` per sequence instead of `per_sequence_s` (measurements/harness.py
    # `row_host`); "": every version carries `per_sequence_s`
    per_sequence_until: str = ""
    # per sequence a step carries from `per_sequence_until` on: the share of `per_sequence_s`
    # that stays on the critical path (scheduling, preparing the inputs, the sampler's return
    # of its tokens) once output processing overlaps the next step
    per_sequence_async_s: float = 0.0
    # Not host work: the measured prefill GPU time of this stack on this system over what the
    # kernel models give (1: as calibrated). Fitted per system on end-to-end rows, never
    # sourced; it carries what a source's long forward passes ran slower than the kernel
    # tables' short benchmarks (clocks under the board's power limit, an older stack's kernels).
    prefill_gpu_time_scale: float = 1.0

    def per_step_s(self, phase: str, tp: int) -> float:
        """Host work of one step of `phase` ("prefill" or "decode") on `tp` ranks that does
        not depend on the batch: the phase's per-step work, plus `tp_step_s` when tp > 1."""
        step = self.prefill_step_s if phase == "prefill" else self.decode_step_s
        return step + self.tp_step_s if tp > 1 else step

    def at_version(self, version: str | None) -> Host:
        """These constants as an engine `version` ran them: from `per_sequence_until` on, the
        output processing (detokenisation, stop checks, request outputs) runs beside the GPU's
        next step (taken as hidden: it is shorter than the step in every measured setup), so a
        sequence adds only `per_sequence_async_s` to the step (scheduling, input preparation
        and the sampler, still between the steps). No version, or an earlier one: unchanged."""
        until = self.per_sequence_until
        if not until or not version or self.per_sequence_s == 0 \
                or version_tuple(version) < version_tuple(until):
            return self
        return dataclasses.replace(self, per_sequence_s=self.per_sequence_async_s)


@dataclass(frozen=True)
class Frontend:
    """The serving front end between the client and the engine (HTTP server, tokeniser,
    detokeniser, streaming), as a client-side benchmark measures through it. Not part of the
    engine's step: `serve(..., client_side=True)` applies it to the replay's times
    (serving/frontend.py); every other replay and `Simulator.run` ignore it."""
    request_s: float = 0.0           # fixed per request, added to its first token and finish
    per_stream_token_s: float = 0.0  # front-end time per output token of each running stream
    # per prompt token, the server's way in (tokenising the prompt's text): the request reaches
    # the engine this much later, and the client's TTFT and E2E are that much longer
    per_prompt_token_s: float = 0.0
    # per request, the server's work on the engine's own event loop, one request at a time
    # (vLLM V0: AsyncLLMEngine inside the API server; serving/vllm_v0.py): no step starts
    # before every arrived request is handed over
    engine_loop_request_s: float = 0.0
    # per prompt token, the part of that work that grows with the prompt (tokenising it and
    # logging its ids on the same loop): a request's hand-over takes engine_loop_request_s +
    # engine_loop_token_s x its prompt tokens
    engine_loop_token_s: float = 0.0
    # per request, the work of a front end in a process of its own, on that process's event
    # loop, one job at a time in the order the jobs became ready (vLLM 0.5.4: the OpenAI server
    # beside an engine RPC process; serving/frontend.py `front_loop_arrivals`): first the
    # request's handler (parsing, tokenising, logging: front_loop_request_s + front_loop_token_s
    # x its prompt tokens), then, queued behind every job ready by then, its send to the engine
    # process (front_loop_send_s). It does not hold the engine's steps back: the engine starts
    # on what has arrived. Used instead of the engine_loop_* form for the engine versions from
    # front_loop_since up to (not including) front_loop_until ("": every version)
    front_loop_request_s: float = 0.0
    front_loop_token_s: float = 0.0
    front_loop_send_s: float = 0.0
    front_loop_since: str = ""
    front_loop_until: str = ""

    def front_loop(self, version: str | None) -> bool:
        """Whether a server of engine `version` hands requests over in the front-loop form
        (the front_loop_* fields): it has them, and `version` lies in [front_loop_since,
        front_loop_until), a bound left "" being open; with bounds and no version, no."""
        if not (self.front_loop_request_s or self.front_loop_token_s or self.front_loop_send_s):
            return False
        since, until = self.front_loop_since, self.front_loop_until
        if not since and not until:
            return True
        if not version:
            return False
        v = version_tuple(version)
        return (not since or v >= version_tuple(since)) and \
            (not until or v < version_tuple(until))

    def after_engine_s(self) -> float:
        """The fixed time per request a client sees besides the engine's and the front-end
        loop's: request_s, which at concurrency 1 holds all the front end's time, less the
        front loop's handler and send (front_loop_request_s + front_loop_send_s), at least 0."""
        return max(0.0, self.request_s - self.front_loop_request_s - self.front_loop_send_s)

    def at_version(self, version: str | None) -> Frontend:
        """This front end as a server of engine `version` runs it: the front-loop form
        (`front_loop`) without the engine-loop fields, or the engine-loop form without the
        front-loop fields."""
        if self.front_loop(version):
            return dataclasses.replace(self, engine_loop_request_s=0.0, engine_loop_token_s=0.0)
        return dataclasses.replace(self, front_loop_request_s=0.0, front_loop_token_s=0.0,
                                   front_loop_send_s=0.0)


MAX_CAPTURED_TOKENS = 65536  # a `Graphs.pad_max` beyond this is a typo, not an engine's graph
# the capture-size rules (`Graphs.pad_limit`) whose engine has a knob for its largest CUDA graph
# (`--cuda-graph-max`: vLLM V1 --max-cudagraph-capture-size, SGLang --cuda-graph-max-bs)
CAPTURE_KNOBS = ("vllm-v1", "sglang")

# `Graphs.pad_limit`: how an engine's knobs bound the largest graph it captures
PAD_LIMITS = ("", "vllm-v0", "vllm-v1", "sglang")
# vLLM V0's default `max_num_seqs` (EngineArgs), which a query without knobs runs at
V0_DEFAULT_MAX_NUM_SEQS = 256
# SGLang 0.5.9 `ServerArgs._handle_gpu_memory_settings` (python/sglang/srt/server_args.py of
# the PyPI wheel): the default `cuda_graph_max_bs` by the GPU's memory (MiB, nvidia-smi's
# total) below a bound, at TP < 4 and at TP >= 4; above the last bound (B200, MI300X) it is
# 512 (`Graphs.pad_max`)
SGLANG_MAX_BS_BY_MEMORY_MIB = ((20 * 1024, 8, 8), (35 * 1024, 24, 80), (60 * 1024, 32, 160),
                               (90 * 1024, 256, 512), (160 * 1024, 256, 512))


@dataclass(frozen=True)
class Graphs:
    """Which phases the stack replays as CUDA graphs (no per-kernel host issue time), and the
    batch padding of a replay: a graph is captured for a few token counts only, and a step
    replays the smallest one at least its size, its rows past the real tokens running as
    padding (the GEMMs, norms and collectives see the padded count; attention and the LM head
    only the real sequences). Captured sizes: 1, 2, 4, then, for each of `pad_tiers`' (first,
    step) pairs in turn, first, first + step, ... below the next tier's first size, the last
    tier up to `pad_max` (vLLM V0: ((8, 8),); V1: ((8, 8), (256, 16)); SGLang: ((8, 4),
    (16, 8), (256, 16), (512, 32))); a larger step is not padded and runs without a graph, its
    kernels issued from the host (`Simulator.run`, the serving oracle). No tiers: no padding,
    every step of a captured phase timed as captured (an engine whose sizes are not read). `pad_mixed`: a step with prompt tokens pads too (vLLM
    V1's piecewise graphs), else only pure-decode steps do (`padded_tokens`). `pad_limit`
    names the engine rule that bounds the largest captured size by its knobs
    (`largest_captured`); "": `pad_max` whatever the knobs."""
    prefill: bool = False
    decode: bool = True
    pad_tiers: tuple[tuple[int, int], ...] = ()
    pad_max: int = 0
    pad_mixed: bool = False
    pad_limit: str = ""
    # a step above the largest captured graph runs the model in PyTorch's eager dispatch
    # (SGLang, vLLM V0), its kernels issued at no less than `Host.eager_per_kernel_s`
    # (`SoftwareProfile.issuing_host`); false: at `per_kernel_s` (vLLM V1: its torch.compile'd
    # pieces without a graph)
    eager_above_largest: bool = False

    @property
    def pads(self) -> bool:
        """Whether a replayed step is padded to a captured size."""
        return bool(self.pad_tiers)

    def _size_at_least(self, tokens: int) -> int:
        """The smallest size of the capture grid (1, 2, 4, then the tiers, unbounded) that
        holds `tokens`."""
        if tokens <= 2:
            return tokens
        if tokens <= 4:
            return 4
        tiers = self.pad_tiers
        for i, (first, step) in enumerate(tiers):
            if tokens <= first:
                return first
            following = tiers[i + 1][0] if i + 1 < len(tiers) else None
            if following is None or tokens < following:
                size = first + -(-(tokens - first) // step) * step
                return size if following is None else min(size, following)
        raise AssertionError("unreachable: the last tier is unbounded")

    def _size_at_most(self, cap: int) -> int:
        """The largest size of the capture grid at most `cap` (>= 1)."""
        if cap < 4:
            return 2 if cap >= 2 else cap
        size = 4
        for first, step in self.pad_tiers:
            if cap < first:
                break
            size = first + (cap - first) // step * step
        return size

    def largest_captured(self, max_num_seqs: int | None = None,
                         max_num_batched_tokens: int | None = None, *,
                         device_memory_bytes: float | None = None,
                         tp: int | None = None, capture_max: int | None = None) -> int:
        """The largest size the engine captures under its knobs, by `pad_limit` (0 without
        padding; `pad_max` where a knob is not given or does not bound it). `capture_max`:
        the engine's own knob for it where it has one (vLLM V1 `--max-cudagraph-capture-size`,
        SGLang `--cuda-graph-max-bs`), which replaces the default below:

        * "vllm-v0": vLLM 0.6.0 `_get_max_graph_batch_size(max_num_seqs)` (worker/
          model_runner.py): `max_num_seqs` (default 256) rounded up to a captured size, at
          most `pad_max` (0.5.4 captured up to 256 whatever the knob: equal at the default);
        * "vllm-v1": vLLM 0.19 `_set_cudagraph_sizes` (config/vllm.py): min(`pad_max`,
          2 x max_num_seqs) or `capture_max`, at most max_num_batched_tokens, rounded down to
          a captured size;
        * "sglang": SGLang 0.5.9 `cuda_graph_max_bs` by the GPU's memory and TP
          (`SGLANG_MAX_BS_BY_MEMORY_MIB`; `pad_max` above the last bound or when the device is
          not given) or `capture_max`, rounded down to a captured size, at most the request
          pool (`max_num_seqs`), which is itself captured (`get_batch_sizes_to_capture` adds
          `req_to_token_pool.size`)."""
        if not self.pad_tiers:
            return 0
        top = self.pad_max
        if self.pad_limit == "vllm-v0":
            seqs = V0_DEFAULT_MAX_NUM_SEQS if max_num_seqs is None else max_num_seqs
            return min(top, self._size_at_least(max(1, seqs)))
        if self.pad_limit == "vllm-v1":
            cap = top if capture_max is None else capture_max
            if max_num_seqs is not None and capture_max is None:
                cap = min(cap, 2 * max_num_seqs)
            if max_num_batched_tokens is not None:
                cap = min(cap, max_num_batched_tokens)
            return top if cap == top else self._size_at_most(max(1, cap))
        if self.pad_limit == "sglang":
            if capture_max is not None:
                top = self._size_at_most(max(1, capture_max))
            elif device_memory_bytes is not None and tp is not None:
                mib = device_memory_bytes / 2**20
                for below, small_tp, large_tp in SGLANG_MAX_BS_BY_MEMORY_MIB:
                    if mib < below:
                        top = min(top, small_tp if tp < 4 else large_tp)
                        break
            if max_num_seqs is not None:
                top = min(top, max(1, max_num_seqs))
            return top
        return top

    def padded_tokens(self, tokens: int, prefill: bool, largest: int | None = None) -> int:
        """The token count a step of `tokens` runs its padded operators at: `prefill` whether
        it holds prompt tokens (padded only when `pad_mixed` and prefill is captured);
        `largest` the largest captured size (`largest_captured`; default: under the engine's
        default knobs): a larger step runs without a graph, unpadded."""
        largest = self.largest_captured() if largest is None else largest
        if not self.pad_tiers or tokens > largest or tokens <= 2:
            return tokens
        if prefill and not (self.pad_mixed and self.prefill):
            return tokens
        if not prefill and not self.decode:
            return tokens
        return min(self._size_at_least(tokens), largest)


@dataclass(frozen=True)
class Prefill:
    """How the stack's prefill hands over to decode."""
    # FasterTransformer-style engines (TurboMind) prefill the prompt but its last token, whose
    # decode step then produces the first token: TTFT = prefill(prompt - 1) + one decode step
    last_token_in_decode: bool = False


@dataclass(frozen=True)
class Collectives:
    """The stack's all-reduce: its custom kernel (and up to what size) or the library's
    (NCCL / RCCL), and the engine versions that changed it."""
    all_reduce: str = "nccl"         # "custom" (framework kernel) or "nccl"
    custom_max_bytes: float = 0.0    # custom all-reduce up to this many bytes; 0: any size
    # the first engine version whose all-reduce is the custom kernel by default; a measurement
    # of an older version ran NCCL (measurements/harness.py `engine_era`); "": every version
    custom_since: str = ""
    # the first engine version whose upstream build runs the custom kernel on AMD GPUs; a
    # measurement of an older upstream build on an AMD GPU ran the library's (RCCL) all-reduce
    # (`engine_era`); "": as on other GPUs
    rocm_custom_since: str = ""


@dataclass(frozen=True)
class Attention:
    """The stack's attention kernels: which family, the largest head it runs fused, and
    the engine versions whose decode kernel read K and V differently."""
    kernel: str = "FlashAttention-2"
    max_head_dim: int = 256
    context_fused: bool = True       # False: prefill runs QK^T, masked softmax and AV unfused
    # False: the decode kernel runs one thread block per query head, each reading its KV head's
    # cache, so a GQA group reads K and V once per query head (timed as MHA over `heads`)
    decode_shares_kv: bool = True
    # the first engine version whose ROCm build decodes with a kernel that reads K and V once per
    # GQA group; a measurement of an older version on an AMD GPU ran the generic kernel
    # (measurements/harness.py `engine_era`: decode_shares_kv false); "": every version
    rocm_shared_kv_since: str = ""
    # how a decode step stores the new token's K and V (one of KV_APPENDS): "in_place" writes
    # one token into a preallocated cache (paged or static); "concat" builds a new cache tensor
    # per layer, torch.cat([past, new], dim=seq), which reads the old cache and writes the new
    # one (graph.py `_attention`; the era: measurements/harness.py `engine_era`)
    kv_append: str = "in_place"
    # True: the decode kernel splits the KV of MHA rows (one query head per KV head) across
    # CTAs as it does GQA rows, whatever the measured table's kernel does: vLLM V0 decodes with
    # flash_attn_with_kvcache (FA2 `mha_fwd_kvcache` calls `set_params_splitkv` for every head
    # layout) or PagedAttention v2 (512-token partitions), where vLLM V1's FA2 varlen path on
    # A100 splits only GQA (kernels/gpu/attention.py, structure `split_mha`); False: as the
    # measured table's kernel does
    decode_splits_mha: bool = False


# `Attention.kv_append`: the new token's K and V written in place, or the cache concatenated anew
KV_APPENDS = ("in_place", "concat")


@dataclass(frozen=True)
class IssuedKernels:
    """How many kernels the host issues, where the stack's own code issues more than the
    simulator's graph has operators (an eager framework that runs each elementwise step of a
    norm or RoPE as its own kernel). The counts replace the graph's operator count in the
    host-issue bound, max(GPU time, kernels x host.per_kernel_s) per graph, part by part of
    the layer, so that they apply to any block built of those parts (run.py
    `issued_kernels`): each RMSNorm issues `rmsnorm`, the RoPE of q and k `rope`, the attention
    block (its projections, cache write or concatenation, attention and output projection,
    RoPE apart) `attention_<phase>`, a gated MLP (its GEMMs, SiLU and product) `gated_mlp`;
    every other operator of a graph (a LayerNorm, GELU, a residual add, an all-reduce, the
    embedding gather, the LM head) one; the graphs outside the layers by the same rule.
    `outside_layers_*` is what a forward pass or decode step issues besides every graph's
    operators (mask and position bookkeeping and, for a decode step, the generate loop's
    logits processing, token choice and stopping checks), charged to the head graph. 0: the
    graph's own operators. Measured, not fitted (benchmarks/hf_eager_op_count.py, by layer part): the
    `eager` profile sets gpt-fast's counts, and an engine era sets transformers' in their
    place (measurements/harness.py `engine_era`)."""
    rmsnorm: int = 0
    rope: int = 0
    attention_prefill: int = 0
    attention_decode: int = 0
    gated_mlp: int = 0
    outside_layers_prefill: int = 0
    outside_layers_decode: int = 0
    # The bytes the stack's unfused elementwise kernels move per element of the tensor the
    # graph's op works on (0: the graph's fused kernel's traffic): RMSNorm per hidden element
    # per norm, RoPE per q and k element, the gated activation (SiLU, x up) per intermediate
    # element. graph.py `eager_elementwise` times them; measured, not fitted
    # (benchmarks/hf_eager_op_count.py --elementwise-bytes).
    rmsnorm_bytes_per_element: float = 0.0
    rope_bytes_per_element: float = 0.0
    swiglu_bytes_per_element: float = 0.0

    def elementwise_bytes_per_element(self) -> tuple[tuple[str, float], ...]:
        """(graph streaming op, bytes per element) for every op the stack runs unfused."""
        return tuple((op, b) for op, b in (("rmsnorm", self.rmsnorm_bytes_per_element),
                                           ("rope", self.rope_bytes_per_element),
                                           ("swiglu", self.swiglu_bytes_per_element)) if b > 0)


@dataclass(frozen=True)
class Fusions:
    """Which neighbouring operators the stack runs as one kernel."""
    add_norm: bool = True            # residual add + next norm in one kernel
    rope_in_attention: bool = False  # RoPE and the KV-cache write inside the attention kernel
    row_bias_after_reduce: bool = False  # a row-parallel Linear's bias: own kernel after the reduce


@dataclass(frozen=True)
class Fp8Policy:
    """The dtype each operator runs in when the model is served in FP8."""
    gemm: str = "fp8"
    attention: str = "bf16"
    kv_cache: str = "bf16"
    lm_head: str = "bf16"
    all_reduce: str = "bf16"


# an engine version's KV sizing accounting (`KVProfile.accounting`; serving/kv_cache.py):
# vLLM's three ("total-used", "torch-peak", "since-init") and SGLang's "free-share"
KV_ACCOUNTINGS = ("total-used", "torch-peak", "since-init", "free-share")


@dataclass(frozen=True)
class KVProfile:
    """How the engine sizes its KV cache at startup: what its memory profile charges besides
    the weights and the profile run's activations (`accounting`, one of `KV_ACCOUNTINGS`),
    and which tensors its profile run holds beyond the forward pass's widest live set:
    `gated_mlp_output`: a gated MLP's activation writes a new tensor beside its input (vLLM's
    `SiluAndMul`); `sampler_bytes_per_logit`: the bytes alive per (dummy sequence, vocabulary
    entry) at the peak of the dummy sampler run that follows the forward pass, 0 when the
    profile run samples nothing the sizing charges. serving/kv_cache.py gives the formula;
    the profiles' `sources` cite the code."""
    accounting: str = "total-used"
    gated_mlp_output: bool = False
    sampler_bytes_per_logit: int = 0


# Systems that share a host platform with a system the host constants were fitted on: the DGX
# A100 40 GB and 80 GB both drive their GPUs from two AMD EPYC 7742 (NVIDIA DGX A100 datasheet).
SAME_HOST = {"a100-40gb-x8": "a100-80gb-x8"}


@dataclass(frozen=True)
class Sampler:
    """The sampler's GPU kernels after the LM head, for the steps whose time nothing measured
    carries: `kernels` kernels over the (sequences x vocabulary) logits moving
    `bytes_per_logit` bytes per logit in all (the greedy path an engine runs for requests at
    temperature 0), timed as plain streaming kernels of equal share (serving/step_time.py
    `sampler_s`). Charged only where a step's host work does not wait for them: a measured
    per-step host time (vLLM V0's single step: Vidur's SAMPLER_E2E, a wall time) already holds
    them; a later step of a vLLM V0 multi-step round runs them on the GPU with nothing else
    charging them (serving/vllm_v0.py). 0: not charged."""
    bytes_per_logit: float = 0.0
    kernels: int = 0


@dataclass(frozen=True)
class SoftwareProfile:
    """A serving stack (`--software`, one YAML file in software_profiles/): its
    kernels, CUDA graphs, host costs, collectives, attention, fusions, FP8 policy and front end,
    with the sources of its constants and the per-system host fits."""
    name: str
    description: str
    kernels: str
    graphs: Graphs = Graphs()
    host: Host = Host()
    prefill: Prefill = Prefill()
    collectives: Collectives = Collectives()
    attention: Attention = Attention()
    fusions: Fusions = Fusions()
    fp8: Fp8Policy = Fp8Policy()
    frontend: Frontend = Frontend()
    kv_profile: KVProfile = KVProfile()
    issued_kernels: IssuedKernels = IssuedKernels()
    sampler: Sampler = Sampler()
    # the KV cache's storage dtype as a serving engine's --kv-cache-dtype sets it ("auto": the
    # profile's own, i.e. the model dtype or its FP8 policy); set per run, not in the YAML
    kv_cache_dtype: str = "auto"
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    # host constants fitted per system (the host CPU is part of the system), and their records
    host_systems: dict[str, Host] = field(default_factory=dict, hash=False, compare=False)
    fits: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def with_hosts(self, change: Callable[[Host], Host], **fields: Any) -> SoftwareProfile:
        """This profile with `change` applied to its host constants and to every per-system
        fit of them alike (and any other `fields` replaced)."""
        return dataclasses.replace(
            self, host=change(self.host),
            host_systems={k: change(h) for k, h in self.host_systems.items()}, **fields)

    def host_time_scaled(self, scale: float) -> SoftwareProfile:
        """This stack on a host whose CPU takes `scale` times as long for the same work: every
        host time (the `Host` fields in seconds, the per-system fits' too) and every front-end
        time (the `Frontend` fields in seconds) x `scale`; what the GPU runs, and
        `prefill_gpu_time_scale`, unchanged. 1: this profile itself. A serving run's CPU is
        rarely stated: serving/host_fit.py fits a server's scale on the runs of the other
        sources that used the same server."""
        if scale == 1.0:
            return self
        return self.with_hosts(lambda h: _times_scaled(h, scale),
                               frontend=_times_scaled(self.frontend, scale))

    def without_cuda_graphs(self) -> SoftwareProfile:
        """This stack with its CUDA graphs switched off (vLLM `--enforce-eager`, SGLang
        `--disable-cuda-graph`; `sim run` / `sim serve --cuda-graph-max 0`): no phase replays a
        graph, so every kernel is issued from the host, at no less than `host.eager_per_kernel_s`
        where the profile gives it (an engine whose model then runs in PyTorch's eager
        dispatch), else at its own `per_kernel_s`; the per-system fits likewise."""
        return self.with_hosts(_issued_eagerly, graphs=Graphs(prefill=False, decode=False))

    def issuing_host(self, host: Host, above_largest: bool) -> Host:
        """The host constants a step issues its kernels by: `host`, or, for a step above the
        largest captured graph (`above_largest`) of an engine that runs such a step eagerly
        (`graphs.eager_above_largest`), `host` at no less than its `eager_per_kernel_s`."""
        if above_largest and self.graphs.eager_above_largest:
            return _issued_eagerly(host)
        return host

    def check_cuda_graph_max(self, n: int) -> None:
        """Raise SoftwareError unless `n` is a value of the engine's knob for its largest
        CUDA graph (`--cuda-graph-max`): 0 (no graphs, any engine), or a size up to
        MAX_CAPTURED_TOKENS where the engine has such a knob (`CAPTURE_KNOBS`)."""
        if not 0 <= n <= MAX_CAPTURED_TOKENS:
            raise SoftwareError(f"--cuda-graph-max must be from 0 (no CUDA graphs) to "
                                f"{MAX_CAPTURED_TOKENS}, got {n}")
        if n and self.graphs.pad_limit not in CAPTURE_KNOBS:
            raise SoftwareError(
                f"--cuda-graph-max {n}: the {self.name} profile's engine has no knob for its "
                "largest CUDA graph (vLLM V1's --max-cudagraph-capture-size and SGLang's "
                "--cuda-graph-max-bs are modelled); use 0 for no CUDA graphs, or drop it")

    def host_for(self, system_name: str) -> Host:
        """The host constants on `system_name`: its fitted values where the profile has them.
        A design `sim sweep` derives from a system is named "<base>:<knobs>" and keeps its
        base's host (the sweep changes the accelerator, not the CPU that drives it)."""
        base = system_name.split(":")[0]
        return self.host_systems.get(SAME_HOST.get(base, base), self.host)

    def precision(self, operator: str, dtype: str) -> str:
        """The dtype `operator` (gemm, attention, kv_cache, lm_head, all_reduce, elementwise)
        runs in when the model is served in `dtype`; the KV cache in `kv_cache_dtype` when set."""
        if operator == "kv_cache" and self.kv_cache_dtype != "auto":
            return self.kv_cache_dtype
        if dtype != "fp8":
            return dtype
        if operator == "elementwise":
            return "bf16"
        return getattr(self.fp8, operator)

    def uses_custom_all_reduce(self, size_bytes: float) -> bool:
        c = self.collectives
        return c.all_reduce == "custom" and (c.custom_max_bytes <= 0 or size_bytes <= c.custom_max_bytes)


def _issued_eagerly(host: Host) -> Host:
    """`host` issuing its kernels at no less than its eager rate (`eager_per_kernel_s`)."""
    if host.eager_per_kernel_s <= host.per_kernel_s:
        return host
    return dataclasses.replace(host, per_kernel_s=host.eager_per_kernel_s)


def _times_scaled(section: Any, scale: float) -> Any:
    """`section` (Host or Frontend) with every float field in seconds (named *_s) x scale."""
    return dataclasses.replace(section, **{
        f.name: getattr(section, f.name) * scale for f in dataclasses.fields(section)
        if f.name.endswith("_s") and isinstance(getattr(section, f.name), float)})


_SECTIONS = {"graphs": Graphs, "host": Host, "prefill": Prefill, "collectives": Collectives,
             "attention": Attention, "fusions": Fusions, "fp8": Fp8Policy, "frontend": Frontend,
             "kv_profile": KVProfile, "issued_kernels": IssuedKernels, "sampler": Sampler}


# an engine version `measurements.harness.engine_era` can compare: "0.8", "1.0.0rc1", "0.5.6.post2"
_VERSION = re.compile(r"\d+(\.\d+)*((rc|a|b|\.post|\.dev)\d+)?")


def is_engine_version(text: str) -> bool:
    """Whether `text` is an engine version the profiles compare ("0.5.4", "1.0.0rc1")."""
    return _VERSION.fullmatch(text) is not None


def _finite(number: float) -> bool:
    try:
        return math.isfinite(number)
    except OverflowError:  # an integer beyond the float range
        return False


def _pairs(value: Any, where: str) -> tuple[tuple[int, int], ...]:
    """A list of [first, step] pairs of whole numbers >= 1 (`Graphs.pad_tiers`)."""
    ok = isinstance(value, list) and all(
        isinstance(p, list) and len(p) == 2 and all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in p)
        for p in value)
    if not ok:
        raise SoftwareError(f"{where}: expected a list of [first size, step] pairs of whole "
                            f"numbers >= 1, e.g. [[8, 8], [256, 16]], got {value!r:.60}")
    return tuple((int(a), int(b)) for a, b in value)


def _section(cls: type, data: Any, where: str) -> Any:
    if data is None:
        return cls()
    if not isinstance(data, dict):
        raise SoftwareError(f"{where}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(str(k) for k in set(data) - set(fields))
    if unknown:
        raise SoftwareError(f"{where}: unknown field(s) {unknown}; known: {', '.join(fields)}")
    kwargs = {}
    for name, value in data.items():
        default = getattr(cls(), name)
        if isinstance(default, tuple):  # `Graphs.pad_tiers`: [[first, step], ...]
            value = _pairs(value, f"{where}.{name}")
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise SoftwareError(f"{where}.{name}: expected true or false, got {value!r}")
        elif isinstance(default, (int, float)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not _finite(value) or value < 0:
                raise SoftwareError(f"{where}.{name}: expected a number >= 0, got "
                                    f"{value!r:.60}")
            if isinstance(default, int) and not float(value).is_integer():
                raise SoftwareError(f"{where}.{name}: expected a whole number >= 0, got "
                                    f"{value!r:.60}")
            value = type(default)(value)
        elif isinstance(default, str):
            if not isinstance(value, str):
                raise SoftwareError(f"{where}.{name}: expected text, got {value!r}")
            if cls is Fp8Policy and value not in PRECISIONS:
                raise SoftwareError(f"{where}.{name}: {value!r} is not one of {PRECISIONS}")
            choices = _NAMED_CHOICES.get((cls.__name__, name))
            if choices is not None and value not in choices:
                raise SoftwareError(f"{where}.{name}: {value!r} is not one of "
                                    f"{', '.join(c or repr(c) for c in choices)}")
            if cls is Collectives and name == "all_reduce" and value not in ("custom", "nccl"):
                raise SoftwareError(f"{where}.{name}: {value!r} is not 'custom' or 'nccl'")
            if name in ("custom_since", "per_sequence_until", "rocm_shared_kv_since",
                        "rocm_custom_since", "front_loop_since", "front_loop_until") and value \
                    and not _VERSION.fullmatch(value):
                raise SoftwareError(f"{where}.{name}: {value!r} is not an engine version such "
                                    "as \"0.8\" or \"1.0.0rc1\" (or \"\" for every version)")
        kwargs[name] = value
    return cls(**kwargs)


# Text fields that take one of a few words: (section class, field) -> the words.
_NAMED_CHOICES = {("KVProfile", "accounting"): KV_ACCOUNTINGS,
                  ("Graphs", "pad_limit"): PAD_LIMITS,
                  ("Attention", "kv_append"): KV_APPENDS}


def profile_from_dict(data: Any, source: str) -> SoftwareProfile:
    if not isinstance(data, dict):
        raise SoftwareError(f"{source}: expected a mapping at the top level")
    known = {"name", "description", "kernels", "sources", "fits", *_SECTIONS}
    unknown = sorted(str(k) for k in set(data) - known)
    if unknown:
        raise SoftwareError(f"{source}: unknown field(s) {unknown}; known: {', '.join(sorted(known))}")
    for required in ("name", "kernels"):
        if not isinstance(data.get(required), str) or not data[required]:
            raise SoftwareError(f"{source}: missing field {required!r}")
    raw_host = data.get("host") or {}
    if not isinstance(raw_host, dict):
        raise SoftwareError(f"{source}: host: expected a mapping, got {raw_host!r:.60}")
    raw_host = dict(raw_host)
    per_system = raw_host.pop("systems", None) or {}
    sections = {name: _section(cls, raw_host if name == "host" else data.get(name),
                               f"{source}: {name}") for name, cls in _SECTIONS.items()}
    graphs = sections["graphs"]
    if graphs.pad_tiers and not 4 <= graphs.pad_max <= MAX_CAPTURED_TOKENS:
        raise SoftwareError(f"{source}: graphs.pad_tiers needs pad_max (the largest captured "
                            f"size) from 4 to {MAX_CAPTURED_TOKENS}, got {graphs.pad_max}")
    firsts = [first for first, _ in graphs.pad_tiers]
    if firsts and (firsts[0] <= 4 or firsts != sorted(set(firsts))):
        raise SoftwareError(f"{source}: graphs.pad_tiers' first sizes must rise from above 4 "
                            f"(1, 2 and 4 are always captured), got {firsts}")
    if graphs.pad_limit and not graphs.pad_tiers:
        raise SoftwareError(f"{source}: graphs.pad_limit {graphs.pad_limit!r} needs pad_tiers "
                            "(the captured sizes it bounds)")
    front = sections["frontend"]
    if (front.engine_loop_request_s or front.engine_loop_token_s) and front.front_loop(None):
        raise SoftwareError(f"{source}: frontend sets both engine_loop_* and front_loop_* for "
                            "every engine version; set one form, or front_loop_since / "
                            "front_loop_until for the versions whose front end has a loop of its own")
    if not isinstance(per_system, dict):
        raise SoftwareError(f"{source}: host.systems must map a system name to host constants")
    host_systems = {}
    for system_name, values in per_system.items():
        if not isinstance(values, dict):
            raise SoftwareError(f"{source}: host.systems.{system_name} must be a mapping")
        merged = {f.name: getattr(sections["host"], f.name) for f in dataclasses.fields(Host)}
        merged.update(values)
        host_systems[str(system_name)] = _section(Host, merged, f"{source}: host.systems.{system_name}")
    sources = data.get("sources") or {}
    if not isinstance(sources, dict):
        raise SoftwareError(f"{source}: sources must map a key to a citation")
    fits = data.get("fits") or {}
    if not isinstance(fits, dict):
        raise SoftwareError(f"{source}: fits must be a mapping")
    return SoftwareProfile(name=data["name"], description=str(data.get("description", "")),
                           kernels=data["kernels"], sources={str(k): str(v) for k, v in sources.items()},
                           host_systems=host_systems, fits=fits, **sections)


def _profile_files() -> dict[str, Any]:
    root = resources.files(PROFILE_PACKAGE)
    return {p.name[:-5]: p for p in root.iterdir() if p.name.endswith(".yaml")}


def software_names() -> list[str]:
    return sorted(_profile_files())


@functools.lru_cache(maxsize=32)
def load_software(name_or_path: str | None = None) -> SoftwareProfile:
    """A profile by name (`krakenlm sim software` lists them) or a path to a YAML file."""
    name_or_path = name_or_path or DEFAULT_SOFTWARE
    text, source = read_shipped_or_user_text(
        name_or_path, _profile_files(), what="software profile", file_what="software profile",
        error=SoftwareError,
        unknown=lambda names: f"unknown software {name_or_path!r}: not a profile ({names}) nor "
                              "a YAML file")
    try:
        data = yamlio.safe_load(text)
    except yaml.YAMLError as exc:
        raise SoftwareError(f"{source} is not valid YAML: {str(exc).splitlines()[0]}") from None
    return profile_from_dict(data, source)


def host_time_scaled(software: SoftwareProfile | str | None,
                     scale: float) -> SoftwareProfile | str | None:
    """`software` (a profile, its name or path, or None for the default) on a host whose CPU
    takes `scale` times its host and front-end times (`SoftwareProfile.host_time_scaled`); at
    scale 1 `software` itself, as given."""
    if scale == 1.0:
        return software
    profile = software if isinstance(software, SoftwareProfile) else load_software(software)
    return profile.host_time_scaled(scale)
