"""How many GPU kernels Hugging Face transformers' eager Llama issues per decode step and per
prefill forward: counted, not guessed, by running the installed transformers code on a tiny
random LlamaConfig on the CPU under a `TorchDispatchMode` that records every ATen op.

    python benchmarks/hf_eager_op_count.py [--json]
    python benchmarks/hf_eager_op_count.py --gpt-fast-model-py PATH/gpt-fast/model.py [--json]
    python benchmarks/hf_eager_op_count.py --elementwise-bytes

The third form gives the bytes the v4.35 layer's non-GEMM, non-attention kernels move, per
element of the tensor each layer part works on (`elementwise_bytes_per_element`; its docstring):
RMSNorm 36 bytes per hidden element per norm (a fused kernel: 4), RoPE 20 per q and k element
(fused: 4), SiLU x up 10 per intermediate element (fused: 6), residual adds 6 (as fused),
solved on four tiny configs and exact on all of them. With `--gpt-fast-model-py PATH` too it
gives gpt-fast's eager prefill layer instead (`gpt_fast_elementwise_bytes`): RMSNorm 40 (its
`x * x`, and the fp32 product before the cast), RoPE 48 per q and k element (cast to fp32,
four products, a difference and a sum, stack, cast back), SiLU x up 10, residual adds 6.

The second form counts gpt-fast's eager Llama instead (`gpt_fast_counts`; its docstring): the
model.py of a gpt-fast checkout the user has (pytorch-labs/gpt-fast@87041526, the code the
`eager` profile's per-kernel host time is derived from), imported from that path, not copied.

What is counted (the rule, `launches_kernel`): every ATen op the dispatcher runs for the call,
except the ones that launch no GPU kernel:

* view ops, whose output shares the input's storage (`OpOverload.is_view`, i.e. the schema
  marks the output as an alias of an input: view, transpose, t, slice, select, expand,
  unsqueeze, as_strided, alias, detach ...) and `_unsafe_view` / `_reshape_alias`, which are
  views without the alias annotation. PyTorch documents view ops as "avoid explicit data copy"
  (PyTorch docs, "Tensor Views"): they change only the tensor's metadata on the host;
* allocation without initialisation (`empty`, `empty_like`, `empty_strided`, `new_empty`:
  the caching allocator, no kernel) and metadata queries (`sym_size`, `sym_stride`,
  `sym_numel`, `sym_storage_offset`, `is_same_size`, `lift_fresh`).

Every other op is one kernel: each of the counted ops (mm, add, mul, pow, mean, rsqrt,
_to_copy, cat, neg, silu, index, embedding, scaled-dot-product attention, argmax ...) is one
CUDA kernel in PyTorch's CUDA backend for these shapes (cuBLAS may split a GEMM in two, and
`_local_scalar_dense`, `.item()`, is a device-to-host copy, not a kernel, and synchronises).

Two layer variants are counted:

* `installed`: the installed transformers (`pip show transformers`) with `attn_implementation
  = "sdpa"` and its DynamicCache (`torch.cat` per layer and step: `DynamicLayer.update`).
* `v4.35-bettertransformer`: the attention the optimum-benchmark rows ran (transformers 4.35.2
  + optimum 1.14.1 `to_bettertransformer()`), transcribed from optimum's `llama_forward`
  (optimum/bettertransformer/models/attention.py; stored copy: a diff of the optimum 1.8.8 ->
  1.9.0 PyPI releases, which adds it, stored id 27790841970; optimum 1.14.1 itself not read): per layer `cos, sin = self.rotary_emb(value_states,
  seq_len=kv_seq_len)` (transformers 4.3x: `cos_cached[:seq_len].to(dtype=x.dtype)`, a no-op
  cast when the cache is already in the model dtype), `apply_rotary_pos_emb(q, k, cos, sin,
  position_ids)` (4.3x: `cos[position_ids]`, `sin[position_ids]`: two gathers, then
  `q * cos + rotate_half(q) * sin` and the same for k), `torch.cat` of the past K and V, and
  `scaled_dot_product_attention` with no mask at batch 1 (with the model's mask and a
  `torch.max(mask, finfo.min)` above batch 1). RMSNorm, the MLP and the residual adds are the
  installed decoder layer's, whose code is that of 4.35 (`hidden_states.to(torch.float32)`,
  `pow(2).mean(-1)`, `rsqrt(variance + eps)`, `weight * hidden_states.to(input_dtype)`;
  `down_proj(act_fn(gate_proj(x)) * up_proj(x))`).

Per layer = count(2 layers) - count(1 layer); outside the layers = count(1 layer) - per
layer. A decode step of `generate` = (count(generate 5 new tokens) - count(generate 3)) / 2,
so the step's own work (logits processing, greedy argmax, stopping checks, the cache and
attention-mask bookkeeping) is the step minus the model's decode forward. The outside-layer
counts are the installed version's: its model-level mask, position and RoPE code and its
`generate` loop differ in detail from 4.35's (here the RoPE cos/sin is computed once per
forward, in 4.35 inside every layer, which the v4.35 variant counts in the layer).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from collections import Counter
from typing import Any, Callable

# ATen ops that launch no GPU kernel beyond the view ops (`OpOverload.is_view`): views without
# the alias annotation, allocation without initialisation, and metadata queries.
NO_KERNEL_OPS = frozenset({
    "_unsafe_view", "_reshape_alias",
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size", "lift_fresh",
})

ERAS = ("installed", "v4.35-bettertransformer")
TINY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=4,
            vocab_size=256, max_position_embeddings=512, rms_norm_eps=1e-5)
PROMPT_TOKENS = 8
# the layer part the running code belongs to, for the byte count (`elementwise_bytes`)
LAYER_PART = {"kind": "outside"}


def launches_kernel(func: Any) -> bool:
    """The counting rule: an ATen op launches a kernel unless it is a view or in NO_KERNEL_OPS."""
    return not func.is_view and func.overloadpacket.__name__ not in NO_KERNEL_OPS


def count_kernels(fn: Callable[[], Any], parts: Counter | None = None) -> Counter:
    """The kernels (ATen op names, by the rule above) that running `fn` issues; with `parts`,
    also counted there by the layer part running (LAYER_PART["kind"], set by the hooks of
    `_tag_layer_parts`)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts: Counter = Counter()

    class _Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if launches_kernel(func):
                counts[func.overloadpacket.__name__] += 1
                if parts is not None:
                    parts[LAYER_PART["kind"]] += 1
            return func(*args, **(kwargs or {}))

    with _Counter():
        fn()
    return counts


