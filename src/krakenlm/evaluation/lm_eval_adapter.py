"""lm-evaluation-harness adapter: any krakenlm checkpoint as an `lm_eval` model named `krakenlm`.

    krakenlm-lm-eval --model krakenlm --model_args checkpoint=runs/gpt --tasks copa  # lm_eval's CLI
    krakenlm lm-eval --checkpoint runs/gpt --tasks copa,boolq                       # offline-aware

Importing this module registers the model. lm-eval 0.4 discovers no plugins (no entry points),
so a plain `lm_eval` process never imports it; `krakenlm-lm-eval` (krakenlm/lm_eval.py) is
lm_eval's own CLI with this module imported first.

Zero-shot multiple choice (the paper's SuperGLUE protocol) needs only `loglikelihood`; the
rolling and generation methods are implemented too so that every task type runs.
"""

from __future__ import annotations

import logging
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import lm_eval.models  # noqa: F401  (registers lm-eval's own models: see the note below)
import torch
import torch.nn.functional as F
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from tqdm import tqdm

from ..data.tokenizer import Tokenizer
from ..data.vocab import check_tokenizer_fits, prompt_ids
from ..errors import KrakenError
from ..models.transformer import Transformer
from ..runtime.device import pick_device
from ..runtime.model_and_tokenizer import checkpoint_tokenizer, load_model_and_tokenizer
from .generate import SamplingConfig, generate

# lm-eval fills its model registry with its own models only when the registry is still empty;
# registering `krakenlm` first would hide `hf`, `vllm`, ... in this process. Importing
# lm_eval.models above registers them before us.

DEFAULT_BATCH_SIZE = 16  # what `batch_size=auto` means here: a CPU-friendly batch of sequences

# Models created by lm-eval's CLI, which keeps them to itself: krakenlm-lm-eval reads their
# counts afterwards for the chance-level table.
_created: list[KrakenLMEval] = []


@dataclass
class TaskCounts:
    """What a task asked the model to score: documents, and answer choices per document."""
    documents: int
    mean_choices: float
    chance_level: float | None  # expected accuracy of a uniform random guess; None if no choice


def _positive_batch_size(value) -> int:
    if value in (None, "auto") or str(value).startswith("auto"):
        return DEFAULT_BATCH_SIZE
    try:
        size = int(value)
    except ValueError:
        raise KrakenError(f"batch_size={value!r} is not a whole number; give e.g. "
                          "batch_size=16 (or auto)") from None
    if size < 1:
        raise KrakenError(f"batch_size must be >= 1 (got {size})")
    return size


def _usable_device(device: str | None) -> torch.device:
    # lm_eval's CLI passes --device cuda by default, also on machines without CUDA
    if device is None or (device.startswith("cuda") and not torch.cuda.is_available()):
        return pick_device()
    return torch.device(device)


