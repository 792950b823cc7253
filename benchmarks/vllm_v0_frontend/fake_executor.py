"""A stand-in for vLLM V0's GPU executor (runs inside a vLLM 0.5.4 / 0.6.0 environment of
setup.sh, imported by the engine process when it unpickles its arguments).

Each step waits a modelled GPU time (`FAKE_STEP`, JSON: prefill_s + prefill_token_s x prompt
tokens, or decode_s + decode_seq_s x sequences) and samples one fixed token for every sequence,
so vLLM's own front end, RPC hop, engine loop, scheduler, detokeniser and output processing run
as they do on a GPU server. 0.6's asynchronous output processor is called from inside the step,
where the model runner calls it. Single-step scheduling only (`--num-scheduler-steps` 1). It
also logs when each request reaches the engine's `RequestTracker` (the end of its way in) to
`FAKE_LOG`, one JSON line per request, and each step to `FAKE_LOG`.steps.
"""
import asyncio
import json
import os
import time

from vllm.executor.executor_base import ExecutorAsyncBase
from vllm.sequence import CompletionSequenceGroupOutput, Logprob, SequenceOutput

try:  # 0.6
    from vllm.model_executor.layers.sampler import SamplerOutput
except ImportError:  # 0.5
    from vllm.sequence import SamplerOutput

TOKEN = 262  # " the" in GPT-2's vocabulary: never the end of a sequence
STEP = json.loads(os.environ.get("FAKE_STEP", "{}"))
LOG = os.environ.get("FAKE_LOG")
STEPS = open(LOG + ".steps", "a") if LOG else None


def step_s(request) -> float:
    """The modelled GPU time of one step."""
    groups = request.seq_group_metadata_list
    prompt = sum(g.token_chunk_size for g in groups if g.is_prompt)  # this step's prompt tokens
    decodes = sum(not g.is_prompt for g in groups)
    if prompt:
        return STEP.get("prefill_s", 5e-3) + STEP.get("prefill_token_s", 1.5e-5) * prompt + \
            STEP.get("decode_seq_s", 2e-5) * decodes
    return STEP.get("decode_s", 7e-3) + STEP.get("decode_seq_s", 2e-5) * decodes


class FakeExecutor(ExecutorAsyncBase):
    uses_ray = False

    def _init_executor(self) -> None:
        pass

    def determine_num_available_blocks(self):
        return (STEP.get("blocks", 30000), 0)

    def initialize_cache(self, num_gpu_blocks, num_cpu_blocks) -> None:
        pass

    def _outputs(self, request):
        groups = request.seq_group_metadata_list
        state = getattr(groups[0], "state", None) if groups else None  # 0.6 has it, 0.5 not
        if state is not None and state.num_steps > 1:
            # 0.6's MultiStepModelRunner hands a round's outputs over through the output queue
            # while its host runs ahead of the GPU (and is held back by a full launch queue in
            # long eager prefills): not emulated here
            raise NotImplementedError("the stand-in GPU does not run --num-scheduler-steps > 1")
        if STEPS is not None:
            groups = request.seq_group_metadata_list
            STEPS.write(json.dumps({"t": time.time(), "seqs": len(groups),
                                    "prompts": sum(g.is_prompt for g in groups),
                                    "gpu_s": step_s(request)}) + "\n")
            STEPS.flush()
        outs = [CompletionSequenceGroupOutput(
                    [SequenceOutput(seq_id, TOKEN, {TOKEN: Logprob(0.0)}) for seq_id in g.seq_data],
                    None)
                for g in request.seq_group_metadata_list]
        callback = getattr(request, "async_callback", None)
        if callback is not None:  # 0.6: the previous step's outputs, beside this forward pass
            callback()
        return [SamplerOutput(outputs=outs)]

    def execute_model(self, request):
        start = time.time()
        out = self._outputs(request)
        time.sleep(max(0.0, step_s(request) - (time.time() - start)))
        return out

    async def execute_model_async(self, request):
        start = time.time()
        out = self._outputs(request)
        await asyncio.sleep(max(0.0, step_s(request) - (time.time() - start)))
        return out

    def check_health(self) -> None:
        pass

    async def check_health_async(self) -> None:
        pass

    def add_lora(self, lora_request):
        return False

    def remove_lora(self, lora_id):
        return False

    def pin_lora(self, lora_id):
        return False

    def list_loras(self):
        return set()

    def add_prompt_adapter(self, request):
        return False

    def remove_prompt_adapter(self, adapter_id):
        return False

    def pin_prompt_adapter(self, adapter_id):
        return False

    def list_prompt_adapters(self):
        return set()


def _log_arrivals() -> None:
    """Write when each request reaches the engine's RequestTracker (`add_request`)."""
    from vllm.engine import async_llm_engine
    add = async_llm_engine.RequestTracker.add_request
    log = open(LOG, "a") if LOG else None

    def add_request(self, request_id, **kwargs):
        if log is not None:
            log.write(json.dumps({"id": request_id, "t": time.time()}) + "\n")
            log.flush()
        return add(self, request_id, **kwargs)

    async_llm_engine.RequestTracker.add_request = add_request


_log_arrivals()
if os.environ.get("FAKE_ENGINE_CPUS"):  # the engine process's cores (the front end keeps its own)
    os.sched_setaffinity(0, {int(c) for c in os.environ["FAKE_ENGINE_CPUS"].split(",")})
