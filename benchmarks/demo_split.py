"""How the demo should split its training budget between steps and seeds (issue 25, item 4).

`run` trains the demo's quality comparison (studies/demo.py: gpt-mini8 against
kraken-mini8-2way, the demo's own template: 8 x 128 tokens a step, warm-up a tenth, its
evaluation and checkpoint intervals, each model at its demo LR, 2 runs at a time) at any steps
and seeds, and writes the comparison's summary.json; finished runs are kept and interrupted ones
resume, as in the demo. `table` reads such summaries, one per split, and gives for each the
paired Kraken/GPT ratio with its realised 95 % interval and the half-width to expect from the
seed-to-seed spread measured at the same number of steps on every seed available.

    python benchmarks/demo_split.py run --out runs/demo-split-400 --steps 400 --seeds 1,2,3
    python benchmarks/demo_split.py table --split 400x3=runs/demo-split-400/summary.json:1,2,3 \\
        --spread 400=runs/demo-split-400/summary.json --json docs/data/demo-split.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from krakenlm.errors import Interrupted, KrakenError  # noqa: E402
from krakenlm.fileio import write_text_atomically  # noqa: E402
from krakenlm.studies.stats import t_975  # noqa: E402


def run_split(out: Path, steps: int, seeds: tuple[int, ...]) -> Path:
    """The demo's step 1 (training and the comparison) at `steps` x `seeds`; its summary.json."""
    from krakenlm.studies.compare import (RunSpec, comparison_section, make_out_dir,
                                          train_and_evaluate)
    from krakenlm.studies.demo import BASELINE, KRAKEN, PEAK_LR, DemoPlan

    plan = dataclasses.replace(DemoPlan(), max_steps=steps, seeds=seeds)
    make_out_dir(out)
    template = plan.template(out)
    specs = [RunSpec(preset, seed, PEAK_LR[preset]) for seed in plan.seeds
             for preset in (BASELINE, KRAKEN)]
    outcomes, _ = train_and_evaluate(specs, template, out, jobs=plan.jobs)
    comparison_section(outcomes, template, out, title=f"{KRAKEN} vs {BASELINE}, {steps} steps",
                       baseline=BASELINE)
    return out / "summary.json"


@dataclasses.dataclass(frozen=True)
class Group:
    """Paired log ratios (Kraken minus GPT validation loss, nats) of some seeds at one number of
    steps, kept as count, mean and sample standard deviation: one seed of a summary is a group
    of one; a published result with only its interval is a group of its n seeds."""
    n: int
    mean: float
    sd: float


def group_from_interval(mean: float, low: float, high: float, n: int) -> Group:
    """The group behind a published paired ratio `mean` [low, high] over n seeds (the interval
    of `studies.stats.ratio_interval`: exp of mean log ratio +- t(n-1) sd / sqrt(n))."""
    if n < 2 or not 0 < low <= mean <= high:
        raise KrakenError(f"a published ratio needs n >= 2 and low <= mean <= high, got "
                          f"{mean} [{low}, {high}] over {n}")
    half = math.log(high / low) / 2
    return Group(n, math.log(mean), half * math.sqrt(n) / t_975(n - 1))


def pool(groups: list[Group]) -> Group:
    """The count, mean and sample sd of the union of `groups` (the within-group sums of squares
    plus each group's squared distance from the overall mean)."""
    n = sum(g.n for g in groups)
    if n == 0:
        raise KrakenError("no seeds to pool")
    mean = sum(g.n * g.mean for g in groups) / n
    squares = sum((g.n - 1) * g.sd ** 2 + g.n * (g.mean - mean) ** 2 for g in groups)
    return Group(n, mean, math.sqrt(squares / (n - 1)) if n > 1 else 0.0)


def expected_half_width(sd: float, seeds: int) -> float:
    """The 95 % paired interval's half-width in log ratio that `seeds` seeds give when the
    seed-to-seed sd of the log ratio is `sd`: t(seeds - 1) sd / sqrt(seeds)."""
    return t_975(seeds - 1) * sd / math.sqrt(seeds)


