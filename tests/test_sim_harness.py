"""Measurement effects belong to the source that measured them (measurements/harness.py): fits
and validation see them, a query of a served model never does."""

import numpy as np
import pytest

from krakenlm.hardware import load_system
from krakenlm.simulator.constants import gpu_kernels as store
from krakenlm.simulator.constants.software import load_software
from krakenlm.simulator.constants.template import default_calibration
from krakenlm.simulator.graph import OpSpec
from krakenlm.simulator.kernels.base import SERVING, Setting
from krakenlm.simulator.measurements import harness
from krakenlm.simulator.timing import OpTimer


def query(system, software, dtype, spec):
    timer = OpTimer(system, load_software(software), "simulate", dtype, default_calibration(),
                    store.for_device(system.device))
    return timer(spec).time_s


def entry_times(system, framework, family, variant, cols):
    """(as served, as the source measured it) for the shipped entry."""
    e = store.for_device(system.device).entry(framework, family, variant)
    setting = Setting(system, framework, variant)
    bench = harness.conditions(harness.AICONFIGURATOR, family, e.harness)
    return (e.kernel.predict(setting, cols, e.params, e.structure, SERVING)[0],
            e.kernel.predict(setting, cols, e.params, e.structure, bench)[0])


def test_burst_heating_of_sglangs_gemm_tables_stays_out_of_queries():
    h100 = load_system("h100-80gb-x8")
    e = store.for_device(h100.device).entry("sglang", "gemm", "fp8")
    assert {"heat_s", "heat_gain"} <= set(e.harness) and "heat_s" not in e.params
    m = n = k = 16384  # ~9 ms at the FP8 power-limited rate: the benchmark's die has heated
    served, measured = entry_times(h100, "sglang", "gemm", "fp8",
                                   {"m": np.array([m]), "n": np.array([n]), "k": np.array([k])})
    assert measured > 1.2 * served
    t = query(h100, "sglang", "fp8", OpSpec("ffn", "GEMM", "matmul", (m, n, k, 1)))
    assert t == pytest.approx(served, rel=1e-12)


def test_warm_replays_of_l40s_context_tables_stay_out_of_queries():
    l40s = load_system("l40s-x8")
    e = store.for_device(l40s.device).entry("trtllm", "context_attention", "bf16")
    assert e.harness == {"warm_replay": True}
    # 128 sequences of 16 tokens, 32 x 128-dim heads over 8 KV heads: Q, O, K, V and the
    # cache copy take 50 MB, within the 96 MB L2: the replayed benchmark streams them from L2
    cols = {"batch": np.array([128]), "isl": np.array([16]), "heads": np.array([32]),
            "kv_heads": np.array([8]), "head_dim": np.array([128])}
    served, measured = entry_times(l40s, "trtllm", "context_attention", "bf16", cols)
    assert served > 2 * measured
    t = query(l40s, "trtllm", "fp16",
              OpSpec("attention", "attention", "flash_prefill", (128, 32, 8, 16, 16, 128)))
    assert t == pytest.approx(served, rel=1e-12)


def test_each_source_has_its_own_conditions():
    aic = harness.AICONFIGURATOR
    assert harness.conditions(aic, "generation_attention", {}).warm_replay  # every table
    assert harness.conditions(aic, "custom_all_reduce", {}).eager  # its graph-False rows
    gemm = harness.conditions(aic, "gemm", {"weight_copies": 6, "heat_s": 0.01,
                                            "heat_gain": 0.5})
    assert gemm.weight_copies == 6 and gemm.burst_heat.time_constant_s == 0.01
    assert harness.choices(aic, "gemm", "trtllm") == ({"weight_copies": 0},
                                                      {"weight_copies": 5})
    assert [p.name for p in harness.params(aic, "gemm", "sglang")] == ["heat_s", "heat_gain"]
    assert harness.params(aic, "gemm", "vllm") == ()
    assert harness.conditions("vidur", "elementwise", {}) == SERVING
