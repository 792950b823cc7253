"""Export the tiny presets to Hugging Face and compare transformers' outputs with ours.

For each model: random weights (seeded), `export_hf`, `AutoModelForCausalLM.from_pretrained`,
then the largest |logit difference| over a [2, 128] batch and whether 32 greedy tokens agree
(transformers' generate with its KV cache vs krakenlm's). Prints a markdown table (the one in
docs/huggingface.md).

    .venv/bin/python benchmarks/hf_equivalence.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch
import transformers
from tqdm import tqdm

from krakenlm.evaluation.generate import SamplingConfig, generate
from krakenlm.interop.hf_export import export_hf
from krakenlm.models import get_preset
from krakenlm.models.transformer import Transformer
from krakenlm.runtime.checkpoint import save_checkpoint

MODELS = {
    "gpt-tiny": get_preset("gpt-tiny"),
    "gpt-tiny, Llama block": get_preset("gpt-tiny").replace(
        norm="rmsnorm", activation="swiglu", position="rope", n_kv_heads=4, tie_embeddings=False),
    "parallel-tiny": get_preset("parallel-tiny"),
    "kraken-tiny-2way": get_preset("kraken-tiny-2way"),
    "kraken-tiny-4way": get_preset("kraken-tiny-4way"),
}


def main() -> None:
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, config in tqdm(MODELS.items(), desc="export + compare", unit="model"):
            model = Transformer(config)
            model.reset_parameters(seed=0)
            ckpt, out = Path(tmp) / f"{len(rows)}-ckpt", Path(tmp) / f"{len(rows)}-hf"
            save_checkpoint(ckpt, model, None, {"step": 0})
            start = time.perf_counter()
            result = export_hf(ckpt, out)
            export_s = time.perf_counter() - start
            hf = transformers.AutoModelForCausalLM.from_pretrained(
                out, trust_remote_code=result.remote_code).eval()
            idx = torch.randint(0, config.vocab_size, (2, 128))
            with torch.no_grad():
                diff = (hf(idx).logits - model.eval()(idx)).abs().max().item()
            prompt = idx[:1, :16]
            ours = generate(model, prompt, SamplingConfig(max_new_tokens=32, greedy=True))
            theirs = hf.generate(prompt, max_new_tokens=32, do_sample=False,
                                 pad_token_id=0)[:, 16:]
            rows.append((name, config.arch, type(hf).__name__, result.remote_code,
                         f"{diff:.1e}", bool(torch.equal(ours, theirs)), f"{export_s:.1f}"))
    print("| model | arch | transformers class | trust_remote_code | max abs logit diff | "
          "32 greedy tokens equal | export s |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


if __name__ == "__main__":
    main()