def sd_interval(sd: float, n: int) -> tuple[float, float]:
    """The 95 % interval of a normal population's sd from a sample sd over n values
    (chi-square with n - 1 degrees of freedom)."""
    from scipy.stats import chi2

    dof = n - 1
    return sd * math.sqrt(dof / chi2.ppf(0.975, dof)), sd * math.sqrt(dof / chi2.ppf(0.025, dof))


def sd_ratio_interval(ratio: float, n_a: int, n_b: int) -> tuple[float, float]:
    """The 95 % interval of sd_a / sd_b from the sample ratio (F with n_a - 1, n_b - 1 dof)."""
    from scipy.stats import f

    return (ratio / math.sqrt(f.ppf(0.975, n_a - 1, n_b - 1)),
            ratio / math.sqrt(f.ppf(0.025, n_a - 1, n_b - 1)))


def seed_groups(summary: dict, baseline: str, model: str, steps_per_token: float
                ) -> dict[tuple[int, int], Group]:
    """{(steps, seed): group of one} for every seed with both models in a compare summary."""
    runs = {(r["preset"], r["seed"]): r for r in summary["runs"]}
    out = {}
    for (preset, seed), run in runs.items():
        if preset != model or (baseline, seed) not in runs:
            continue
        steps = round(run["tokens"] * steps_per_token)
        out[(steps, seed)] = Group(1, run["val_loss"] - runs[(baseline, seed)]["val_loss"], 0.0)
    return out


def cpu_seconds(time_v_text: str) -> float:
    """User + system seconds of every /usr/bin/time -v record in the text (an interrupted
    invocation and the one that resumed it, concatenated, count together)."""
    total = 0.0
    for key in ("User time (seconds)", "System time (seconds)"):
        found = re.findall(re.escape(key) + r":\s*([0-9.]+)", time_v_text)
        if not found:
            raise KrakenError(f"no {key!r} in the /usr/bin/time -v output")
        total += sum(float(x) for x in found)
    return total


def split_rows(splits: list[tuple[str, int, list[Group] | None, int]],
               seeds_at: dict[int, list[Group]], cpu_per_seed_s: dict[int, float]) -> list[dict]:
    """One row per split (label, steps, its own seeds' groups or None, seed count): the ratio
    and 95 % paired interval realised on the split's own seeds (None: a split not run, only
    expected), and the half-width to expect with the sd from every seed at its steps, with
    that half-width's 95 % range from the sd's chi-square interval. CPU seconds are the
    measured CPU per seed (both models) at those steps times the seed count."""
    rows = []
    for label, steps, groups, n in splits:
        if steps not in seeds_at:
            raise KrakenError(f"split {label}: no seeds at {steps} steps in the summaries")
        every = pool(seeds_at[steps])
        if every.n < 2:
            raise KrakenError(f"split {label}: one seed at {steps} steps gives no spread")
        own = pool(groups) if groups else None
        realised = (t_975(own.n - 1) * own.sd / math.sqrt(own.n)
                    if own is not None and own.n > 1 else None)
        sd_low, sd_high = sd_interval(every.sd, every.n)
        half = expected_half_width(every.sd, n)
        per_seed = cpu_per_seed_s.get(steps)
        rows.append({
            "split": label, "steps": steps, "seeds": n, "steps_x_seeds": steps * n,
            "measured": own is not None,
            "ratio": math.exp(own.mean) if own is not None else None,
            "low": math.exp(own.mean - realised) if realised is not None else None,
            "high": math.exp(own.mean + realised) if realised is not None else None,
            "ratio_all_seeds": math.exp(every.mean), "seeds_for_sd": every.n,
            "sd_log_ratio": every.sd, "sd_log_ratio_95": [sd_low, sd_high],
            "expected_half_width_log": half, "expected_factor": math.exp(half),
            "expected_factor_95": [math.exp(expected_half_width(sd_low, n)),
                                   math.exp(expected_half_width(sd_high, n))],
            "cpu_s": per_seed * n if per_seed is not None else None})
    first = rows[0] if rows else None
    for r in rows:
        r["half_width_vs_first"], r["half_width_vs_first_95"] = half_width_ratio(r, first)
    return rows


