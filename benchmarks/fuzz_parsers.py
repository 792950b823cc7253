"""Hypothesis examples run per parser: every fuzz target of tests/fuzz_parsers.py with N
examples each, counting the examples that broke the property (a traceback, or an error message
of more than one line) instead of stopping at the first.

    python benchmarks/fuzz_parsers.py [--examples 200] [--seed 0] [--only ID ...] [--out FILE]

Prints a Markdown table (target, examples run, failures, the kinds of failure, seconds) and
writes it to --out when given (docs/fuzzing.md quotes it; what each target parses and through
which entry point is in its first table). Targets marked
"known" fail on inputs another change is fixing (see `known_failure` in tests/fuzz_parsers.py).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from hypothesis import HealthCheck, Phase, given, seed as hypothesis_seed, settings  # noqa: E402

from fuzz_parsers import TARGETS, TRACE_TARGETS, PropertyViolation, Target  # noqa: E402


def _kind(exc: BaseException) -> str:
    """Exception type and where it was raised (the innermost krakenlm frame); for a property
    violation, which one."""
    if isinstance(exc, PropertyViolation):
        return "multi-line message" if "not one line" in str(exc) else "CLI: not one error line"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "krakenlm" in f.filename]
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}{where}"


def run(target: Target, examples: int, seed: int) -> tuple[int, int, collections.Counter]:
    """(examples run, failures, failure kinds) of `target`'s property."""
    counts = {"run": 0, "failed": 0}
    kinds: collections.Counter = collections.Counter()

    def property_counted(data) -> None:
        counts["run"] += 1
        try:
            target.check(data)
        except Exception as exc:  # noqa: BLE001  (counted, not raised: keep going)
            counts["failed"] += 1
            kinds[_kind(exc)] += 1

    property_counted.__qualname__ = f"bench_{target.id}"
    test = settings(max_examples=examples, deadline=None, database=None,
                    phases=(Phase.generate,),
                    suppress_health_check=list(HealthCheck))(property_counted)
    hypothesis_seed(seed)(given(target.strategy())(test))()
    return counts["run"], counts["failed"], kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200, help="examples per target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", help="target ids (default: all)")
    parser.add_argument("--out", help="also write the Markdown table here")
    args = parser.parse_args()
    targets = [t for t in TARGETS + TRACE_TARGETS if not args.only or t.id in args.only]
    lines = ["| target | examples run | failures | failure kinds | seconds |",
             "|---|---:|---:|---|---:|"]
    total_run = total_failed = 0
    for target in targets:
        started = time.perf_counter()
        n = max(1, round(args.examples / target.cost))
        ran, failed, kinds = run(target, n, args.seed)
        seconds = time.perf_counter() - started
        total_run, total_failed = total_run + ran, total_failed + failed
        kinds_text = "; ".join(f"{k} x{c}" for k, c in kinds.most_common(4)) or "-"
        known = " (known)" if target.known_failure and failed else ""
        lines.append(f"| {target.id} | {ran} | {failed}{known} | {kinds_text} | "
                     f"{seconds:.0f} |")
        print(f"{target.id}: {ran} examples, {failed} failures, {seconds:.0f} s "
              f"{dict(kinds)}", file=sys.stderr)
    lines.append(f"| all | {total_run} | {total_failed} | | |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        Path(args.out).write_text(table)


if __name__ == "__main__":
    main()
