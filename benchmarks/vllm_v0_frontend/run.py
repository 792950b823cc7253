"""How long vLLM V0's OpenAI API server takes to hand a burst's requests to its engine: the
source of the `vllm-v0` profile's `frontend.engine_loop_request_s`.

    bash benchmarks/vllm_v0_frontend/setup.sh           # once: vLLM 0.5.4 and 0.6.0 (PyPI)
    python benchmarks/vllm_v0_frontend/run.py [--reps 5] [--json docs/data/vllm-v0-frontend.json]

For each of vLLM 0.5.4 and 0.6.0 (the versions of LambdaLabs' runs, `lambda` and `lambda_v060`)
this starts the release's own OpenAI server (`serve_fake.py`: api_server.run_server, the
front-end process and the engine's RPC process as `vllm.entrypoints.openai.api_server` starts
them, with LambdaLabs' flags) over `fake_executor.FakeExecutor`, which stands in for the GPU
(each step waits a modelled GPU time) and logs when each request reaches the engine's
`RequestTracker`. The client (`burst.py`) sends, like vLLM's `benchmark_serving.py`, one test
request and then bursts of N streaming completions at once, one aiohttp session each. The front
end runs on core 1, the client and the engine process on core 0.

The bursts: the prompt and output lengths of LambdaLabs' Llama-3-8B runs on H100 with 10, 20 and
160 ShareGPT prompts (`lambda-v060-h100-tp1-llama3-8b-inf-n*`), the text cut from Shakespeare's
plays to those lengths in GPT-2's BPE; and 160 prompts of 50 and of 1,000 tokens (8 output
tokens each). A request whose output length is 0 in the file (the server refused it) is sent
with 4,096 output tokens, which the server refuses too.

What it reports per version and burst (median over `--reps` fresh servers): the first, mean and
last time a request reached the engine after the burst was sent, and the client's mean TTFT.
The per-request time the replay's one-process model needs (vllm_v0.py: every request is handed
over at N x c) is c = mean arrival / N; fitted as c = fixed + per-token x prompt tokens by least
squares over the 160-prompt bursts of both versions. The figures are this machine's CPU's
(printed with them); a server's own host may be faster or slower.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE.parent))

from krakenlm.data.sources import shakespeare_documents  # noqa: E402
from krakenlm.data.tokenizer import gpt2_data_dir, gpt2_encoding  # noqa: E402
from krakenlm.fileio import write_text_atomically  # noqa: E402
from krakenlm.serving.validation import load_runs  # noqa: E402
from tokenizer_speed import cpu_name  # noqa: E402  (benchmarks/tokenizer_speed.py)

VERSIONS = ("0.5.4", "0.6.0")
PORT = 8311
# the server flags of LambdaLabsML/vllm-benchmark's benchmark.py (max_model_len of the H100 files)
FLAGS = ["--max-model-len", "2048", "--gpu-memory-utilization", "0.95"]
# the fake GPU: about an H100 running Llama-3-8B at TP 1 (prefill 5 ms + 15 us a token, decode 7 ms)
STEP = {"prefill_s": 0.005, "prefill_token_s": 1.5e-5, "decode_s": 0.007}
LAMBDA = "lambda-v060-h100-tp1-llama3-8b-inf-n{}"


def fail(message: str) -> None:
    """One `error:` line on stderr, exit status 2 (bad input or a missing environment)."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def bursts() -> dict[str, tuple[list[int], list[int]]]:
    """(prompt lengths, output lengths) of each burst."""
    _, runs = load_runs()
    by_id = {r.id: r for r in runs}
    out = {}
    for n in (10, 20, 160):
        r = by_id[LAMBDA.format(n)]
        out[f"sharegpt{n}"] = (list(r.prompt_tokens), list(r.output_tokens))
    out["len50x160"] = ([50] * 160, [8] * 160)
    out["len1000x160"] = ([1000] * 160, [8] * 160)
    return out