@register_model("krakenlm")
class KrakenLMEval(LM):
    def __init__(self, model: Transformer | None = None, checkpoint: str | None = None,
                 batch_size: int | str = DEFAULT_BATCH_SIZE, device: str | None = None,
                 progress: bool = True, tokenizer=None, **_ignored):
        super().__init__()
        if isinstance(tokenizer, str):  # from --model_args: the checkpoint's own is the one
            raise KrakenError(f"tokenizer={tokenizer} in --model_args: the krakenlm model always "
                              "uses its checkpoint's own tokenizer; drop it")
        if model is None:
            if checkpoint is None:
                raise KrakenError("the krakenlm model needs a checkpoint: --model_args "
                                  "checkpoint=DIR (a `krakenlm train --out` directory)")
            # the tokenizer the checkpoint was trained (or imported) with, never GPT-2's by default
            model, tokenizer = load_model_and_tokenizer(checkpoint, device=_usable_device(device))
        elif tokenizer is None and checkpoint is not None:
            tokenizer = checkpoint_tokenizer(checkpoint)
        self.model = model.eval()
        # a bare model without its tokenizer (tests, library use) reads GPT-2's ids
        self.tokenizer = tokenizer if tokenizer is not None else Tokenizer()
        check_tokenizer_fits(self.tokenizer, model.config.vocab_size, "the krakenlm model",
                             "pass the tokenizer it was trained with")
        # what a sequence starts with when it has no text of its own before the scored part:
        # the tokenizer's BOS (Llama), else its end-of-text (GPT-2, as lm-eval's own models do)
        self._prefix = list(self.tokenizer.start_ids) or [self.tokenizer.eot_id]
        self.batch_size_per_call = _positive_batch_size(batch_size)
        self.context_len = model.config.context_len
        self.progress = progress
        # (task, doc_id) -> choice indices seen; filled by loglikelihood for the results table
        self._choices: dict[tuple[str, int], set[int]] = defaultdict(set)
        _created.append(self)

    @property
    def _model_device(self) -> torch.device:
        return self.model.tok_emb.weight.device

    # ------------------------------------------------------------------ scoring helpers
    @torch.no_grad()
    def _score(self, sequences: list[tuple[list[int], int]],
               bar: tqdm | None = None) -> list[tuple[float, bool]]:
        """Each item: (token ids, n): sum log p of the last n ids given the ones before, and
        whether each of them is the argmax. Sequences are right-padded into batches."""
        results: list[tuple[float, bool]] = []
        for start in range(0, len(sequences), self.batch_size_per_call):
            batch = sequences[start:start + self.batch_size_per_call]
            width = max(len(ids) for ids, _ in batch) - 1
            inputs = torch.zeros(len(batch), width, dtype=torch.long)
            for row, (ids, _) in enumerate(batch):
                inputs[row, :len(ids) - 1] = torch.tensor(ids[:-1])
            logits = self.model(inputs.to(self._model_device)).float()
            for row, (ids, n) in enumerate(batch):
                end = len(ids) - 1
                logprobs = F.log_softmax(logits[row, end - n:end], dim=-1)
                target = torch.tensor(ids[-n:], device=logprobs.device)
                total = logprobs.gather(1, target[:, None]).sum().item()
                greedy = bool((logprobs.argmax(-1) == target).all())
                results.append((total, greedy))
            if bar is not None:
                bar.update(len(batch))
        return results

    def _context_and_continuation(self, context: str, continuation: str) -> tuple[list[int], int]:
        ctx = prompt_ids(self.tokenizer, context) if context else self._prefix
        cont = self.tokenizer.encode(continuation)
        ids = (ctx + cont)[-(self.context_len + 1):]  # keep the end: the continuation matters
        return ids, min(len(cont), len(ids) - 1)

    def _bar(self, total: int, desc: str) -> tqdm:
        # stderr, so that a piped table or --json on stdout stays clean
        return tqdm(total=total, desc=desc, unit="seq", file=sys.stderr, dynamic_ncols=True,
                    disable=not self.progress or total == 0)

    # ---------------------------------------------------------------- results bookkeeping
    def _count(self, requests) -> None:
        for r in requests:
            task, doc_id = getattr(r, "task_name", None), getattr(r, "doc_id", None)
            if task is not None and doc_id is not None:
                self._choices[(task, doc_id)].add(getattr(r, "idx", 0))

    def task_counts(self) -> dict[str, TaskCounts]:
        """Per task: documents scored and the chance level of its multiple choice, computed
        from the requests themselves (so it holds for any task, with or without --limit)."""
        per_task: dict[str, list[int]] = defaultdict(list)
        for (task, _), choices in self._choices.items():
            per_task[task].append(len(choices))
        counts = {}
        for task, n_choices in sorted(per_task.items()):
            multiple = all(n > 1 for n in n_choices)
            counts[task] = TaskCounts(
                documents=len(n_choices), mean_choices=sum(n_choices) / len(n_choices),
                chance_level=sum(1 / n for n in n_choices) / len(n_choices) if multiple else None)
        return counts

    # ---------------------------------------------------------------------- LM interface
    def loglikelihood(self, requests) -> list[tuple[float, bool]]:
        self._count(requests)
        items = [self._context_and_continuation(*r.args) for r in requests]
        order = sorted(range(len(items)), key=lambda i: -len(items[i][0]))  # similar lengths batch well
        with self._bar(len(items), "scoring choices") as bar:
            scored = self._score([items[i] for i in order], bar)
        out: list[tuple[float, bool]] = [(0.0, False)] * len(items)
        for i, result in zip(order, scored):
            out[i] = result
        return out

    def loglikelihood_rolling(self, requests) -> list[float]:
        """Every token predicted exactly once, each window with as much context as fits."""
        self._count(requests)
        out = []
        for request in tqdm(requests, desc="rolling loglikelihood", file=sys.stderr,
                            disable=not self.progress or len(requests) < 2):
            ids = self._prefix + self.tokenizer.encode(request.args[0])
            windows = list(_rolling_windows(ids, self.context_len, len(self._prefix)))
            out.append(sum(score for score, _ in self._score(windows)))
        return out

    def generate_until(self, requests) -> list[str]:
        self._count(requests)
        out = []
        for request in tqdm(requests, desc="generating", file=sys.stderr,
                            disable=not self.progress or len(requests) < 2):
            context, kwargs = request.args
            until = kwargs.get("until", [self.tokenizer.decode([self.tokenizer.eot_id])])
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(kwargs.get("max_gen_toks", 64))
            keep = self.context_len - max_new
            ids = prompt_ids(self.tokenizer, context)[-keep:] or self._prefix
            prompt = torch.tensor([ids], device=self._model_device)
            new = generate(self.model, prompt, SamplingConfig(
                max_new_tokens=max_new, greedy=True, stop_token=self.tokenizer.eot_id))
            text = self.tokenizer.decode(new[0].tolist())
            cut = min((text.find(u) for u in until if u and u in text), default=len(text))
            out.append(text[:cut])
        return out


