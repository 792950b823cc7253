"""Zero-shot tasks that run offline, built from the held-out Shakespeare plays.

`shakespeare_next_line`: given a few lines of a validation play, pick the true next line among
four lines of the same play (the other three drawn at random, deterministically). It is the
Shakespeare-sized cousin of the paper's zero-shot multiple-choice protocol (SuperGLUE needs the
hub), and it never overlaps the training split: both plays are held out of training.

Hub tasks without a network: `go_offline_unless_hub_reachable` switches `datasets` to offline
mode when a 2-second TCP probe of the hub fails, so a hub task fails at once (or loads from the
local cache) instead of retrying for half a minute.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from ..data.prepare import cache_root, resolve_corpus
from ..data.sources import shakespeare_markdown, spoken_lines

TASK_NAME = "shakespeare_next_line"
CHOICES = 4
CONTEXT_LINES = 4


def build_shakespeare_next_line(directory: Path | None = None, *, n_items: int = 400,
                                seed: int = 0) -> Path:
    """Write the task's JSONL and YAML into `directory`; returns the directory (an lm-eval
    include path). Deterministic for a given seed."""
    directory = directory or cache_root() / "lm_eval_tasks"
    directory.mkdir(parents=True, exist_ok=True)
    spec = resolve_corpus("shakespeare")
    held_out = [markdown for i, (_, markdown) in enumerate(shakespeare_markdown())
                if spec.is_validation(i)]
    rng = random.Random(seed)
    items = []
    for markdown in held_out:
        lines = spoken_lines(markdown)
        for i in rng.sample(range(CONTEXT_LINES, len(lines)), n_items // len(held_out)):
            distractors = rng.sample([j for j in range(len(lines)) if abs(j - i) > 2], CHOICES - 1)
            choices = [" " + lines[j] for j in distractors]
            label = rng.randrange(CHOICES)
            choices.insert(label, " " + lines[i])
            items.append({"context": "\n".join(lines[i - CONTEXT_LINES:i]) + "\n",
                          "choices": choices, "label": label})
    data = directory / f"{TASK_NAME}.jsonl"
    data.write_text("".join(json.dumps(item) + "\n" for item in items))
    (directory / f"{TASK_NAME}.yaml").write_text(
        f"task: {TASK_NAME}\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data.resolve()}\n"
        "output_type: multiple_choice\n"
        "test_split: test\n"
        "doc_to_text: context\n"
        "doc_to_choice: choices\n"
        "doc_to_target: label\n"
        "target_delimiter: ''\n"  # the choices carry their own leading space
        "metric_list:\n"
        "  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
        "  - metric: acc_norm\n    aggregation: mean\n    higher_is_better: true\n"
        "metadata:\n  version: 1.0\n")
    return directory


# ------------------------------------------------------------------ hub tasks without a network
# (whether the hub can be reached is shared with the corpus loaders: krakenlm/hub.py)
from ..hub import go_offline_unless_hub_reachable, hub_is_offline, hub_reachable  # noqa: E402,F401

def local_data_hint() -> str:
    """What to do when a task's data is on the hub and the hub cannot be reached."""
    example = cache_root() / "lm_eval_tasks" / f"{TASK_NAME}.yaml"
    return ("copy the data as JSONL next to a task YAML (dataset_path: json; an example is "
            f"{example}, written by `krakenlm lm-eval`) and pass its directory with "
            "--include-path (lm_eval: --include_path), or run once with internet to fill the "
            "Hugging Face cache")
