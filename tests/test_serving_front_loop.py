"""vLLM 0.5.4's front end in a process of its own (serving/frontend.py `front_loop_arrivals`,
`frontend.front_loop_*`): each request's handler, then its send queued behind every job ready
by then, on the front end's event loop; the engine starts on what has arrived."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest
import yaml
from serving_cases import MODEL

from krakenlm.models import get_preset
from krakenlm.serving.frontend import front_loop_arrivals
from krakenlm.serving.replay import ServeError, serve
from krakenlm.serving.traces import Request, Trace
from krakenlm.serving.validation import RUNS_FILE, ValidationDataError, load_runs
from krakenlm.serving.vllm_v1 import V1Options
from krakenlm.simulator.constants.software import PROFILE_PACKAGE, Frontend, load_software

HARNESS = Path(__file__).parent.parent / "docs/data/vllm-v0-frontend.json"
C1, T, C2 = 1e-3, 2e-6, 0.5e-3
FRONT = Frontend(front_loop_request_s=C1, front_loop_token_s=T, front_loop_send_s=C2)


def test_a_burst_reaches_the_engine_after_every_handler_one_send_at_a_time():
    prompts = [100, 200, 300, 400]
    arrivals = front_loop_arrivals([0.0] * 4, prompts, FRONT)
    handlers = sum(C1 + T * p for p in prompts)
    assert arrivals == pytest.approx([handlers + (i + 1) * C2 for i in range(4)])


def test_a_request_sent_to_an_idle_loop_takes_its_handler_and_its_send():
    arrivals = front_loop_arrivals([0.0, 1.0, 2.0], [100, 100, 100], FRONT)
    assert arrivals == pytest.approx([t + C1 + T * 100 + C2 for t in (0.0, 1.0, 2.0)])


def test_a_send_waits_behind_a_handler_that_became_ready_first():
    # request 1 arrives during request 0's handler, so its handler is ready before request
    # 0's send and runs first: request 0 reaches the engine after both handlers
    c1 = C1 + T * 100
    arrivals = front_loop_arrivals([0.0, c1 / 2], [100, 100], FRONT)
    assert arrivals == pytest.approx([2 * c1 + C2, 2 * c1 + 2 * C2])


def test_the_form_is_chosen_by_the_engine_version():
    front = load_software("vllm-v0").frontend
    assert front.front_loop("0.5.4") and not front.front_loop("0.5.5")
    assert not front.front_loop("0.5.3.post1") and not front.front_loop(None)
    old = front.at_version("0.5.3.post1")
    assert old.engine_loop_request_s > 0 and old.front_loop_send_s == 0
    new = front.at_version("0.5.4")
    assert new.engine_loop_request_s == 0 and new.front_loop_send_s > 0
    # without version bounds the fields apply to every version
    assert FRONT.front_loop(None) and not Frontend().front_loop("0.5.4")


def test_the_shipped_values_are_the_harness_fit():
    # benchmarks/vllm_v0_frontend/run.py: the first and last arrivals of vLLM 0.5.4's own
    # server's 160-request bursts, fitted by least squares, to three significant digits
    fit = json.loads(HARNESS.read_text())["fit_front_loop_054"]
    front = load_software("vllm-v0").frontend
    assert front.front_loop_request_s == float(f"{fit['request_s']:.3g}")
    assert front.front_loop_token_s == float(f"{fit['per_prompt_token_s']:.3g}")
    assert front.front_loop_send_s == float(f"{fit['send_s']:.3g}")


def _serve(trace, software, **kw):
    return serve(trace, get_preset(MODEL), "h100-80gb-x8", software=software, tp=1,
                 model_name=MODEL, options=V1Options(1024, 16), client_side=True, **kw)


def _profile(tmp_path, front: Frontend):
    """vllm-v0 with `front` as its front end (a user's YAML)."""
    data = yaml.safe_load(resources.files(PROFILE_PACKAGE).joinpath("vllm-v0.yaml").read_text())
    data["frontend"] = dict(front.__dict__)
    path = tmp_path / "v0-front.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_the_replay_serves_the_engine_arrivals_and_times_the_client_from_the_send(tmp_path):
    # 8 prompts sent at once through 0.5.4's front end equal the same prompts sent at their
    # engine arrivals without a front end, each TTFT longer by its way to the engine
    burst = Trace("burst", tuple(Request(i, 0.0, 100, 5) for i in range(8)))
    front = replace(load_software("vllm-v0").frontend, engine_loop_request_s=0.0,
                    engine_loop_token_s=0.0)
    spread = _serve(burst, "vllm-v0", engine_version="0.5.4")
    engine_s = front_loop_arrivals([0.0] * 8, [100] * 8, front)
    shifted = Trace("shifted", tuple(Request(i, t, 100, 5) for i, t in enumerate(engine_s)))
    plain = _serve(shifted, _profile(tmp_path, Frontend()))
    for a, b, t in zip(spread.rows, plain.rows, engine_s):
        assert a["arrival_s"] == 0.0
        assert a["first_token_s"] == pytest.approx(b["first_token_s"])
        assert a["ttft_s"] == pytest.approx(b["ttft_s"] + t)
    assert spread.setup["client_side"]["engine_version"] == "0.5.4"
    assert spread.setup["client_side"]["front_loop_send_s"] == front.front_loop_send_s
    assert "engine_loop_request_s" not in spread.setup["client_side"]


def test_without_a_version_the_engine_loop_form_is_kept():
    burst = Trace("burst", tuple(Request(i, 0.0, 100, 5) for i in range(8)))
    default = _serve(burst, "vllm-v0")
    older = _serve(burst, "vllm-v0", engine_version="0.5.3")
    assert [r["ttft_s"] for r in default.rows] == [r["ttft_s"] for r in older.rows]
    assert "front_loop_send_s" not in default.setup["client_side"]


def test_a_closed_loop_that_never_waits_is_the_open_loop():
    # 8 requests at once with room for all 8 in flight: the front end's loop, run as the sends
    # come (FrontLoop), gives the arrivals of the whole burst known in advance
    burst = Trace("burst", tuple(Request(i, 0.0, 100 + 10 * i, 5) for i in range(8)))
    open_loop = _serve(burst, "vllm-v0", engine_version="0.5.4")
    closed = _serve(burst, "vllm-v0", engine_version="0.5.4", max_concurrency=8)
    assert [r["ttft_s"] for r in closed.rows] == pytest.approx([r["ttft_s"] for r in open_loop.rows])


def test_a_closed_loop_of_one_waits_its_own_way_in_each_time(tmp_path):
    # one in flight: every request meets an idle loop and an idle engine, so its TTFT is a lone
    # request's, its way through the loop included
    burst = Trace("burst", tuple(Request(i, 0.0, 100, 5) for i in range(3)))
    lone = _serve(Trace("lone", (Request(0, 0.0, 100, 5),)), "vllm-v0", engine_version="0.5.4")
    closed = _serve(burst, "vllm-v0", engine_version="0.5.4", max_concurrency=1)
    assert [r["ttft_s"] for r in closed.rows] == pytest.approx([lone.rows[0]["ttft_s"]] * 3)
    # each sent when the one before it finished, as the client saw it
    sends = [r["arrival_s"] for r in closed.rows]
    assert sends[1] == pytest.approx(closed.rows[0]["finish_s"])


def test_a_later_send_with_a_shorter_way_in_is_handed_over_in_its_place(tmp_path):
    # a long prompt's handler takes longer: the rows stay in send order, each its own
    front = replace(FRONT, front_loop_token_s=1e-4)
    burst = Trace("burst", (Request(0, 0.0, 2000, 5), Request(1, 0.0, 10, 5)))
    closed = _serve(burst, _profile(tmp_path, front), max_concurrency=2)
    assert [r["prompt_tokens"] for r in closed.rows] == [2000, 10]


def test_another_engine_is_refused(tmp_path):
    burst = Trace("burst", tuple(Request(i, 0.0, 100, 5) for i in range(4)))
    with pytest.raises(ServeError, match="only vLLM's engines .* not sglang"):
        _serve(burst, _profile(tmp_path, FRONT), scheduler="sglang")


def test_the_lambda_runs_name_their_engine_version(tmp_path):
    _, runs = load_runs()
    versions = {r.source: r.engine_version for r in runs if r.source.startswith("lambda")}
    assert versions == {"lambda": "0.5.4", "lambda_v060": "0.6.0"}
    data = json.loads(RUNS_FILE.read_text())
    data["runs"] = [dict(data["runs"][0], engine_version="v0.5")]
    bad = tmp_path / "runs.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValidationDataError, match="engine_version 'v0.5' is not an engine"):
        load_runs(bad)


def test_every_request_reaches_the_engine_once_and_in_order():
    sent = [0.0, 0.0, 0.0005, 0.004, 0.004, 1.0]
    arrivals = front_loop_arrivals(sent, [50, 900, 10, 10, 300, 20], FRONT)
    assert all(math.isfinite(a) for a in arrivals)
    assert all(a > s for a, s in zip(arrivals, sent))
    assert arrivals == sorted(arrivals)  # the sends leave in the order the handlers ended
