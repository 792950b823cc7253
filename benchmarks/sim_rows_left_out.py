"""How many rows of NVIDIA's attention tables the kernel models leave out, and why.

    python benchmarks/sim_rows_left_out.py [--system h100-80gb-x8 ...]

The attention forms describe FlashAttention-class kernels without sliding windows up to
head_dim 256 (`supported` of the context and generation forms, kernels/gpu/attention.py);
every other row is left out of both the fit and the score. This prints, per system, framework and table,
the rows measured and those left out by reason, so the operator errors in
docs/results-simulator.md can be read against what they cover. Needs the `calibrate` extra.
"""

from __future__ import annotations

import argparse

import numpy as np

from krakenlm.hardware import load_system
from krakenlm.simulator.kernels.base import Setting
from krakenlm.simulator.kernels.gpu import attention
from krakenlm.simulator.measurements import aiconfigurator as aic

SYSTEMS = ("a100-80gb-x8", "h100-80gb-x8", "h200-x8")
FRAMEWORKS = ("trtllm", "vllm", "sglang")


def reasons(framework: str, cols: dict, generation: bool) -> dict[str, np.ndarray]:
    """Boolean masks, one per reason, in the order the models apply them (first one wins)."""
    head_dim = np.asarray(cols["head_dim"])
    window = np.asarray(cols["window"])
    kernel = np.char.lower(np.asarray(cols["kernel"], dtype=str))
    out = {"sliding window": window != 0, "head_dim > 256": head_dim > 256}
    if generation:
        if framework == "trtllm":
            out["group > 32 (MMHA, not XQA)"] = cols["heads"] // cols["kv_heads"] > 32
    else:
        other = np.zeros(len(head_dim), bool)
        for word in attention.CONTEXT_OTHER_KERNELS:
            other |= np.char.find(kernel, word) >= 0
        if not other.all():
            out["another kernel (" + ", ".join(sorted(set(kernel[other]))) + ")"] = other
    if framework == "sglang":
        out["SGLang head_dim 192 (padded pass)"] = head_dim == 192
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", action="append", help=f"default: {', '.join(SYSTEMS)}")
    args = ap.parse_args()
    print("| system | framework | table | rows | left out | by reason |")
    print("|---|---|---|---:|---:|---|")
    for system in args.system or SYSTEMS:
        sysm = load_system(system)
        for fw in FRAMEWORKS:
            for name, reader, gen in (("context", aic.read_context_attention, False),
                                      ("generation", aic.read_generation_attention, True)):
                try:
                    t = reader(system, fw)
                except aic.CalibrationSourceError:
                    continue
                n = len(t.latency_s)
                left = np.zeros(n, bool)
                parts = []
                for why, mask in reasons(fw, t.columns, gen).items():
                    new = mask & ~left
                    if new.any():
                        parts.append(f"{why} {int(new.sum())}")
                    left |= mask
                # the reasons restate the models' filters; they must agree with them row by row
                form = attention.SMOOTH_DECODE if gen else attention.FLASH_CONTEXT
                supported = form.supported(Setting(sysm, fw, "bf16"), t.columns)
                if not np.array_equal(left, ~np.asarray(supported, bool)):
                    raise SystemExit(f"error: the reasons here disagree with attention.py's "
                                     f"filters for {system} {fw} {name}; update reasons()")
                print(f"| {system} | {fw} | {name} | {n} | {int(left.sum())} "
                      f"({100 * left.mean():.0f} %) | {'; '.join(parts) or '-'} |")


if __name__ == "__main__":
    main()
