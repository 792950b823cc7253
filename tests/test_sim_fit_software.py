"""Fitting a software profile's host constants (fit_software): on synthetic end-to-end rows made
by the simulator itself with known host constants, the fit recovers them from the fit half and
scores the held-out half at ~0 % error; the per-sequence part is fitted only when the batch
varies, the prefill GPU-time scale only when the prompt length does."""

import dataclasses

import pytest

from krakenlm.models import PRESETS
from krakenlm.simulator.calibration.software import _metric, fit_host
from krakenlm.simulator.constants.software import load_software
from krakenlm.simulator.measurements.harness import combine, row_results
from krakenlm.simulator.measurements.models import ModelRow

SYSTEM = "a100-80gb-x8"
TRUE = {"per_kernel_s": 6e-5, "prefill_step_s": 8e-3, "decode_step_s": 3e-3,
        "per_sequence_s": 6e-4, "prefill_gpu_time_scale": 1.0}


def _rows(batches, true=TRUE, prompts=(128, 512)):
    """TTFT and TPOT rows of two models at TP 1 under vllm-eager whose 'measurements' are the
    simulator's own times with the `true` host constants; setups alternate fit / held out.
    (Two depths, so that the time per kernel is not confounded with the per-step time; a
    host slow enough to bound the decode steps, else the time per kernel has no effect.)"""
    profile = load_software("vllm-eager")
    host = dataclasses.replace(profile.host_for(SYSTEM), **true)
    rows = []
    setups = [(m, b, p) for m in ("llama2-7b", "llama2-13b") for b in batches for p in prompts]
    for i, (model, batch, prompt) in enumerate(setups):
        for metric in ("ttft", "tpot"):
            row = ModelRow("splitwise", model, SYSTEM, 1, "vllm", "", "fp16", batch,
                           prompt, 32, metric, 1.0, "fit" if i % 2 == 0 else "held_out", "")
            main, single = row_results(row, PRESETS[model], profile)
            ttft, tpot = combine(row, main.retimed(host),
                                 single.retimed(host) if single is not None else (0.0, 0.0))
            rows.append(dataclasses.replace(row, measured_s=_metric(row, ttft, tpot)))
    return rows


def test_fit_recovers_the_host_constants_that_made_the_rows():
    true = dict(TRUE, prefill_gpu_time_scale=1.25)
    fit = fit_host("vllm-eager", SYSTEM, _rows((1, 2, 4, 8, 16), true, prompts=(128, 512, 2048)))
    assert set(fit.fitted) == set(TRUE)
    assert fit.host["prefill_gpu_time_scale"] == pytest.approx(1.25, rel=0.03)
    # the per-step and per-kernel times trade off a little along a flat valley of the MAPE
    assert fit.host["per_sequence_s"] == pytest.approx(TRUE["per_sequence_s"], rel=0.05)
    for name, value in true.items():
        assert fit.host[name] == pytest.approx(value, rel=0.1), name
    assert fit.mape_fit < 0.5 and fit.mape_held_out < 0.5


def test_per_sequence_work_is_not_fitted_from_batch_one_rows():
    true = {k: v for k, v in TRUE.items() if k != "per_sequence_s"}
    fit = fit_host("vllm-eager", SYSTEM, _rows((1, 1, 1), true))
    assert "per_sequence_s" not in fit.fitted
    # two prompt lengths cannot tell a prefill time growing with the prompt from a per-step one
    assert "prefill_gpu_time_scale" not in fit.fitted
