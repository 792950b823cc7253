"""Kraken vs standard vs parallel block: simulated TTFT in the Kraken paper's inference setting.

    python benchmarks/sim_kraken_ttft.py [--system a100-80gb-x8] [--batch 1]

GPT-3 shapes 1.3B, 6.7B, 13B, 65B, 175B; prompts 128 and 2048; TP 4 and 8 with Kraken degree =
TP (the parameter-matched kraken-*-{4,8}way presets); one generated token (TTFT only). Prints
every configuration and the geometric-mean TTFT reduction of Kraken over the standard block
(the paper reports 35.6 % on 8x A100 with TensorRT-LLM). Memory is not checked: the engines of
the paper are timed whether or not a real deployment would hold the KV cache of a batch.
"""

from __future__ import annotations

import argparse
import json
import math

from krakenlm.models import get_preset
from krakenlm.simulator import simulate

SIZES = ("gpt3-1.3b", "gpt3-6.7b", "gpt3-13b", "gpt-65b", "gpt3-175b")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", default="a100-80gb-x8")
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    rows, ratios = [], []
    for size in SIZES:
        for prompt in (128, 2048):
            for tp in (4, 8):
                gpt = get_preset(size)
                times = {}
                for arch, cfg in (("gpt", gpt), ("parallel", gpt.replace(arch="parallel")),
                                  ("kraken", get_preset(f"kraken-{size}-{tp}way"))):
                    r = simulate(cfg, args.system, tp, args.batch, prompt, 1, check_memory=False)
                    times[arch] = r.ttft_s
                    if arch == "kraken":
                        layer = r.layer_categories["prefill"]
                ratios.append(times["kraken"] / times["gpt"])
                rows.append({"model": size, "prompt": prompt, "tp": tp,
                             **{f"ttft_{k}_ms": v * 1e3 for k, v in times.items()},
                             "kraken_reduction_pct": 100 * (1 - times["kraken"] / times["gpt"]),
                             "kraken_layer_ms": {k: v * 1e3 for k, v in layer.items()}})
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(json.dumps({"system": args.system, "batch": args.batch, "rows": rows,
                      "geomean_ttft_reduction_pct": 100 * (1 - geomean)}, indent=2))


if __name__ == "__main__":
    main()
