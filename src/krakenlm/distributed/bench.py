"""`bench tp`: TTFT, TPOT and exposed communication of gpt / parallel / Kraken under sharding.

For every model size, the three architectures at matched parameter counts (the spec's presets)
run with random weights on `world_size` ranks. Every measurement is the median of `repeats`
runs after `warmup` runs, taken on rank 0. Exposed communication is measured as a difference:
the same run with every collective replaced by a local no-op (`NoOpComm`, the `--comm off`
run) costs the same compute without the traffic, so `ttft(comm on) - ttft(comm off)` is the
communication time that compute did not hide (including waiting for the slower rank).
Kraken also runs with its reductions made blocking (`ctx.new_comm(overlap=False)`), to show
how much of the communication its overlap hides. The collectives go through the run's
`--comm-backend` (shared memory or gloo on CPU), recorded in every row. Runs with and without communication, and of the three
architectures, are interleaved, and the exposed time is the median of back-to-back
differences, so slow drifts of the machine's speed hit every variant alike.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import KrakenError
from ..evaluation.generate import SamplingConfig
from ..models import get_preset, preset_names
from ..models.config import ModelConfig
from ..models.transformer import Shard, local_sizes
from .comm import NoOpComm
from .comm_backend import check_comm_backend
from .engine import build_local_model, median, timed_generate
from .launch import RankContext

ARCHS = ("gpt", "parallel", "kraken")
# Size name -> the GPT and parallel presets and the prefix of the parameter-matched Kraken ones.
SIZES = {
    "tiny": ("gpt-tiny", "parallel-tiny", "kraken-tiny-"),
    "125m": ("gpt2-124m", "parallel-124m", "kraken-125m-"),
    "350m": ("gpt2-350m", "parallel-350m", "kraken-350m-"),
    "760m": ("gpt2-774m", "parallel-774m", "kraken-760m-"),
}
COMM_MODES = {"both": ("on", "off"), "on": ("on",), "off": ("off",)}


def kraken_preset(size: str, world_size: int) -> str:
    """The Kraken preset of this size with the fewest sub-layers that `world_size` divides."""
    prefix = SIZES[size][2]
    degrees = sorted(int(name[len(prefix):-3]) for name in preset_names()
                     if name.startswith(prefix) and name.endswith("way"))
    fitting = [d for d in degrees if d % world_size == 0]
    if not fitting:
        raise KrakenError(f"no {size} Kraken preset has a degree divisible by world size "
                          f"{world_size} (degrees {degrees}); use a world size dividing one")
    return f"{prefix}{fitting[0]}way"


def preset_for(size: str, arch: str, world_size: int) -> str:
    if size not in SIZES:
        raise KrakenError(f"unknown size {size!r}; use one of {', '.join(SIZES)}")
    if arch == "kraken":
        return kraken_preset(size, world_size)
    return SIZES[size][ARCHS.index(arch)]


@dataclass(frozen=True)
class BenchPlan:
    world_size: int
    sizes: tuple[str, ...] = ("125m",)
    archs: tuple[str, ...] = ARCHS
    prompt_tokens: tuple[int, ...] = (128, 512, 1024)
    new_tokens: int = 9  # 1 from the prefill + 8 decoded: TPOT averages the 8
    warmup: int = 1
    repeats: int = 3
    comm: str = "both"
    seed: int = 0
    comm_backend: str = "auto"  # passed to `run_ranks`; see comm_backend.py

    def validate(self) -> None:
        check_comm_backend(self.comm_backend)
        for arch in self.archs:
            if arch not in ARCHS:
                raise KrakenError(f"unknown architecture {arch!r}; use some of {', '.join(ARCHS)}")
        if self.comm not in COMM_MODES:
            raise KrakenError(f"--comm must be one of {', '.join(COMM_MODES)}, got {self.comm!r}")
        if not self.prompt_tokens or min(self.prompt_tokens) < 1:
            raise KrakenError("prompt lengths must be positive token counts, e.g. 128,512,1024")
        if self.new_tokens < 2:
            raise KrakenError("--new-tokens must be >= 2: TPOT needs one decoded token after the "
                              "prefill's")
        if self.repeats < 1 or self.warmup < 0:
            raise KrakenError("--repeats must be >= 1 and --warmup >= 0")
        for _, _, name in self.preset_list():
            # Raises the clear TP divisibility error before any process starts.
            local_sizes(get_preset(name), Shard(0, self.world_size))

    def modes(self, arch: str) -> tuple[str, ...]:
        """Communicators to time: with `both`, Kraken also runs with its reductions made
        blocking, which shows how much communication its overlap hides."""
        if self.comm == "both" and arch == "kraken":
            return ("on", "off", "blocking")
        return COMM_MODES[self.comm]

    def preset_list(self) -> list[tuple[str, str, str]]:
        """(size, arch, preset name) in run order."""
        return [(size, arch, preset_for(size, arch, self.world_size))
                for size in self.sizes for arch in self.archs]


def bench_config(preset: ModelConfig, max_tokens: int) -> ModelConfig:
    """The preset, its position table grown if prompt + new tokens exceed its context.

    Weights are random, so a few more learned positions change no timing that matters; this
    lets a 1024-token prompt (the presets' whole context) still be followed by decode steps.
    """
    return preset if max_tokens <= preset.context_len else preset.replace(context_len=max_tokens)


def _log(ctx: RankContext, message: str) -> None:
    if ctx.is_main:
        print(message, file=sys.stderr, flush=True)


def bench_rank(ctx: RankContext, plan: BenchPlan) -> list[dict[str, Any]]:
    """Runs on every rank; returns the rows (every rank measures, rank 0's rows are reported).

    The machine's speed drifts (other tenants, frequency), so runs are interleaved as finely
    as possible: for each prompt length, every repeat runs every architecture with and without
    communication, and differences are taken within a repeat.
    """
    comms = {"on": ctx.new_comm(), "off": NoOpComm(), "blocking": ctx.new_comm(overlap=False)}
    sampling = SamplingConfig(max_new_tokens=plan.new_tokens, greedy=True)
    max_tokens = max(plan.prompt_tokens) + plan.new_tokens
    rows = []
    for size in plan.sizes:
        models = {}  # arch -> (preset name, config, model); random weights
        for arch in plan.archs:
            name = preset_for(size, arch, ctx.world_size)
            config = bench_config(get_preset(name), max_tokens)
            models[arch] = (name, config, build_local_model(ctx, config, comm=comms["on"]))
        for prompt_tokens in plan.prompt_tokens:
            runs = {arch: {m: [] for m in plan.modes(arch)} for arch in models}
            for i in range(plan.warmup + plan.repeats):
                for arch, (_, config, model) in models.items():
                    # The same prompt on every rank.
                    gen = torch.Generator().manual_seed(plan.seed + prompt_tokens)
                    prompt = torch.randint(0, config.vocab_size, (1, prompt_tokens), generator=gen)
                    for mode in runs[arch]:
                        model.comm = comms[mode]
                        result = timed_generate(model, prompt, sampling, ctx)
                        if i >= plan.warmup:
                            runs[arch][mode].append(result)
            for arch, (name, config, _) in models.items():
                row = _row(size, arch, name, config, ctx.world_size, prompt_tokens, plan.comm,
                           runs[arch])
                row["comm_backend"] = ctx.comm_backend
                rows.append(row)
                _log(ctx, f"[bench tp] {name} world {ctx.world_size} prompt {prompt_tokens}: "
                          f"TTFT {row['ttft_s']:.4f} s, TPOT {row['tpot_s']:.4f} s, exposed "
                          f"comm {_fmt(row['exposed_comm_s'])} s")
        del models
    return rows


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _paired_median(on: list, off: list, field: str) -> float | None:
    """Median over repeats of (with comm - without comm), each pair run back to back."""
    return median([getattr(a, field) - getattr(b, field) for a, b in zip(on, off)])


def _row(size, arch, name, config, world_size, prompt_tokens, comm, runs) -> dict[str, Any]:
    ttft = {m: median([r.ttft_s for r in rs]) for m, rs in runs.items()}
    tpot = {m: median([r.tpot_s for r in rs]) for m, rs in runs.items()}
    main = "on" if "on" in runs else "off"
    both = "on" in runs and "off" in runs
    return {
        "arch": arch, "preset": name, "world_size": world_size, "prompt_tokens": prompt_tokens,
        "ttft_s": ttft[main], "tpot_s": tpot[main],
        "exposed_comm_s": _paired_median(runs["on"], runs["off"], "ttft_s") if both else None,
        # Extras: the no-op baseline itself, the decode-side difference, and the time rank 0
        # spent inside collectives during prefill (waits included, overlapped time excluded).
        "size": size, "params": config.num_params(), "comm": comm,
        "ttft_comm_off_s": ttft.get("off"), "tpot_comm_off_s": tpot.get("off"),
        "tpot_exposed_comm_s": _paired_median(runs["on"], runs["off"], "tpot_s") if both else None,
        "prefill_comm_blocked_s": (median([r.prefill_comm_blocked_s for r in runs["on"]])
                                   if "on" in runs else None),
        # Shared memory only: the part of the above spent waiting for a peer (the rest is
        # copying and summing); None with gloo, whose waiting and work cannot be told apart.
        "prefill_comm_peer_wait_s": (median([r.prefill_comm_peer_wait_s for r in runs["on"]])
                                     if "on" in runs and runs["on"][0].prefill_comm_peer_wait_s
                                     is not None else None),
        # Kraken only: the same runs with every reduction blocking (no overlap).
        "exposed_comm_if_blocking_s": (_paired_median(runs["blocking"], runs["off"], "ttft_s")
                                       if "blocking" in runs else None),
        # Every timed run, in order, so the spread behind each median is on record.
        "ttft_runs_s": [r.ttft_s for r in runs[main]],
        "ttft_comm_off_runs_s": [r.ttft_s for r in runs["off"]] if both else None,
    }


def save_ttft_plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """TTFT against prompt length, one panel per model size, one line per architecture
    (dashed: the same run with communication off)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(dict.fromkeys(row["size"] for row in rows))
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 4), squeeze=False)
    colours = {"gpt": "tab:blue", "parallel": "tab:orange", "kraken": "tab:green"}
    for ax, size in zip(axes[0], sizes):
        for arch in ARCHS:
            mine = sorted((r for r in rows if r["size"] == size and r["arch"] == arch),
                          key=lambda r: r["prompt_tokens"])
            if not mine:
                continue
            x = [r["prompt_tokens"] for r in mine]
            ax.plot(x, [r["ttft_s"] for r in mine], "o-", color=colours[arch],
                    label=f"{arch} ({mine[0]['preset']})")
            if mine[0]["exposed_comm_s"] is not None:
                ax.plot(x, [r["ttft_comm_off_s"] for r in mine], "--", color=colours[arch],
                        alpha=0.6, label=f"{arch}, comm off")
        ax.set_title(f"{size}, world size {rows[0]['world_size']}, "
                     f"{rows[0].get('comm_backend', 'gloo')} all-reduce")
        ax.set_xlabel("prompt tokens")
        ax.set_ylabel("TTFT (s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