def _era_attention(attn: Any, era_rope: tuple[Any, Any]):
    """optimum's BetterTransformer `llama_forward` over transformers 4.35 (module docstring),
    keeping its own tuple cache (past K, V) on the module as the 4.35 model passes it back."""
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    cos_cached, sin_cached = era_rope
    num_heads = attn.config.num_attention_heads
    head_dim = attn.head_dim
    hidden = attn.config.hidden_size

    def rotate_half(x):
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def forward(hidden_states, position_embeddings=None, attention_mask=None, cache=None,
                position_ids=None, **kwargs):
        bsz, q_len, _ = hidden_states.size()
        shape = (bsz, q_len, num_heads, head_dim)
        query_states = attn.q_proj(hidden_states).view(shape).transpose(1, 2)
        key_states = attn.k_proj(hidden_states).view(shape).transpose(1, 2)
        value_states = attn.v_proj(hidden_states).view(shape).transpose(1, 2)
        past = getattr(attn, "_era_past", None)
        kv_seq_len = key_states.shape[-2] + (past[0].shape[-2] if past is not None else 0)
        LAYER_PART["kind"] = "rope"  # the byte count's layer part (`elementwise_bytes`)
        # LlamaRotaryEmbedding.forward(x, seq_len) of 4.3x
        cos = cos_cached[:kv_seq_len].to(dtype=value_states.dtype)
        sin = sin_cached[:kv_seq_len].to(dtype=value_states.dtype)
        # apply_rotary_pos_emb(q, k, cos, sin, position_ids) of 4.3x
        cos = cos[position_ids].unsqueeze(1)
        sin = sin[position_ids].unsqueeze(1)
        query_states = (query_states * cos) + (rotate_half(query_states) * sin)
        key_states = (key_states * cos) + (rotate_half(key_states) * sin)
        LAYER_PART["kind"] = "other"
        if past is not None:
            key_states = torch.cat([past[0], key_states], dim=2)
            value_states = torch.cat([past[1], value_states], dim=2)
        attn._era_past = (key_states, value_states)
        if bsz == 1:
            attn_output = torch.nn.functional.scaled_dot_product_attention(
                query_states, key_states, value_states, attn_mask=None, dropout_p=0.0,
                is_causal=q_len > 1)
        else:
            mask = attention_mask
            if mask is None or mask.dtype == torch.bool:
                # the 4.35 model passed an additive float 4-D mask (built outside the layers)
                with _disable_current_modes():
                    mask = torch.zeros(bsz, 1, q_len, kv_seq_len, dtype=query_states.dtype)
            mask = torch.max(mask, torch.tensor(torch.finfo(mask.dtype).min))
            attn_output = torch.nn.functional.scaled_dot_product_attention(
                query_states, key_states, value_states, attn_mask=mask, dropout_p=0.0,
                is_causal=False)
        attn_output = attn_output.transpose(1, 2).reshape(bsz, q_len, hidden)
        return attn.o_proj(attn_output), None

    return forward


