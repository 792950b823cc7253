"""The operator-level table of docs/results-simulator.md, from `sim validate --json` output.

    krakenlm sim validate --level all --out runs/validation --json > docs/data/sim-validation.json
    python benchmarks/sim_operator_table.py docs/data/sim-validation.json

Prints one markdown row per (family, dtype): the held-out MAPE of each device, TensorRT-LLM /
vLLM / SGLang separated by " / " ("-" where a framework has no such table). Cells of the goal
set (GEMM, attention and all-reduce on A100, H100, H200) at or below 8 % are bold.
"""

from __future__ import annotations

import argparse
import json

DEVICES = ("A100", "H100", "H200", "B200", "GB200", "L40S")
FRAMEWORKS = ("trtllm", "vllm", "sglang")
GOAL_DEVICES = {"A100", "H100", "H200"}
GOAL_PCT = 8.0
ROWS = (  # (label, family, variant)
    ("GEMM", "gemm", "bf16"), ("GEMM", "gemm", "fp8"),
    ("context attention", "context_attention", "bf16"),
    ("context attention", "context_attention", "fp8"),
    ("generation attention", "generation_attention", "bf16"),
    ("generation attention (FP8 KV)", "generation_attention", "fp8"),
    ("custom all-reduce", "custom_all_reduce", "any"),
)
GOAL_FAMILIES = {"gemm", "context_attention", "generation_attention", "custom_all_reduce",
                 "nccl"}


def cell(groups: dict, device: str, family: str, variant: str, frameworks=FRAMEWORKS) -> str:
    values = []
    for fw in frameworks:
        g = groups.get((device, fw, family, variant))
        if g is None:
            values.append("-")
            continue
        v = g["mape_held_out_pct"]
        text = f"{v:.1f}"
        if device in GOAL_DEVICES and family in GOAL_FAMILIES and v <= GOAL_PCT:
            text = f"**{text}**"
        values.append(text)
    return " / ".join(values) if any(v != "-" for v in values) else "-"


def table(operators: list[dict]) -> str:
    groups = {(g["device"], g["framework"], g["family"], g["variant"]): g for g in operators}
    lines = ["| family | dtype | " + " | ".join(DEVICES) + " |",
             "|---|---|" + "---|" * len(DEVICES)]
    for label, family, variant in ROWS:
        cells = [cell(groups, d, family, variant) for d in DEVICES]
        if all(c == "-" for c in cells):
            continue
        lines.append(f"| {label} | {variant} | " + " | ".join(cells) + " |")
    cells = [cell(groups, d, "nccl", "any", ("nccl",)) for d in DEVICES]
    lines.append("| NCCL all-reduce, all-gather, reduce-scatter | bf16 | " + " | ".join(cells)
                 + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("validation_json", help="output of `krakenlm sim validate --level all --json`")
    args = ap.parse_args()
    with open(args.validation_json) as fh:
        data = json.load(fh)
    operators = data["operators"]
    operators = operators["groups"] if isinstance(operators, dict) else operators
    print(table(operators))
    missed = sorted((g["mape_held_out_pct"], g["device"], g["framework"], g["family"],
                     g["variant"]) for g in operators
                    if g["device"] in GOAL_DEVICES and g["family"] in GOAL_FAMILIES
                    and g["mape_held_out_pct"] > GOAL_PCT)
    print(f"\ngoal cells above {GOAL_PCT:g} % held-out: {len(missed)}")
    for v, d, fw, fam, var in missed[::-1]:
        print(f"  {d} {fw} {fam} {var}: {v:.2f} %")


if __name__ == "__main__":
    main()
