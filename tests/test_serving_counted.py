"""The vLLM V1 engine with its decoding requests as counters (serving/v1_counted.py) replays
exactly what `V1Engine` replays, request by request and step by step: on a roomy cache with
bursts and idle gaps (the counters empty and restart), on a cache small enough to preempt (the
counters stop and restart), with chunked long prompts and with prefix-cache hits. And the
counters are really used: most windows run on them."""

from __future__ import annotations

import numpy as np
import pytest
from serving_cases import replay, small_timer

from krakenlm.serving.traces import Request, synthetic_trace
from krakenlm.serving.v1_counted import CountedV1Engine
from krakenlm.serving.vllm_v1 import RECORD, V1Engine

FIELDS = ("first_scheduled_s", "first_token_s", "last_token_s", "finish_s", "computed",
          "generated", "preemptions", "cached_tokens", "private")


def bursts() -> list[Request]:
    """Two bursts of Poisson arrivals 30 s apart: the engine drains between them."""
    a = synthetic_trace(np.random.default_rng(3), 60, 300.0, "lognormal:300,120,0.8").requests
    return list(a) + [Request(r.id + 100, r.arrival_s + 30.0, r.prompt_tokens, r.output_tokens)
                      for r in a]


def prefix() -> list[Request]:
    rng = np.random.default_rng(4)
    t, reqs = 0.0, []
    for i in range(80):
        t += float(rng.exponential(1 / 300.0))
        blocks = int(rng.integers(1, 6))
        conv = int(rng.integers(0, 4))
        reqs.append(Request(i, t, blocks * 64 + int(rng.integers(1, 64)),
                            int(rng.integers(2, 90)), tuple(conv * 100 + b for b in range(blocks))))
    return reqs


def short_outputs() -> list[Request]:
    """Requests of one to three output tokens (some finish at their first token, in the step
    that admits them), some with prefix block ids and some without, on a prefix cache."""
    rng = np.random.default_rng(6)
    t, reqs = 0.0, []
    for i in range(120):
        t += float(rng.exponential(1 / 200.0))
        blocks = int(rng.integers(1, 4))
        ids = tuple(i % 3 * 100 + b for b in range(blocks)) if i % 2 else ()
        reqs.append(Request(i, t, blocks * 64 + int(rng.integers(1, 64)),
                            int(rng.integers(1, 4)), ids))
    return reqs


CASES = {
    "bursts, roomy cache": (bursts, 100_000, 0),
    "bursts, cache that preempts": (bursts, 260, 0),
    "long prompts chunked": (lambda: list(synthetic_trace(
        np.random.default_rng(5), 50, 80.0, "lognormal:1500,30,0.5").requests), 100_000, 0),
    "prefix cache, tight": (prefix, 120, 64),
    "one to three output tokens, prefix cache": (short_outputs, 100_000, 64),
}


def _gaps(engine) -> list[tuple[float, float]]:
    """Every inter-token gap with the tokens it stands for, one entry per run member."""
    values, weights, counts = engine.itl_runs()
    return sorted(zip(np.repeat(values, counts).tolist(), np.repeat(weights, counts).tolist()))


def outputs(engine, seqs) -> dict:
    tl = engine.timeline
    return {"seqs": [[getattr(s, f) for f in FIELDS] for s in seqs],
            "timeline": [list(getattr(tl, f)) for f in ("t_s", "kv_used", "running", "waiting",
                                                        "preemptions", "tokens")],
            "itl": _gaps(engine), "itl_windows": list(engine.itl_window_s),
            "itl_weight": list(engine.itl_weight), "steps": engine.steps,
            "preemptions": engine.preemptions}


@pytest.mark.parametrize("name", list(CASES))
def test_the_counted_engine_replays_exactly_what_v1_replays(name, monkeypatch):
    make, blocks, block_tokens = CASES[name]
    timer = small_timer("vllm")
    plain = outputs(*replay(timer, V1Engine, make(), blocks, block_tokens))
    used = {"windows": 0, "stopped": 0}
    window, uncount = CountedV1Engine._counted_window, CountedV1Engine._uncount

    def counted_window(self, until, stop_at_finish=False):
        records = len(self.timeline._log)  # RECORD ints per record, one record per window
        ran = window(self, until, stop_at_finish)
        used["windows"] += (len(self.timeline._log) - records) // RECORD
        return ran

    def stop(self):
        used["stopped"] += 1
        uncount(self)

    monkeypatch.setattr(CountedV1Engine, "_counted_window", counted_window)
    monkeypatch.setattr(CountedV1Engine, "_uncount", stop)
    counted = outputs(*replay(timer, CountedV1Engine, make(), blocks, block_tokens))
    assert counted == plain
    assert used["windows"] >= 10  # the counted windows ran (10-30 per case)
    if plain["preemptions"]:
        assert used["stopped"] > 0



@pytest.mark.parametrize("software,decode_step_s,form", [
    ("vllm", None, 1), ("trtllm", None, 0), ("vllm", 0.02, 2)])
def test_the_counted_windows_line_forms_replay_what_v1_replays(software, decode_step_s, form):
    """Llama-2-70B on 4 H100s, whose decode rows have a `line`: the counted window times its
    steps on it in each form (0: no overlap, trtllm; 1: overlap with the GPU time above the
    host's, vllm; 2: overlap with a host step that can exceed it) exactly as `V1Engine`."""
    import dataclasses

    from krakenlm.models import get_preset
    from krakenlm.serving.step_time import StepTimer
    from krakenlm.simulator import Simulator
    from krakenlm.simulator.constants.software import load_software

    profile = load_software(software)
    if decode_step_s is not None:
        profile = dataclasses.replace(profile, host=dataclasses.replace(
            profile.host, decode_step_s=decode_step_s))
    timer = StepTimer(Simulator("h100-80gb-x8", profile), get_preset("llama2-70b"), 4,
                      max_tokens=2048, max_sequences=64, max_context=4096)
    requests = synthetic_trace(np.random.default_rng(3), 150, 3.0,
                               "lognormal:600,250,0.8").requests
    options = {"max_num_batched_tokens": 2048, "max_num_seqs": 64}
    plain = outputs(*replay(timer, V1Engine, list(requests), 100_000, 0, **options))
    engine, seqs = replay(timer, CountedV1Engine, list(requests), 100_000, 0, **options)
    assert outputs(engine, seqs) == plain
    assert {line[-1] for line in engine._lines.values() if line} == {form}
