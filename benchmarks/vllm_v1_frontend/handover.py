"""How vLLM V1's OpenAI API server hands a burst's requests to its engine core: measured with
vLLM 0.19's own server code over a stand-in GPU (evidence; no profile constant comes from it yet).

    bash benchmarks/vllm_v1_frontend/setup.sh              # once: vLLM 0.19.0 (PyPI)
    python benchmarks/vllm_v1_frontend/handover.py [--envs DIR] [--reps 5] [--json FILE]
    python benchmarks/vllm_v1_frontend/handover.py --from-json docs/data/vllm-v1-frontend.json

This starts vLLM 0.19.0's own OpenAI server (`serve_fake.py`: the API-server process and the
engine-core process as `vllm serve` starts them, with an H100's default token budget and
sequence cap) over `fake_executor.FakeExecutor`, which stands in for the GPU and logs when each
request reaches the engine core's scheduler. The client and the bursts are
benchmarks/vllm_v0_frontend/'s (`burst.py`: one test request, then N streaming completions at
once; 10, 20 and 160 ShareGPT-length prompts, 160 x 50 and 160 x 1,000 tokens). The API server
runs on core 1, the client and the engine core on core 0.

Two forms are fitted to the 160-request bursts. One at a time (a queue: request i reaches the
engine core at h_i = max(a_i, h_{i-1}) + c, so the k-th arrival of a burst is (k + 1) c): c by
least squares through the origin of every server's sorted arrivals. Handlers first, then sends
(vLLM 0.5.4's form, serving/frontend.py `front_loop_arrivals`: first arrival N c1 + c2, last
N (c1 + c2), c1 = handler + per-token x prompt tokens): benchmarks/vllm_v0_frontend/run.py's
`fit_front_loop` over the same bursts' first and last arrivals. The figures are this machine's
CPU's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "vllm_v0_frontend"))

import run as v0  # noqa: E402  (benchmarks/vllm_v0_frontend/run.py: bursts, client, arrivals)
from krakenlm.fileio import write_text_atomically  # noqa: E402

VERSION = "0.19.0"
PORT = 8321
# vLLM V1's defaults on an H100 (80 GB, not an A100; vllm/engine/arg_utils.py), set explicitly
# because the CPU platform it runs on here has smaller ones
FLAGS = ["--max-model-len", "8192", "--max-num-batched-tokens", "8192", "--max-num-seqs", "1024"]


def environment(envs: str) -> Path:
    env = Path(envs) / f"vllm-{VERSION}"
    if not (env / "bin/python").exists():
        v0.fail(f"no vLLM {VERSION} environment at {env}; run "
                f"`bash benchmarks/vllm_v1_frontend/setup.sh {envs}` first")
    return env


def serve(env: Path, work: Path, log: Path, step: dict = v0.STEP):
    """vLLM 0.19's server over the stand-in GPU (`step`), API server on core 1 (the V0
    harness's `serve` with this directory's serve_fake.py)."""
    return v0.serve(env, work, log, FLAGS, step, harness=HERE, port=PORT)


def client(env: Path, work: Path, prompts: Path, result: Path) -> None:
    v0.client(env, work, prompts, result, port=PORT)


def one_server(env: Path, work: Path, sets: dict) -> dict[str, dict]:
    """Every burst on a fresh server: the sorted arrivals after the send, the client's TTFTs."""
    log = work / "arrivals.jsonl"
    out = {}
    for name, r, t0, end in v0.burst_runs(env, work, sets, log, serve, client):
        out[name] = {"arrivals_s": v0.arrivals(log, t0, end).tolist(),
                     "ttft_mean_s": float(np.mean(v0.streamed_ttfts(r)))}
    return out


def fit(servers: list[dict], n: int = 160) -> tuple[float, int]:
    """(c, arrivals): the least-squares slope through the origin of the k-th sorted arrival
    on k + 1 over every server's bursts of `n` requests."""
    k, a = [], []
    for server in servers:
        for burst in server.values():
            if len(burst["arrivals_s"]) == n:
                k += range(1, n + 1)
                a += burst["arrivals_s"]
    k, a = np.array(k, dtype=float), np.array(a)
    return float(k @ a / (k @ k)), len(a)


