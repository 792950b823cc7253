"""TPOT and TTFT with and without the vocabulary-parallel LM head, from `bench tp` runs.

The runs themselves are `krakenlm bench tp` with and without `--vocab-parallel-head`; run them
in both orders (off, on, on, off) so that a drift of the machine's speed shows as a
disagreement between the two pairs instead of as an effect:

    for out in off on on2 off2; do
        krakenlm bench tp --world-size 2 --sizes 125m --prompt-tokens 128,512,1024 --repeats 9 \\
            --out runs/bench-vocab-$out $([[ $out == on* ]] && echo --vocab-parallel-head)
    done
    python benchmarks/vocab_head.py runs/bench-vocab-{off,on,on2,off2}/rows.json \\
        --json docs/data/bench-tp-125m-world2-vocab-head.json --plot docs/img/bench-tp-125m-world2-vocab-head.png

Prints a markdown table: per architecture and prompt length, the medians of each run with the
head replicated and vocabulary-parallel, and the change of their means.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def load(paths: list[Path]) -> list[dict]:
    rows = []
    for order, path in enumerate(paths):
        for row in json.loads(path.read_text()):
            rows.append({**row, "run": order, "source": str(path)})
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    """One entry per (arch, prompt): every run's TTFT and TPOT, by head layout."""
    out = []
    keys = dict.fromkeys((r["arch"], r["preset"], r["prompt_tokens"]) for r in rows)
    for arch, preset, prompt in keys:
        mine = [r for r in rows if (r["arch"], r["preset"], r["prompt_tokens"]) == (arch, preset, prompt)]
        entry = {"arch": arch, "preset": preset, "prompt_tokens": prompt}
        for layout, flag in (("replicated", False), ("vocab_parallel", True)):
            runs = [r for r in mine if bool(r.get("vocab_parallel_head")) == flag]
            entry[f"tpot_{layout}_s"] = [r["tpot_s"] for r in runs]
            entry[f"ttft_{layout}_s"] = [r["ttft_s"] for r in runs]
        for metric in ("tpot", "ttft"):
            before = statistics.mean(entry[f"{metric}_replicated_s"])
            after = statistics.mean(entry[f"{metric}_vocab_parallel_s"])
            entry[f"{metric}_change"] = after / before - 1
        out.append(entry)
    return out


def table(summary: list[dict]) -> str:
    def ms(values):
        return " / ".join(f"{1000 * v:.1f}" for v in values)

    lines = ["| model | prompt | TPOT replicated ms | TPOT vocab-parallel ms | change | "
             "TTFT replicated ms | TTFT vocab-parallel ms | change |",
             "|---|---:|---|---|---:|---|---|---:|"]
    for e in summary:
        lines.append(
            f"| {e['preset']} | {e['prompt_tokens']} | {ms(e['tpot_replicated_s'])} | "
            f"{ms(e['tpot_vocab_parallel_s'])} | {100 * e['tpot_change']:+.0f} % | "
            f"{ms(e['ttft_replicated_s'])} | {ms(e['ttft_vocab_parallel_s'])} | "
            f"{100 * e['ttft_change']:+.0f} % |")
    return "\n".join(lines)


def plot(summary: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [f"{e['arch']}\n{e['prompt_tokens']}" for e in summary]
    x = range(len(summary))
    width = 0.38
    for offset, layout, colour in ((-width / 2, "replicated", "tab:gray"),
                                   (width / 2, "vocab_parallel", "tab:green")):
        means = [1000 * statistics.mean(e[f"tpot_{layout}_s"]) for e in summary]
        ax.bar([i + offset for i in x], means, width, color=colour,
               label=f"LM head {layout.replace('_', '-')}")
        for i, e in enumerate(summary):  # every run's median, so the spread is visible
            ax.plot([i + offset] * len(e[f"tpot_{layout}_s"]),
                    [1000 * v for v in e[f"tpot_{layout}_s"]], "k.", markersize=4)
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set_ylabel("TPOT (ms), 2 processes")
    ax.set_title("Decode time per token, 125M models, TP 2, shared-memory all-reduce")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="+", type=Path, help="rows.json files of bench tp runs")
    parser.add_argument("--json", type=Path, help="write the runs and the summary here")
    parser.add_argument("--plot", type=Path, help="write a TPOT bar chart here (PNG)")
    args = parser.parse_args()
    rows = load(args.rows)
    layouts = {bool(r.get("vocab_parallel_head")) for r in rows}
    if layouts != {False, True}:
        parser.error("give runs both with and without --vocab-parallel-head")
    summary = summarise(rows)
    print(table(summary))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"summary": summary, "rows": rows}, indent=2) + "\n")
    if args.plot:
        plot(summary, args.plot)


if __name__ == "__main__":
    main()