def prompt_texts(lengths: list[int]) -> list[str]:
    """Consecutive pieces of the plays, `lengths` GPT-2 tokens each."""
    enc = gpt2_encoding()
    ids = enc.encode_ordinary("\n".join(text for _, text in shakespeare_documents()))
    texts, pos = [], 0
    for n in lengths:
        n = max(1, n)
        if pos + n > len(ids):
            pos = 0
        texts.append(enc.decode(ids[pos:pos + n]))
        pos += n
    return texts


def read_earlier(path: str, key: str) -> tuple[dict, object]:
    """An earlier --json file of a script here and its `key` (the servers' raw figures); a file
    that is not one is one error line."""
    try:
        earlier = json.loads(Path(path).read_text())
        return earlier, earlier[key]
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"{path}: not a file this script wrote ({e})")


def environment(envs: str, version: str) -> Path:
    """setup.sh's virtual environment of vLLM `version` under `envs`; one error line if absent."""
    env = Path(envs) / f"vllm-{version}"
    if not (env / "bin/python").exists():
        fail(f"no vLLM {version} environment at {env}; run "
             f"`bash benchmarks/vllm_v0_frontend/setup.sh {envs}` first")
    return env


def burst_files(work: Path) -> dict[str, Path]:
    """Each burst of `bursts()` as the client's prompts file in `work` (a request the server
    refuses, output 0 in the source file, is sent with 4,096 output tokens)."""
    sets = {}
    for name, (prompts, outputs) in bursts().items():
        path = work / f"{name}.json"
        path.write_text(json.dumps({"prompts": prompt_texts(prompts),
                                    "max_tokens": [o if o > 0 else 4096 for o in outputs]}))
        sets[name] = path
    return sets


