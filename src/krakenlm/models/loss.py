"""Cross-entropy of the LM head without materialising the [tokens, vocab] logits.

With a 50k vocabulary the LM head dominates small models: a batch of 4096 tokens has 206M
logits, and the unfused path writes them in bf16, copies them to fp32, runs log-softmax and its
backward over them and keeps them alive for autograd. Here the vocabulary is processed in
column chunks that stay in cache:

  forward:  lse = logsumexp over chunks of h @ W[c].T (running log-add-exp); the target logit
            is a row-wise dot product h . W[target]; loss = mean(lse - target_logit).
  backward: per chunk, recompute the logits, form (softmax - one_hot) / n and fold it into
            grad_W[c] = G.T @ h (one GEMM per chunk, written once) and grad_h += G @ W[c].

That trades one extra LM-head matmul for never holding the logits, and every grad_W row is the
result of a single GEMM, exactly as in the unfused path, so precision is unchanged.
"""

from __future__ import annotations

import torch

IGNORE_INDEX = -1
_CHUNK_ELEMENTS = 4 << 20  # ~16 MB of fp32 logits per chunk: big GEMMs, still cache friendly


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    if torch.is_autocast_enabled(t.device.type):
        return torch.get_autocast_dtype(t.device.type)
    return t.dtype


def _vocab_chunks(rows: int, vocab_size: int):
    cols = max(256, (_CHUNK_ELEMENTS // max(1, rows)) // 64 * 64)
    for start in range(0, vocab_size, cols):
        yield start, min(vocab_size, start + cols)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                compute_dtype: torch.dtype):
        h, w = hidden.to(compute_dtype), weight.to(compute_dtype)
        lse = torch.full((h.shape[0],), float("-inf"), device=h.device)
        for start, end in _vocab_chunks(h.shape[0], w.shape[0]):
            chunk_lse = torch.logsumexp((h @ w[start:end].t()).float(), dim=-1)
            lse = torch.logaddexp(lse, chunk_lse)
        valid = targets != IGNORE_INDEX
        safe_targets = targets.clamp_min(0)
        target_logit = (h.float() * w[safe_targets].float()).sum(-1)
        n_valid = valid.sum().clamp_min(1)
        loss = ((lse - target_logit) * valid).sum() / n_valid
        ctx.save_for_backward(hidden, weight, safe_targets, valid, lse, n_valid)
        ctx.compute_dtype = compute_dtype
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        hidden, weight, targets, valid, lse, n_valid = ctx.saved_tensors
        h, w = hidden.to(ctx.compute_dtype), weight.to(ctx.compute_dtype)
        row_scale = (valid * (grad_loss / n_valid))[:, None]
        grad_h = torch.zeros(h.shape, dtype=torch.float32, device=h.device)
        grad_w = torch.empty(weight.shape, dtype=weight.dtype, device=weight.device)
        rows = torch.arange(h.shape[0], device=h.device)
        for start, end in _vocab_chunks(h.shape[0], w.shape[0]):
            probs = (h @ w[start:end].t()).float().sub_(lse[:, None]).exp_()
            hit = (targets >= start) & (targets < end)
            probs[rows[hit], targets[hit] - start] -= 1.0  # softmax - one_hot
            g = probs.mul_(row_scale).to(ctx.compute_dtype)
            grad_w[start:end] = g.t() @ h
            grad_h += g @ w[start:end]
        return grad_h.to(hidden.dtype), grad_w, None, None


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor,
                         targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of softmax(hidden @ weight.T) against targets (-1 is ignored).

    hidden: [N, e]; weight: [V, e]; targets: [N]. Equal to
    F.cross_entropy(hidden @ weight.T, targets, ignore_index=-1) up to rounding.
    """
    return _LinearCrossEntropy.apply(hidden, weight, targets, _compute_dtype(hidden))
