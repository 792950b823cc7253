"""Trace readers of the serving simulator: the three formats, synthetic arrivals, the rate
scale, and bad files as one-line errors."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from krakenlm.serving.traces import (TraceError, arrival_times, read_trace, scale_rate,
                                     synthetic_trace)

DATA = Path(__file__).parent / "data" / "traces"
# the shared traces: $KRAKENLM_TRACES_DIR, else ../shared/data/traces beside the checkout
SHARED = Path(os.environ.get("KRAKENLM_TRACES_DIR") or
              Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces")


def test_azure_rows_become_seconds_since_the_first_request():
    trace = read_trace(DATA / "azure_conv_head.csv")
    assert len(trace.requests) == 20
    first, second = trace.requests[:2]
    # 18:15:46.6805900 and 18:15:50.9951690 in the file
    assert first.arrival_s == 0.0
    assert second.arrival_s == pytest.approx(4.314579, abs=1e-6)
    assert (first.prompt_tokens, first.output_tokens) == (374, 44)
    assert (second.prompt_tokens, second.output_tokens) == (396, 109)
    assert trace.hash_block_tokens == 0 and first.hash_ids == ()


def test_mooncake_keeps_prefix_block_ids_and_milliseconds():
    trace = read_trace(DATA / "mooncake_conv_head.jsonl")
    assert len(trace.requests) == 12 and trace.hash_block_tokens == 512
    r = trace.requests[0]
    assert (r.prompt_tokens, r.output_tokens) == (6758, 500)
    assert r.hash_ids == tuple(range(14))


def test_vidur_style_csv():
    trace = read_trace(DATA / "vidur_style.csv")
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in trace.requests] == \
        [(0.0, 100, 10), (0.5, 200, 20), (1.25, 300, 30)]


def test_rate_scale_divides_arrival_times():
    trace = read_trace(DATA / "vidur_style.csv")
    fast = scale_rate(trace, 2.0)
    assert [r.arrival_s for r in fast.requests] == [0.0, 0.25, 0.625]
    with pytest.raises(TraceError, match="--rate-scale must be a positive number"):
        scale_rate(trace, 0.0)


def test_poisson_and_gamma_arrivals_have_their_rate_and_cv():
    rng = np.random.default_rng(0)
    t = arrival_times(rng, 40_000, 5.0)
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(0.2, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.03)
    g = np.diff(arrival_times(np.random.default_rng(0), 40_000, 5.0, "gamma", cv=3.0))
    assert g.mean() == pytest.approx(0.2, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(3.0, rel=0.1)


def test_synthetic_trace_is_deterministic_for_a_seed_and_resamples_lengths():
    def make(seed):
        return synthetic_trace(np.random.default_rng(seed), 50, 2.0,
                               f"trace:{DATA / 'azure_conv_head.csv'}")
    a, b, c = make(1), make(1), make(2)
    assert a.requests == b.requests and a.requests != c.requests
    pairs = {(r.prompt_tokens, r.output_tokens) for r in read_trace(DATA / "azure_conv_head.csv").requests}
    assert {(r.prompt_tokens, r.output_tokens) for r in a.requests} <= pairs
    fixed = synthetic_trace(np.random.default_rng(0), 3, 1.0, "fixed:512,128")
    assert {(r.prompt_tokens, r.output_tokens) for r in fixed.requests} == {(512, 128)}
    logn = synthetic_trace(np.random.default_rng(0), 20_000, 1.0, "lognormal:1000,200,0.5")
    assert np.mean([r.prompt_tokens for r in logn.requests]) == pytest.approx(1000, rel=0.02)


@pytest.mark.parametrize("name,text,message", [
    ("t.csv", "", "is empty"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "holds no requests"),
    ("t.csv", "a,b,c\n1,2,3\n", "neither Azure's"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,0,3\n",
     "line 2: ContextTokens is 0; it must be at least 1"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,3\n",
     "line 2: TIMESTAMP 'yesterday' is not a time"),
    ("t.csv", "Time,PromptTokenCount,CompletionTokenCount\nnan,5,3\n", "must be a finite time"),
    ("t.csv", "Time,PromptTokenCount,CompletionTokenCount\n1,5.5,3\n", "not a whole number"),
    ("t.jsonl", '{"timestamp": 0, "input_length": 10}\n', "line 1: missing output_length"),
    ("t.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1, 2]}\n',
     "2 hash_ids for 10 prompt tokens"),
    ("t.jsonl", "[1, 2]\n", "expected an object"),
    ("t.jsonl", "{oops\n", "line 1 is not JSON"),
    ("t.txt", "x", "unknown suffix"),
])
def test_bad_traces_are_one_line_errors(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert message in str(info.value)
    assert len(str(info.value).splitlines()) == 1


def test_out_of_order_arrivals_are_sorted_with_a_warning(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("Time,PromptTokenCount,CompletionTokenCount\n2,5,1\n1,6,1\n")
    trace = read_trace(path)
    assert [r.prompt_tokens for r in trace.requests] == [6, 5]
    assert [r.arrival_s for r in trace.requests] == [0.0, 1.0]
    assert capsys.readouterr().err.startswith("warning: trace t.csv: arrival times are not in order")


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared traces (../shared/data/traces) are absent")
def test_the_shared_traces_read_with_the_sizes_their_readme_gives():
    sizes = {"azure2023_conv.csv": 19366, "azure2023_code.csv": 8819,
             "mooncake_conversation.jsonl": 12031, "mooncake_synthetic.jsonl": 3993}
    for name, rows in sizes.items():
        trace = read_trace(SHARED / name)
        assert len(trace.requests) == rows
        mean_prompt = np.mean([r.prompt_tokens for r in trace.requests])
        assert math.isfinite(mean_prompt)
    conv = read_trace(SHARED / "azure2023_conv.csv")
    assert np.mean([r.prompt_tokens for r in conv.requests]) == pytest.approx(1155, abs=1)
    assert conv.duration_s / 60 == pytest.approx(58, abs=1)
