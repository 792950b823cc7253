"""lm-evaluation-harness adapter: any krakenlm checkpoint as an `lm_eval` model.

    lm_eval --model krakenlm --model_args checkpoint=runs/gpt --tasks copa   # once imported
    krakenlm lm-eval --checkpoint runs/gpt --tasks copa,boolq                # the same, offline-aware

Zero-shot multiple choice (the paper's SuperGLUE protocol) needs only `loglikelihood`; the
rolling and generation methods are implemented too so that every task type runs.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from tqdm import tqdm

from ..data.tokenizer import Tokenizer
from ..models.transformer import Transformer
from ..training.checkpoint import load_model
from ..training.runtime import pick_device
from .generate import SamplingConfig, generate


@register_model("krakenlm")
class KrakenLMEval(LM):
    def __init__(self, model: Transformer | None = None, checkpoint: str | None = None,
                 batch_size: int | str = 8, device: str | None = None, **_ignored):
        super().__init__()
        if model is None:
            if checkpoint is None:
                raise ValueError("give model_args checkpoint=DIR")
            model = load_model(checkpoint, device=device or pick_device())
        self.model = model.eval()
        self.tokenizer = Tokenizer()
        self.batch_size_per_call = int(batch_size)
        self.context_len = model.config.context_len

    @property
    def _model_device(self) -> torch.device:
        return self.model.tok_emb.weight.device

    # ------------------------------------------------------------------ scoring helpers
    @torch.no_grad()
    def _score(self, sequences: list[tuple[list[int], int]]) -> list[tuple[float, bool]]:
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
        return results

    def _context_and_continuation(self, context: str, continuation: str) -> tuple[list[int], int]:
        ctx = self.tokenizer.encode(context) if context else [self.tokenizer.eot_id]
        cont = self.tokenizer.encode(continuation)
        ids = (ctx + cont)[-(self.context_len + 1):]  # keep the end: the continuation matters
        return ids, min(len(cont), len(ids) - 1)

    # ---------------------------------------------------------------------- LM interface
    def loglikelihood(self, requests) -> list[tuple[float, bool]]:
        items = [self._context_and_continuation(*r.args) for r in requests]
        order = sorted(range(len(items)), key=lambda i: -len(items[i][0]))  # similar lengths batch well
        scored = self._score([items[i] for i in order])
        out: list[tuple[float, bool]] = [(0.0, False)] * len(items)
        for i, result in zip(order, scored):
            out[i] = result
        return out

    def loglikelihood_rolling(self, requests) -> list[float]:
        """Every token predicted exactly once, each window with as much context as fits."""
        out = []
        for request in tqdm(requests, desc="rolling loglikelihood", disable=len(requests) < 10):
            ids = [self.tokenizer.eot_id] + self.tokenizer.encode(request.args[0])
            windows = list(_rolling_windows(ids, self.context_len))
            out.append(sum(score for score, _ in self._score(windows)))
        return out

    def generate_until(self, requests) -> list[str]:
        out = []
        for request in requests:
            context, kwargs = request.args
            until = kwargs.get("until", [self.tokenizer.decode([self.tokenizer.eot_id])])
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(kwargs.get("max_gen_toks", 64))
            ids = self.tokenizer.encode(context)[-(self.context_len - max_new):] or [self.tokenizer.eot_id]
            prompt = torch.tensor([ids], device=self._model_device)
            new = generate(self.model, prompt, SamplingConfig(
                max_new_tokens=max_new, greedy=True, stop_token=self.tokenizer.eot_id))
            text = self.tokenizer.decode(new[0].tolist())
            cut = min((text.find(u) for u in until if u and u in text), default=len(text))
            out.append(text[:cut])
        return out


def _rolling_windows(ids: list[int], context_len: int) -> Iterable[tuple[list[int], int]]:
    """(window ids, number of new tokens scored at its end) covering ids[1:] once each."""
    predicted = 1  # ids[0] (the end-of-text prefix) is never predicted
    while predicted < len(ids):
        end = min(len(ids), predicted + context_len)
        start = max(0, end - context_len - 1)
        yield ids[start:end], end - predicted
        predicted = end
