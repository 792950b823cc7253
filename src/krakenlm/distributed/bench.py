"""`bench tp`: TTFT, TPOT and exposed communication of gpt / parallel / Kraken under sharding.

For every model size, the three architectures at matched parameter counts (the spec's presets)
run with random weights on `world_size` ranks. Every measurement is the median of `repeats`
runs after `warmup` runs, taken on rank 0. Exposed communication is measured as a difference:
the same run with every collective replaced by a local no-op (`NoOpComm`, the `--comm off`
run) costs the same compute without the traffic, so `ttft(comm on) - ttft(comm off)` is the
communication time that compute did not hide (including waiting for the slower rank).
Kraken also runs with its reductions made blocking (`ctx.new_comm(overlap=False)`), to show
how much of the communication its overlap hides. The collectives go through the run's
`--comm-backend` (shared memory or gloo on CPU), recorded in every row; with several backends
(`shm,gloo`) every repeat runs every backend too, so they are compared under the same drifts,
against the same no-op runs. Runs with and without communication, and of the three
architectures, are interleaved, and the exposed time is the median of back-to-back
differences, so slow drifts of the machine's speed hit every variant alike. Time cannot be
negative: when noise makes the runs with communication the faster ones, the exposed time is
reported as 0 (below what this machine can resolve) and the measured median is kept beside it
(`exposed_comm_raw_s`).
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


DEFAULT_PROMPT_TOKENS = (128, 512, 1024)


def default_prompt_tokens(sizes: Sequence[str]) -> tuple[int, ...]:
    """128, 512 and 1024 tokens, those that fit the smallest context of the sizes benched (the
    tiny presets' 256 leave 128), or that context alone."""
    context = min(get_preset(SIZES[size][0]).context_len for size in sizes if size in SIZES) \
        if any(size in SIZES for size in sizes) else max(DEFAULT_PROMPT_TOKENS)
    return tuple(p for p in DEFAULT_PROMPT_TOKENS if p <= context) or (context,)


@dataclass(frozen=True)
class BenchPlan:
    """What `krakenlm bench tp` times: on `world_size` ranks, each model size in `sizes` and
    architecture in `archs`, at each prompt length (tokens), generating `new_tokens` (the first
    from the prefill, so TPOT averages new_tokens - 1 decode steps), `warmup` untimed and
    `repeats` timed runs; `comm` "on", "off" (every collective a local no-op) or "both", over
    each of `comm_backends` (interleaved); `seed` for the random prompts (seed + prompt length);
    `vocab_parallel_head` shards the LM head over the vocabulary. `validate()` checks it before
    any process starts."""
    world_size: int
    sizes: tuple[str, ...] = ("125m",)
    archs: tuple[str, ...] = ARCHS
    prompt_tokens: tuple[int, ...] = (128, 512, 1024)
    new_tokens: int = 9  # 1 from the prefill + 8 decoded: TPOT averages the 8
    warmup: int = 1
    repeats: int = 3
    comm: str = "both"
    seed: int = 0
    comm_backends: tuple[str, ...] = ("auto",)  # see comm_backend.py; several are interleaved
    vocab_parallel_head: bool = False  # see models.transformer.Shard

    def validate(self) -> None:
        if not self.comm_backends or len(set(self.comm_backends)) < len(self.comm_backends):
            raise KrakenError(f"--comm-backend takes distinct backend names, got "
                              f"{','.join(self.comm_backends)!r}")
        for backend in self.comm_backends:
            check_comm_backend(backend)
        if not self.sizes or not self.archs:
            raise KrakenError(f"--sizes and --arch need at least one name each, got "
                              f"{','.join(self.sizes)!r} and {','.join(self.archs)!r}")
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
        for size, _, name in self.preset_list():
            # Raises the clear TP divisibility error before any process starts.
            config = get_preset(name)
            local_sizes(config, Shard(0, self.world_size))
            # The decode steps may run a few positions past the context (bench_config), but a
            # prompt beyond it would time a model that does not exist (and run for hours).
            if max(self.prompt_tokens) > config.context_len:
                raise KrakenError(f"--prompt-tokens {max(self.prompt_tokens)} exceeds the "
                                  f"{config.context_len}-token context of the {size} presets; "
                                  f"use prompts of at most {config.context_len} tokens")

    @property
    def launch_backend(self) -> str:
        """What the ranks are started with: one that sets up shared memory if any asks for it
        (the process group's all-reduce is available in every case)."""
        for wanted in ("shm", "auto"):
            if wanted in self.comm_backends:
                return wanted
        return self.comm_backends[0]

    def modes(self, arch: str, backends: Sequence[str]) -> list[str]:
        """Communicators to time ("on:gloo", "off", ...): with `both`, Kraken also runs with its
        reductions made blocking, which shows how much communication its overlap hides."""
        modes = [f"{mode}:{b}" if mode == "on" else mode
                 for mode in COMM_MODES[self.comm] for b in (backends if mode == "on" else [0])]
        if self.comm == "both" and arch == "kraken":
            modes += [f"blocking:{b}" for b in backends]
        return modes

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
    backends = list(dict.fromkeys(ctx.comm_backend if b == "auto" else b
                                  for b in plan.comm_backends))
    comms = {"off": NoOpComm()}
    for backend in backends:
        comms[f"on:{backend}"] = ctx.new_comm(backend=backend)
        comms[f"blocking:{backend}"] = ctx.new_comm(overlap=False, backend=backend)
    row_backends = backends if plan.comm != "off" else [None]
    sampling = SamplingConfig(max_new_tokens=plan.new_tokens, greedy=True)
    max_tokens = max(plan.prompt_tokens) + plan.new_tokens
    rows = []
    for size in plan.sizes:
        models = {}  # arch -> (preset name, config, model); random weights
        for arch in plan.archs:
            name = preset_for(size, arch, ctx.world_size)
            config = bench_config(get_preset(name), max_tokens)
            models[arch] = (name, config, build_local_model(
                ctx, config, comm=comms["off"], vocab_parallel_head=plan.vocab_parallel_head))
        for prompt_tokens in plan.prompt_tokens:
            runs = {arch: {m: [] for m in plan.modes(arch, backends)} for arch in models}
            for i in range(plan.warmup + plan.repeats):
                kind = "warm-up" if i < plan.warmup else "timed"
                _log(ctx, f"[bench tp] {size} prompt {prompt_tokens}: run {i + 1}/"
                          f"{plan.warmup + plan.repeats} ({kind}) of {', '.join(models)}")
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
                for backend in row_backends:
                    mine = runs[arch]
                    row = _row(size, arch, name, config, ctx.world_size, prompt_tokens, plan.comm,
                               backend, mine.get(f"on:{backend}"), mine.get("off"),
                               mine.get(f"blocking:{backend}"))
                    row["vocab_parallel_head"] = plan.vocab_parallel_head
                    rows.append(row)
                    _log(ctx, f"[bench tp] {name} world {ctx.world_size} prompt {prompt_tokens} "
                              f"{backend or 'comm off'}: TTFT {row['ttft_s']:.4f} s, TPOT "
                              f"{row['tpot_s']:.4f} s, exposed comm "
                              f"{_fmt(row['exposed_comm_s'])} s")
        del models
    return rows


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _paired_median(on: list, off: list, field: str) -> float | None:
    """Median over repeats of (with comm - without comm), each pair run back to back."""
    return median([getattr(a, field) - getattr(b, field) for a, b in zip(on, off)])


def _exposed(on: list, off: list, field: str) -> float | None:
    """The paired median as an exposed time: at least 0 (a negative median is noise larger
    than the communication, not communication that saved time)."""
    difference = _paired_median(on, off, field)
    return None if difference is None else max(0.0, difference)


def _median_of(runs: list | None, field: str) -> float | None:
    return median([getattr(r, field) for r in runs]) if runs else None


def _row(size, arch, name, config, world_size, prompt_tokens, comm, backend, on, off,
         blocking) -> dict[str, Any]:
    """One row from the timed runs with communication through `backend` (`on`), with every
    collective a no-op (`off`) and, Kraken only, with its reductions blocking; absent: None."""
    main = on if on else off
    both = bool(on) and bool(off)
    waits = [r.prefill_comm_peer_wait_s for r in on or []]
    return {
        "arch": arch, "preset": name, "world_size": world_size, "prompt_tokens": prompt_tokens,
        "ttft_s": _median_of(main, "ttft_s"), "tpot_s": _median_of(main, "tpot_s"),
        "exposed_comm_s": _exposed(on, off, "ttft_s") if both else None,
        # Extras: the no-op baseline itself, the decode-side difference, and the time rank 0
        # spent inside collectives during prefill (waits included, overlapped time excluded).
        "size": size, "params": config.num_params(), "comm": comm, "comm_backend": backend,
        "ttft_comm_off_s": _median_of(off, "ttft_s"), "tpot_comm_off_s": _median_of(off, "tpot_s"),
        "tpot_exposed_comm_s": _exposed(on, off, "tpot_s") if both else None,
        # The TTFT difference as measured, negative when noise exceeded the communication.
        "exposed_comm_raw_s": _paired_median(on, off, "ttft_s") if both else None,
        "prefill_comm_blocked_s": _median_of(on, "prefill_comm_blocked_s"),
        # Shared memory only: the part of the above spent waiting for a peer (the rest is
        # copying and summing); None with gloo, whose waiting and work cannot be told apart.
        "prefill_comm_peer_wait_s": (median(waits) if waits and None not in waits else None),
        # Kraken only: the same runs with every reduction blocking (no overlap).
        "exposed_comm_if_blocking_s": (_exposed(blocking, off, "ttft_s")
                                       if blocking and off else None),
        # Every timed run, in order, so the spread behind each median is on record.
        "ttft_runs_s": [r.ttft_s for r in main],
        "ttft_comm_off_runs_s": [r.ttft_s for r in off] if both else None,
    }


def save_ttft_plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """TTFT against prompt length, one panel per model size, one colour per architecture, one
    line style per all-reduce backend (dashed: the same runs with communication off)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(dict.fromkeys(row["size"] for row in rows))
    backends = list(dict.fromkeys(row["comm_backend"] for row in rows))
    styles = ["o-", "s:", "^-."]
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 4), squeeze=False)
    colours = {"gpt": "tab:blue", "parallel": "tab:orange", "kraken": "tab:green"}
    for ax, size in zip(axes[0], sizes):
        for arch in ARCHS:
            for i, backend in enumerate(backends):
                mine = sorted((r for r in rows if r["size"] == size and r["arch"] == arch
                               and r["comm_backend"] == backend), key=lambda r: r["prompt_tokens"])
                if not mine:
                    continue
                x = [r["prompt_tokens"] for r in mine]
                ax.plot(x, [r["ttft_s"] for r in mine], styles[i % len(styles)],
                        color=colours[arch],
                        label=f"{arch} ({mine[0]['preset']}), {backend or 'comm off'}")
                if i == 0 and mine[0]["exposed_comm_s"] is not None:
                    ax.plot(x, [r["ttft_comm_off_s"] for r in mine], "--", color=colours[arch],
                            alpha=0.6, label=f"{arch}, comm off")
        ax.set_title(f"{size}, world size {rows[0]['world_size']}")
        ax.set_xlabel("prompt tokens")
        ax.set_ylabel("TTFT (s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
