"""`krakenlm lm-eval`: zero-shot evaluation through lm-evaluation-harness."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ..errors import KrakenError
from . import app


@app.command("lm-eval")
def lm_eval_command(
    checkpoint_dir: Path = typer.Option(..., "--checkpoint", help="A checkpoint directory."),
    tasks: str = typer.Option("shakespeare_next_line", "--tasks", help="Comma-separated lm-eval task names. shakespeare_next_line runs offline; hub tasks (copa, boolq, ...) need internet or a local copy via --include-path."),
    include_path: Path = typer.Option(None, "--include-path", help="A directory of extra task YAMLs (e.g. local JSONL tasks)."),
    limit: int = typer.Option(None, "--limit", help="Evaluate at most N documents per task."),
    batch_size: int = typer.Option(8, "--batch-size"),
    as_json: bool = typer.Option(False, "--json", help="Print {task: {metric: value}} as JSON."),
) -> None:
    """Zero-shot accuracy of a checkpoint on lm-evaluation-harness tasks."""
    try:
        from lm_eval import simple_evaluate
        from lm_eval.tasks import TaskManager
    except ImportError:
        raise KrakenError("lm-eval is not installed: pip install 'krakenlm[eval]'") from None
    from ..evaluation.lm_eval_adapter import KrakenLMEval
    from ..evaluation.offline_tasks import TASK_NAME, build_shakespeare_next_line
    from ..training.checkpoint import load_model

    names = [t.strip() for t in tasks.split(",") if t.strip()]
    paths = [str(include_path)] if include_path else []
    if TASK_NAME in names:
        paths.append(str(build_shakespeare_next_line()))
    manager = TaskManager(include_path=paths or None)
    unknown = [n for n in names if n not in manager.all_tasks]
    if unknown:
        raise KrakenError(f"unknown lm-eval task(s) {unknown}; pass --include-path for local tasks")
    model = KrakenLMEval(load_model(checkpoint_dir), batch_size=batch_size)
    results = simple_evaluate(model=model, tasks=names, task_manager=manager, limit=limit,
                              log_samples=False, bootstrap_iters=0)
    table = {task: {k.split(",")[0]: v for k, v in metrics.items()
                    if isinstance(v, (int, float)) and not k.startswith(("alias", "sample_len"))}
             for task, metrics in results["results"].items()}
    if as_json:
        print(json.dumps(table, indent=2))
        return
    for task, metrics in table.items():
        print(task + ": " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
