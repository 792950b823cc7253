"""P:D search on the Azure 2023 conversation trace: the capacity under TTFT and TPOT SLOs of
every split of N instances into P prefill and N - P decode instances (disaggregated, the KV
transfer timed by the link model), next to N aggregated replicas, per device and per $/hour.

    python benchmarks/serve_pd_search.py [--traces DIR] [--requests 2000] [--instances 4]
        [--model llama2-70b] [--system h100-80gb-x8] [--tp 4] [--percentile 90]
        [--slo-ttft-s 1.0] [--slo-tpot-s 0.05] [--json OUT.json] [--plot OUT.png]

The first N requests of the trace with their real arrival times (requests beyond the model's
context dropped), vLLM V1 with the device's defaults, the jsq-tokens router on both sides;
each split's capacity is `capacity.find_capacity` (the trace's rate scaled, to 1 %).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from krakenlm.models import get_preset
from krakenlm.serving.cluster import PoolSpec
from krakenlm.serving.disagg import pd_search
from krakenlm.serving.traces import Trace, read_trace

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(ROOT.parent / "shared" / "data" / "traces"))
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--instances", type=int, default=4)
    parser.add_argument("--model", default="llama2-70b")
    parser.add_argument("--system", default="h100-80gb-x8")
    parser.add_argument("--tp", type=int, default=4)
    parser.add_argument("--percentile", type=int, default=90)
    parser.add_argument("--slo-ttft-s", type=float, default=1.0)
    parser.add_argument("--slo-tpot-s", type=float, default=0.05)
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None)
    args = parser.parse_args()
    config = get_preset(args.model)
    full = read_trace(str(Path(args.traces) / "azure2023_conv.csv"))
    keep = tuple(r for r in full.requests[:args.requests]
                 if r.prompt_tokens + r.output_tokens - 1 <= config.context_len)
    trace = Trace(f"{full.name} (first {args.requests})", keep, full.hash_block_tokens)
    started = time.perf_counter()
    result = pd_search(trace, config, PoolSpec(args.system, args.tp), args.instances,
                       percentile=args.percentile, slo_ttft_s=args.slo_ttft_s,
                       slo_tpot_s=args.slo_tpot_s, router="jsq-tokens",
                       model_name=args.model, progress=lambda name: print(f"split {name}",
                                                                         flush=True))
    out = {**result.to_json(), "trace": trace.name, "requests": len(keep),
           "model": args.model, "wall_s": time.perf_counter() - started}
    p = args.percentile
    print(f"| split | devices | capacity req/s | req/s per device | req/s per $/h | "
          f"TTFT p{p} ms | TPOT p{p} ms | KV transfer ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in result.rows:
        def ms(x):
            return "-" if x is None else f"{x * 1e3:.1f}"
        print(f"| {r['split']} | {r['devices']} | {r['capacity_per_s']:.3f} | "
              f"{r['per_device_per_s']:.4f} | {r['per_usd_hour']:.4f} | {ms(r['ttft_s'])} | "
              f"{ms(r['tpot_s'])} | {ms(r['kv_transfer_mean_s'])} |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    if args.plot:
        _plot(result.rows, args, Path(args.plot))


def _plot(rows, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["split"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, key, label in ((axes[0], "per_device_per_s", "requests/s per device"),
                           (axes[1], "per_usd_hour", "requests/s per $/hour")):
        ax.bar(names, [r[key] for r in rows],
               color=["#888" if n == "agg" else "#3a7" for n in names])
        ax.set_xlabel("P:D split (agg: aggregated replicas)")
        ax.set_ylabel(label)
    fig.suptitle(f"{args.model} TP{args.tp} on {args.system}, {args.instances} instances, "
                 f"Azure conv: p{args.percentile} TTFT <= {args.slo_ttft_s} s, TPOT <= "
                 f"{args.slo_tpot_s} s", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
