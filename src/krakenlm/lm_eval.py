"""`krakenlm-lm-eval` (or `python -m krakenlm.lm_eval`): lm-evaluation-harness's own command line
with the `krakenlm` model registered.

    krakenlm-lm-eval --model krakenlm --model_args checkpoint=runs/gpt --tasks copa --limit 50

Every `lm_eval` option works the same. Why a separate command: lm-eval 0.4 finds models only in
its own source tree (no plugin entry points; upstream issues #1457, #3282), so a plain
`lm_eval --model krakenlm` cannot see krakenlm. This wrapper imports krakenlm's adapter (which
registers the model) and then runs lm-eval's CLI unchanged. It adds: hub access that fails fast
when there is no network, one `error:` line (exit 2) for krakenlm's errors, a --limit that
selects nothing and an option given twice, and a table of documents scored and chance level per
task after lm-eval's own results table (which has the stderr).
"""

from __future__ import annotations

import sys


def _option_value(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _check_limit(argv: list[str]) -> str | None:
    """lm-eval takes --limit 0 or a negative one and then fails with a traceback."""
    limit = _option_value(argv, "--limit")
    if limit is None:
        return None
    try:
        value = float(limit)
    except ValueError:
        return None  # lm-eval's own parser reports it
    if value <= 0:
        return (f"--limit must be > 0 (got {limit}): a number of documents, or a fraction "
                "below 1; leave it out to evaluate every document")
    return None


def _krakenlm_checkpoint(argv: list[str]) -> str | None:
    """The checkpoint directory of `--model krakenlm --model_args checkpoint=DIR,...`."""
    if _option_value(argv, "--model") != "krakenlm":
        return None
    for part in (_option_value(argv, "--model_args") or "").split(","):
        key, _, value = part.partition("=")
        if key.strip() == "checkpoint":
            return value.strip()
    return None


def main() -> None:
    from .errors import KrakenError
    from .evaluation.offline_tasks import go_offline_unless_hub_reachable, local_data_hint

    problem = _check_limit(sys.argv[1:])
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    checkpoint_dir = _krakenlm_checkpoint(sys.argv[1:])
    if checkpoint_dir:  # a wrong directory fails now, not after lm-eval has indexed its tasks
        from pathlib import Path

        from .runtime.model_and_tokenizer import checkpoint_tokenizer
        try:
            checkpoint_tokenizer(Path(checkpoint_dir))
        except KrakenError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
    offline = go_offline_unless_hub_reachable()  # before lm_eval imports datasets
    try:
        from lm_eval.__main__ import cli_evaluate
    except ImportError:
        print("error: lm-eval is not installed: pip install 'krakenlm[eval]'", file=sys.stderr)
        sys.exit(2)
    from .evaluation import lm_eval_adapter
    from .evaluation.lm_eval_index import use_cached_builtin_index

    lm_eval_adapter.quiet_lm_eval_noise()
    use_cached_builtin_index()
    instances = lm_eval_adapter.track_instances()
    if "-h" not in sys.argv[1:] and "--help" not in sys.argv[1:]:
        # lm-eval indexes its ~15,000 task YAMLs before it logs anything
        print("krakenlm-lm-eval: lm-eval is indexing its tasks (10-60 s the first time, then "
              "about 1 s from the cache)...", file=sys.stderr)
    try:
        cli_evaluate()
    except KrakenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except ConnectionError as exc:  # datasets' "Couldn't reach ... on the Hub"
        where = "the hub is unreachable (offline mode)" if offline else "the hub refused"
        print(f"error: a task's dataset could not be loaded: {exc}; {where}; {local_data_hint()}",
              file=sys.stderr)
        sys.exit(2)
    except TypeError as exc:
        if "got multiple values for keyword argument" not in str(exc):
            raise  # a bug, with its traceback
        # e.g. batch_size both in --model_args and as lm_eval's own --batch_size
        print(f"error: an option is given twice ({exc}); give it either in --model_args or as "
              "lm_eval's own option (--batch_size, --device), not both", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    for model in instances:
        print(lm_eval_adapter.counts_table(model.task_counts()))


if __name__ == "__main__":
    main()
