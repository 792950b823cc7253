"""A client like vLLM's `benchmark_serving.py` (runs inside a setup.sh environment): one test
request (the first prompt, 4 output tokens), then the requests of a prompts file, each in an aiohttp session of its own, streaming
`/v1/completions`; all at once, or at the file's `send_s` offsets (seconds after the start).

    burst.py PORT MODEL PROMPTS_JSON RESULT_JSON

PROMPTS_JSON: {"prompts": [...], "max_tokens": [...], optionally "send_s": [...]}.
RESULT_JSON: {"t0": wall-clock start, "requests": [{"send", "status", "ttft", "e2e",
"chunks"}, ...]} with times in seconds, TTFT and E2E from each request's send.
"""
import asyncio
import json
import sys
import time

import aiohttp


async def stream(session, url: str, payload: dict, out: dict) -> None:
    """One streaming completion: its send time, status, TTFT, E2E and chunks into `out`."""
    start = time.perf_counter()
    out["send"] = time.time()
    ttft, chunks = None, 0
    async with session.post(url, json=payload) as response:
        out["status"] = response.status
        async for line in response.content:
            line = line.strip()
            if not line or line == b"data: [DONE]":
                continue
            if ttft is None:
                ttft = time.perf_counter() - start
            chunks += 1
    out.update(ttft=ttft, e2e=time.perf_counter() - start, chunks=chunks)


async def one(url: str, model: str, prompt: str, max_tokens: int, out: dict) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600)) as session:
        await stream(session, url, {"model": model, "prompt": prompt, "temperature": 0.0,
                                    "best_of": 1, "max_tokens": max_tokens, "stream": True}, out)


async def later(delay_s: float, job) -> None:
    await asyncio.sleep(delay_s)
    await job


async def main(port: int, model: str, prompts_file: str, result_file: str) -> None:
    spec = json.load(open(prompts_file))
    url = f"http://127.0.0.1:{port}/v1/completions"
    await one(url, model, spec["prompts"][0], 4, {})  # the test request (4 tokens)
    outs = [{} for _ in spec["prompts"]]
    send_s = spec.get("send_s") or [0.0] * len(outs)
    t0 = time.time()
    await asyncio.gather(*[later(s, one(url, model, p, m, o)) if s else one(url, model, p, m, o)
                           for s, p, m, o in zip(send_s, spec["prompts"], spec["max_tokens"],
                                                 outs)])
    with open(result_file, "w") as f:
        json.dump({"t0": t0, "requests": outs}, f)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]))
