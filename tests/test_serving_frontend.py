"""The serving front end (serving/frontend.py): the pipeline the client's tokens pass through
after the engine's step, and `serve(..., client_side=True)` on a tiny replay."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fuzz_parsers import cli_one_line_or_success
from serving_cases import MODEL

from krakenlm.models import get_preset
from krakenlm.serving.frontend import delivery_times
from krakenlm.serving.replay import serve
from krakenlm.serving.traces import synthetic_trace
from krakenlm.serving.vllm_v1 import V1Options
from krakenlm.simulator.constants.software import Frontend, SoftwareError, load_software


def test_the_front_end_passes_each_step_on_after_the_engine_and_after_the_step_before():
    # F1 = 1 + 2 x 0.1; F2 = max(2, 1.2) + 10 x 0.1 = 3.0 (it falls behind);
    # F3 = max(3, 3.0) + 1 x 0.1; F4 = max(5, 3.1) + 0.1 (caught up again)
    f = delivery_times(np.array([1.0, 2.0, 3.0, 5.0]), np.array([2, 10, 1, 1]), 0.1)
    assert f == pytest.approx([1.2, 3.0, 3.1, 5.1])
    # no per-token cost: every token leaves when its step ends
    assert delivery_times(np.array([0.5, 0.7]), np.array([3, 4]), 0.0) == \
        pytest.approx([0.5, 0.7])


def _replay(software, client_side):
    trace = synthetic_trace(np.random.default_rng(0), 30, 4.0, "fixed:200,20")
    return serve(trace, get_preset(MODEL), "h100-80gb-x8", software=software, tp=1,
                 model_name=MODEL, options=V1Options(1024, 16), client_side=client_side)


def _profile(tmp_path, **frontend):
    """A copy of the vllm profile with these front-end constants, without its loop's hand-over
    (front_loop_*, tests/test_serving_front_loop.py) unless given."""
    base = load_software("vllm")
    frontend = {"front_loop_request_s": 0.0, "front_loop_token_s": 0.0, "front_loop_send_s": 0.0,
                **frontend}
    return dataclasses.replace(base, frontend=dataclasses.replace(base.frontend, **frontend))


def test_the_fixed_request_time_moves_ttft_and_e2e_not_tpot(tmp_path):
    fixed_only = _profile(tmp_path, per_prompt_token_s=0.0)
    engine = _replay(fixed_only, False)
    client = _replay(fixed_only, True)
    assert load_software("vllm").frontend.request_s == pytest.approx(8.7e-3)
    for a, b in zip(engine.rows, client.rows):
        assert b["ttft_s"] - a["ttft_s"] == pytest.approx(8.7e-3)
        assert b["e2e_s"] - a["e2e_s"] == pytest.approx(8.7e-3)
        assert b["tpot_s"] == pytest.approx(a["tpot_s"])
    assert client.setup["client_side"] == {"request_s": 8.7e-3, "per_prompt_token_s": 0.0,
                                           "per_stream_token_s": 0.0}
    assert "client_side" not in engine.setup


def test_the_prompt_time_delays_the_engine_and_counts_from_the_send(tmp_path):
    """Every prompt of the trace has 200 tokens, so at 0.2 ms a token every request reaches
    the engine 40 ms after it was sent: the engine's run is the same shifted by 40 ms, so the
    client's TTFT and E2E are the engine's plus 40 ms, TPOT is the same, and each row's
    arrival stays the send time."""
    way_in = _profile(tmp_path, request_s=0.0, per_prompt_token_s=2e-4)
    engine = _replay(way_in, False)
    client = _replay(way_in, True)
    for a, b in zip(engine.rows, client.rows):
        assert b["arrival_s"] == a["arrival_s"]
        assert b["ttft_s"] - a["ttft_s"] == pytest.approx(0.04, abs=1e-9)
        assert b["e2e_s"] - a["e2e_s"] == pytest.approx(0.04, abs=1e-9)
        assert b["tpot_s"] == pytest.approx(a["tpot_s"], rel=1e-9)
    assert load_software("vllm").frontend.per_prompt_token_s == pytest.approx(3.2e-6)


def test_a_short_prompt_sent_with_a_long_one_reaches_the_engine_first(tmp_path):
    """Sent together, 2,000 and 100 prompt tokens at 1 ms a token reach the engine at 2.0 and
    0.1 s: the short one runs first; the rows stay in the order sent."""
    from krakenlm.serving.traces import Request, Trace

    trace = Trace("two", (Request(0, 0.0, 2000, 5), Request(1, 0.0, 100, 5)))
    report = serve(trace, get_preset(MODEL), "h100-80gb-x8", software=_profile(
        tmp_path, request_s=0.0, per_prompt_token_s=1e-3), tp=1, model_name=MODEL,
        options=V1Options(4096, 16), client_side=True)
    long, short = report.rows
    assert (long["id"], short["id"]) == (0, 1)
    assert long["arrival_s"] == short["arrival_s"] == 0.0
    assert 0.1 < short["ttft_s"] < 2.0 < long["ttft_s"]
    assert short["first_token_s"] < long["first_token_s"]


def test_a_per_stream_cost_slows_what_the_client_sees_and_not_the_engine(tmp_path):
    from importlib import resources

    text = resources.files("krakenlm.simulator.constants.software_profiles") \
        .joinpath("vllm.yaml").read_text()
    slow = tmp_path / "vllm-slow-frontend.yaml"  # 50 ms per stream token: far behind
    slow.write_text(text.replace("per_stream_token_s: 0.0 ", "per_stream_token_s: 0.05 ", 1)
                    .replace("request_s: 8.7e-3 ", "request_s: 0.0 ", 1)
                    .replace("per_prompt_token_s: 3.2e-6 ", "per_prompt_token_s: 0.0 ", 1)
                    .replace("front_loop_request_s: 5.0e-4 ", "front_loop_request_s: 0.0 ", 1)
                    .replace("front_loop_token_s: 1.24e-6 ", "front_loop_token_s: 0.0 ", 1)
                    .replace("front_loop_send_s: 2.55e-3 ", "front_loop_send_s: 0.0 ", 1))
    assert load_software(str(slow)).frontend == Frontend(0.0, 0.05)
    engine = _replay(str(slow), False)
    client = _replay(str(slow), True)
    # the engine's steps are the same, the client's tokens come later and slower
    assert [r["queue_s"] for r in engine.rows] == [r["queue_s"] for r in client.rows]
    assert all(b["ttft_s"] >= a["ttft_s"] + 0.05 - 1e-12
               for a, b in zip(engine.rows, client.rows))
    assert client.summary["tpot_s"]["mean"] > engine.summary["tpot_s"]["mean"] + 0.04


def test_a_negative_front_end_constant_is_a_one_line_error(tmp_path):
    from krakenlm.simulator.constants.software import profile_from_dict

    with pytest.raises(SoftwareError, match=r"frontend.request_s: expected a number >= 0"):
        profile_from_dict({"name": "x", "kernels": "vllm", "frontend": {"request_s": -1}}, "x")


@pytest.mark.parametrize("extra,message", [
    (["--pp", "2"], "--client-side is modelled on one pool of replicas"),
])
def test_client_side_on_a_cluster_is_one_error_line(extra, message):
    err = cli_one_line_or_success(["sim", "serve", "--model", MODEL, "--system",
                                   "h100-80gb-x8", "--trace", "synthetic", "--rate", "2",
                                   "--requests", "10", "--client-side", *extra])
    assert err.strip().splitlines()[-1].startswith("error: ") and message in err, err
