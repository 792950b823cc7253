"""A stand-in for vLLM V1's GPU executor (runs inside setup.sh's vLLM 0.19 environment, imported
by the engine-core process when it unpickles its configuration).

Each step waits a modelled GPU time (`FAKE_STEP`, JSON: prefill_s + prefill_token_s x prompt
tokens + decode_seq_s x decodes when the step holds prompt tokens, else decode_s + decode_seq_s
x decodes) and samples one fixed token for every request whose prompt is done, so vLLM's own API
server, tokeniser, input processing, engine-core hop, scheduler, output processing and
detokeniser run as on a GPU server. The executor does not support asynchronous scheduling, so
the engine steps serially. It logs when each request reaches the scheduler
(`Scheduler.add_request`) to `FAKE_LOG`, one JSON line per request, and each step to
`FAKE_LOG`.steps.
"""
import json
import os
import time
from concurrent.futures import Future
from functools import cached_property

import torch
from vllm.v1.executor.abstract import Executor
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.outputs import ModelRunnerOutput

TOKEN = 262  # " the" in GPT-2's vocabulary: never the end of a sequence
STEP = json.loads(os.environ.get("FAKE_STEP", "{}"))
LOG = os.environ.get("FAKE_LOG")
STEPS = open(LOG + ".steps", "a") if LOG else None
LAYERS = 32  # serve_fake.py's Llama-3-8B shape: 32 layers of 8 KV heads of 128


def gpu_s(prompt_tokens: int, decodes: int) -> float:
    """The modelled GPU time of one step."""
    if prompt_tokens:
        return STEP.get("prefill_s", 5e-3) + STEP.get("prefill_token_s", 1.5e-5) * prompt_tokens \
            + STEP.get("decode_seq_s", 2e-5) * decodes
    return STEP.get("decode_s", 7e-3) + STEP.get("decode_seq_s", 2e-5) * decodes if decodes else 0.0


def _done(value):
    future = Future()
    future.set_result(value)
    return future


class FakeExecutor(Executor):
    uses_ray = False

    def _init_executor(self) -> None:
        self.prompt_len: dict[str, int] = {}
        self.computed: dict[str, int] = {}

    def determine_available_memory(self) -> list[int]:
        return [STEP.get("kv_bytes", 20 * 2**30)]

    def get_kv_cache_specs(self):
        spec = FullAttentionSpec(block_size=self.cache_config.block_size or 16, num_kv_heads=8,
                                 head_size=128, dtype=torch.bfloat16)
        return [{f"model.layers.{i}.self_attn.attn": spec for i in range(LAYERS)}]

    def initialize_from_config(self, kv_cache_configs) -> None:
        pass

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None, non_block=False):
        return _done([None]) if non_block else [None]

    @cached_property
    def supported_tasks(self):
        return ("generate",)

    def execute_model(self, scheduler_output, non_block=False):
        start = time.time()
        for new in scheduler_output.scheduled_new_reqs:
            self.prompt_len[new.req_id] = len(new.prompt_token_ids or ())
            self.computed[new.req_id] = new.num_computed_tokens
        req_ids, sampled, prompt_tokens, decodes = [], [], 0, 0
        for rid, n in scheduler_output.num_scheduled_tokens.items():
            before, prompt = self.computed.get(rid, 0), self.prompt_len.get(rid, 0)
            self.computed[rid] = before + n
            if before >= prompt:
                decodes += 1
            else:
                prompt_tokens += n
            req_ids.append(rid)
            sampled.append([TOKEN] if self.computed[rid] >= prompt else [])
        for rid in scheduler_output.finished_req_ids:
            self.prompt_len.pop(rid, None)
            self.computed.pop(rid, None)
        step = gpu_s(prompt_tokens, decodes)
        if STEPS is not None and req_ids:
            STEPS.write(json.dumps({"t": start, "seqs": len(req_ids),
                                    "prompt_tokens": prompt_tokens, "gpu_s": step}) + "\n")
            STEPS.flush()
        out = ModelRunnerOutput(req_ids=req_ids,
                                req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                sampled_token_ids=sampled)
        time.sleep(max(0.0, step - (time.time() - start)))
        return _done(out) if non_block else out

    def sample_tokens(self, grammar_output, non_block=False):
        raise RuntimeError("not reached: execute_model returns the step's output")

    def execute_dummy_batch(self) -> None:
        pass

    def take_draft_token_ids(self):
        return None

    def check_health(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def profile(self, is_start=True, profile_prefix=None):
        pass


def _log_arrivals() -> None:
    """Write when each request reaches the engine core's scheduler (`add_request`)."""
    from vllm.v1.core.sched import scheduler
    add = scheduler.Scheduler.add_request
    log = open(LOG, "a") if LOG else None

    def add_request(self, request):
        if log is not None:
            log.write(json.dumps({"id": request.request_id, "t": time.time()}) + "\n")
            log.flush()
        return add(self, request)

    scheduler.Scheduler.add_request = add_request


_log_arrivals()
if os.environ.get("FAKE_ENGINE_CPUS"):  # the engine core's cores (the API server keeps its own)
    os.sched_setaffinity(0, {int(c) for c in os.environ["FAKE_ENGINE_CPUS"].split(",")})
