"""The capacity search's warm start and early stop: starting from the static throughput bound
and giving up a probe once its TTFT misses decide the percentile finds the same capacity (to
the 1 % bisection tolerance) as the plain search from the trace's rate; the bound is above
the capacity; an overloaded probe is stopped early."""

from __future__ import annotations

import numpy as np
import pytest

from krakenlm.models import get_preset
from krakenlm.serving.capacity import find_capacity, ttft_misses_deciding
from krakenlm.serving.command import ServeOptions, capacity_command
from krakenlm.serving.replay import ReplayStopped, serve, throughput_bound_per_s
from krakenlm.serving.traces import scale_rate, synthetic_trace
from krakenlm.serving.vllm_v1 import V1Options

MODEL = "gpt3-1.3b"
OPTIONS = V1Options(1024, 32, async_scheduling=True)  # vLLM V1's defaults, as the command
SLO = {"slo_ttft_s": 0.05, "slo_tpot_s": 0.02}


def _trace():
    return synthetic_trace(np.random.default_rng(0), 120, 4.0, "fixed:512,32")


def _plain_search():
    trace = _trace()

    def replay(scale):
        return serve(scale_rate(trace, scale), get_preset(MODEL), "h100-80gb-x8",
                     options=OPTIONS, model_name=MODEL, **SLO)
    return find_capacity(replay, trace.rate_per_s(), percentile=90, **SLO)


def test_the_warm_started_early_stopping_search_finds_the_same_capacity():
    options = ServeOptions("synthetic", MODEL, "h100-80gb-x8", rate=4.0, requests=120,
                           lengths="fixed:512,32", max_num_batched_tokens=1024,
                           max_num_seqs=32, **SLO)
    fast = capacity_command(options, percentile=90)
    plain = _plain_search()
    assert fast.rate_per_s == pytest.approx(plain.rate_per_s, rel=0.01)
    bound = throughput_bound_per_s(_trace(), get_preset(MODEL), "h100-80gb-x8",
                                   options=OPTIONS)
    assert bound >= fast.rate_per_s
    assert fast.evaluations[0]["rate_per_s"] == pytest.approx(bound)
    assert not any(e["stopped_early"] for e in plain.evaluations)


def test_an_overloaded_probe_stops_early():
    trace = scale_rate(_trace(), 200.0)
    with pytest.raises(ReplayStopped, match="already miss the TTFT SLO of 0.05 s"):
        serve(trace, get_preset(MODEL), "h100-80gb-x8", options=OPTIONS, model_name=MODEL,
              stop_after_ttft_misses=ttft_misses_deciding(120, 90), **SLO)
    full = serve(trace, get_preset(MODEL), "h100-80gb-x8", options=OPTIONS, model_name=MODEL,
                 **SLO)
    assert full.summary["ttft_s"]["p90"] > SLO["slo_ttft_s"]


def test_the_deciding_count_puts_the_percentile_above_the_slo():
    for n, p in ((120, 90), (1000, 99), (7, 50), (1, 99)):
        m = ttft_misses_deciding(n, p)
        values = np.r_[np.zeros(n - m), np.ones(m)]
        assert np.percentile(values, p) > 0.5
        if m > 1:  # one fewer miss need not decide it
            assert np.percentile(np.r_[np.zeros(n - m + 1), np.ones(m - 1)], p) < 1
