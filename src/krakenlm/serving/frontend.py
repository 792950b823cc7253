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

A front end in a process of its own that hands the requests over one job at a time on its
event loop (`front_loop_*`, vLLM 0.5.4's OpenAI server; `Frontend.at_version` chooses it by the
engine version) delays each request's way to the engine by the jobs ahead of it:
`front_loop_arrivals`. vLLM 0.5.4's completion handler (vllm-project/vllm v0.5.4
`vllm/entrypoints/openai/serving_completion.py` `create_completion`) parses and tokenises the
request, logs it and calls `engine.generate` for its prompt, whose generator
`merge_async_iterators` (`vllm/utils.py`) drives from a task of its own: the send to the engine
process (`vllm/entrypoints/openai/rpc/client.py` `AsyncEngineRPCClient.generate`, pickling the
request onto a new socket) runs only when the loop reaches that task, behind every job that was
ready before it. So a burst's handlers all run before its first send, and its requests reach
the engine spread over the burst's whole way in, the first after every handler and one send
(`benchmarks/vllm_v0_frontend/run.py` timed both on 0.5.4's own server code).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

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
    return delivered_s[k] + frontend.after_engine_s()


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


def front_loop_arrivals(sent_s: Sequence[float], prompt_tokens: Sequence[int],
                        frontend: Frontend) -> list[float]:
    """When each request reaches the engine through the front end's event loop
    (`front_loop_schedule`)."""
    return front_loop_schedule(sent_s, prompt_tokens, frontend)[0]


def front_loop_schedule(sent_s: Sequence[float], prompt_tokens: Sequence[int],
                        frontend: Frontend) -> tuple[list[float], np.ndarray, np.ndarray]:
    """When each request reaches the engine through the front end's event loop (module
    docstring), every request sent at sent_s[i] (in send order): `FrontLoop` with every send
    known. For N requests sent at once request i arrives at sum_j (request_s + token_s x p_j) +
    (i + 1) x send_s; a request sent to an idle loop arrives request_s + token_s x p + send_s
    after its send. Returns the arrivals and, for the loop's jobs in the order it served them,
    when each became ready and when it ended."""
    loop = FrontLoop(frontend)
    for i, (t, p) in enumerate(zip(sent_s, prompt_tokens)):
        loop.submit(float(t), p, i)
    arrival = [0.0] * len(sent_s)
    for i, t in loop.release(np.inf):
        arrival[i] = t
    return arrival, np.array(loop.ready_s), np.array(loop.done_s)


class FrontLoop:
    """The front end's event loop (module docstring) as the sends come: one server, its jobs
    served in the order they became ready. `submit` puts a request's handler on it at its send
    (front_loop_request_s + front_loop_token_s x its prompt tokens); when the handler ends, its
    send becomes ready (front_loop_send_s), and the request reaches the engine when the send
    ends. `release(until_s)` serves every job that became ready by `until_s` and returns the
    requests whose send ended, with their arrival at the engine, in order: a caller that sends
    nothing before `until_s` (a closed loop's client, whose next send is no earlier) can hand
    them to the engine, since no later job can go before them."""

    def __init__(self, frontend: Frontend):
        self.frontend = frontend
        self.jobs: list[tuple[float, int, int, int, object]] = []  # (ready, order, stage, ...)
        self.order = 0
        self.busy_until = -np.inf
        self.ready_s: list[float] = []  # the jobs served, in order: when each became ready
        self.done_s: list[float] = []  # and when it ended

    def submit(self, ready_s: float, prompt_tokens: int, item: object) -> None:
        heapq.heappush(self.jobs, (ready_s, self.order, 1, prompt_tokens, item))
        self.order += 1

    def next_ready_s(self) -> float:
        """When the next job waiting on the loop became (or becomes) ready; inf: none waits."""
        return self.jobs[0][0] if self.jobs else np.inf

    def release(self, until_s: float) -> list[tuple[object, float]]:
        front, out = self.frontend, []
        while self.jobs and self.jobs[0][0] <= until_s:
            ready, _, stage, tokens, item = heapq.heappop(self.jobs)
            start = max(ready, self.busy_until)
            self.ready_s.append(ready)
            if stage == 1:
                self.busy_until = start + front.front_loop_request_s + \
                    front.front_loop_token_s * tokens
                heapq.heappush(self.jobs, (self.busy_until, self.order, 2, tokens, item))
                self.order += 1
            else:
                self.busy_until = start + front.front_loop_send_s
                out.append((item, self.busy_until))
            self.done_s.append(self.busy_until)
        return out
