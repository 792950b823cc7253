"""vllm-project/vllm pull request #6883's benchmark (source `vllm_pr6883`) through vLLM 0.5.4's own
server code over a stand-in GPU: does the host code make its slow steps?

    python benchmarks/vllm_v0_frontend/pr6883.py [--envs DIR] [--json docs/data/vllm-v0-pr6883.json]

The PR's table times Llama-3-8B-Instruct on one H100 at 10 requests a second with chunked prefill,
550-token prompts and 150 output tokens: TTFT mean 687.69 ms and TPOT mean 70.74 ms with the
one-process server of then, 298.09 and 57.35 ms with the ZeroMQ front end that 0.5.4 released;
the replay gives 38 and 11.6 ms (docs/serving.md, "Fourth source"). This sends the same 600
requests (Poisson at 10/s, the replay's seed 0 arrivals; 550 tokens of Shakespeare, 150 output
tokens) to vLLM 0.5.4's server with `--enable-chunked-prefill` (512-token budget), over
fake_executor.FakeExecutor timing an H100 with Llama-3-8B (a step with a prompt chunk: 5 ms + 15 us
a prompt token; a decode step 7 ms; 20 us a sequence), in the two forms: the default (front end
and engine in two processes) and `--disable-frontend-multiprocessing` (one process). The client
(burst.py) reports TTFT and TPOT ((E2E - TTFT) / (chunks - 1)) per request. This machine's CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run  # noqa: E402  (this directory's run.py)

N, RATE_PER_S, PROMPT, OUTPUT = 600, 10.0, 550, 150
STEP = {"prefill_s": 0.005, "prefill_token_s": 1.5e-5, "decode_s": 0.007, "decode_seq_s": 2e-5}
FORMS = {"two processes (ZeroMQ front end, 0.5.4's default)": ["--enable-chunked-prefill"],
         "one process (--disable-frontend-multiprocessing)":
             ["--enable-chunked-prefill", "--disable-frontend-multiprocessing"]}
MEASURED = {"two processes (ZeroMQ front end, 0.5.4's default)": (0.29809, 0.05735),
            "one process (--disable-frontend-multiprocessing)": (0.68769, 0.07074)}


def sends(n: int = N, rate_per_s: float = RATE_PER_S, seed: int = 0) -> list[float]:
    """Poisson send offsets as `serving.validation.run_trace` draws them (the first at once)."""
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_per_s, n)
    return np.concatenate(([0.0], np.cumsum(gaps[:-1]))).tolist()


def client_means(requests: list[dict]) -> tuple[float, float, int]:
    """(TTFT mean, TPOT mean, requests counted): requests with two or more chunks."""
    ok = [r for r in requests if r.get("ttft") is not None and r.get("chunks", 0) > 1]
    ttft = float(np.mean([r["ttft"] for r in ok]))
    tpot = float(np.mean([(r["e2e"] - r["ttft"]) / (r["chunks"] - 1) for r in ok]))
    return ttft, tpot, len(ok)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", default="/tmp/krakenlm-vllm-v0",
                    help="the directory setup.sh built (vllm-0.5.4/ is used)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    env = run.environment(args.envs, "0.5.4")
    work = Path(tempfile.mkdtemp(prefix="vllm-v0-pr6883-"))
    prompts = work / "prompts.json"
    prompts.write_text(json.dumps({"prompts": run.prompt_texts([PROMPT] * N),
                                   "max_tokens": [OUTPUT] * N, "send_s": sends()}))
    out = {"command": "python benchmarks/vllm_v0_frontend/pr6883.py" +
           (f" --json {args.json}" if args.json else ""), "cpu": run.cpu_name(),
           "fake_gpu": STEP, "forms": {}}
    for form, flags in FORMS.items():
        log = work / "arrivals.jsonl"
        log.write_text("")
        proc = run.serve(env, work, log, flags, STEP)
        try:
            result = work / "result.json"
            run.client(env, work, prompts, result)
        finally:
            run.stop(proc)
        ttft, tpot, n = client_means(json.loads(result.read_text())["requests"])
        out["forms"][form] = {"flags": flags, "requests": n, "ttft_mean_s": ttft,
                              "tpot_mean_s": tpot, "pr_ttft_mean_s": MEASURED[form][0],
                              "pr_tpot_mean_s": MEASURED[form][1]}
        print(f"{form}: TTFT mean {ttft*1e3:.1f} ms (PR {MEASURED[form][0]*1e3:.1f}), "
              f"TPOT mean {tpot*1e3:.2f} ms (PR {MEASURED[form][1]*1e3:.2f}), {n} requests")
    if args.json:
        run.write_text_atomically(args.json, json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
