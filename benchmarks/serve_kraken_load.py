"""Kraken under load: TTFT p50 / p99 of the standard block (gpt) and its parameter-matched
Kraken against the request rate, one replica on the simulated H100.

    python benchmarks/serve_kraken_load.py [--traces DIR] [--requests 2000]
        [--rates 2,4,8,12,16] [--seed 0] [--json OUT.json] [--plot OUT.png]

Llama-2-70B and `arch_variant(llama2-70b, "kraken", 4)` (degree 4 = TP 4, the Kraken paper's
engine rule), TP 4 on h100-80gb-x8, vLLM V1 with its H100 defaults; per rate N requests with
lengths resampled from the Azure 2023 conversation trace (those beyond the 4,096-token context
dropped), Poisson arrivals from one seeded RNG, the same requests for both architectures.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from krakenlm.models import get_preset
from krakenlm.serving.replay import serve
from krakenlm.serving.traces import synthetic_trace
from krakenlm.simulator import arch_variant

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(ROOT.parent / "shared" / "data" / "traces"))
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rates", default="2,4,8,12,16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None)
    args = parser.parse_args()
    conv = Path(args.traces) / "azure2023_conv.csv"
    base = get_preset("llama2-70b")
    models = {"gpt": base, "kraken": arch_variant(base, "kraken", 4)}
    rows = []
    for rate in (float(r) for r in args.rates.split(",")):
        trace = synthetic_trace(np.random.default_rng(args.seed), args.requests, rate,
                                f"trace:{conv}")
        for arch, config in models.items():
            r = serve(trace, config, "h100-80gb-x8", software="vllm", tp=4,
                      model_name=f"llama2-70b {arch}", skip_long=True)
            s = r.summary
            row = {"rate_per_s": rate, "arch": arch, "requests": s["requests"],
                   "ttft_p50_s": s["ttft_s"]["p50"], "ttft_p99_s": s["ttft_s"]["p99"],
                   "tpot_p50_s": s["tpot_s"]["p50"], "tpot_p99_s": s["tpot_s"]["p99"],
                   "throughput_requests_per_s": s["throughput"]["requests_per_s"],
                   "preemptions": s["kv_cache"]["preemptions"],
                   "kv_blocks": r.setup["kv_cache"]["blocks"], "overloaded": s["overloaded"]}
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.json:
        from krakenlm.fileio import write_text_atomically
        write_text_atomically(args.json, json.dumps(rows, indent=2) + "\n")
    if args.plot:
        plot(rows, args.plot, args.requests)


def plot(rows: list[dict], path: str, n: int) -> None:
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from krakenlm.fileio import write_bytes_atomically

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, arch in enumerate(("gpt", "kraken")):
        mine = [r for r in rows if r["arch"] == arch]
        rates = [r["rate_per_s"] for r in mine]
        ax.plot(rates, [r["ttft_p50_s"] for r in mine], "o-", color=f"C{i}", label=f"{arch} p50")
        ax.plot(rates, [r["ttft_p99_s"] for r in mine], "s--", color=f"C{i}", label=f"{arch} p99")
        for r in mine:
            if r["overloaded"]:
                ax.annotate("overloaded", (r["rate_per_s"], r["ttft_p99_s"]), fontsize=7)
    ax.set_yscale("log")
    ax.set_xlabel("request rate (requests/s, Poisson)")
    ax.set_ylabel("TTFT (s)")
    ax.set_title(f"Llama-2-70B vs its Kraken (degree 4), TP 4 on H100, vLLM V1\n"
                 f"{n} requests per rate, Azure conversation lengths")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    write_bytes_atomically(path, buffer.getvalue())


if __name__ == "__main__":
    main()
