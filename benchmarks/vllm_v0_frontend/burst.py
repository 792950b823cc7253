"""Send a burst of N completion requests the way vLLM's benchmark client does (one aiohttp session
per request, streaming) and record each request's send time and first-token time."""
import asyncio, json, sys, time
import aiohttp

URL = "http://127.0.0.1:{port}/v1/completions"


async def one(url, model, prompt, max_tokens, out):
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600)) as session:
        payload = {"model": model, "prompt": prompt, "temperature": 0.0, "best_of": 1,
                   "max_tokens": max_tokens, "stream": True}
        st = time.perf_counter()
        out["send"] = time.time()
        ttft = None
        n = 0
        async with session.post(url, json=payload) as resp:
            out["status"] = resp.status
            async for chunk in resp.content:
                chunk = chunk.strip()
                if not chunk:
                    continue
                body = chunk.decode().removeprefix("data: ")
                if body == "[DONE]":
                    continue
                if ttft is None:
                    ttft = time.perf_counter() - st
                n += 1
        out["ttft"] = ttft
        out["e2e"] = time.perf_counter() - st
        out["chunks"] = n


async def main(port, model, prompts_file, result_file):
    spec = json.load(open(prompts_file))
    url = URL.format(port=port)
    test = {}
    await one(url, model, spec["prompts"][0], 4, test)
    outs = [{} for _ in spec["prompts"]]
    t0 = time.time()
    await asyncio.gather(*[one(url, model, p, m, o)
                           for p, m, o in zip(spec["prompts"], spec["max_tokens"], outs)])
    json.dump({"t0": t0, "requests": outs}, open(result_file, "w"))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]))
