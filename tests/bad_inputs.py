"""The bad-input table: command lines a user could type by mistake, and the one line each gets.

Used by tests/test_cli_bad_inputs.py (in process, every row must exit 2 with one `error:` line
containing `expect`) and by benchmarks/bad_inputs_table.py (real subprocesses; writes the table
in docs/bad-inputs.md). Placeholders in braces are filled from `fixture_paths()`:

  {tmp}        an empty scratch directory
  {gpt}        a random-weight gpt-tiny checkpoint
  {kraken}     a random-weight kraken-tiny-2way checkpoint
  {mismatch}   a checkpoint whose config.json was swapped for another model's
  {nan}        a gpt-tiny checkpoint with one NaN weight
  {smallvocab} a gpt-tiny checkpoint with a 1,000-token vocabulary and no tokenizer record
               (read with GPT-2's 50,257 tokens, which do not fit)
  {notckpt}    a directory that is not a checkpoint
  {file}       a regular file (so `{file}/x` cannot be created)
  {badhw}      a hardware YAML with a typo'd field
  {badjson}    a model config that is not JSON
  {tinycorpus} a directory with one sentence of text
  {binarycorpus} a corpus directory whose one .txt file is random bytes
  {readonly}   a directory nobody may create (under /sys, read-only even for root)
  {binary}     a binary file (a PNG header): not UTF-8 text
  {latin1}     a YAML file saved as Latin-1, not UTF-8
  {badmeta}    an explore table whose `.meta.json` sidecar is not JSON
  {moe}        a Llama config.json with Mixtral's mixture-of-experts fields
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BadInput:
    argv: tuple[str, ...]
    expect: str  # a part of the one-line message
    exit_code: int = 2

    @property
    def id(self) -> str:
        return " ".join(self.argv)[:80]


def case(command: str, expect: str, exit_code: int = 2) -> BadInput:
    return BadInput(tuple(command.split()), expect, exit_code)


SIM_RUN = "sim run --system a100-80gb-x8 --model llama3-8b --tp 8"

CASES: list[BadInput] = [
    # usage: typer's own checks, reported as one line
    case("nope", "No such command 'nope'"),
    case("models --nope", "No such option: --nope"),
    case("train --out {tmp}/run --batch-size abc", "Invalid value for '--batch-size'"),
    case("sim run --system a100-80gb-x8 --prompt 3", "Missing option '--model'"),
    # models and checkpoints
    case("train --out {tmp}/run --preset nope", "unknown model preset 'nope'"),
    case("train --out {tmp}/run --config {badjson}", "not valid JSON"),
    case("train --out {tmp}/run --preset gpt-tiny --config {badjson}",
         "give either --preset or --config"),
    case("eval --checkpoint {tmp}/missing", "does not exist"),
    case("eval --checkpoint {notckpt}", "is not a checkpoint"),
    case("generate --checkpoint {mismatch} --prompt hi", "do not match its config.json"),
    case("generate --checkpoint {smallvocab} --prompt hi",
         "the gpt2 tokenizer has 50,257 tokens but the model's vocabulary is 1,000"),
    case("lm-eval --checkpoint {smallvocab}",
         "the gpt2 tokenizer has 50,257 tokens but the model's vocabulary is 1,000"),
    case("export hf --checkpoint {smallvocab} --out {tmp}/hf",
         "the gpt2 tokenizer has 50,257 tokens but the model's vocabulary is 1,000"),
    case("demo-tp --kraken-checkpoint {gpt}", "holds a 'gpt' model, not 'kraken'"),
    case("demo-tp --kraken-checkpoint {gpt} --gpt-checkpoint {kraken}",
         "did you swap --kraken-checkpoint and --gpt-checkpoint"),
    # training, evaluation, generation: sizes, ranges, repeated options, memory
    case("train --out {tmp}/run --preset gpt-tiny --max-steps 0", "--max-steps must be >= 1"),
    case("train --out {tmp}/run --preset gpt-tiny --max-steps 10 --stop-at 20",
         "--stop-at 20 must be between 1 and --max-steps 10"),
    case("train --out {tmp}/run --preset gpt-tiny --preset kraken-tiny-2way",
         "--preset was given 2 times"),
    case("train --out {tmp}/run --preset gpt-tiny --lr nan", "--lr must be a finite number"),
    case("train --out {tmp}/run --preset gpt3-175b", "this host has"),
    case("train --out {readonly}/run --preset gpt-tiny", "cannot write to --out"),
    case("eval --checkpoint {gpt} --batch-size 0", "--batch-size must be >= 1"),
    case("eval --checkpoint {gpt} --tokenizer bpe-4k", "gpt2"),
    case("train --out {tmp}/run --preset gpt-tiny --data {tinycorpus}", "too few to hold out"),
    case("train --out {tmp}/run --preset gpt-tiny --tokenizer bpe-3k", "bpe-3k"),
    case("eval --checkpoint {gpt} --max-batches 0", "--max-batches must be >= 1"),
    case("eval --checkpoint {nan}", "non-finite values"),
    case("generate --checkpoint {nan} --prompt hi", "non-finite values"),
    case("generate --checkpoint {gpt} --prompt hi --temperature -1",
         "--temperature must be a finite number > 0"),
    case("generate --checkpoint {gpt} --prompt hi --max-new-tokens 0",
         "--max-new-tokens must be >= 1"),
    case("train --out {tmp}/run --preset gpt-tiny --log-to mlfow", "'mlfow' is not a tracker"),
    case("train --out {tmp}/run --recipe kraken-125m-3way", "unknown recipe 'kraken-125m-3way'"),
    # lm-evaluation-harness
    case("lm-eval --checkpoint {gpt} --limit 0", "--limit must be >= 1"),
    case("lm-eval --checkpoint {gpt} --batch-size 0", "--batch-size must be >= 1"),
    case("lm-eval --checkpoint {notckpt}", "is not a checkpoint"),
    # Hugging Face
    case("import hf {tmp}/missing --out {tmp}/imported", "does not exist"),
    case("import hf {notckpt} --out {tmp}/imported", "has no config.json"),
    case("export hf --checkpoint {notckpt} --out {tmp}/hf", "is not a checkpoint"),
    case("export hf --checkpoint {gpt} --out {file}", "is a file"),
    case("export hf --checkpoint {gpt} --out {gpt} --force", "would replace the model being read"),
    # the filesystem
    case("study ttft --out {file}/x", "Not a directory"),
    case("study ttft --out {readonly}/x", "write somewhere else"),
    # the simulator
    case(f"{SIM_RUN} --prompt 8192 --gen 2", "has a context of 8192 tokens"),
    case("sim run --system a100-80gb-x4 --model gpt3-175b --tp 4 --batch 8 --prompt 1024 "
         "--gen 1024", "does not fit on a100-80gb-x4"),
    case(f"{SIM_RUN} --prompt 0 --gen 2", "--prompt must be at least 1"),
    case("sim run --system a100-80gb-x8 --model llama3-8b --tp 3 --prompt 8 --gen 2",
         "does not divide"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --dtype fp7", "fp7"),
    case("sim run --system nope --model llama3-8b --prompt 8 --gen 2", "unknown system 'nope'"),
    case("sim run --system {badhw} --model llama3-8b --prompt 8 --gen 2", "bandwith"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --software nope", "nope"),
    case("sim calibrate --source nope", "--source 'nope'"),
    case("sim calibrate --source aiconfigurator", "needs --system"),
    case("sim cost --system nope", "unknown system 'nope'"),
    case("sim run --system {binary} --model llama3-8b --prompt 8 --gen 2", "is not UTF-8 text"),
    case("sim run --system {latin1} --model llama3-8b --prompt 8 --gen 2", "is not UTF-8 text"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --calibration {{binary}}", "is not UTF-8 text"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --calibration {{badjson}}", "is not valid YAML"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --gpu-calibration {{latin1}}", "is not UTF-8 text"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --software {{binary}}", "is not UTF-8 text"),
    case("sim run --system a100-80gb-x8 --model {binary} --prompt 8 --gen 2",
         "is not UTF-8 text"),
    case("sim run --system a100-80gb-x8 --model {moe} --tp 8 --prompt 8 --gen 2",
         "mixture-of-experts model (num_local_experts=8, num_experts_per_tok=2)"),
    case("train --out {tmp}/run --config {binary}", "is not UTF-8 text"),
    case("sim explore --space {binary}", "is not UTF-8 text"),
    case("sim explore --space {latin1}", "is not UTF-8 text"),
    case("sim explore --knob cores=108 --out {badmeta}", "is not valid JSON"),
    case("sim search --knob cores=16:160 --population 1", "--population must be at least 2"),
    case("sim sweep --cores 0", "--cores takes whole numbers of at least 1, got 0"),
    case("sim sweep --global-buffers 0", "--global-buffers takes sizes above 0 MiB"),
    # studies and benchmarks
    case("study ttft --system nope --out {tmp}/ttft", "unknown system 'nope'"),
    case("study compare --out {tmp}/cmp --preset gpt-tiny --seeds a,b", "--seeds"),
    case("study compare --out {tmp}/cmp --preset gpt-tiny --jobs 0", "--jobs must be >= 1"),
    case("demo --out {tmp}/demo --max-steps 0", "--max-steps must be >= 1"),
    case("demo --out {tmp}/demo --seeds 1,x", "--seeds must be comma-separated integers"),
    case("demo --out {tmp}/demo --jobs 0", "--jobs must be >= 1"),
    case("study compare --out {tmp}/cmp --preset gpt-tiny --lrs 0,1e-3", "--lrs needs distinct"),
    case("study compare --out {tmp}/cmp --preset gpt-tiny --budgets 1000,x", "--budgets must be"),
    case("study compare --out {tmp}/cmp --preset gpt-tiny --budgets 0", "--budgets needs distinct"),
    case("study compare --out {tmp}/cmp --preset gpt-tiny --budgets 4096",
         "--budgets needs --seq-len"),
    case("study compare --out {tmp}/cmp --preset gpt-tiny --budgets 5000 --seq-len 64 "
         "--batch-size 8", "--budgets 5,000 tokens is not a whole number of steps of 512"),
    case("study compare --out {tmp}/cmp --preset gpt-tiny --baseline kraken-tiny-2way",
         "--baseline kraken-tiny-2way is not one of the --preset models"),
    case("bench tp --sizes tiny --prompt-tokens 100000", "exceeds the 256-token context"),
    case("bench tp --sizes tiny --arch nope", "unknown architecture 'nope'"),
    case("bench tp --sizes tiny --prompt-tokens 0", "prompt lengths must be positive"),
    # output directories, --resume overrides, corpora that are not text
    BadInput(("train", "--out", "", "--preset", "gpt-tiny"), "--out is empty"),
    BadInput(("demo", "--out", ""), "--out is empty"),
    BadInput(("study", "compare", "--out", " ", "--preset", "gpt-tiny"), "--out is empty"),
    case("demo --out {file}", "is a file; give a directory for the runs and the report"),
    case("study compare --out {file} --preset gpt-tiny",
         "is a file; give a directory for the runs and the report"),
    case("train --out {tmp}/run --preset gpt-tiny --override lr",
         "--override only applies to --resume"),
    case("train --out {tmp}/run --preset gpt-tiny --resume --override nope",
         "--override nope: not an option that --resume checks"),
    case("train --out {tmp}/run --preset gpt-tiny --data {binarycorpus}",
         "is not text (it holds control bytes such as NUL: binary data)"),
]


def fixture_paths(root: Path) -> dict[str, str]:
    """Create what the placeholders name, under `root`."""
    import torch
    from safetensors.torch import save_file

    from krakenlm.models import get_preset
    from krakenlm.models.transformer import Transformer
    from krakenlm.runtime.checkpoint import (
        CONFIG_FILE,
        MODEL_FILE,
        current_checkpoint,
        load_state_dict,
        save_checkpoint,
    )

    def checkpoint(name: str, preset: str) -> Path:
        torch.manual_seed(0)
        directory = root / name
        save_checkpoint(directory, Transformer(get_preset(preset)), None, {"step": 0})
        return directory

    gpt = checkpoint("gpt", "gpt-tiny")
    nan = checkpoint("nan", "gpt-tiny")
    nan_state, _ = load_state_dict(nan)
    nan_state["tok_emb.weight"][3, 5] = float("nan")
    save_file(nan_state, str(current_checkpoint(nan) / MODEL_FILE), metadata=_)
    kraken = checkpoint("kraken", "kraken-tiny-2way")
    save_checkpoint(root / "smallvocab",
                    Transformer(get_preset("gpt-tiny").replace(vocab_size=1000)), None, {"step": 0})
    mismatch = checkpoint("mismatch", "gpt-tiny")
    (current_checkpoint(mismatch) / CONFIG_FILE).write_text(
        (current_checkpoint(kraken) / CONFIG_FILE).read_text())
    (root / "notckpt").mkdir()
    (root / "tmp").mkdir()
    (root / "file").write_text("a file, not a directory\n")
    from importlib import resources

    preset = resources.files("krakenlm.hardware").joinpath("presets/a100-80gb-x8.yaml")
    (root / "bad-hw.yaml").write_text(preset.read_text().replace("bandwidth", "bandwith", 1))
    (root / "bad.json").write_text("{not json\n")
    (root / "binary.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (root / "latin1.yaml").write_bytes("device:\n  name: Caf\xe9 GPU\n".encode("latin-1"))
    (root / "table.csv").write_text("knob_cores,key\n")
    (root / "table.csv.meta.json").write_text('{"base": "a100-80gb-x8", "objective": ')
    (root / "moe").mkdir()
    (root / "moe" / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
        "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2}))
    (root / "tiny-corpus").mkdir()
    (root / "tiny-corpus" / "a.txt").write_text("To be, or not to be.\n")
    (root / "binary-corpus").mkdir()
    (root / "binary-corpus" / "a.txt").write_bytes(bytes(range(256)) * 16)
    return {"tmp": str(root / "tmp"), "gpt": str(gpt), "kraken": str(kraken),
            "mismatch": str(mismatch), "nan": str(nan), "notckpt": str(root / "notckpt"),
            "file": str(root / "file"), "badhw": str(root / "bad-hw.yaml"),
            "badjson": str(root / "bad.json"), "tinycorpus": str(root / "tiny-corpus"),
            "readonly": "/sys/krakenlm-bad-input", "binary": str(root / "binary.png"),
            "latin1": str(root / "latin1.yaml"), "badmeta": str(root / "table.csv"),
            "moe": str(root / "moe" / "config.json"), "smallvocab": str(root / "smallvocab"),
            "binarycorpus": str(root / "binary-corpus")}


def filled(bad: BadInput, paths: dict[str, str]) -> list[str]:
    return [part.format(**paths) for part in bad.argv]
