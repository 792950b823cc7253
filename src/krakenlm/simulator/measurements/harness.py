"""How each public source measured: the harness effects applied when a prediction is compared
with (or fitted to) that source's numbers, and never in a query of a served model.

* NVIDIA's kernel tables (aiconfigurator's collectors): the kernel forms' `Conditions`
  (kernels/base.py) under which each family was measured (`conditions`), the ones a fit
  chooses among (`choices`: stored in a calibration entry's `harness:`) and the harness
  constants a fit adds (`params`: the burst heating of SGLang's GEMM tables).
* The LLMCompass measurement set times each op with host `time.time()` around a PyTorch call:
  a measurement is max(floor, overhead + kernel) (`harnessed`, constants in the template file).
* Whole-model sources: how a source's engine ran a batch of prompts (`SEQUENTIAL_PREFILL`),
  which decides which simulations a row needs (`row_results`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...hardware import load_system
from ...hardware.identity import lookup
from ...hardware.schema import Device, System
from ...models import ModelConfig
from ..constants.software import Host, IssuedKernels, SoftwareProfile
from ..constants.template import CalibrationError, OpConstants
from ..kernels.base import BurstHeat, Conditions
from ..kernels.gpu.allreduce_routes import version_tuple
from ..kernels.params import Param
from ..kernels.template.collectives import collective_time
from ..kernels.template.elementwise import simulate_stream
from ..kernels.template.matmul import simulate_matmul
from .llmcompass import Point
from .models import ModelRow

# ------------------------------------------------------------ NVIDIA's kernel tables (aiconfigurator)
AICONFIGURATOR = "aiconfigurator"
# Copies of the layer the GEMM collectors cycle through (collector/*/collect_gemm.py): when they
# all fit the L2 with the activation, the weights come from L2 (gemm.py)
BENCHMARK_COPIES = {"trtllm": 5, "vllm": 6, "sglang": 6}
# SGLang's GEMM tables are timed in back-to-back bursts of one shape (6 copies x 9 passes): the
# power-limited rate of a long GEMM falls further as the die heats (leakage grows with
# temperature, the clocks at the power limit fall), toward a hot steady state. On the fit half,
# M, N >= 4096, K >= 2048, FP8 H100 runs median 1080 TFLOP/s for runs of 0.1-1 ms, 1069 for
# 1-5 ms, then 940, 783 and 670 for 5-10, 10-30 and > 30 ms (H200 1168, 1130, 1109, 917, 808;
# `python benchmarks/sim_sglang_gemm_tables.py`). The time constant is stated per kernel of
# such a burst; a served model's layer never runs that way.
HEAT_FRAMEWORKS = ("sglang",)
HEAT = (Param("heat_s", "seconds", 0.05, "thermal time constant of the power-limited rate: over "
              "a run of this length a GEMM's own heat takes the rate most of the way to its "
              "hot steady state; stated per kernel of the benchmark's back-to-back bursts"),
        Param("heat_gain", "positive", 0.5, "how much slower the power-limited rate is once "
              "the die has reached its hot steady state: the floor tends to t (1 + heat_gain)"))


def choices(source: str, family: str, framework: str) -> tuple[dict[str, Any], ...]:
    """The measurement conditions a fit of `family` tries in turn (the lowest fit-half error
    wins and is stored in the entry's `harness:`): whether the GEMM benchmark's weight copies
    stay in L2, whether the context benchmark's replays find their tensors in L2."""
    if source != AICONFIGURATOR:
        return ({},)
    if family == "gemm":
        copies = BENCHMARK_COPIES.get(framework, 0)
        return tuple({"weight_copies": c} for c in sorted({0, copies}))
    if family == "context_attention":
        return ({"warm_replay": False}, {"warm_replay": True})
    return ({},)


def params(source: str, family: str, framework: str) -> tuple[Param, ...]:
    """Harness constants fitted with a kernel form's (stored in the entry's `harness:`)."""
    if source == AICONFIGURATOR and family == "gemm" and framework in HEAT_FRAMEWORKS:
        return HEAT
    return ()


def conditions(source: str, family: str, stored: dict[str, Any] | None) -> Conditions:
    """How `source` ran `family`, with an entry's `harness:` (chosen and fitted conditions):
    every generation table replays its cache warm, the all-reduce tables mark their eager
    calls, and burst heating applies where a heat constant was fitted."""
    stored = dict(stored or {})
    if source != AICONFIGURATOR:
        return Conditions()
    heat = None
    if "heat_s" in stored:
        heat = BurstHeat(float(stored.pop("heat_s")), float(stored.pop("heat_gain")))
    return Conditions(weight_copies=int(stored.get("weight_copies", 0)),
                      warm_replay=bool(stored.get("warm_replay",
                                                  family == "generation_attention")),
                      burst_heat=heat, eager=family == "custom_all_reduce")


# ------------------------------------------------------------- the LLMCompass measurement set
def kernel_time(dev: Device, system: System | None, point: Point, c: OpConstants) -> float:
    """The device time of a measured operator under constants `c` (no harness terms)."""
    if point.op == "matmul":
        M, N, K = point.shape
        return simulate_matmul(dev, M, N, K, dtype="fp16", compute_eff=c.compute_efficiency,
                               memory_eff=c.memory_efficiency).time_s
    if point.op in ("softmax", "layernorm"):
        rows, cols = point.shape
        return simulate_stream(dev, point.op, rows, cols, "fp16", c.memory_efficiency,
                               c.single_pass_row_bytes).time_s
    if point.op == "gelu":
        (n,) = point.shape
        return simulate_stream(dev, "gelu", 1, n, "fp16", c.memory_efficiency).time_s
    if point.op == "allreduce":
        size, n = point.shape
        if system is None:
            raise CalibrationError("an all-reduce prediction needs a system")
        return collective_time("all_reduce", system.interconnect, float(size), n, c.protocols)[0]
    raise ValueError(f"no model for measured op {point.op!r}")


def harnessed(kernel_s: float, c: OpConstants) -> float:
    """What the measurement harness reports for a kernel of `kernel_s` seconds."""
    return max(c.measurement_floor_s, c.harness_overhead_s + kernel_s)


def predict_point(dev: Device, system: System | None, point: Point, c: OpConstants) -> float:
    return harnessed(kernel_time(dev, system, point, c), c)


# ------------------------------------------------------------------------- whole-model sources
# How a source's harness ran its prompts: a structural choice made on the fit half, not a
# sourced mechanism. Splitwise's batched TTFT is modelled as B sequential single-prompt
# prefills (decode still runs the whole batch); at TP 2 the data cannot tell (prompt 512:
# batch 2/4/8/16/32 take 2.1x/4.3x/8.1x/16.4x/33.7x the batch-1 time, as a compute-bound
# batched prefill would too). The sources say one batched forward pass (vLLM 0.1-0.2's
# scheduler admits the waiting prompts into one prefill step up to max_num_batched_tokens;
# SplitwiseSim's DatabasePerformanceModel interpolates prompt_time on batch x prompt tokens),
# and the TP 8 H100 rows agree (b x 512 tokens take what one prompt of b*512 tokens takes,
# within 5 %). But the measured time per token of one forward pass grows past 2048 tokens
# (H100, measured / modelled GPU time: TP 8 1.4 up to 2048 tokens, 2.1-2.4 from 4096; TP 4
# 1.4 -> 1.7; TP 2 1.4 throughout), by no mechanism found in vLLM 0.1-0.2 or the harness (not
# attention: 16 x 512 tokens behave like one 8192-token prompt), and a batched prefill exposes
# that growth: the host fit on the fit half is better sequential on both A100 and H100.
SEQUENTIAL_PREFILL = {"splitwise"}


def simulate_row(row: ModelRow, config: ModelConfig, software: SoftwareProfile,
                 **kwargs: Any) -> float:
    ttft, tpot = simulate_row_times(row, config, software, **kwargs)
    if row.metric == "ttft":
        return ttft
    if row.metric == "tpot":
        return tpot
    return ttft + (max(2, row.output) - 1) * tpot


def simulate_row_times(row: ModelRow, config: ModelConfig, software: SoftwareProfile,
                       **kwargs: Any) -> tuple[float, float]:
    """(TTFT, TPOT) of the row's setup as its source's harness ran it."""
    results = row_results(row, config, software, **kwargs)
    return combine(row, *(r.retimed(row_host(row, r.profile.host)) if r is not None
                          else (0.0, 0.0) for r in results))


def row_host(row: ModelRow, host: Host) -> Host:
    """The host constants as the row's engine version ran them (`Host.at_version`: from the
    profile's `host.per_sequence_until` on, a sequence adds only `host.per_sequence_async_s`
    to the step, its output processing running beside the GPU)."""
    return host.at_version(row.version)


# Engines measured on a profile whose versions they predate, so they are older than any
# `collectives.custom_since`: FasterTransformer (2022), TensorRT-LLM's predecessor, run on the
# `trtllm` profile. Its custom all-reduce was opt-in: `enable_custom_all_reduce=0` in the GPT
# example's config (NVIDIA/FasterTransformer@4c014fba0f1bad9b5078eb1b29d163b87749a470
# examples/cpp/multi_gpu_gpt/gpt_config.ini), read into `ParallelGpt(..., enable_custom_all_reduce)`.
PREDECESSOR_ENGINES = frozenset({"fastertransformer"})
# Predecessor engines whose context phase has no fused attention kernel: FasterTransformer's GPT
# context attention is a cuBLAS strided-batched GEMM for QK^T into a score buffer, a masked
# softmax kernel over it, a second batched GEMM for AV and a transpose
# (NVIDIA/FasterTransformer@6fddeac5f59ce4df380002aa945da57a0c8e878c
# src/fastertransformer/layers/attention_layers/GptContextAttentionLayer.cc, `forward`), while its
# decode runs the fused masked multi-head attention kernel.
UNFUSED_CONTEXT_ENGINES = frozenset({"fastertransformer"})
# Frameworks whose decode step appends the new token's K and V by concatenating it onto each
# layer's whole cache (`attention.kv_append: concat`): Hugging Face transformers' `generate`.
# Optimum's BetterTransformer replacement of the Llama attention, which the optimum-benchmark
# rows ran (read at huggingface/optimum@014ea91b2980f86d1fb5f8fc75cd21798833fb9b, an older
# commit than the rows' optimum 1.14.1, which no stored copy holds:
# optimum/bettertransformer/models/attention.py, `llama_forward`), does
# `key_states = torch.cat([past_key_value[0], key_states], dim=2)`, the same for the values, and
# returns `past_key_value = (key_states, value_states)`, as transformers' own tuple-cache Llama
# attention of v4.35 does (`LlamaAttention.forward`; cited by tag, no stored copy read); the later default cache does the same
# per layer (huggingface/transformers@67dd5524d384fdf6b20f6123e7a9d74e6ed96345
# src/transformers/cache_utils.py, `DynamicCache.update`: `self.key_cache[layer_idx] =
# torch.cat([self.key_cache[layer_idx], key_states], dim=-2)`).
# gpt-fast, the other stack on the `eager` profile, writes a static cache in place
# (pytorch-labs/gpt-fast@870415262cf12f7144d93359317acb24629e6dfd model.py, `KVCache.update`:
# `torch.ops.aten.index_put_(self.k_cache, [None, None, input_pos], k_val)`).
CONCAT_KV_ENGINES = frozenset({"hf"})
# Kernels Hugging Face transformers' eager Llama issues (`issued_kernels`), counted by
# benchmarks/hf_eager_op_count.py (ATen ops that launch a kernel, views and allocations
# excluded; its docstring gives the rule) on a tiny random LlamaConfig at batch 1, variant
# "v4.35-bettertransformer" (the attention the optimum-benchmark rows ran: optimum's
# BetterTransformer `llama_forward` over transformers 4.35, transcribed in the script):
# per layer 42 per decode step, by layer part (the script's forward hooks): 2 RMSNorms x 8
# (cast to fp32, pow, mean, add eps, rsqrt, mul, cast back, weight mul) + RoPE 12
# (cos[position_ids], sin[position_ids], and for q and k: mul, neg, cat, mul, add) + the
# attention block 7 (q, k, v and o projections, 2 torch.cat of the past K and V, SDPA) + the
# gated MLP 5 (gate, up, SiLU, the gate x up mul, down) + 2 residual adds; 40 per prefill
# forward (attention 5: no past to concatenate). Outside the layers: 16 per forward (the
# embedding gather, final RMSNorm 8 and LM head, the graph's operators, and 6 of mask and
# position bookkeeping: `outside_layers_prefill`) and 44 per decode step (17 of the model's
# forward + 27 of generate's loop: logits processing, argmax, stopping checks, cache and mask
# bookkeeping; 34 besides the graph's operators), counted with the installed transformers
# 5.24, whose model-level and generate code differ in detail from 4.35's. Above batch 1 the layer adds one op (torch.max of the mask): not modelled (2 %).
# The bytes those unfused kernels move (graph.py `eager_elementwise`), counted by the same rule
# (`--elementwise-bytes`: each kernel's input + output tensors' nbytes, views excluded), per
# element of the graph's op and exact on four tiny configs: RMSNorm 36 per hidden element per
# norm (cast 2 + 4, pow 4 + 4, mean 4, mul 4 + 4, cast back 4 + 2, weight mul 2 + 2; a fused
# norm moves 4), RoPE 20 per q and k element (mul 2 + 2, neg 1 + 1, cat 2 + 2, mul 2 + 2, add 4 + 2;
# fused 4), SiLU then x up 10 per intermediate element (fused SiLU-and-mul 6); the residual adds
# move 6 per hidden element as the graph's do. Left out: the cos / sin gathers (16 x head_dim
# + 16 bytes per token at batch 1, 1.2 % of RoPE's on Llama-2-7B), the norms' per-row
# statistics (48 bytes per token) and weight reads, the mask's torch.max (0.2 % at batch 64).
EAGER_OP_ENGINES = {"hf": IssuedKernels(rmsnorm=8, rope=12, attention_prefill=5,
                                        attention_decode=7, gated_mlp=5,
                                        outside_layers_prefill=6, outside_layers_decode=34,
                                        rmsnorm_bytes_per_element=36.0,
                                        rope_bytes_per_element=20.0,
                                        swiglu_bytes_per_element=10.0)}


# A measured version string naming AMD's fork of vLLM (ROCm/vllm): the fork carried its own
# custom all-reduce since ROCm/vllm pull request #27 "[Kernel] Enable custom AR on ROCm"
# (2024-05-30), long before upstream (`collectives.rocm_custom_since`).
ROCM_FORK = "rocm fork"


def engine_era(software: SoftwareProfile, version: str, framework: str = "",
               vendor: str = "") -> SoftwareProfile:
    """The profile as engine `version` of `framework` ran it on a GPU of `vendor`: before the
    profile's `collectives.custom_since` (or on an engine that predates the profile's versions,
    PREDECESSOR_ENGINES) the engine reduced with NCCL, not its custom all-reduce (TensorRT-LLM
    before 0.8 built the custom kernel only when asked: `--use_custom_all_reduce`, a store_true
    flag). An engine of UNFUSED_CONTEXT_ENGINES runs its context-phase attention unfused
    (`attention.context_fused`). On an AMD GPU, a version before the profile's
    `attention.rocm_shared_kv_since` decoded with the generic paged-attention kernel, one thread
    block per query head (`attention.decode_shares_kv` false), and an upstream build (not
    ROCM_FORK) before `collectives.rocm_custom_since` reduced with the library (RCCL), not the
    custom kernel. A framework of CONCAT_KV_ENGINES (Hugging Face transformers) appends each
    decode step's K and V by copying the layer's whole cache (`attention.kv_append` concat). A
    framework of EAGER_OP_ENGINES issues its own measured kernel counts (`issued_kernels`), in
    place of the profile's (the `eager` profile's are gpt-fast's). The host constants stay the profile's: an older version is scored with
    what the others fitted."""
    if framework.lower() in CONCAT_KV_ENGINES and software.attention.kv_append != "concat":
        software = dataclasses.replace(software, attention=dataclasses.replace(
            software.attention, kv_append="concat"))
    issued = EAGER_OP_ENGINES.get(framework.lower())
    if issued is not None and software.issued_kernels != issued:
        software = dataclasses.replace(software, issued_kernels=issued)
    if framework.lower() in UNFUSED_CONTEXT_ENGINES and software.attention.context_fused:
        software = dataclasses.replace(software, attention=dataclasses.replace(
            software.attention, context_fused=False))
    since = software.attention.rocm_shared_kv_since
    if vendor == "amd" and since and version and version_tuple(version) < version_tuple(since):
        software = dataclasses.replace(software, attention=dataclasses.replace(
            software.attention, decode_shares_kv=False))
    c = software.collectives
    if vendor == "amd" and c.all_reduce == "custom" and c.rocm_custom_since and version \
            and ROCM_FORK not in version.lower() \
            and version_tuple(version) < version_tuple(c.rocm_custom_since):
        return dataclasses.replace(software, collectives=dataclasses.replace(
            c, all_reduce="nccl"))
    if c.all_reduce != "custom" or not c.custom_since:
        return software
    older = framework.lower() in PREDECESSOR_ENGINES or bool(version) and \
        version_tuple(version) < version_tuple(c.custom_since)
    if not older:
        return software
    return dataclasses.replace(software, collectives=dataclasses.replace(c, all_reduce="nccl"))


def row_results(row: ModelRow, config: ModelConfig, software: SoftwareProfile, **kwargs: Any):
    """The simulations a row needs: (prefill run, decode run or None), with the collectives of
    the row's engine version (`engine_era`). A source that prefills its prompts one at a time
    gets a batch-1 prefill run (see SEQUENTIAL_PREFILL)."""
    from ..run import simulate

    vendor = lookup(load_system(row.system).device).architecture[0]
    software = engine_era(software, row.version, row.framework, vendor)

    dtype = {"fp16": "fp16", "bf16": "bf16", "fp8": "fp8"}[row.dtype]
    gen = 1 if row.metric == "ttft" else max(2, row.output)
    # Published runs went past the model's context (e.g. 4096 + 128 on Llama-2); time them as run.
    common = dict(dtype=dtype, software=software, check_memory=False, check_context=False,
                  model_name=row.model, **kwargs)
    sequential = row.source in SEQUENTIAL_PREFILL and row.batch > 1
    main = simulate(config, row.system, row.tp, row.batch, row.prompt, gen, **common)
    if not sequential or row.metric == "tpot":
        return main, None
    return main, simulate(config, row.system, row.tp, 1, row.prompt, 1, **common)


def combine(row: ModelRow, main: tuple[float, float], single: tuple[float, float]
            ) -> tuple[float, float]:
    ttft, tpot = main
    if row.source in SEQUENTIAL_PREFILL and row.batch > 1 and row.metric != "tpot":
        ttft = row.batch * single[0]
    return ttft, tpot
