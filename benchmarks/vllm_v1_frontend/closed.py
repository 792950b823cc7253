"""Closed-loop client like `vllm bench serve --max-concurrency N`: all requests created at once,
a semaphore of N around each streaming request. closed.py PORT MODEL PROMPTS_JSON N RESULT_JSON"""
import asyncio, json, sys, time
import aiohttp

async def one(session, url, model, prompt, max_tokens, out):
    payload = {"model": model, "prompt": prompt, "temperature": 0.0, "max_tokens": max_tokens,
               "stream": True, "ignore_eos": True}
    start = time.perf_counter(); out["send"] = time.time(); ttft = None; chunks = 0
    async with session.post(url, json=payload) as response:
        async for line in response.content:
            line = line.strip()
            if not line or line == b"data: [DONE]":
                continue
            if ttft is None:
                ttft = time.perf_counter() - start
            chunks += 1
    out.update(ttft=ttft, e2e=time.perf_counter() - start, chunks=chunks)

async def main(port, model, prompts_file, n, result_file):
    spec = json.load(open(prompts_file)); url = f"http://127.0.0.1:{port}/v1/completions"
    sem = asyncio.Semaphore(n); outs = [{} for _ in spec["prompts"]]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600),
                                     connector=aiohttp.TCPConnector(limit=0)) as session:
        await one(session, url, model, spec["prompts"][0], 4, {})
        async def limited(p, m, o):
            async with sem:
                await one(session, url, model, p, m, o)
        t0 = time.time()
        await asyncio.gather(*[limited(p, m, o) for p, m, o in zip(spec["prompts"], spec["max_tokens"], outs)])
    json.dump({"t0": t0, "requests": outs}, open(result_file, "w"))

if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
