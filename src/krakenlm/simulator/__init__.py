"""Hardware simulator: LLM inference latency, memory and cost from a hardware description.

Python API (what `krakenlm sim run` calls; torch-free, numpy and pyyaml only):

    from krakenlm.models import get_preset
    from krakenlm.simulator import simulate

    result = simulate(get_preset("gpt3-13b"), "a100-80gb-x8", tp=8, batch=1,
                      prompt_tokens=2048, gen_tokens=128, mode="simulate")
    result.ttft_s, result.tpot_s, result.e2e_s          # seconds
    result.memory.total_bytes                           # per device (weights, KV, activations)
    result.layer_categories["prefill"]                  # one layer: GEMM, GEMM overlapped with
                                                        # AllReduce, attention, LayerNorm,
                                                        # exposed AllReduce, ... (seconds)
    result.prefill.categories, result.decode.categories # the whole phase, same categories
    result.breakdown()                                  # per operator: op, phase, category,
                                                        # time_s, count
    result.to_json()                                    # what `sim run --json` prints

Arguments: `config` a `ModelConfig` (any of the three architectures: gpt, parallel, kraken),
`system` a preset name, a YAML path or a `krakenlm.hardware.System`; `tp` devices; keyword
options `dtype` ("fp16", "bf16", "fp8", "int8", "fp32"), `attention` ("fused" | "unfused"),
`calibration` (a `Calibration`; default: the shipped constants), `check_memory` (raise
`ModelDoesNotFit` when weights + KV cache + activations exceed a device), `model_name`.
`arch_variant(config, "kraken", tp)` gives the parameter-matched Kraken of a GPT config (the
Kraken paper's inference engines), `arch_variant(config, "parallel", tp)` its parallel block.

Modules: matmul (closed-form systolic arrays + vectorised mapper), attention, elementwise,
collectives, graph (model -> per-device operator graphs), schedule (two streams, contention),
memory, run (this API), calibration / measured / validate (fitting and validation), sweep.
"""

from .run import Result, Simulator, arch_variant, resolve_model, simulate

__all__ = ["Result", "Simulator", "arch_variant", "resolve_model", "simulate"]