def half_width_ratio(row: dict, first: dict) -> tuple[float, list[float]]:
    """Expected half-width of `row` over that of `first`, with its 95 % interval: at the same
    steps both use the same sd, so only t / sqrt(seeds) differs; at other steps the ratio of two
    sds estimated from their own seeds carries F's uncertainty."""
    shape = (t_975(row["seeds"] - 1) / math.sqrt(row["seeds"])
             / (t_975(first["seeds"] - 1) / math.sqrt(first["seeds"])))
    sd_ratio = row["sd_log_ratio"] / first["sd_log_ratio"]
    if row["steps"] == first["steps"]:
        return shape, [shape, shape]
    low, high = sd_ratio_interval(sd_ratio, row["seeds_for_sd"], first["seeds_for_sd"])
    return shape * sd_ratio, [shape * low, shape * high]


def markdown(rows: list[dict]) -> str:
    lines = [("| split | seeds | steps | steps x seeds | ratio [95 % paired interval] | ratio, "
              "all seeds at these steps | sd of log ratio (seeds) [95 %] | expected interval "
              "x/÷ [95 %] | half-width / first row's [95 %] | CPU s |"),
             "|---|---:|---:|---:|---|---:|---|---|---|---:|"]
    for r in rows:
        if r["ratio"] is None:
            realised = "not run"
        elif r["low"] is None:
            realised = f"{r['ratio']:.3f} (1 seed)"
        else:
            realised = f"{r['ratio']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"
        lo, hi = r["sd_log_ratio_95"]
        flo, fhi = r["expected_factor_95"]
        cpu = f"{r['cpu_s']:,.0f}" if r["cpu_s"] is not None else "-"
        lines.append(f"| {r['split']} | {r['seeds']} | {r['steps']} | {r['steps_x_seeds']:,} | "
                     f"{realised} | {r['ratio_all_seeds']:.3f} | {r['sd_log_ratio']:.3f} "
                     f"({r['seeds_for_sd']}) [{lo:.3f}, {hi:.3f}] | {r['expected_factor']:.3f} "
                     f"[{flo:.3f}, {fhi:.3f}] | {r['half_width_vs_first']:.2f} "
                     f"[{r['half_width_vs_first_95'][0]:.2f}, {r['half_width_vs_first_95'][1]:.2f}]"
                     f" | {cpu} |")
    return "\n".join(lines) + "\n"


def _seeds(text: str) -> tuple[int, ...]:
    """Seeds as `--seeds` reads them, each at most once (a repeated seed would count twice)."""
    from krakenlm.cli.study import _parse_seeds

    seeds = tuple(_parse_seeds(text))
    if len(set(seeds)) != len(seeds):
        raise KrakenError(f"seeds {text!r}: give each seed once")
    return seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train one split (resumable)")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--steps", type=int, required=True)
    run.add_argument("--seeds", required=True, help="comma-separated, e.g. 1,2,3")
    table = sub.add_parser("table", help="the splits compared, from summaries")
    table.add_argument("--summary", type=Path, action="append", default=[],
                       help="a summary.json of `run`; its seeds join the sd at their steps")
    table.add_argument("--published", action="append", default=[],
                       help="STEPS=MEAN,LOW,HIGH,N: a paired ratio known only by its interval "
                            "(the demo's seeds 1-3 at 400 steps), used as split 'STEPSxN'")
    table.add_argument("--split", action="append", default=[],
                       help="LABEL=STEPS:SEEDS (comma-separated seeds of the summaries, "
                            "optionally after `published,`: the published seeds at STEPS)")
    table.add_argument("--expect", action="append", default=[],
                       help="LABEL=STEPS:N: a split not run, only its expected half-width")
    table.add_argument("--cpu", action="append", default=[],
                       help="STEPS=FILE:N: /usr/bin/time -v output of `run` training N seeds "
                            "at STEPS, several records summed (CPU per seed = user + system / N)")
    table.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            if args.steps < 1:
                raise KrakenError(f"--steps must be >= 1, got {args.steps}")
            print(run_split(args.out, args.steps, _seeds(args.seeds)))
        else:
            rows, groups = _table(args)
            print(markdown(rows), end="")
            if args.json:
                # groups: every seed (n 1) or published result (its n) by steps, in log ratio
                write_text_atomically(args.json, json.dumps(
                    {"rows": rows, "log_ratio_groups_by_steps": groups}, indent=2) + "\n")
    except KrakenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Interrupted as exc:
        print(f"stopped: {exc}", file=sys.stderr)
        return 128 + exc.signum
    return 0


