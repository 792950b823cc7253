"""A stand-in for vLLM V0's GPU executor (runs inside a vLLM 0.5.4 / 0.6.0 environment of
setup.sh, imported by the engine process when it unpickles its arguments).

Each step waits a modelled GPU time (`FAKE_STEP`, JSON: prefill_s + prefill_token_s x prompt
tokens, or decode_s + decode_seq_s x sequences) and samples one fixed token for every sequence,
so vLLM's own front end, RPC hop, engine loop, scheduler, detokeniser and output processing run
as they do on a GPU server. 0.6's asynchronous output processor is called from inside the step,
where the model runner calls it. It also logs when each request reaches the engine's
`RequestTracker` (the end of its way in) to `FAKE_LOG`, one JSON line per request, and each
step to `FAKE_LOG`.steps.

0.6.0's multi-step rounds (`--num-scheduler-steps` N > 1) follow its `MultiStepModelRunner`
(vllm/worker/multi_step_model_runner.py of the 0.6.0 wheel, `execute_model`,
`_async_process_outputs`, `_final_process_outputs`): a later step of a round launches the
forward pass, then runs the asynchronous callback (the engine's `_process_model_outputs` of the
queued outputs) and pythonizes every earlier step of the round, queueing each and calling the
callback again, and only then launches the sampler, so the step's GPU work ends at the later of
the forward pass's end and the callback's. The round's last step pythonizes the steps left
(`_final_process_outputs`, blocking on the GPU for the last) and returns the last one's output.
One difference: the stand-in holds the host at a later step's start until the previous step's
GPU work has ended, where 0.6.0's `wait_previous_step` makes the stream wait (a CUDA event's
`wait`) and lets the host run ahead, pythonizing only the steps whose events have fired. That
moves when the host's work for a step starts, not how much of it there is, which is what
benchmarks/vllm_v0_frontend/multi_step_host.py measures. Pythonizing is the fake's object
building (one `SequenceOutput` with its logprob per sequence), not the runner's own
`_pythonize_sampler_output`; the input broadcast to other ranks and `advance_step` are not run.
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


async def wait_until(deadline: float) -> None:
    """Wait until the wall clock reaches `deadline` to within the event loop's turn: the engine's
    loop may be uvloop, whose timers have a resolution of 1 ms, so the last 2 ms are waited by
    yielding to the loop, as a GPU event is waited by polling."""
    while True:
        left = deadline - time.time()
        if left <= 0:
            return
        await asyncio.sleep(left - 0.002 if left > 0.003 else 0)


def multi_step(request) -> bool:
    """Whether the step is one of a multi-step round (0.6 has the state, 0.5 not)."""
    groups = request.seq_group_metadata_list
    state = getattr(groups[0], "state", None) if groups else None
    return state is not None and state.num_steps > 1


def pythonized(groups) -> SamplerOutput:
    """A step's output as Python objects: one sampled token with its logprob per sequence."""
    return SamplerOutput(outputs=[
        CompletionSequenceGroupOutput(
            [SequenceOutput(seq_id, TOKEN, {TOKEN: Logprob(0.0)}) for seq_id in g.seq_data], None)
        for g in groups])


class FakeExecutor(ExecutorAsyncBase):
    uses_ray = False

    def _init_executor(self) -> None:
        pass

    def determine_num_available_blocks(self):
        return (STEP.get("blocks", 30000), 0)

    def initialize_cache(self, num_gpu_blocks, num_cpu_blocks) -> None:
        pass

    def _outputs(self, request):
        if STEPS is not None:
            groups = request.seq_group_metadata_list
            STEPS.write(json.dumps({"t": time.time(), "seqs": len(groups),
                                    "prompts": sum(g.is_prompt for g in groups),
                                    "gpu_s": step_s(request)}) + "\n")
            STEPS.flush()
        outs = pythonized(request.seq_group_metadata_list)
        callback = getattr(request, "async_callback", None)
        if callback is not None:  # 0.6: the previous step's outputs, beside this forward pass
            callback()
        return [outs]

    def execute_model(self, request):
        if multi_step(request):
            raise NotImplementedError("multi-step rounds run through the async engine only")
        start = time.time()
        out = self._outputs(request)
        time.sleep(max(0.0, step_s(request) - (time.time() - start)))
        return out

    async def execute_model_async(self, request):
        if multi_step(request):
            return await self._multi_step(request)
        start = time.time()
        out = self._outputs(request)
        await asyncio.sleep(max(0.0, step_s(request) - (time.time() - start)))
        return out

    async def _multi_step(self, request):
        """One step of a multi-step round, as 0.6.0's MultiStepModelRunner runs it (module
        docstring); logs the step's launch, the host's time from its launch to the sampler's,
        and its GPU time."""
        groups = request.seq_group_metadata_list
        if request.is_first_multi_step:
            self.round = []  # the round's steps not pythonized yet
        else:  # the stand-in's hold until the previous step's GPU work ends (docstring)
            await wait_until(self.gpu_end)
        launch = time.time()
        callback = request.async_callback
        if callback is not None:  # _async_process_outputs
            callback()
            ctx = callback.keywords["ctx"]
            while self.round:  # the earlier steps, finished: the host waited for the last
                ctx.output_queue.append(([pythonized(self.round.pop(0))],
                                         ctx.seq_group_metadata_list, ctx.scheduler_outputs,
                                         False, False))
                callback()
        sampler = time.time()
        self.gpu_end = max(launch + step_s(request), sampler)
        self.round.append(groups)
        if STEPS is not None:
            STEPS.write(json.dumps({"t": launch, "seqs": len(groups),
                                    "prompts": sum(g.is_prompt for g in groups),
                                    "gpu_s": step_s(request), "host_s": sampler - launch,
                                    "step": request.current_step,
                                    "last": request.is_last_step}) + "\n")
            STEPS.flush()
        if not request.is_last_step:
            return [SamplerOutput(outputs=[])]
        outputs = []  # _final_process_outputs
        for i, step_groups in enumerate(self.round):
            last = i == len(self.round) - 1
            if callback is not None:
                callback()
            if last:  # pythonizing the last step blocks on its GPU work
                await wait_until(self.gpu_end)
            out = pythonized(step_groups)
            if callback is not None and not last:
                ctx = callback.keywords["ctx"]
                ctx.output_queue.append(([out], ctx.seq_group_metadata_list,
                                         ctx.scheduler_outputs, False, False))
            else:
                outputs.append(out)
        self.round = []
        return outputs

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
