"""benchmarks/serve_decode_own_kv.py: its launch time is the fitted form's on equal lengths,
and a one-wave launch with one long sequence waits for that sequence."""

from __future__ import annotations

import numpy as np
import pytest
from benchmark_module import load_benchmark

from krakenlm.hardware import load_system
from krakenlm.simulator.constants import gpu_kernels as gpu_store
from krakenlm.simulator.kernels.base import SERVING, Setting

own = load_benchmark("serve_decode_own_kv", "benchmarks_serve_decode_own_kv")


@pytest.fixture(scope="module")
def entry():
    cal = next(c for c in gpu_store.shipped() if c.meta.get("system") == own.CALIBRATION)
    e = cal.entry("vllm", "generation_attention", "bf16")
    return Setting(load_system("a100-40gb-x8"), "vllm", "bf16"), e


@pytest.mark.parametrize("batch,kv_len,kv_heads", [(5, 300, 1), (93, 400, 1), (300, 1500, 1),
                                                    (16, 2000, 2)])
def test_equal_lengths_give_the_forms_prediction(entry, batch, kv_len, kv_heads):
    setting, e = entry
    cols = {"batch": batch, "heads": 8 * kv_heads, "kv_heads": kv_heads,
            "head_dim": own.HEAD_DIM, "kv_len": kv_len}
    want = float(e.kernel.predict(setting, cols, e.params, e.structure, SERVING)[0])
    for mode in (False, True):
        got = own.launch_s(setting, e.params, e.structure, [kv_len] * batch, kv_heads, 8, mode)
        assert got == pytest.approx(want, rel=1e-12)


def test_one_long_sequence_sets_a_one_wave_launch(entry):
    setting, e = entry
    lengths = np.array([300.0] * 99 + [3000.0])  # 100 CTAs: one wave of 216 slots
    mean = own.launch_s(setting, e.params, e.structure, lengths, 1, 8, False)
    longest = own.launch_s(setting, e.params, e.structure, lengths, 1, 8, True)
    uniform_long = own.launch_s(setting, e.params, e.structure, [3000.0] * 100, 1, 8, False)
    assert mean < longest < uniform_long
