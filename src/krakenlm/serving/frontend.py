"""The serving front end as a client-side benchmark sees it: the times `serve(...,
client_side=True)` reports instead of the engine's.

A client (vLLM's `benchmark_serving.py`, SGLang's `bench_serving`) times a request through the
OpenAI-compatible server in front of the engine: HTTP, tokenisation, the hop to the engine
process, detokenisation and streaming. vLLM V1 and SGLang run that work in processes of their
own (vLLM's API server with its `AsyncLLM` output handler; SGLang's tokenizer manager and
detokenizer), so it is not on the engine's step: the engine runs its steps as the replay times
them, and the front end passes each step's tokens on behind it. Three constants of the software
profile's `frontend` section (sources in its YAML) model it:

* `request_s`: a fixed time per request (the request's way in and its first chunk's way
  out), added to the client's first token and finish, so to TTFT and E2E, not to TPOT;
* `per_prompt_token_s`: the server's time per prompt token on the request's way in
  (tokenising its text), before the engine sees it: `serve` hands the request to the engine
  that much after the client sent it, and times the client's TTFT and E2E from the send;
* `per_stream_token_s`: the front end's time per output token of each stream. It serves the
  engine's steps in order, one at a time: the tokens of step k, which ends at t_k with n_k
  running requests, reach the client at F_k = max(t_k, F_{k-1}) + n_k x per_stream_token_s.
  While the front end keeps up this adds n_k x per_stream_token_s to each token; once a step's
  n_k x per_stream_token_s exceeds the step time, it sets the pace the client sees (TPOT and
  E2E grow, the engine's own steps do not).

The requests running at a step (the engine timeline's count) stand for the streams that
receive a token in it. The recorded inter-token latencies stay the engine's.
"""

from __future__ import annotations

import numpy as np

from ..simulator.constants.software import Frontend
from .packing import packed_array


def delivery_times(step_end_s: np.ndarray, streams: np.ndarray,
                   per_stream_token_s: float) -> np.ndarray:
    """When the front end has passed on each step's tokens: F_k = max(t_k, F_{k-1}) + n_k c,
    in closed form F_k = S_k + max_{j<=k}(t_j - S_{j-1}) with S_k = c (n_1 + ... + n_k)."""
    t = np.asarray(step_end_s, dtype=float)
    work = np.cumsum(np.asarray(streams, dtype=float) * per_stream_token_s)
    before = np.concatenate(([0.0], work[:-1]))
    return work + np.maximum.accumulate(t - before)


def client_times(engine_times_s: np.ndarray, step_end_s: np.ndarray,
                 delivered_s: np.ndarray, frontend: Frontend) -> np.ndarray:
    """The client's time of each engine event (a first token or a finish, each at the end of
    an engine step): that step's delivery time plus the fixed per-request time."""
    k = np.searchsorted(step_end_s, engine_times_s, side="left")
    k = np.minimum(k, len(step_end_s) - 1)
    return delivered_s[k] + frontend.request_s


def apply_frontend(seqs, engines, frontend: Frontend) -> tuple[np.ndarray, np.ndarray]:
    """The client's first-token and finish times of `seqs` (each served by
    `engines[seq.replica]`), through the front end."""
    first = np.array([s.first_token_s for s in seqs])
    finish = np.array([s.finish_s for s in seqs])
    replica = np.array([s.replica for s in seqs])
    for e in engines:
        ends = packed_array(e.timeline.t_s, float)
        mine = replica == e.index
        if not len(ends) or not mine.any():
            continue
        delivered = delivery_times(ends, e.timeline.running, frontend.per_stream_token_s)
        first[mine] = client_times(first[mine], ends, delivered, frontend)
        finish[mine] = client_times(finish[mine], ends, delivered, frontend)
    return first, finish