def _rolling_windows(ids: list[int], context_len: int,
                     prefix_len: int = 1) -> Iterable[tuple[list[int], int]]:
    """(window ids, number of new tokens scored at its end) covering ids[prefix_len:] once
    each."""
    predicted = prefix_len  # the prefix (BOS or end-of-text) is never predicted
    while predicted < len(ids):
        end = min(len(ids), predicted + context_len)
        start = max(0, end - context_len - 1)
        yield ids[start:end], end - predicted
        predicted = end


def track_instances() -> list[KrakenLMEval]:
    """The (live) list of every KrakenLMEval created in this process from now on."""
    _created.clear()
    return _created


def counts_table(counts: dict[str, TaskCounts]) -> str:
    """A markdown table (like lm-eval's own) of documents scored and chance level per task."""
    lines = ["|Task|n (documents)|choices|chance level|", "|---|--:|--:|--:|"]
    for task, c in counts.items():
        chance = "-" if c.chance_level is None else f"{c.chance_level:.4f}"
        lines.append(f"|{task}|{c.documents}|{c.mean_choices:g}|{chance}|")
    return "\n".join(lines)


# --------------------------------------------------------------------------- quieter logs
# Messages lm-eval logs on every run that tell the user nothing they can act on. Filtered by
# logger and exact wording, so that every other warning still shows.
_NOISE = {
    # a task YAML without `aggregation`/`higher_is_better` gets the metric's standard default
    "lm_eval.api.task": ("is defined, but aggregation is not. using default",
                         "is defined, but higher_is_better is not. using default"),
}


class _DropNoise(logging.Filter):
    def __init__(self, phrases: tuple[str, ...]):
        super().__init__()
        self.phrases = phrases

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(phrase in message for phrase in self.phrases)


def quiet_lm_eval_noise() -> None:
    """Drop lm-eval's routine log lines listed in _NOISE (idempotent)."""
    for logger_name, phrases in _NOISE.items():
        logger = logging.getLogger(logger_name)
        if not any(isinstance(f, _DropNoise) for f in logger.filters):
            logger.addFilter(_DropNoise(phrases))
