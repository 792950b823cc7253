"""How Splitwise's measured batch-1 TTFT grows with the prompt, per tensor-parallel degree.

    python benchmarks/sim_splitwise_prompt_growth.py

For each (model, system, TP) of the `splitwise` source, prints the measured TTFT at each prompt
length, the ratio from one length to the next, and a least-squares fit
TTFT = a + b L + c L^2 (ms, L in tokens). Attention's work per GPU halves when TP doubles, so a
quadratic term from attention should shrink with TP. The measurements only, nothing simulated:
docs/results-simulator.md, "What makes TP 8 and batch 2-8 negative", reads them.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from krakenlm.simulator.measurements.models import load_rows


def main() -> None:
    ttft: dict[tuple, dict[int, float]] = defaultdict(dict)
    for r in load_rows():
        if r.source == "splitwise" and r.metric == "ttft" and r.batch == 1:
            ttft[r.model, r.system, r.tp][r.prompt] = r.measured_s * 1e3
    for (model, system, tp), by_prompt in sorted(ttft.items()):
        prompts = sorted(by_prompt)
        ms = np.array([by_prompt[p] for p in prompts])
        length = np.array(prompts, float)
        a, b, c = np.linalg.lstsq(np.vstack([np.ones_like(length), length, length**2]).T, ms,
                                  rcond=None)[0]
        ratios = " ".join(f"{x:.2f}" for x in ms[1:] / ms[:-1])
        print(f"{model} {system} TP {tp}: a {a:.1f} ms, b {b:.4f} ms/token, "
              f"c {c:.3g} ms/token^2")
        print("  prompt  " + " ".join(f"{p:>6}" for p in prompts))
        print("  TTFT ms " + " ".join(f"{x:6.0f}" for x in ms))
        print(f"  ratio to the previous length: {ratios}")


if __name__ == "__main__":
    main()
