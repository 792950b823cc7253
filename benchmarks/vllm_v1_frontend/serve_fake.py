"""Run vLLM V1's OpenAI API server (`vllm serve`'s `run_server`, vLLM 0.19) over
fake_executor.FakeExecutor.

    serve_fake.py MODEL_DIR [vLLM server flags]

MODEL_DIR is made on first use as benchmarks/vllm_v0_frontend/serve_fake.py makes it (a
Llama-3-8B-shaped config.json, GPT-2's byte-level BPE as a fast tokenizer; KRAKEN_GPT2_DIR).
"""
import asyncio
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

if __name__ == "__main__":
    import fake_executor  # this directory's (before the V0 harness's directory joins the path)
    import importlib.util
    spec = importlib.util.spec_from_file_location(  # benchmarks/vllm_v0_frontend/serve_fake.py
        "v0_serve_fake", os.path.join(os.path.dirname(HERE), "vllm_v0_frontend", "serve_fake.py"))
    v0 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(v0)
    v0.make_model_dir(sys.argv[1])
    from vllm.entrypoints.openai.api_server import run_server
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", sys.argv[1]] +
                                                                 sys.argv[2:])
    args.distributed_executor_backend = fake_executor.FakeExecutor
    asyncio.run(run_server(args))