def serve(env: Path, work: Path, log: Path, flags: list[str] = FLAGS,
          step: dict = STEP, harness: Path = HERE, port: int = PORT) -> subprocess.Popen:
    """The environment's vLLM server over the stand-in GPU (`step`; `harness`: the directory of
    its serve_fake.py and fake_executor.py), front end on core 1, started with `flags`; returns
    once it answers /health."""
    environ = dict(os.environ, FAKE_LOG=str(log), FAKE_STEP=json.dumps(step), FAKE_ENGINE_CPUS="0",
                   KRAKEN_GPT2_DIR=str(gpt2_data_dir()), PYTHONPATH=str(harness))
    cmd = ["taskset", "-c", "1", str(env / "bin/python"), str(harness / "serve_fake.py"),
           str(work / "model"), "--port", str(port)] + flags
    proc = subprocess.Popen(cmd, env=environ, stdout=open(work / "server.log", "a"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    for _ in range(360):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return proc
        except OSError:
            if proc.poll() is not None:
                fail(f"the vLLM server in {env} exited; see {work}/server.log")
            time.sleep(0.5)
    fail(f"the vLLM server in {env} did not start; see {work}/server.log")


def client(env: Path, work: Path, prompts: Path, result: Path, port: int = PORT,
           core: str = "0") -> None:
    """burst.py on `core` (0: beside the engine) against the running server; a failed request
    is one error line."""
    done = subprocess.run(["taskset", "-c", core, str(env / "bin/python"), str(HERE / "burst.py"),
                           str(port), str(work / "model"), str(prompts), str(result)],
                          stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        fail(f"the client's burst {prompts.name} failed ({last}); see {work}/server.log")


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def arrivals(log: Path, start: float, end: float) -> np.ndarray:
    times = [json.loads(line)["t"] for line in log.read_text().splitlines()]
    return np.sort([t - start for t in times if start <= t < end])


def burst_runs(env: Path, work: Path, sets: dict, log: Path, serve=serve, client=client):
    """Start a fresh server (`serve(env, work, log)`), send it every burst of `sets` with
    `client`, and yield (name, the client's result, the burst's send time, its end); the
    server stops when the bursts are done or the caller leaves."""
    log.write_text("")
    proc = serve(env, work, log)
    try:
        for name, path in sets.items():
            result = work / f"{name}.result.json"
            client(env, work, path, result)
            end = time.time()
            r = json.loads(result.read_text())
            yield name, r, r["t0"], end
            time.sleep(2)
    finally:
        stop(proc)


def streamed_ttfts(result: dict) -> list[float]:
    """The client's TTFTs of the streams of two chunks or more (a refused request has none)."""
    return [x["ttft"] for x in result["requests"] if x.get("ttft") and x.get("chunks", 0) > 1]


def one_server(env: Path, work: Path, sets: dict) -> dict[str, dict[str, float]]:
    log = work / "arrivals.jsonl"
    out = {}
    for name, r, t0, end in burst_runs(env, work, sets, log):
        a = arrivals(log, t0, end)
        out[name] = {"n": len(r["requests"]), "first_s": float(a[0]), "mean_s": float(a.mean()),
                     "last_s": float(a[-1]), "ttft_mean_s": float(np.mean(streamed_ttfts(r)))}
    return out


def summarise(raw: dict, lengths: dict[str, float], fit_n: int = 160):
    """Per version and burst, the medians over the servers of `raw`'s figures with c = mean
    arrival / N; and the least-squares fit c = fixed + per_token x mean prompt tokens over every
    server's bursts of `fit_n` requests (both versions): (table, (fixed, per_token), rows)."""
    table, rows = {}, []
    for v, bursts_of in raw.items():
        table[v] = {}
        for name, figs in bursts_of.items():
            med = {k: statistics.median(f[k] for f in figs) for k in figs[0] if k != "n"}
            n = figs[0]["n"]
            table[v][name] = {**med, "n": n, "c_s": med["mean_s"] / n,
                              "mean_prompt_tokens": lengths[name]}
            if n == fit_n:
                rows += [(lengths[name], f["mean_s"] / n) for f in figs]
    x = np.array([[1.0, length] for length, _ in rows])
    y = np.array([c for _, c in rows])
    (fixed, per_token), *_ = np.linalg.lstsq(x, y, rcond=None)
    return table, (float(fixed), float(per_token)), len(rows)


def fit_front_loop(raw: dict, lengths: dict[str, float], version: str = "0.5.4",
                   n: int = 160) -> tuple[float, float, float]:
    """vLLM 0.5.4's two jobs per request on its front end's loop (serving/frontend.py
    `front_loop_arrivals`): (request_s, per_token_s, send_s) by least squares over every
    server's `n`-request bursts, whose first request reaches the engine after every handler
    and one send, N c1 + c2, and whose last after all of both, N (c1 + c2), with
    c1 = request_s + per_token_s x the burst's mean prompt tokens."""
    rows, values = [], []
    for name, figs in raw[version].items():
        for fig in figs:
            if fig["n"] != n:
                continue
            tokens = lengths[name]
            rows += [[n, n * tokens, 1.0], [n, n * tokens, n]]
            values += [fig["first_s"], fig["last_s"]]
    (request_s, per_token_s, send_s), *_ = np.linalg.lstsq(np.array(rows), np.array(values),
                                                           rcond=None)
    return float(request_s), float(per_token_s), float(send_s)


def bootstrap(raw: dict, lengths: dict[str, float], tokens: float, draws: int = 2000,
              seed: int = 0) -> tuple[float, float]:
    """A 95 % interval of the fitted c at `tokens` prompt tokens over the servers: each draw
    resamples every version's servers (each with all its bursts) with replacement and refits."""
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(draws):
        drawn = {}
        for v, bursts_of in raw.items():
            servers = len(next(iter(bursts_of.values())))
            pick = rng.integers(0, servers, servers)
            drawn[v] = {name: [figs[i] for i in pick] for name, figs in bursts_of.items()}
        _, (fixed, per_token), _ = summarise(drawn, lengths)
        values.append(fixed + per_token * tokens)
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def report(table: dict, fit: tuple[float, float], interval: tuple[float, float],
           tokens: float, front_loop: tuple[float, float, float]) -> None:
    for v, bursts_of in table.items():
        for name, f in bursts_of.items():
            print(f"vLLM {v} {name:12s} first {f['first_s']*1e3:6.1f}  mean {f['mean_s']*1e3:6.1f}  "
                  f"last {f['last_s']*1e3:6.1f} ms  c {f['c_s']*1e3:.2f} ms  TTFT {f['ttft_mean_s']*1e3:6.1f} ms")
    fixed, per_token = fit
    print(f"fit over the 160-prompt bursts: c = {fixed*1e3:.2f} ms + {per_token*1e6:.2f} us x prompt "
          f"tokens; at {tokens:.0f} tokens {(fixed + per_token * tokens)*1e3:.2f} ms, 95 % interval "
          f"over the servers {interval[0]*1e3:.2f}-{interval[1]*1e3:.2f} ms")
    request_s, per_token_s, send_s = front_loop
    print(f"vLLM 0.5.4's two jobs a request (first and last arrivals of its 160-prompt bursts): "
          f"handler {request_s*1e3:.2f} ms + {per_token_s*1e6:.2f} us x prompt tokens, "
          f"send {send_s*1e3:.2f} ms")


def figures(table: dict, fit: tuple[float, float], n_fit: int,
            front_loop: tuple[float, float, float]) -> dict:
    """The summary keys of the JSON this script writes."""
    return {"fit": {"request_s": fit[0], "per_prompt_token_s": fit[1], "rows": n_fit},
            "fit_front_loop_054": dict(zip(("request_s", "per_prompt_token_s", "send_s"),
                                           front_loop)),
            "medians": table}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", default="/tmp/krakenlm-vllm-v0",
                    help="the directory setup.sh built (vllm-0.5.4/, vllm-0.6.0/)")
    ap.add_argument("--reps", type=int, default=5, help="fresh servers per version")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--from-json", help="summarise the servers of an earlier --json file again "
                    "(no servers are started; with --json, write the file with the new summary)")
    args = ap.parse_args(argv)
    lengths = {name: float(np.mean(p)) for name, (p, _) in bursts().items()}
    sharegpt = lengths["sharegpt160"]
    if args.from_json:
        earlier, raw = read_earlier(args.from_json, "reps")
        table, fit, n_fit = summarise(raw, lengths)
        front_loop = fit_front_loop(raw, lengths)
        report(table, fit, bootstrap(raw, lengths, sharegpt), sharegpt, front_loop)
        if args.json:  # the same servers' figures, summarised by this version of the script
            earlier.update(summarised_by="python benchmarks/vllm_v0_frontend/run.py "
                           f"--from-json {args.from_json} --json {args.json}",
                           **figures(table, fit, n_fit, front_loop))
            write_text_atomically(args.json, json.dumps(earlier, indent=1) + "\n")
        return
    if args.reps < 1:
        fail(f"--reps {args.reps}: at least one server per version")
    envs = {v: environment(args.envs, v) for v in VERSIONS}
    work = Path(tempfile.mkdtemp(prefix="vllm-v0-frontend-"))
    sets = burst_files(work)
    raw: dict[str, dict[str, list]] = {v: {name: [] for name in sets} for v in VERSIONS}
    for rep in range(args.reps):
        for v in VERSIONS:
            for name, fig in one_server(envs[v], work, sets).items():
                raw[v][name].append(fig)
            print(f"rep {rep + 1}/{args.reps} vLLM {v} done", file=sys.stderr)
    table, (fixed, per_token), n_fit = summarise(raw, lengths)
    interval = bootstrap(raw, lengths, sharegpt)
    front_loop = fit_front_loop(raw, lengths)
    out = {"command": "python benchmarks/vllm_v0_frontend/run.py" +
           (f" --reps {args.reps}" if args.reps != 5 else "") +
           (f" --json {args.json}" if args.json else ""),
           "cpu": cpu_name(), "fake_gpu": STEP, "server_flags": FLAGS,
           **figures(table, (fixed, per_token), n_fit, front_loop), "reps": raw}
    report(table, (fixed, per_token), interval, sharegpt, front_loop)
    if args.json:
        write_text_atomically(args.json, json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
