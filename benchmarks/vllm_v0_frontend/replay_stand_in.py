"""The replay against vLLM 0.5.4's own server on the same stand-in GPU: which hand-over form
reproduces the client's TTFT.

    python benchmarks/vllm_v0_frontend/replay_stand_in.py [--json FILE]

run.py and delivery.py drive vLLM 0.5.4's own OpenAI server over a stand-in executor whose
steps wait a fixed modelled GPU time (run.STEP: a prefill 5 ms + 15 us a prompt token, a decode
7 ms + 20 us a sequence). This replays the same bursts (run.bursts(); requests the server
refused left out) through the replay's vLLM V0 scheduler with a step timer that charges the
same GPU times plus the host gaps the server's engine left between its steps (delivery.py's
`host_gaps` of docs/data/vllm-v0-delivery.json: the gap after a step against its sequences, a
least-squares line for prefill and one for decode steps), client-side, twice:

* the spread form the replay takes for 0.5.4 (`engine_version="0.5.4"`, frontend.front_loop_*);
* the clump form it takes without a version (frontend.engine_loop_*, fitted on both versions).

and prints each burst's mean TTFT beside the client's on the real server (median over the
servers of docs/data/vllm-v0-frontend.json). Only the front end's form differs between the two
replays; the host gaps are read from 0.5.4's own engine, not fitted on the TTFTs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run  # noqa: E402  (the bursts and the stand-in GPU's times)
from delivery import DECODE_SEQ_S  # noqa: E402
from krakenlm.fileio import write_text_atomically  # noqa: E402
from krakenlm.models import get_preset  # noqa: E402
from krakenlm.serving import replay  # noqa: E402
from krakenlm.serving.traces import Request, Trace  # noqa: E402
from krakenlm.serving.vllm_v1 import V1Options  # noqa: E402

ROOT = HERE.parent.parent
FRONTEND = ROOT / "docs/data/vllm-v0-frontend.json"
DELIVERY = ROOT / "docs/data/vllm-v0-delivery.json"
MAX_MODEL_LEN = 2048  # run.FLAGS: V0's token budget max(max_model_len, 2048)


class StandInTimer:
    """The replay's step-time oracle as the stand-in GPU times a step, plus the host gap."""

    multi_step_broadcast_s = 0.0  # one device: no broadcast between a round's steps

    def __init__(self, gaps: dict[str, list[float]]):
        self.gaps = gaps
        self.profile = SimpleNamespace(host=SimpleNamespace(decode_step_s=gaps["decode"][0]))

    def prefill_attention_s(self, chunk: int, context: int) -> float:
        return 0.0

    def decode_attention_s(self, sequences: int, mean_kv: float) -> float:
        return 0.0

    def step_s(self, tokens: int, sequences: int, logits: int, attention_s: float,
               prefill: bool, attention_bound: str | None = None, host: bool = True) -> float:
        step = run.STEP
        if prefill:  # V0 without chunked prefill: every sequence of the step is a prompt
            gpu = step["prefill_s"] + step["prefill_token_s"] * tokens
            fixed, per, _ = self.gaps["prefill"]
        else:
            gpu = step["decode_s"] + DECODE_SEQ_S * sequences
            fixed, per, _ = self.gaps["decode"]
        return gpu + (fixed + per * sequences if host else 0.0)

    def decode_steps_list(self, sequences: int, mean_kv: float, steps: int) -> list[float]:
        return [self.step_s(sequences, sequences, sequences, 0.0, False)] * steps


def replay_burst(prompts: list[int], outputs: list[int], timer: StandInTimer,
                 version: str | None) -> float:
    """The mean client TTFT of one burst sent at once, with the replay's form for `version`."""
    kept = [(p, o) for p, o in zip(prompts, outputs) if o > 0 and p + o <= MAX_MODEL_LEN]
    trace = Trace("burst", tuple(Request(i, 0.0, p, o) for i, (p, o) in enumerate(kept)))
    original = replay._step_timer
    replay._step_timer = lambda *args, **kwargs: timer
    try:
        report = replay.serve(trace, get_preset("llama3-8b"), "h100-80gb-x8", software="vllm-v0",
                              tp=1, model_name="stand-in", client_side=True,
                              options=V1Options(max(MAX_MODEL_LEN, 2048), 256),
                              scheduler="vllm-v0", engine_version=version)
    finally:
        replay._step_timer = original
    return float(np.mean([r["ttft_s"] for r in report.rows]))


def compare() -> dict:
    measured = json.loads(FRONTEND.read_text())["medians"]
    gaps = json.loads(DELIVERY.read_text())["host_gaps"]
    timer = StandInTimer(gaps)
    rows = {}
    for name, (prompts, outputs) in run.bursts().items():
        rows[name] = {"client_054_s": measured["0.5.4"][name]["ttft_mean_s"],
                      "spread_s": replay_burst(prompts, outputs, timer, "0.5.4"),
                      "clump_s": replay_burst(prompts, outputs, timer, None)}
    errors = {form: [abs(r[f"{form}_s"] / r["client_054_s"] - 1) for r in rows.values()]
              for form in ("spread", "clump")}
    return {"host_gaps": gaps, "bursts": rows,
            "median_abs_error": {k: statistics.median(v) for k, v in errors.items()},
            "mean_abs_error": {k: statistics.fmean(v) for k, v in errors.items()}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    out = compare()
    print(f"{'burst':12s} {'0.5.4 client':>12s} {'spread':>8s} {'err':>7s} {'clump':>8s} {'err':>7s}")
    for name, r in out["bursts"].items():
        c = r["client_054_s"]
        print(f"{name:12s} {c*1e3:12.1f} {r['spread_s']*1e3:8.1f} {100*(r['spread_s']/c-1):+6.1f}% "
              f"{r['clump_s']*1e3:8.1f} {100*(r['clump_s']/c-1):+6.1f}%")
    for stat in ("median", "mean"):
        print(f"{stat} |error|: " + ", ".join(f"{k} {100*v:.1f} %"
                                              for k, v in out[f"{stat}_abs_error"].items()))
    if args.json:
        out["command"] = f"python benchmarks/vllm_v0_frontend/replay_stand_in.py --json {args.json}"
        write_text_atomically(args.json, json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
