"""`krakenlm lm-eval`: zero-shot evaluation through lm-evaluation-harness."""

from __future__ import annotations

import difflib
import json
import math
from pathlib import Path

import typer

from ..errors import KrakenError
from . import app
from ._console import stderr_console, stdout_console, table

# Resamples for the stderr of metrics without a closed form (f1, bleu, ...); accuracy-like
# means use the closed form whatever this is. lm-eval's own default (100000) takes minutes.
BOOTSTRAP_ITERS = 1000


@app.command("lm-eval")
def lm_eval_command(
    checkpoint_dir: Path = typer.Option(..., "--checkpoint", help="A checkpoint directory."),
    tasks: str = typer.Option("shakespeare_next_line", "--tasks", help="Comma-separated lm-eval task names. shakespeare_next_line runs offline; hub tasks (copa, boolq, ...) need internet, the Hugging Face cache, or a local copy via --include-path."),
    include_path: Path = typer.Option(None, "--include-path", help="A directory of extra task YAMLs (e.g. local JSONL tasks)."),
    limit: int = typer.Option(None, "--limit", help="Evaluate at most N documents per task."),
    batch_size: int = typer.Option(8, "--batch-size", help="Sequences scored per forward pass."),
    as_json: bool = typer.Option(False, "--json", help="Print {task: {metric: value, metric_stderr, n, chance_level}} as JSON."),
) -> None:
    """Zero-shot accuracy of a checkpoint on lm-evaluation-harness tasks, with stderr, the
    number of documents and the chance level of each task."""
    rows = run_lm_eval(checkpoint_dir, _task_names(tasks, limit, batch_size, include_path),
                       include_path, limit, batch_size)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    _print_table(rows)


def _task_names(tasks: str, limit: int | None, batch_size: int,
                include_path: Path | None) -> list[str]:
    """The --tasks names, once the options' ranges are checked."""
    if limit is not None and limit < 1:
        raise KrakenError(f"--limit must be >= 1 (got {limit}); leave it out to evaluate every "
                          "document")
    if batch_size < 1:
        raise KrakenError(f"--batch-size must be >= 1 (got {batch_size})")
    names = [t.strip() for t in tasks.split(",") if t.strip()]
    if not names:
        raise KrakenError("--tasks is empty; give e.g. --tasks shakespeare_next_line")
    if include_path is not None and not include_path.is_dir():
        raise KrakenError(f"--include-path {include_path} is not a directory of task YAMLs")
    return names


def run_lm_eval(checkpoint_dir: Path, names: list[str], include_path: Path | None,
                limit: int | None, batch_size: int) -> dict[str, dict]:
    """The tasks `names` evaluated by lm-eval on the checkpoint: result_rows()."""
    from ..runtime.model_and_tokenizer import checkpoint_tokenizer

    # a wrong directory or tokenizer fails now, not after the slow imports
    checkpoint_tokenizer(checkpoint_dir)

    from ..evaluation.offline_tasks import (TASK_NAME, build_shakespeare_next_line,
                                            go_offline_unless_hub_reachable, local_data_hint)

    offline = go_offline_unless_hub_reachable()  # before lm_eval imports datasets
    try:
        from lm_eval import simple_evaluate
        from lm_eval.tasks import TaskManager
    except ImportError:
        raise KrakenError("lm-eval is not installed: pip install 'krakenlm[eval]'") from None
    from ..evaluation.lm_eval_adapter import KrakenLMEval, quiet_lm_eval_noise
    from ..evaluation.lm_eval_index import use_cached_builtin_index

    quiet_lm_eval_noise()
    use_cached_builtin_index()
    paths = [str(include_path)] if include_path else []
    if TASK_NAME in names:
        paths.append(str(build_shakespeare_next_line()))
    manager = _task_manager(TaskManager, names, paths)
    _check_task_names(names, [*manager.all_tasks, TASK_NAME])
    # the same path as `krakenlm-lm-eval --model_args checkpoint=DIR`: the checkpoint's model
    # with its own tokenizer
    model = KrakenLMEval(checkpoint=str(checkpoint_dir), batch_size=batch_size)
    try:
        results = simple_evaluate(model=model, tasks=names, task_manager=manager, limit=limit,
                                  log_samples=False, bootstrap_iters=BOOTSTRAP_ITERS)
    except ConnectionError as exc:  # datasets: "Couldn't reach '...' on the Hub (...)"
        where = ("no network, so the hub was asked in offline mode" if offline
                 else "the hub did not answer")
        raise KrakenError(f"a task's dataset could not be loaded ({exc}; {where}); "
                          f"{local_data_hint()}") from None
    return result_rows(results, model.task_counts())


def _task_manager(task_manager_class, names: list[str], paths: list[str]):
    """lm-eval's task index. When every task asked for is a plain task (not a group) of the local
    directories, only those are indexed: indexing lm-eval's own ~15,000 task YAMLs takes 10-60 s
    the first time (evaluation/lm_eval_index.py caches it) and adds nothing such a run needs. Otherwise (a hub task, a group, a misspelt name) the
    whole index, so a group's members resolve and a typo gets its suggestions."""
    if paths:
        local = task_manager_class(include_path=paths, include_defaults=False)
        if all(name in local.all_subtasks for name in names):
            return local
    with stderr_console().status("indexing lm-eval's tasks"):
        return task_manager_class(include_path=paths or None)


def _check_task_names(names: list[str], known: list[str]) -> None:
    unknown = [n for n in names if n not in known]
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=3)
        hints.append(f"{name!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
    raise KrakenError(f"unknown lm-eval task {'; '.join(hints)}; list them with `lm-eval ls "
                      "tasks`, or pass --include-path DIR for local task YAMLs")


def result_rows(results: dict, counts: dict) -> dict[str, dict]:
    """{task: {metric: value, metric_stderr: value, n: documents, chance_level: value}}."""
    rows: dict[str, dict] = {}
    for task, metrics in results["results"].items():
        row: dict = {}
        for key, value in metrics.items():
            name, _, _filter = key.partition(",")
            # strings are skipped: the alias, and "N/A" for a stderr lm-eval did not compute
            if not isinstance(value, (int, float)) or name in ("alias", "sample_len"):
                continue
            row[name] = value
        samples = results.get("n-samples", {}).get(task, {})
        row["n"] = samples.get("effective", counts[task].documents if task in counts else None)
        row["chance_level"] = counts[task].chance_level if task in counts else None
        rows[task] = row
    return rows


def _print_table(rows: dict[str, dict]) -> None:
    t = table(title="lm-eval (zero-shot)")
    for column in ("task", "metric", "value", "± stderr", "chance", "n"):
        t.add_column(column, justify="left" if column in ("task", "metric") else "right")
    for task, row in rows.items():
        metrics = [k for k in row if k not in ("n", "chance_level") and not k.endswith("_stderr")]
        for i, metric in enumerate(metrics):
            stderr = row.get(f"{metric}_stderr")
            chance = row["chance_level"] if metric.startswith("acc") else None
            t.add_row(task if i == 0 else "", metric, f"{row[metric]:.4f}",
                      "-" if stderr is None or math.isnan(stderr) else f"{stderr:.4f}",
                      "-" if chance is None else f"{chance:.4f}",
                      str(row["n"]) if i == 0 else "")
    stdout_console().print(t)
