"""`serve(max_concurrency=N)`: a closed-loop client (at most N requests in flight, the next one
sent when one finishes), as vLLM's `benchmark_serving.py --max-concurrency N` drives a server."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from serving_cases import MODEL

from krakenlm.models import get_preset
from krakenlm.serving.replay import ServeError, serve
from krakenlm.serving.traces import Request, Trace, synthetic_trace
from krakenlm.serving.vllm_v1 import V1Options


def _burst(n: int, prompt: int = 200, output: int = 20) -> Trace:
    return Trace("burst", tuple(Request(i, 0.0, prompt, output) for i in range(n)))


def _serve(trace, software="vllm", **kw):
    return serve(trace, get_preset(MODEL), "h100-80gb-x8", software=software, tp=1,
                 model_name=MODEL, options=V1Options(1024, 16), **kw)


@pytest.mark.parametrize("software", ["vllm", "vllm-v0", "sglang"])
def test_one_in_flight_sends_each_request_when_the_one_before_finishes(software):
    rows = _serve(_burst(6), software, max_concurrency=1).rows
    for before, row in pairwise(rows):
        assert row["arrival_s"] == before["finish_s"]  # back to back
    assert all(r["queue_s"] == 0.0 for r in rows)  # the engine is idle when each arrives
    # equal requests on an idle engine take equal times
    assert np.ptp([r["e2e_s"] for r in rows]) == pytest.approx(0.0, abs=1e-12)


def test_the_client_side_slot_frees_at_the_finish_the_client_sees():
    rows = _serve(_burst(4), max_concurrency=1, client_side=True).rows
    engine = _serve(_burst(4), max_concurrency=1).rows
    for k, (before, row) in enumerate(pairwise(rows), start=1):
        assert row["arrival_s"] == pytest.approx(before["finish_s"])  # the client's finish
        # each request is sent vLLM's front-end time after the engine finished the one before
        # (8.7 ms at 1 in flight, its loop's handler and hand-over included) and its prompt's
        # way in (200 x 3.2 us) and the handler's per-token part (200 x 1.24 us) later: k of
        # each behind the engine-side closed loop
        assert row["arrival_s"] - engine[k]["arrival_s"] == pytest.approx(
            k * (8.7e-3 + 200 * 3.2e-6 + 200 * 1.24e-6))


def test_a_cap_of_at_least_the_requests_is_the_open_loop_replay():
    trace = synthetic_trace(np.random.default_rng(0), 12, 50.0, "fixed:300,15")
    for t in (trace, _burst(12)):
        assert _serve(t, max_concurrency=12).rows == _serve(t).rows
        assert _serve(t, max_concurrency=40).rows == _serve(t).rows


def test_never_more_than_n_requests_in_flight_and_each_waits_for_a_free_slot():
    trace = synthetic_trace(np.random.default_rng(1), 40, 200.0, "fixed:500,30")
    rows = _serve(trace, max_concurrency=4).rows
    sent = [r["arrival_s"] for r in rows]
    assert sent == sorted(sent)
    for k, row in enumerate(rows):
        assert row["arrival_s"] >= trace.requests[k].arrival_s
        in_flight = sum(r["arrival_s"] <= row["arrival_s"] < r["finish_s"] for r in rows)
        assert in_flight <= 4
        if k >= 4:  # it takes the slot of the (k - 3)-th finish of those sent before it
            finishes = sorted(r["finish_s"] for r in rows[:k])
            assert row["arrival_s"] == max(trace.requests[k].arrival_s, finishes[k - 4])


@pytest.mark.parametrize("n", [0, -3])
def test_a_cap_below_one_is_refused(n):
    with pytest.raises(ServeError, match=f"max_concurrency {n} must be at least 1"):
        _serve(_burst(2), max_concurrency=n)


@pytest.mark.parametrize("router", ["least-loaded", "round-robin"])
def test_with_replicas_no_replica_runs_past_a_send_time(router):
    """Two replicas, two in flight, equal requests: each is sent when one finishes and finds
    an idle replica (none was run to its own next finish beyond that send time)."""
    trace = Trace("staggered", tuple(Request(i, 1e-3 * i, 200, 20) for i in range(8)))
    rows = _serve(trace, max_concurrency=2, replicas=2, router=router).rows
    assert all(r["queue_s"] == 0.0 for r in rows)
    assert np.ptp([r["e2e_s"] for r in rows]) == pytest.approx(0.0, abs=1e-12)
    assert sorted(r["replica"] for r in rows) == [0, 0, 0, 0, 1, 1, 1, 1]


def test_the_counted_engine_sends_each_request_where_v1_does(monkeypatch):
    """The counted vLLM V1 engine runs decode windows back to back in one call; under a
    closed loop it still stops at the first window in which a request finished, so its
    replay is exactly `V1Engine`'s (requests of different lengths: finishes at many
    steps)."""
    from krakenlm.serving import replay
    from krakenlm.serving.vllm_v1 import V1Engine
    trace = synthetic_trace(np.random.default_rng(2), 30, 100.0, "lognormal:300,40,0.6")
    counted = _serve(trace, max_concurrency=4).rows
    monkeypatch.setitem(replay.REPLAY_ENGINES, "vllm-v1", V1Engine)
    assert counted == _serve(trace, max_concurrency=4).rows