def _table(args) -> tuple[list[dict], dict[str, list[dict]]]:
    from krakenlm.studies.demo import BASELINE, KRAKEN, DemoPlan

    plan = DemoPlan()
    by_seed: dict[tuple[int, int], Group] = {}
    for path in args.summary:
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise KrakenError(f"--summary {path}: cannot read it ({exc})") from None
        by_seed.update(seed_groups(summary, BASELINE, KRAKEN,
                                   1 / (plan.batch_size * plan.seq_len)))
    seeds_at: dict[int, list[Group]] = {}
    for (steps, _), group in by_seed.items():
        seeds_at.setdefault(steps, []).append(group)
    splits = []
    published: dict[int, Group] = {}
    for item in args.published:
        steps, _, numbers = item.partition("=")
        try:
            mean, low, high, n = (float(x) for x in numbers.split(","))
            group = group_from_interval(mean, low, high, int(n))
            steps = int(steps)
        except ValueError:
            raise KrakenError(f"--published {item!r}: use STEPS=MEAN,LOW,HIGH,N") from None
        seeds_at.setdefault(steps, []).append(group)
        published[steps] = group
        splits.append((f"{steps}x{group.n}", steps, [group], group.n))
    for item in args.split:
        label, steps, seeds = _labelled(item, "--split", "LABEL=STEPS:SEEDS")
        groups = []
        if seeds.startswith("published,"):  # the published seeds, then the summaries' own
            if steps not in published:
                raise KrakenError(f"--split {item!r}: no --published result at {steps} steps")
            groups.append(published[steps])
            seeds = seeds.removeprefix("published,")
        missing = [s for s in _seeds(seeds) if (steps, s) not in by_seed]
        if missing:
            raise KrakenError(f"--split {item!r}: no summary has seeds {missing} at {steps} steps")
        groups += [by_seed[(steps, s)] for s in _seeds(seeds)]
        splits.append((label, steps, groups, sum(g.n for g in groups)))
    for item in args.expect:
        label, steps, n = _labelled(item, "--expect", "LABEL=STEPS:N")
        if not n.isdigit() or int(n) < 2:
            raise KrakenError(f"--expect {item!r}: N must be a whole number of seeds >= 2")
        splits.append((label, steps, None, int(n)))
    cpu_per_seed_s = {}
    for item in args.cpu:
        steps, _, rest = item.partition("=")
        path, _, n = rest.rpartition(":")
        if not (steps.isdigit() and n.isdigit() and int(n) > 0 and path):
            raise KrakenError(f"--cpu {item!r}: use STEPS=FILE:N")
        try:
            cpu_per_seed_s[int(steps)] = cpu_seconds(Path(path).read_text()) / int(n)
        except OSError as exc:
            raise KrakenError(f"--cpu {item!r}: cannot read it ({exc.strerror})") from None
    groups = {str(steps): [dataclasses.asdict(g) for g in gs]
              for steps, gs in sorted(seeds_at.items())}
    return split_rows(splits, seeds_at, cpu_per_seed_s), groups


def _labelled(item: str, option: str, form: str) -> tuple[str, int, str]:
    label, _, rest = item.partition("=")
    steps, _, tail = rest.partition(":")
    if not (label and steps.isdigit() and tail):
        raise KrakenError(f"{option} {item!r}: use {form}")
    return label, int(steps), tail


if __name__ == "__main__":
    sys.exit(main())