def fit_two_phase(servers: list[dict]) -> tuple[float, float, float]:
    """(handler_s, per_token_s, send_s) of the handlers-then-sends form (module docstring)."""
    raw = {VERSION: {name: [{"n": len(s[name]["arrivals_s"]), "first_s": s[name]["arrivals_s"][0],
                             "last_s": s[name]["arrivals_s"][-1]} for s in servers]
                     for name in servers[0]}}
    lengths = {name: float(np.mean(p)) for name, (p, _) in v0.bursts().items()}
    return v0.fit_front_loop(raw, lengths, VERSION)


def table(servers: list[dict]) -> dict[str, dict[str, float]]:
    """Per burst, the medians over the servers: first, mean and last arrival, client TTFT."""
    out = {}
    for name in servers[0]:
        figs = [{"first_s": s[name]["arrivals_s"][0], "mean_s": float(np.mean(s[name]["arrivals_s"])),
                 "last_s": s[name]["arrivals_s"][-1], "ttft_mean_s": s[name]["ttft_mean_s"]}
                for s in servers]
        out[name] = {k: statistics.median(f[k] for f in figs) for k in figs[0]}
        out[name]["n"] = len(servers[0][name]["arrivals_s"])
    return out


def report(medians: dict, c: float, rows: int, two_phase: tuple[float, float, float]) -> None:
    for name, f in medians.items():
        print(f"vLLM {VERSION} {name:12s} first {f['first_s']*1e3:6.1f}  mean {f['mean_s']*1e3:6.1f}  "
              f"last {f['last_s']*1e3:6.1f} ms  last/N {f['last_s']/f['n']*1e3:.2f} ms  "
              f"TTFT {f['ttft_mean_s']*1e3:6.1f} ms")
    print(f"one request at a time: c = {c*1e3:.2f} ms (least squares over {rows} arrivals of the "
          "160-request bursts)")
    handler, per_token, send = two_phase
    print(f"handlers, then sends: handler {handler*1e3:.2f} ms + {per_token*1e6:.2f} us x prompt "
          f"tokens, send {send*1e3:.2f} ms (first and last arrivals of the same bursts)")


def arg_parser(doc: str) -> argparse.ArgumentParser:
    """A V1 harness script's command line: its docstring's first paragraph and `--envs`."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--envs", default="/tmp/krakenlm-vllm-v1",
                    help=f"the directory setup.sh built (vllm-{VERSION}/)")
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = arg_parser(__doc__)
    ap.add_argument("--reps", type=int, default=5, help="fresh servers")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--from-json", help="summarise the servers of an earlier --json file again")
    args = ap.parse_args(argv)
    if args.from_json:
        try:
            servers = json.loads(Path(args.from_json).read_text())["servers"]
            report(table(servers), *fit(servers), fit_two_phase(servers))
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            v0.fail(f"{args.from_json}: not a file this script wrote ({e})")
        return
    if args.reps < 1:
        v0.fail(f"--reps {args.reps}: at least one server")
    env = environment(args.envs)
    work = Path(tempfile.mkdtemp(prefix="vllm-v1-frontend-"))
    sets = v0.burst_files(work)
    servers = []
    for rep in range(args.reps):
        servers.append(one_server(env, work, sets))
        print(f"server {rep + 1}/{args.reps} done", file=sys.stderr)
    c, rows = fit(servers)
    two_phase = fit_two_phase(servers)
    medians = table(servers)
    report(medians, c, rows, two_phase)
    if args.json:
        out = {"command": "python benchmarks/vllm_v1_frontend/handover.py" +
               (f" --reps {args.reps}" if args.reps != 5 else "") + f" --json {args.json}",
               "cpu": v0.cpu_name(), "vllm": VERSION, "fake_gpu": v0.STEP, "server_flags": FLAGS,
               "fit": {"one_at_a_time_s": c, "arrivals": rows},
               "fit_two_phase": dict(zip(("handler_s", "per_prompt_token_s", "send_s"), two_phase)),
               "medians": medians,
               "servers": servers}
        write_text_atomically(args.json, json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
