"""A closed-loop client like `vllm bench serve --max-concurrency N` (runs inside setup.sh's
environment): one test request, then every request created at once, a semaphore of N around each
streaming completion (`ignore_eos`, so each gives its max_tokens), one shared aiohttp session.

    closed.py PORT MODEL PROMPTS_JSON N RESULT_JSON

PROMPTS_JSON: {"prompts": [...], "max_tokens": [...]}. RESULT_JSON: as burst.py's.
"""
import asyncio
import json
import os
import sys
import time

import aiohttp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "vllm_v0_frontend"))
from burst import stream  # noqa: E402  (benchmarks/vllm_v0_frontend/burst.py)


async def main(port: int, model: str, prompts_file: str, n: int, result_file: str) -> None:
    spec = json.load(open(prompts_file))
    url = f"http://127.0.0.1:{port}/v1/completions"
    semaphore, outs = asyncio.Semaphore(n), [{} for _ in spec["prompts"]]

    def payload(prompt: str, max_tokens: int) -> dict:
        return {"model": model, "prompt": prompt, "temperature": 0.0, "max_tokens": max_tokens,
                "stream": True, "ignore_eos": True}

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600),
                                     connector=aiohttp.TCPConnector(limit=0)) as session:
        await stream(session, url, payload(spec["prompts"][0], 4), {})  # the test request

        async def limited(prompt: str, max_tokens: int, out: dict) -> None:
            async with semaphore:
                await stream(session, url, payload(prompt, max_tokens), out)

        t0 = time.time()
        await asyncio.gather(*[limited(p, m, o) for p, m, o in
                               zip(spec["prompts"], spec["max_tokens"], outs)])
    with open(result_file, "w") as f:
        json.dump({"t0": t0, "requests": outs}, f)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