def _model(layers: int, era: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(num_hidden_layers=layers, **TINY)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.float16).eval()
    if era == "v4.35-bettertransformer":
        head_dim = TINY["hidden_size"] // TINY["num_attention_heads"]
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        freqs = torch.outer(torch.arange(TINY["max_position_embeddings"]).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        # from_pretrained(torch_dtype=float16) builds the buffers in the model dtype
        rope = (emb.cos().to(torch.float16), emb.sin().to(torch.float16))
        for layer in model.model.layers:
            layer.self_attn.forward = _era_attention(layer.self_attn, rope)
        # the era computed cos / sin inside every layer (counted there), not once per forward
        model.model.rotary_emb.forward = lambda x, position_ids=None: (None, None)
    return model


def _reset_era_cache(model) -> None:
    for layer in model.model.layers:
        layer.self_attn.__dict__.pop("_era_past", None)


def forward_counts(layers: int, era: str, batch: int = 1) -> dict[str, Counter]:
    """Kernels of one prefill forward (PROMPT_TOKENS tokens) and of the decode forward after it,
    by op ("prefill", "decode") and by layer part ("prefill parts", "decode parts":
    `_tag_layer_parts`, the era's RoPE tagging itself)."""
    import torch
    from transformers.cache_utils import DynamicCache

    model = _model(layers, era)
    ids = torch.randint(0, TINY["vocab_size"], (batch, PROMPT_TOKENS))
    mask = torch.ones(batch, PROMPT_TOKENS + 1, dtype=torch.long)
    out: dict[str, Counter] = {"prefill parts": Counter(), "decode parts": Counter()}
    handles = _tag_layer_parts(model.model.layers, model.model.norm, LAYER_PART,
                               norms=("input_layernorm", "post_attention_layernorm"),
                               mlp="mlp", attention="self_attn",
                               embedding=model.model.embed_tokens, lm_head=model.lm_head)
    try:
        with torch.no_grad():
            cache = DynamicCache(config=model.config)
            box = {}

            def prefill():
                box["out"] = model(input_ids=ids, attention_mask=mask[:, :-1], cache=cache,
                                   use_cache=True)

            LAYER_PART["kind"] = "outside"
            out["prefill"] = count_kernels(prefill, out["prefill parts"])
            nxt = box["out"].logits[:, -1:].argmax(-1)
            pos = torch.full((batch, 1), PROMPT_TOKENS)
            LAYER_PART["kind"] = "outside"
            out["decode"] = count_kernels(
                lambda: model(input_ids=nxt, attention_mask=mask, cache=cache, position_ids=pos,
                              use_cache=True), out["decode parts"])
    finally:
        for h in handles:
            h.remove()
        _reset_era_cache(model)
    return out


def generate_step_counts(era: str, batch: int = 1) -> Counter:
    """Kernels of one `generate` decode step (greedy, min_new_tokens = max_new_tokens, as the
    optimum-benchmark rows ran it): the difference of 5 and 3 new tokens, halved."""
    import torch

    model = _model(1, era)
    ids = torch.randint(0, TINY["vocab_size"], (batch, PROMPT_TOKENS))
    mask = torch.ones_like(ids)
    runs = {}
    for n in (3, 5):
        _reset_era_cache(model)
        with torch.no_grad():
            runs[n] = count_kernels(lambda: model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                do_sample=False, pad_token_id=0, eos_token_id=1))
    diff = Counter(runs[5])
    diff.subtract(runs[3])
    if any(v % 2 for v in diff.values()):
        raise RuntimeError(f"generate steps differ in their kernels: {dict(diff)}")
    return Counter({k: v // 2 for k, v in diff.items() if v})


def issued_fields(one: dict[str, Counter], two: dict[str, Counter]) -> dict[str, int]:
    """The per-part fields of the simulator's `issued_kernels` (constants/software.py
    `IssuedKernels`) from the part counts of a 1- and a 2-layer model: per layer = count(2
    layers) - count(1 layer) of each part. A layer's two RMSNorms share "norm", its attention
    block without RoPE is "other", the gated MLP "activation"; the two residual adds
    ("residual") are the graph's own operators, one kernel each, and checked to be so, as are
    the final norm (an RMSNorm like the layers'), the embedding gather and the LM head, the
    graph's operators outside the layers. `outside_layers_<phase>` is the rest of the forward
    outside the layers ("outside": mask and position bookkeeping), to which a decode step adds
    its own loop (`generate_step_outside_model`, the sampling step)."""
    fields: dict[str, int] = {}
    for phase in ("prefill", "decode"):
        part = Counter(two[f"{phase} parts"])
        part.subtract(one[f"{phase} parts"])
        if part["norm"] % 2 or part["residual"] != 2:
            raise RuntimeError(f"unexpected {phase} layer parts: {dict(part)}")
        fields.update({"rmsnorm": part["norm"] // 2, "rope": part["rope"],
                       f"attention_{phase}": part["other"], "gated_mlp": part["activation"]})
        head = one[f"{phase} parts"]
        if (head["final_norm"], head["embedding"], head["lm_head"]) != (fields["rmsnorm"], 1, 1):
            raise RuntimeError(f"unexpected {phase} parts outside the layers: {dict(head)}")
        fields[f"outside_layers_{phase}"] = head["outside"]
    return fields


def measure(era: str, batch: int = 1) -> dict[str, int]:
    """The kernel counts the simulator's `issued_kernels` profile section takes (the per-part
    fields, `issued_fields`), with the per-layer totals they add up to."""
    one, two = forward_counts(1, era, batch), forward_counts(2, era, batch)
    result: dict[str, int] = dict(issued_fields(one, two))
    for phase in ("prefill", "decode"):
        per_layer = sum(two[phase].values()) - sum(one[phase].values())
        result[f"layer_{phase}"] = per_layer
        result[f"forward_outside_layers_{phase}"] = sum(one[phase].values()) - per_layer
    step = sum(generate_step_counts(era, batch).values())
    result["generate_step"] = step
    result["generate_step_outside_model"] = step - sum(one["decode"].values())
    result["outside_layers_decode"] += result["generate_step_outside_model"]
    return result


def layer_breakdown(era: str, phase: str = "decode") -> Counter:
    one, two = forward_counts(1, era)[phase], forward_counts(2, era)[phase]
    diff = Counter(two)
    diff.subtract(one)
    return Counter({k: v for k, v in diff.items() if v})



# --------------------------------------------------------------------------- elementwise bytes
# The bytes of the non-GEMM, non-attention kernels (`elementwise_bytes`): by the same counting
# rule, each counted kernel's input and output tensors' nbytes summed (a view's own elements;
# a kernel writing in place counts its tensor as read and as written), grouped by the
# layer part that issues it. GEMMs (mm, addmm, bmm), attention (scaled dot product *) and the
# decode step's torch.cat of the past K and V (the simulator's `kv_append: concat`) are left
# out: the graph times those already.
NOT_ELEMENTWISE = ("mm", "addmm", "bmm", "scaled_dot_product")
# the layer parts, as the simulator's graph names its streaming kinds
ELEMENTWISE_KINDS = ("norm", "rope", "activation", "residual", "other")
# tiny configs of distinct widths the bytes are solved on (hidden, intermediate, heads)
BYTES_CONFIGS = ((64, 128, 4), (96, 256, 4), (128, 160, 8), (160, 384, 8))


def _tensor_bytes(value: Any) -> int:
    import torch
    from torch.utils._pytree import tree_flatten

    return sum(t.numel() * t.element_size() for t in tree_flatten(value)[0]
               if isinstance(t, torch.Tensor))


def _is_elementwise(func: Any, args: tuple) -> bool:
    name = func.overloadpacket.__name__
    if any(name.startswith(n) or n in name for n in NOT_ELEMENTWISE):
        return False
    if name == "cat" and len(args) > 1 and args[1] == 2:  # torch.cat([past, new], dim=2)
        return False
    return launches_kernel(func)


def _tag_layer_parts(layers, final_norm, state: dict, *, norms: tuple[str, str], mlp: str,
                     attention: str, embedding=None, lm_head=None) -> list:
    """Hooks that set state["kind"] to the layer part running: the RMSNorms (attributes `norms`
    of each layer) "norm", the MLP (`mlp`: SiLU and the gate x up product; its GEMMs are not
    counted) "activation", the attention (`attention`) "other" (an era's RoPE sets "rope"
    itself), the rest of the decoder layer (the residual adds) "residual", the final norm
    "final_norm", the `embedding` and `lm_head` modules (when given) their names, and the rest
    of the step (masks, positions, sampling) "outside". Attribute names: transformers' Llama or
    gpt-fast's Transformer."""
    handles = []

    def setter(kind):
        def hook(*_):
            state["kind"] = kind
        return hook

    for module, kind in ((embedding, "embedding"), (lm_head, "lm_head")):
        if module is not None:
            handles.append(module.register_forward_pre_hook(setter(kind)))
            handles.append(module.register_forward_hook(setter("outside")))

    for layer in layers:
        handles.append(layer.register_forward_pre_hook(setter("residual")))
        for norm in (getattr(layer, name) for name in norms):
            handles.append(norm.register_forward_pre_hook(setter("norm")))
            handles.append(norm.register_forward_hook(setter("residual")))
        for name, kind in ((mlp, "activation"), (attention, "other")):
            handles.append(getattr(layer, name).register_forward_pre_hook(setter(kind)))
            handles.append(getattr(layer, name).register_forward_hook(setter("residual")))
    handles.append(final_norm.register_forward_pre_hook(setter("final_norm")))
    handles.append(final_norm.register_forward_hook(setter("outside")))
    return handles


def elementwise_bytes(layers: int, hidden: int, intermediate: int, heads: int,
                      batch: int = 1) -> dict[str, Counter]:
    """Bytes the elementwise kernels of the v4.35-bettertransformer variant move, per layer
    part, in a prefill forward (PROMPT_TOKENS tokens) and the decode forward after it."""
    import torch
    from transformers.cache_utils import DynamicCache

    saved = dict(TINY)
    TINY.update(hidden_size=hidden, intermediate_size=intermediate, num_attention_heads=heads,
                num_key_value_heads=heads)
    try:
        model = _model(layers, "v4.35-bettertransformer")
    finally:
        TINY.clear()
        TINY.update(saved)
    state = LAYER_PART
    handles = _tag_layer_parts(model.model.layers, model.model.norm, state,
                               norms=("input_layernorm", "post_attention_layernorm"),
                               mlp="mlp", attention="self_attn")
    moved: Counter = Counter()
    ids = torch.randint(0, saved["vocab_size"], (batch, PROMPT_TOKENS))
    mask = torch.ones(batch, PROMPT_TOKENS + 1, dtype=torch.long)
    out: dict[str, Counter] = {}
    try:
        with torch.no_grad(), _bytes_mode(moved, state):
            cache = DynamicCache(config=model.config)
            state["kind"] = "outside"
            logits = model(input_ids=ids, attention_mask=mask[:, :-1], cache=cache,
                           use_cache=True).logits
            out["prefill"] = Counter(moved)
            state["kind"] = "outside"
            nxt = logits[:, -1:].argmax(-1)
            moved.clear()
            model(input_ids=nxt, attention_mask=mask, cache=cache,
                  position_ids=torch.full((batch, 1), PROMPT_TOKENS), use_cache=True)
            out["decode"] = Counter(moved)
    finally:
        for h in handles:
            h.remove()
        _reset_era_cache(model)
    return out


def _bytes_mode(moved: Counter, state: dict):
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Bytes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if _is_elementwise(func, args):
                moved[state["kind"]] += _tensor_bytes((args, kwargs)) + _tensor_bytes(out)
            return out

    return _Bytes()


def gpt_fast_elementwise_bytes(module, layers: int, hidden: int, intermediate: int, heads: int,
                               batch: int = 1) -> dict[str, Counter]:
    """Bytes gpt-fast's eager prefill forward (PROMPT_TOKENS tokens, bfloat16, its static
    cache) moves in elementwise kernels, per layer part, tagged as `elementwise_bytes` does:
    RMSNorm modules "norm", FeedForward "activation", `apply_rotary_emb` "rope" (wrapped on the
    imported module), the rest of Attention (cache index_put_, .contiguous()) "other", the
    block's residual adds "residual". Batch 1: gpt-fast's generate prefills one prompt."""
    import torch

    args = module.ModelArgs(n_layer=layers, block_size=64, vocab_size=256, n_head=heads,
                            dim=hidden, intermediate_size=intermediate)
    torch.manual_seed(0)
    model = module.Transformer(args)
    model.setup_caches(max_batch_size=batch, max_seq_length=GPT_FAST_CACHE_TOKENS)
    model = model.to(torch.bfloat16).eval()
    state = LAYER_PART
    handles, rope = _tag_gpt_fast_parts(module, model)
    moved: Counter = Counter()
    try:
        with torch.no_grad(), _bytes_mode(moved, state):
            state["kind"] = "outside"
            ids = torch.randint(0, args.vocab_size, (batch, PROMPT_TOKENS))
            model(ids, torch.arange(0, PROMPT_TOKENS))
    finally:
        module.apply_rotary_emb = rope
        for h in handles:
            h.remove()
    return {"prefill": Counter(moved)}


def elementwise_bytes_per_element(batch: int = 1, measure: Callable | None = None
                                  ) -> dict[str, Any]:
    """The prefill layer's elementwise bytes per element of the tensor each part works on, solved
    on BYTES_CONFIGS and checked exact on every one of them (per token, per layer):

        norm       = n x 2 hidden + k          (two RMSNorms; k: their per-row statistics)
        rope       = r x (hidden + kv_dim) + g x head_dim + c   (q and k; cos / sin gathers)
        activation = a x intermediate          (SiLU, gate x up)
        residual   = s x 2 hidden              (two residual adds)

    a and s from the first config, n and k from the first two, r, g and c from the first three (kv_dim = hidden: the
    transcribed era attention is multi-head, as Llama-2-7B / 13B). Per layer = count(2 layers)
    - count(1 layer), at PROMPT_TOKENS tokens and `batch` sequences. RMSNorm's weight read
    (2 x hidden bytes per call, not per token) is left in n: at PROMPT_TOKENS x batch tokens it
    adds 2 x 2 hidden / tokens bytes per token; the check allows it."""
    import numpy as np

    measure = measure or elementwise_bytes
    rows = []
    for hidden, inter, heads in BYTES_CONFIGS:
        one = measure(1, hidden, inter, heads, batch)["prefill"]
        two = measure(2, hidden, inter, heads, batch)["prefill"]
        tokens = PROMPT_TOKENS * batch
        per = {k: (two[k] - one[k]) / tokens for k in ELEMENTWISE_KINDS}
        rows.append((hidden, inter, hidden // heads, per))
    weight_per_token = [2 * 2 * h / (PROMPT_TOKENS * batch) for h, _, _, _ in rows]
    norm_bytes = [p["norm"] - w for (*_, p), w in zip(rows, weight_per_token)]
    n, k = np.linalg.solve(np.array([[2 * h, 1] for h, *_ in rows[:2]], float), norm_bytes[:2])
    act = [p["activation"] / i for _, i, _, p in rows]
    res = [p["residual"] / (2 * h) for h, _, _, p in rows]
    A = np.array([[2 * h, d, 1] for h, _, d, _ in rows[:3]], float)
    r, g, c = np.linalg.solve(A, [p["rope"] for _, _, _, p in rows[:3]])
    rope_fit = [2 * h * r + d * g + c for h, _, d, _ in rows]
    exact = {"norm": all(abs(2 * h * n + k - b) < 1e-6 for (h, *_), b in zip(rows, norm_bytes)),
             "activation": max(act) == min(act), "residual": max(res) == min(res),
             "rope": all(abs(f - p["rope"]) < 1e-6 for f, (_, _, _, p) in zip(rope_fit, rows)),
             "other": all(p["other"] * PROMPT_TOKENS * batch < 1024 for *_, p in rows)}
    return {"norm_bytes_per_element": float(n), "norm_bytes_per_token": float(k),
            "rope_bytes_per_element": float(r),
            "rope_gather_bytes_per_head_dim": float(g), "rope_bytes_per_token": float(c),
            "activation_bytes_per_element": act[0], "residual_bytes_per_element": res[0],
            "other_bytes_per_layer": rows[0][3]["other"] * PROMPT_TOKENS * batch,
            "exact": exact, "configs": [(h, i, d) for h, i, d, _ in rows],
            "per_token": [{k: round(v, 3) for k, v in p.items()} for *_, p in rows]}

# A tiny gpt-fast ModelArgs (its own fields) and the prompt / cache lengths of the count.
GPT_FAST_TINY = dict(block_size=64, vocab_size=256, n_head=4, dim=64)
GPT_FAST_CACHE_TOKENS = 32
# gpt-fast generate.py `main`'s sampling defaults, which the blog's runs used
GPT_FAST_TEMPERATURE, GPT_FAST_TOP_K = 0.8, 200


def load_gpt_fast_model(model_py: str):
    """Import gpt-fast's model.py from the user's path (its code is not in this repository)."""
    path = Path(model_py)
    if not path.is_file():
        raise SystemExit(f"error: --gpt-fast-model-py {model_py}: no such file (give the model.py "
                         "of a pytorch-labs/gpt-fast checkout, commit 87041526)")
    spec = importlib.util.spec_from_file_location("gpt_fast_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("ModelArgs", "Transformer"):
        if not hasattr(module, name):
            raise SystemExit(f"error: --gpt-fast-model-py {model_py}: no `{name}` in it "
                             "(not gpt-fast's model.py)")
    return module


def _gpt_fast_sampling_step(logits):
    """The kernels gpt-fast's eager decode loop runs per token besides the model's forward, as
    ATen ops (generate.py `decode_n_tokens` / `decode_one_token` / `sample` / `logits_to_probs`
    / `multinomial_sample_one_no_sync`, stored copy id 43925398078, commit 0055c42d; not
    imported: it needs sentencepiece): logits / temperature, topk(top_k), `where(logits <
    pivot, -inf, logits)`, softmax, `empty_like(probs).exponential_(1)`, probs / q, argmax,
    cast to int; then `input_pos += 1` and the two `.clone()`s of the token and the probs."""
    import torch

    logits = logits[0, -1] / max(GPT_FAST_TEMPERATURE, 1e-5)
    v, _ = torch.topk(logits, min(GPT_FAST_TOP_K, logits.size(-1)))
    pivot = v.select(-1, -1).unsqueeze(-1)
    logits = torch.where(logits < pivot, -float("Inf"), logits)
    probs = torch.nn.functional.softmax(logits, dim=-1)
    q = torch.empty_like(probs).exponential_(1)
    token = torch.argmax(probs / q, dim=-1, keepdim=True).to(dtype=torch.int)
    return token.clone(), probs.clone()


def _gpt_fast_forward_counts(module, layers: int) -> dict[str, Counter]:
    """Kernels of gpt-fast's prefill forward (PROMPT_TOKENS tokens) and of one decode forward
    after it, as its eager generate runs them: static KV cache (`setup_caches`, written with
    `index_put_`), bfloat16, the decode step under the math SDPA backend (`decode_n_tokens`
    enters `sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_math=True)`), the
    prefill under the default one."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    args = module.ModelArgs(n_layer=layers, **GPT_FAST_TINY)
    torch.manual_seed(0)
    model = module.Transformer(args)
    model.setup_caches(max_batch_size=1, max_seq_length=GPT_FAST_CACHE_TOKENS)
    model = model.to(torch.bfloat16).eval()
    out: dict[str, Counter] = {"prefill parts": Counter(), "decode parts": Counter()}
    handles, rope = _tag_gpt_fast_parts(module, model)
    try:
        with torch.no_grad():
            ids = torch.randint(0, args.vocab_size, (1, PROMPT_TOKENS))
            LAYER_PART["kind"] = "outside"
            out["prefill"] = count_kernels(lambda: model(ids, torch.arange(0, PROMPT_TOKENS)),
                                           out["prefill parts"])
            token = torch.randint(0, args.vocab_size, (1, 1))
            pos = torch.tensor([PROMPT_TOKENS], dtype=torch.int)
            with sdpa_kernel(SDPBackend.MATH):
                LAYER_PART["kind"] = "outside"
                out["decode"] = count_kernels(lambda: model(token, pos), out["decode parts"])
                logits = model(token, pos)
            sampling = Counter(count_kernels(lambda: _gpt_fast_sampling_step(logits)))
            sampling += count_kernels(lambda: pos.add_(1))
            out["sampling"] = sampling
    finally:
        module.apply_rotary_emb = rope
        for h in handles:
            h.remove()
    return out


def _tag_gpt_fast_parts(module, model) -> tuple[list, Callable]:
    """`_tag_layer_parts` on gpt-fast's Transformer, and its `apply_rotary_emb` wrapped (on the
    imported module) to tag "rope"; returns the hooks and the original function to restore."""
    rope = module.apply_rotary_emb

    def tagged_rope(x, freqs_cis):
        LAYER_PART["kind"] = "rope"
        try:
            return rope(x, freqs_cis)
        finally:
            LAYER_PART["kind"] = "other"

    handles = _tag_layer_parts(model.layers, model.norm, LAYER_PART,
                               norms=("attention_norm", "ffn_norm"), mlp="feed_forward",
                               attention="attention", embedding=model.tok_embeddings,
                               lm_head=model.output)
    module.apply_rotary_emb = tagged_rope
    return handles, rope


def gpt_fast_counts(model_py: str) -> dict[str, Any]:
    """gpt-fast's eager kernels per layer and outside the layers (the `issued_kernels` fields),
    by the same rule and differencing as the transformers count: per layer = count(2 layers) -
    count(1 layer). The decode step outside the layers is the forward's (embedding, the mask
    and RoPE gathers `causal_mask[None, None, input_pos]`, `freqs_cis[input_pos]`, final
    RMSNorm, LM head) plus the sampling step (`_gpt_fast_sampling_step`, top-k 200,
    temperature 0.8 as the blog's generate.py defaults). The installed PyTorch's math SDPA backend
    upcasts bf16 q, k, v to fp32 and the output back (`_scaled_dot_product_attention_math`:
    "Keep query, key, value in high precision", 5 more kernels per layer) unless
    `torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)`, a switch that came with the
    upcast; the count sets it, taking the blog's 2023 PyTorch to have had no upcast (an
    assumption: its attention.cpp was not read), and reports the layer without it too
    (`upcast_math_sdpa_layer_decode`)."""
    module = load_gpt_fast_model(model_py)
    import torch

    flag = torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp
    was = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    try:
        flag(True)
        one, two = _gpt_fast_forward_counts(module, 1), _gpt_fast_forward_counts(module, 2)
        flag(False)
        upcast = (sum(_gpt_fast_forward_counts(module, 2)["decode"].values())
                  - sum(_gpt_fast_forward_counts(module, 1)["decode"].values()))
    finally:
        flag(was)
    result: dict[str, Any] = dict(issued_fields(one, two))
    for phase in ("prefill", "decode"):
        per_layer = sum(two[phase].values()) - sum(one[phase].values())
        result[f"layer_{phase}"] = per_layer
        result[f"forward_outside_layers_{phase}"] = sum(one[phase].values()) - per_layer
    result["sampling_step"] = sum(one["sampling"].values())
    result["outside_layers_decode"] += result["sampling_step"]
    # a decode token: the layers, the embedding gather, final norm and LM head (the graph's
    # operators outside the layers) and the rest of the step
    result["upcast_math_sdpa_layer_decode"] = upcast
    layer = Counter(two["decode"])
    layer.subtract(one["decode"])
    result["decode layer, by op"] = dict(sorted((k, v) for k, v in layer.items() if v))
    result["sampling step, by op"] = dict(sorted(one["sampling"].items()))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    parser.add_argument("--elementwise-bytes", action="store_true",
                        help="the v4.35 layer's elementwise bytes per element instead of the "
                             "kernel counts (`elementwise_bytes_per_element`)")
    parser.add_argument("--gpt-fast-model-py", metavar="PATH",
                        help="count gpt-fast's eager Llama instead: the model.py of a "
                             "pytorch-labs/gpt-fast checkout (commit 87041526)")
    args = parser.parse_args()
    if args.elementwise_bytes and args.gpt_fast_model_py:
        module = load_gpt_fast_model(args.gpt_fast_model_py)
        report = {"gpt-fast, batch 1": elementwise_bytes_per_element(
            1, lambda *a: gpt_fast_elementwise_bytes(module, *a))}
        print(json.dumps(report, indent=1))
        return
    if args.elementwise_bytes:
        report = {f"batch {b}": elementwise_bytes_per_element(b) for b in (1, 2)}
        print(json.dumps(report, indent=1))
        return
    if args.gpt_fast_model_py:
        gpt_fast_main(args.gpt_fast_model_py, args.json)
        return
    import torch
    import transformers

    report = {"transformers": transformers.__version__, "torch": torch.__version__,
              "config": TINY, "prompt_tokens": PROMPT_TOKENS}
    for era in ERAS:
        report[era] = {f"batch {b}": measure(era, b) for b in (1, 2)}
        report[era]["decode layer, by op"] = dict(sorted(layer_breakdown(era).items()))
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"transformers {report['transformers']}, torch {report['torch']}; tiny Llama "
          f"{TINY['hidden_size']} wide, prompt {PROMPT_TOKENS} tokens, float16 on the CPU")
    for era in ERAS:
        print(f"\n{era}:")
        for b in (1, 2):
            counts = report[era][f"batch {b}"]
            print(f"  batch {b}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        one = report[era]["batch 1"]
        print(f"  per layer (batch 1): {one['layer_prefill']} prefill, {one['layer_decode']} "
              f"decode; issued_kernels: {_fields_line(one)}, outside_layers_prefill "
              f"{one['outside_layers_prefill']}, outside_layers_decode "
              f"{one['outside_layers_decode']} (besides the embedding, final norm and LM head)")
        print("  decode layer by op: " + ", ".join(
            f"{k} {v}" for k, v in report[era]["decode layer, by op"].items()))


def _fields_line(counts: dict[str, Any]) -> str:
    return ", ".join(f"{k} {counts[k]}" for k in ("rmsnorm", "rope", "attention_prefill",
                                                  "attention_decode", "gated_mlp"))


# LLaMA-7B (gpt-fast transformer_configs["7B"]: 32 layers): the token the blog times
GPT_FAST_7B_LAYERS = 32


def gpt_fast_main(model_py: str, as_json: bool) -> None:
    counts = gpt_fast_counts(model_py)
    import torch

    # one 7B token: 32 layers, the forward outside them and the sampling step
    per_token = (GPT_FAST_7B_LAYERS * counts["layer_decode"]
                 + counts["forward_outside_layers_decode"] + counts["sampling_step"])
    counts["torch"] = torch.__version__
    counts["kernels per 7B decode token"] = per_token
    if as_json:
        print(json.dumps(counts, indent=1))
        return
    print(f"gpt-fast {model_py}, torch {torch.__version__}; tiny ModelArgs {GPT_FAST_TINY}, "
          f"prompt {PROMPT_TOKENS} tokens, bfloat16 on the CPU")
    print(f"  per layer: {counts['layer_prefill']} prefill, {counts['layer_decode']} decode; "
          f"issued_kernels: {_fields_line(counts)}, outside_layers_prefill "
          f"{counts['outside_layers_prefill']}, outside_layers_decode "
          f"{counts['outside_layers_decode']} (of which sampling {counts['sampling_step']}; "
          "besides the embedding, final norm and LM head)")
    print(f"  decode layer with the installed math SDPA's default fp32 upcast: "
          f"{counts['upcast_math_sdpa_layer_decode']}")
    print("  decode layer by op: " + ", ".join(
        f"{k} {v}" for k, v in counts["decode layer, by op"].items()))
    print("  sampling step by op: " + ", ".join(
        f"{k} {v}" for k, v in counts["sampling step, by op"].items()))
    print(f"  per 7B decode token: {GPT_FAST_7B_LAYERS} x {counts['layer_decode']} + "
          f"{counts['forward_outside_layers_decode']} + {counts['sampling_step']} = {per_token} "
          "kernels; the blog's eager 39.2 ms "
          f"per token / {per_token} = {39.2e-3 / per_token * 1e6:.2f} us per kernel")


if __name__ == "__main__":
    main()
