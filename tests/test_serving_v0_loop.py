"""vLLM V0's API server on the engine's event loop (serving/vllm_v0.py,
`frontend.engine_loop_request_s` and `engine_loop_token_s`): requests are handed over one at a
time and no step starts before every arrived request is handed over."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import pytest
from serving_cases import MODEL

from krakenlm.models import get_preset
from krakenlm.serving.replay import ServeError, serve
from krakenlm.serving.traces import Request, Trace
from krakenlm.serving.vllm_v1 import V1Options
from krakenlm.simulator.constants.software import SoftwareError, load_software

LOOP_S = 2e-3
HARNESS = Path(__file__).parent.parent / "docs/data/vllm-v0-frontend.json"


def _profile(tmp_path, name: str, loop_s: float, token_s: float = 0.0) -> str:
    """The shipped profile `name` with `frontend.engine_loop_request_s` set to `loop_s` and
    `engine_loop_token_s` to `token_s`."""
    text = resources.files("krakenlm.simulator.constants.software_profiles") \
        .joinpath(f"{name}.yaml").read_text()
    for key, value in (("engine_loop_request_s", loop_s), ("engine_loop_token_s", token_s)):
        if f"{key}:" in text:
            text = re.sub(rf"{key}: [0-9.e+-]+", f"{key}: {value:.6e}", text, count=1)
        else:
            text = text.replace("\nfrontend:", f"\nfrontend:\n  {key}: {value:.6e}", 1)
    path = tmp_path / f"{name}-loop-{loop_s}-{token_s}.yaml"
    path.write_text(text)
    front = load_software(str(path)).frontend
    assert (front.engine_loop_request_s, front.engine_loop_token_s) == (loop_s, token_s)
    return str(path)


def _serve(trace, software, client_side=True):
    """`trace` on one H100 through `software`; the tests compare a profile with loop times
    against the same profile with none (`_profile(tmp_path, "vllm-v0", 0.0)`)."""
    return serve(trace, get_preset(MODEL), "h100-80gb-x8", software=software, tp=1,
                 model_name=MODEL, options=V1Options(1024, 16), client_side=client_side)


def test_the_shipped_v0_loop_times_are_the_harness_fit():
    # benchmarks/vllm_v0_frontend/run.py: vLLM 0.5.4's and 0.6.0's own API servers over a
    # stand-in GPU; the profile carries its least-squares fit, to three significant digits
    fit = json.loads(HARNESS.read_text())["fit"]
    front = load_software("vllm-v0").frontend
    assert front.engine_loop_request_s == float(f"{fit['request_s']:.3g}")
    assert front.engine_loop_token_s == float(f"{fit['per_prompt_token_s']:.3g}")


def test_a_burst_waits_for_every_hand_over_before_its_first_step(tmp_path):
    # 8 prompts of 100 tokens fit one 1024-token prefill step: the step starts after the
    # 8 hand-overs instead of at once, so every request is 8 x 2 ms later, decode unchanged
    burst = Trace("burst", tuple(Request(i, 0.0, 100, 5) for i in range(8)))
    base = _serve(burst, _profile(tmp_path, "vllm-v0", 0.0))
    loop = _serve(burst, _profile(tmp_path, "vllm-v0", LOOP_S))
    for a, b in zip(base.rows, loop.rows):
        assert b["ttft_s"] - a["ttft_s"] == pytest.approx(8 * LOOP_S)
        assert b["e2e_s"] - a["e2e_s"] == pytest.approx(8 * LOOP_S)
        assert b["tpot_s"] == pytest.approx(a["tpot_s"])
    assert loop.setup["client_side"]["engine_loop_request_s"] == LOOP_S
    assert "engine_loop_request_s" not in base.setup["client_side"]


def test_a_longer_prompt_takes_longer_to_hand_over(tmp_path):
    # 4 prompts of 100, 200, 300 and 400 tokens at once: the step waits for all 4 hand-overs,
    # 4 x 2 ms + 1,000 tokens x 3 us
    burst = Trace("burst", tuple(Request(i, 0.0, 100 * (i + 1), 5) for i in range(4)))
    base = _serve(burst, _profile(tmp_path, "vllm-v0", 0.0))
    loop = _serve(burst, _profile(tmp_path, "vllm-v0", LOOP_S, 3e-6))
    for a, b in zip(base.rows, loop.rows):
        assert b["ttft_s"] - a["ttft_s"] == pytest.approx(4 * LOOP_S + 1000 * 3e-6)
    assert loop.setup["client_side"]["engine_loop_token_s"] == 3e-6


def test_a_request_alone_waits_only_for_its_own_hand_over(tmp_path):
    # one request a second, each long done before the next: each is handed over in 2 ms
    spaced = Trace("spaced", tuple(Request(i, float(i), 100, 5) for i in range(4)))
    base = _serve(spaced, _profile(tmp_path, "vllm-v0", 0.0))
    loop = _serve(spaced, _profile(tmp_path, "vllm-v0", LOOP_S))
    for a, b in zip(base.rows, loop.rows):
        assert b["ttft_s"] - a["ttft_s"] == pytest.approx(LOOP_S)


def test_a_hand_over_during_a_step_does_not_hold_the_engine(tmp_path):
    # request 1 arrives 1 ms into request 0's prefill and is handed over while that step
    # runs, so the engine runs as without the loop, only 2 ms later: request 0 itself was
    # handed over 2 ms late, and request 1 waits for that step as before
    arrival_1 = LOOP_S + 1e-3
    pair = Trace("pair", (Request(0, 0.0, 1000, 5), Request(1, arrival_1, 100, 5)))
    base = _serve(pair, _profile(tmp_path, "vllm-v0", 0.0))
    loop = _serve(pair, _profile(tmp_path, "vllm-v0", LOOP_S))
    # the premise: request 1's hand-over ends before request 0's prefill step does
    assert arrival_1 + LOOP_S < LOOP_S + base.rows[0]["ttft_s"]
    assert loop.rows[0]["ttft_s"] - base.rows[0]["ttft_s"] == pytest.approx(LOOP_S)
    assert loop.rows[1]["ttft_s"] - base.rows[1]["ttft_s"] == pytest.approx(LOOP_S)


def test_the_engine_only_replay_has_no_front_end(tmp_path):
    burst = Trace("burst", tuple(Request(i, 0.0, 100, 5) for i in range(8)))
    base = _serve(burst, "vllm-v0", client_side=False)
    loop = _serve(burst, _profile(tmp_path, "vllm-v0", LOOP_S), client_side=False)
    assert [r["ttft_s"] for r in loop.rows] == [r["ttft_s"] for r in base.rows]


def test_a_loop_time_on_an_engine_with_its_own_front_end_process_is_refused(tmp_path):
    # on vLLM V1's profile, whose front end has a loop of its own for every version, the
    # engine-loop form is refused as the profile loads; on SGLang's, as the replay starts
    with pytest.raises(SoftwareError, match="both engine_loop_\\* and front_loop_\\*"):
        _profile(tmp_path, "vllm", LOOP_S)
    burst = Trace("burst", tuple(Request(i, 0.0, 100, 5) for i in range(2)))
    with pytest.raises(ServeError, match=r"only a vLLM V0 engine .* not sglang"):
        serve(burst, get_preset(MODEL), "h100-80gb-x8", software=_profile(tmp_path, "sglang", LOOP_S),
              tp=1, model_name=MODEL, client_side=True)
