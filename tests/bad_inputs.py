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
  {badhostlink} a hardware YAML whose host_link_bandwidth_bytes_per_s is not a number
  {bigvisible} a hardware YAML whose memory.runtime_visible_bytes is 1000x its capacity
  {bigsustained} a hardware YAML whose memory.sustained_read_fraction is given in percent (88.3)
  {badnetwork} a hardware YAML whose interconnect.inter_node bandwidth is negative
  {badsince}   TensorRT-LLM's software profile with collectives.custom_since "abc"
  {baduntil}   vLLM V0's software profile with host.per_sequence_until "soon"
  {badkvsince} vLLM V0's software profile with attention.rocm_shared_kv_since "later"
  {badpad}     vLLM V1's software profile whose largest captured CUDA graph is 10^9 tokens
  {badtiers}   SGLang's software profile whose captured-size tiers are not [first, step] pairs
  {badjson}    a model config that is not JSON
  {tinycorpus} a directory with one sentence of text
  {binarycorpus} a corpus directory whose one .txt file is random bytes
  {readonly}   a directory nobody may create (under /sys, read-only even for root)
  {binary}     a binary file (a PNG header): not UTF-8 text
  {latin1}     a YAML file saved as Latin-1, not UTF-8
  {badmeta}    an explore table whose `.meta.json` sidecar is not JSON
  {moe}        a Llama config.json with Mixtral's mixture-of-experts fields
  {badrope}    a Llama 3.1 config.json whose llama3 rope scaling lacks
               original_max_position_embeddings

and for the new-user rows (NEW_USER_CASES):

  {truncated} {emptyweights} {noconfig} {badstate}
               gpt-tiny checkpoints whose model.safetensors is cut in half or empty, whose
               config.json is gone, whose train_state.json is cut short
  {emptyfile}  an empty file          {listjson}   a JSON list, not an object
  {zeroheads}  a model config with n_heads 0     {hugevocab} one with 10^12 tokens
  {badspace}   a design space YAML with a typo'd knob
  {servespace} {badservespace} {zerotpspace} {badyamlspace} {badratespace}
               serving configuration spaces: a valid one, a typo'd option, a TP of 0,
               unclosed brackets, a rate that is not a number
  {hfbert} {hfllama} {hfbadweights}
               Hugging Face directories: a BERT config; a Llama config with no weights and no
               tokenizer; a GPT-2 config whose model.safetensors is not safetensors
  {microconfig} a one-layer model that trains in a moment
  {smallcorpus} {latin1corpus}
               40 short JSON-lines documents, in UTF-8 and saved as Latin-1
  {h100calibration} the shipped GPU calibration of the H100

Rows may set environment variables (`env`); `warning()` rows expect success (exit 0) with one
`warning:` line. `verdict()` classifies what a process did (tests and the table share it).
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
    # "error": the command fails with one `error:` line (exit 2). "warning": the input is
    # plausible, so the command does its work (exit 0) and says once, on a `warning:` line,
    # what looks wrong; its usual output (progress, results) may follow.
    kind: str = "error"
    env: tuple[tuple[str, str], ...] = ()  # environment variables set for this row only
    # Not one line yet: the file(s) whose owner must change (the test expects the failure,
    # strictly, so the row is noticed when it is fixed).
    known: str = ""

    @property
    def id(self) -> str:
        return self.shown[:80]

    @property
    def shown(self) -> str:
        """The row as a shell line: VAR=value ... krakenlm-arguments (placeholders unfilled)."""
        words = [f"{name}={_shell_word(value)}" for name, value in self.env]
        return " ".join(words + [_shell_word(a) for a in self.argv])


def _shell_word(word: str) -> str:
    """`word` as typed in a shell: quoted when empty or spaced, bytes that are not UTF-8 as
    $'\\xNN', a very long one cut short with its length."""
    if len(word) > 60:
        return _shell_word(word[:40]) + f"...({len(word)} characters)"
    if word and word.isprintable() and " " not in word:
        return word
    try:
        word.encode("utf-8")
        return repr(word)
    except UnicodeEncodeError:  # lone surrogates: bytes of the command line that are not UTF-8
        raw = word.encode("utf-8", "surrogateescape")
        return "$'" + "".join(chr(b) if b < 128 else f"\\x{b:02x}" for b in raw) + "'"


def case(command: str, expect: str, exit_code: int = 2, *,
         env: dict[str, str] | None = None, known: str = "") -> BadInput:
    return BadInput(tuple(command.split()), expect, exit_code, env=tuple((env or {}).items()),
                    known=known)


def warning(command: str, expect: str) -> BadInput:
    """A plausible but suspicious command line: it succeeds with one `warning:` line."""
    return BadInput(tuple(command.split()), expect, 0, kind="warning")


# What a row's process did, in the words of the measure: exactly the promised line
# ("one line"), a Python traceback, "silent" (the wrong exit code, or no `error:`/`warning:`
# line where one was due), more than the one line ("multi-line"), or the promised kind of line
# but not the expected message ("other message").
VERDICTS = ("one line", "traceback", "silent", "multi-line", "other message")


def verdict(bad: BadInput, exit_code: int, stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    if "Traceback (most recent call last)" in stderr:
        return "traceback"
    prefix = "warning: " if bad.kind == "warning" else "error: "
    promised = [line for line in lines if line.startswith(prefix)]
    if exit_code != bad.exit_code or not promised:
        return "silent"
    if len(promised) > 1 or (bad.kind == "error" and len(lines) > 1):
        return "multi-line"
    if bad.expect not in promised[0]:
        return "other message"
    return "one line"


SIM_RUN = "sim run --system a100-80gb-x8 --model llama3-8b --tp 8"
SIM_SERVE = "sim serve --model gpt3-1.3b --trace synthetic --rate 5 --requests 20"

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
    case(f"{SIM_RUN} --prompt 8 --gen 2 --software vllm --cuda-graph-max 70000",
         "--cuda-graph-max must be from 0 (no CUDA graphs) to 65536, got 70000"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --cuda-graph-max 16",
         "the trtllm profile's engine has no knob for its largest CUDA graph"),
    case("sim run --system a100-80gb-x8 --model kraken-mini8-2way-head128 --prompt 8 --gen 2",
         "widens its LM head (lm_head_width 128), a training ablation the simulator does not"),
    case("sim run --system nope --model llama3-8b --prompt 8 --gen 2", "unknown system 'nope'"),
    case("sim run --system {badhw} --model llama3-8b --prompt 8 --gen 2", "bandwith"),
    case("sim run --system {badhostlink} --model llama3-8b --prompt 8 --gen 2",
         "device.host_link_bandwidth_bytes_per_s: expected a number in bytes_per_s"),
    case("sim run --system {bigvisible} --model llama3-8b --prompt 8 --gen 2",
         "device.memory.runtime_visible_bytes: 8.499e+13 bytes exceeds capacity_bytes"),
    case("sim run --system {bigsustained} --model llama3-8b --prompt 8 --gen 2",
         "device.memory.sustained_read_fraction: 88.3 is not in (0, 1]"),
    case("sim serve --trace synthetic --rate 1 --model llama3-8b --system {badnetwork}",
         "interconnect.inter_node.bandwidth_bytes_per_s: must be positive, got '-25e9'"),
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
    case("sim run --system a100-80gb-x8 --model {badrope} --tp 8 --prompt 8 --gen 2",
         "'rope_scaling.original_context_len': must be a positive integer, got None"),
    case("train --out {tmp}/run --config {badrope}", "needs factor, low_freq_factor"),
    case("train --out {tmp}/run --config {binary}", "is not UTF-8 text"),
    case("sim explore --space {binary}", "is not UTF-8 text"),
    case("sim explore --space {latin1}", "is not UTF-8 text"),
    case("sim explore --knob cores=108 --out {badmeta}", "is not valid JSON"),
    case("sim search --knob cores=16:160 --population 1", "--population must be at least 2"),
    case("sim sweep --cores 0", "--cores takes whole numbers of at least 1, got 0"),
    case("sim sweep --global-buffers 0", "--global-buffers takes sizes above 0 MiB"),
    case("sim sweep --memories HBM9-5", "--memories: unknown ['HBM9-5']; write TECHNOLOGY-UNITS"),
    # sim serve, cluster level (caught before any step time is tabulated)
    case(f"{SIM_SERVE} --replicas h100-80gb-x8:tq4",
         "'tq4' is not tpN, ppN or a replica count"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --kv-cache-dtype fp4",
         "--kv-cache-dtype 'fp4' is not one of auto, fp8, fp8_e4m3, fp8_e5m2"),
    case(f"{SIM_SERVE} --replicas h100-80gb-x8:tp2:tp4", "gives tp twice"),
    case(f"{SIM_SERVE} --replicas h100-80gb-x8:tp0", "tp must be at least 1, got 0"),
    case(f"{SIM_SERVE} --replicas nope:tp2", "unknown system 'nope'"),
    case(f"{SIM_SERVE} --replicas h100-80gb-x8:tp16", "tp 16 exceeds the 8 devices"),
    case(f"{SIM_SERVE} --replicas 2", "give --system"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --pp 0", "--pp must be at least 1, got 0"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --router jsq", "--router 'jsq' is not one of"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --preemption-mode swap",
         "--preemption-mode swap is vLLM V0's"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --software vllm-v0 --preemption-mode evict",
         "--preemption-mode 'evict' is not one of recompute, swap"),
    case(f"{SIM_SERVE} --system l40s-x8 --software vllm-v0 --preemption-mode swap",
         "needs the host link of l40s-x8"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --num-scheduler-steps 8",
         "is vLLM V0's multi-step scheduling"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --software vllm-v0 --num-scheduler-steps 0",
         "--num-scheduler-steps must be at least 1, got 0"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --software vllm-v0 --num-scheduler-steps 8 "
         "--chunked-prefill", "Chunked prefill is not supported with multi-step"),
    case("sim serve --model llama3.1-8b --trace synthetic --rate 5 --requests 20 --system "
         "h100-80gb-x8 --software vllm-v0 --num-scheduler-steps 8",
         "pass --no-chunked-prefill (vLLM V0 turns it on by itself past a 32K context)"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --cuda-graph-max -1",
         "--cuda-graph-max must be from 0 (no CUDA graphs) to 65536, got -1"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --software vllm-v0 --cuda-graph-max 64",
         "the vllm-v0 profile's engine has no knob for its largest CUDA graph"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --prefill-replicas 1",
         "needs both --prefill-replicas and --decode-replicas"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --prefill-replicas 1 --decode-replicas 0",
         "--decode-replicas must be at least 1, got 0"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --prefill-replicas 1 --decode-replicas 1 "
         "--network-gbps 0", "--network-gbps must be a positive number"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --pd-search 1 --slo-ttft-s 1",
         "a P:D split needs at least 2 instances"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --pd-search 4", "--pd-search needs an SLO"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --max-concurrency 0",
         "--max-concurrency must be at least 1, got 0"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --max-concurrency -2",
         "--max-concurrency must be at least 1, got -2"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --max-concurrency 4 --slo-ttft-s 1 --capacity",
         "--max-concurrency cannot be combined with --capacity"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --pp 2 --max-concurrency 4",
         "--max-concurrency is modelled on one pool of replicas"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --engine-version v0.5.4",
         "--engine-version 'v0.5.4' is not an engine version such as 0.5.4"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --host-time-scale 0",
         "--host-time-scale 0.0 must be a positive number"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --pp 2 --client-side",
         "--client-side is modelled on one pool of replicas"),
    case(f"{SIM_SERVE} --system h100-80gb-x8 --pd-search 4 --slo-ttft-s 1 --client-side",
         "--client-side is modelled on one pool of replicas"),
    warning("sim serve --model llama3.1-8b --trace synthetic --rate 5 --requests 20 --system "
            "h100-80gb-x8 --software vllm-v0",
            "vLLM V0 turns chunked prefill on by itself for a context above 32K"),
    warning(f"{SIM_SERVE} --system h100-80gb-x8 --software trtllm --client-side",
            "software trtllm has no front-end constants"),
    warning(f"{SIM_SERVE} --system h100-80gb-x8 --software vllm-v0 --engine-version 0.5.4",
            "--engine-version chooses the front end's form of a --client-side replay"),
    # studies and benchmarks
    case("study ttft --system nope --out {tmp}/ttft", "unknown system 'nope'"),
    case("study serving --seeds 3 --out {tmp}/serving", "--seeds needs at least two seeds"),
    case("study serving --rates 0 --out {tmp}/serving", "--rates must be positive"),
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


# ---------------------------------------------------------------------------------------------
# The new-user table (issue 24): command lines a hostile new user tries on every command, beside
# the rows above. Same placeholders, plus the fixtures of `_damaged_checkpoints` and
# `_SMALL_FILES`; warning() rows are plausible inputs that succeed with one `warning:` line.
TRAIN = "train --out {tmp}/run --preset gpt-tiny"
GEN = "generate --checkpoint {gpt} --prompt hi"
EXPLORE = "sim explore --knob cores=64"
SEARCH = "sim search --knob cores=16:160 --trials 2 --population 2"
COMPARE = "study compare --out {tmp}/cmp --preset gpt-tiny"
AIC = "sim calibrate --source aiconfigurator --system h100-80gb-x8"
MICRO_RUN = ("--config {microconfig} --data {smallcorpus} --max-steps 2 --batch-size 2 "
             "--seq-len 16 --eval-batches 1 --eval-interval 2 --no-progress")

NEW_USER_CASES: list[BadInput] = [
    # options of another command, typos of the command line itself
    case("--version", "No such option: --version"),
    case("sim nope", "No such command 'nope'"),
    case("train", "Missing option '--out'"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --max-steps 3", "No such option: --max-steps"),
    case("eval --checkpoint {gpt} --prompt hi", "No such option: --prompt"),
    case("models --json extra", "Got unexpected extra argument(s) (extra)"),
    case("models --json=yes", "Option '--json' does not take a value"),
    case(f"{SIM_RUN} --prompt 1e3 --gen 2", "Invalid value for '--prompt'"),
    case(f"{TRAIN} --max-steps 1.5", "Invalid value for '--max-steps'"),
    case("import hf --out {tmp}/imported", "Missing argument 'hf_dir'"),
    case("sim software --json extra", "Got unexpected extra argument(s) (extra)"),
    # train: numbers out of range, before any data or model is touched
    case(f"{TRAIN} --batch-size -1", "--batch-size must be >= 1, got -1"),
    case(f"{TRAIN} --grad-accum 0", "--grad-accum must be >= 1, got 0"),
    case(f"{TRAIN} --seq-len 0", "--seq-len 0 must be between 1 and the model's context 256"),
    case(f"{TRAIN} --seq-len 100000",
         "--seq-len 100000 must be between 1 and the model's context 256"),
    case(f"{TRAIN} --lr inf", "--lr must be a finite number > 0, got inf"),
    case(f"{TRAIN} --lr -1e-3", "--lr must be a finite number > 0, got -0.001"),
    case(f"{TRAIN} --weight-decay -0.1", "--weight-decay must be a finite number >= 0"),
    case(f"{TRAIN} --grad-clip 0", "--grad-clip must be a finite number > 0, got 0.0"),
    case(f"{TRAIN} --warmup-steps -5", "--warmup-steps must be >= 0, got -5"),
    case(f"{TRAIN} --eval-interval 0", "--eval-interval must be >= 1, got 0"),
    case(f"{TRAIN} --eval-batches -1", "--eval-batches must be >= 1, got -1"),
    case(f"{TRAIN} --checkpoint-interval 0", "--checkpoint-interval must be >= 1, got 0"),
    case(f"{TRAIN} --keep-checkpoints 0", "--keep-checkpoints must be >= 1, got 0"),
    case(f"{TRAIN} --threads 0", "--threads must be >= 1, got 0"),
    case(f"{TRAIN} --precision fp16", "unknown precision 'fp16'"),
    case(f"{TRAIN} --seed -1", "--seed must be a whole number from 0 to 2**64 - 1, got -1"),
    case(f"{TRAIN} --seed 99999999999999999999999", "--seed must be a whole number from 0"),
    case(f"{TRAIN} --batch-size 1000000000", "this host has"),
    case(f"{TRAIN} --dry-run --max-steps 0", "--max-steps must be >= 1, got 0"),
    case(f"{TRAIN} --dry-run --lr nan", "--lr must be a finite number > 0, got nan"),
    case(f"{TRAIN} --log-to tensorboard,nope", "'nope' is not a tracker"),
    # train: corpora, tokenizers, model configs
    case(f"{TRAIN} --data {{tmp}}/nonexistent", "is neither a known corpus"),
    case(f"{TRAIN} --data {{file}}", "is a file; pass the directory that holds it"),
    case(f"{TRAIN} --data {{notckpt}}", "holds no .txt, .jsonl, .parquet files"),
    BadInput(("train", "--out", "{tmp}/run", "--preset", "gpt-tiny", "--tokenizer", ""),
             "unknown tokenizer ''"),
    case(f"{TRAIN} --tokenizer BPE-4K", "unknown tokenizer 'BPE-4K'"),
    case("train --out {tmp}/run --config {tmp}/missing.json", "does not exist"),
    case("train --out {tmp}/run --config {notckpt}", "is a directory with no config.json"),
    case("train --out {tmp}/run --config {file}", "is not valid JSON"),
    case("train --out {tmp}/run --config {emptyfile}", "is not valid JSON"),
    case("train --out {tmp}/run --config {listjson}", "must hold a JSON object"),
    case("train --out {tmp}/run --config {zeroheads}",
         "'n_heads': must be a positive integer, got 0"),
    case("train --out {tmp}/run --config {hugevocab}", "this host has"),
    case("train --out {tmp}/run --config {hfbert}/config.json", "unsupported model_type 'bert'"),
    case("train --out {tmp}/run --config {moe}", "mixture-of-experts model"),
    case("train --out {tmp}/run --recipe kraken-125m-2way --preset gpt-tiny",
         "drop --preset/--config"),
    case("train --out {tmp}/run", "give a model: --preset NAME"),
    # train: run directories that are not what they should be
    case("train --out {tmp}/fresh --resume", "does not exist"),
    case("train --out {gpt} --preset gpt-tiny", "already holds a checkpoint at step 0"),
    case("train --out {gpt}/checkpoints/step-00000000 --preset gpt-tiny --resume",
         "is one checkpoint of a run"),
    case("train --out {file} --preset gpt-tiny", "cannot write to --out"),
    case("train --out {gpt} --resume --preset kraken-tiny-2way", "describes a different model"),
    case("train --out {badstate} --resume", "train_state.json is not valid JSON"),
    # the environment
    case(TRAIN, "KRAKENLM_DEVICE=gpu is not a device", env={"KRAKENLM_DEVICE": "gpu"}),
    case("eval --checkpoint {gpt}", "KRAKENLM_DEVICE=tpu is not a device",
         env={"KRAKENLM_DEVICE": "tpu"}),
    case(GEN, "KRAKENLM_DEVICE=cuda but torch", env={"KRAKENLM_DEVICE": "cuda"}),
    case("eval --checkpoint {gpt}", "cannot write the corpus cache",
         env={"KRAKENLM_CACHE": "{file}"}),
    case("eval --checkpoint {gpt}", "cannot write the corpus cache",
         env={"KRAKENLM_CACHE": "{readonly}"}),
    case("eval --checkpoint {gpt}", "KRAKENLM_CACHE is set but empty",
         env={"KRAKENLM_CACHE": " "}),
    case(AIC, "it is $KRAKENLM_AIC_TABLES: fix the path or unset it",
         env={"KRAKENLM_AIC_TABLES": "{tmp}/missing"}),
    case("sim validate --level operators", "it is $KRAKENLM_AIC_TABLES: fix the path or unset it",
         env={"KRAKENLM_AIC_TABLES": "{file}"}),
    case(TRAIN, "not a torchrun launch", env={"WORLD_SIZE": "abc"}),
    case(TRAIN, "not a torchrun launch", env={"WORLD_SIZE": "2"}),
    case("train --out {tmp}/run --preset gpt-tiny --data hf:nobody/nothing",
         "the Hugging Face hub cannot be reached", env={"HF_HUB_OFFLINE": "1"}),
    # eval: damaged and wrong checkpoints, ranges
    case("eval --checkpoint {file}", "is not a checkpoint"),
    case("eval --checkpoint {gpt} --seq-len 0", "--seq-len must be between 1 and the model's"),
    case("eval --checkpoint {gpt} --precision fp16", "unknown precision 'fp16'"),
    case("eval --checkpoint {gpt} --data {binarycorpus}", "is not text"),
    case("eval --checkpoint {gpt} --tokenizer nope", "unknown tokenizer 'nope'"),
    case("eval --checkpoint {gpt} --checkpoint {kraken}", "--checkpoint was given 2 times"),
    BadInput(("eval", "--checkpoint", ""), ". is not a checkpoint"),
    case("eval --checkpoint {gpt}/checkpoints/step-99999999", "does not exist"),
    case("eval --checkpoint {truncated}", "is unreadable"),
    case("eval --checkpoint {emptyweights}", "is unreadable"),
    case("eval --checkpoint {noconfig}", "is not a checkpoint"),
    case("eval --checkpoint {badstate}", "train_state.json is not valid JSON"),
    case("eval --checkpoint {gpt} --max-batches -1", "--max-batches must be >= 1, got -1"),
    # generate: prompts and sampling
    BadInput(("generate", "--checkpoint", "{gpt}", "--prompt", ""), "the prompt is empty"),
    BadInput(("generate", "--checkpoint", "{gpt}", "--prompt", "to be or not to be " * 200),
             "the prompt has 1201 tokens but the model's context is 256"),
    case(f"{GEN} --max-new-tokens 1000000000", "exceeds the model's context of 256"),
    case(f"{GEN} --temperature inf", "--temperature must be a finite number > 0, got inf"),
    case(f"{GEN} --top-k -1", "--top-k must be >= 0"),
    case(f"{GEN} --seed 99999999999999999999999", "--seed must be a whole number from 0"),
    case(f"{GEN} --timeout nan", "--timeout must be a finite number of seconds > 0, got nan"),
    case("generate --checkpoint {truncated} --prompt hi", "is unreadable"),
    # generate: sharding that cannot work is refused before any process starts
    case(f"{GEN} --world-size 0", "--world-size must be >= 1, got 0"),
    case("generate --checkpoint {kraken} --prompt hi --world-size 3",
         "world size 3 does not divide the Kraken degree 2"),
    case(f"{GEN} --world-size 1000", "to be divisible by 1000"),
    case(f"{GEN} --world-size 2 --comm-backend nope", "--comm-backend must be one of"),
    warning(f"{GEN} --max-new-tokens 2 --vocab-parallel-head",
            "--vocab-parallel-head only apply to sharded generation"),
    warning(f"{GEN} --max-new-tokens 2 --comm-backend gloo",
            "--comm-backend gloo only apply to sharded generation"),
    # a prompt typed on a Latin-1 terminal: "caf\xe9" arrives as bytes that are not UTF-8
    BadInput(("generate", "--checkpoint", "{gpt}", "--prompt",
              b"caf\xe9".decode("utf-8", "surrogateescape"), "--max-new-tokens", "2"),
             "the prompt is not UTF-8 text (byte 0xe9 at character 3", 0, kind="warning"),
    # lm-eval (the rows that fail before lm-eval's slow task index)
    BadInput(("lm-eval", "--checkpoint", "{gpt}", "--tasks", ""), "--tasks is empty"),
    case("lm-eval --checkpoint {gpt} --include-path {file}", "is not a directory of task YAMLs"),
    case("lm-eval --checkpoint {gpt} --limit -5", "--limit must be >= 1 (got -5)"),
    case("lm-eval --checkpoint {tmp}/missing", "does not exist"),
    # study compare, demo, demo-tp: refused before any training or process
    case(f"{COMPARE} --preset gpt-tiny", "--preset names a model twice"),
    BadInput(("study", "compare", "--out", "{tmp}/cmp", "--preset", "gpt-tiny", "--seeds", ""),
             "--seeds needs at least one seed"),
    case(f"{COMPARE} --max-steps 0", "--max-steps must be >= 1, got 0"),
    case(f"{COMPARE} --lrs abc", "--lrs must be comma-separated numbers"),
    case(f"{COMPARE} --lrs 0.1,0.1", "--lrs needs distinct learning rates"),
    case(f"{COMPARE} --tokenizer bpe-3k", "unknown tokenizer 'bpe-3k'"),
    case("study compare --out {tmp}/cmp --preset nope", "unknown model preset 'nope'"),
    case(f"{COMPARE} --precision fp16", "unknown precision 'fp16'"),
    case(f"{COMPARE} --threads 0", "--threads must be >= 1, got 0"),
    case(f"{COMPARE} --data {{tmp}}/missing", "is neither a known corpus"),
    case("study compare --out {readonly}/cmp --preset gpt-tiny", "cannot create --out"),
    case("study compare --out {tmp}/cmp --preset gpt3-175b", "this host has"),
    case("demo --out {readonly}/demo", "cannot create --out"),
    BadInput(("demo", "--out", "{tmp}/demo", "--seeds", ""), "--seeds needs at least one seed"),
    case("demo --out {tmp}/demo --max-steps -1", "--max-steps must be >= 1, got -1"),
    case("demo-tp --world-size 0", "--world-size must be >= 1, got 0"),
    case("demo-tp --world-size 3", "world size 3 does not divide the Kraken degree 2"),
    case("demo-tp --new-tokens 0", "--new-tokens must be >= 1, got 0"),
    case("demo-tp --new-tokens 100000", "exceeds the model's context of 256"),
    case("demo-tp --kraken-checkpoint {tmp}/missing", "does not exist"),
    case("demo-tp --gpt-checkpoint {kraken}", "holds a 'kraken' model, not 'gpt'"),
    # bench tp: refused before its processes start
    case("bench tp --sizes tiny --world-size 0", "--world-size must be >= 1, got 0"),
    case("bench tp --sizes huge", "unknown size 'huge'"),
    BadInput(("bench", "tp", "--sizes", ""), "--sizes and --arch need at least one name each"),
    BadInput(("bench", "tp", "--sizes", "tiny", "--arch", ""),
             "--sizes and --arch need at least one name each"),
    case("bench tp --sizes tiny --prompt-tokens abc", "--prompt-tokens takes comma-separated"),
    case("bench tp --sizes tiny --new-tokens 0", "--new-tokens must be >= 2"),
    case("bench tp --sizes tiny --repeats 0", "--repeats must be >= 1"),
    case("bench tp --sizes tiny --comm maybe", "--comm must be one of both, on, off"),
    case("bench tp --sizes tiny --comm-backend nope", "--comm-backend must be one of"),
    case("bench tp --sizes tiny --timeout -1", "--timeout must be a finite number of seconds > 0"),
    case("bench tp --sizes tiny --world-size 3", "divisible by world size 3"),
    case("bench tp --sizes 125m --prompt-tokens 2000", "exceeds the 1024-token context"),
    case("bench tp --sizes tiny --out {file}", "File exists"),
    # export hf, import hf
    BadInput(("export", "hf", "--checkpoint", "{gpt}", "--out", ""), "--out is empty"),
    case("export hf --checkpoint {gpt} --out {tmp}/hf-a --out {tmp}/hf-b",
         "--out was given 2 times"),
    case("export hf --checkpoint {nan} --out {tmp}/hf", "non-finite values"),
    case("export hf --checkpoint {mismatch} --out {tmp}/hf", "do not match its config.json"),
    case("export hf --checkpoint {truncated} --out {tmp}/hf", "is unreadable"),
    case("export hf --checkpoint {gpt} --out {readonly}/hf",
         "cannot write the Hugging Face model"),
    case("import hf {file} --out {tmp}/imported", "is a file; give the model's directory"),
    case("import hf {gpt} --out {tmp}/imported", "has no config.json"),
    case("import hf {hfllama} --out {tmp}/imported", "has no tokenizer files"),
    case("import hf {hfbert} --out {tmp}/imported", "model_type 'bert' cannot be imported"),
    case("import hf {hfbadweights} --out {tmp}/imported", "hf-bad-weights"),
    case("import hf {hfllama} --out {hfllama}", "would replace the model being read"),
    case("import hf {hfbadweights} --out {gpt}", "already exists and is not empty"),
    BadInput(("import", "hf", "{hfbadweights}", "--out", ""), "--out is empty"),
    # sim calibrate, validate, fit-software, cost
    case("sim calibrate --source llmcompass", "needs --measured DIR"),
    case("sim calibrate --source llmcompass --measured {tmp}/missing", "does not exist"),
    case("sim calibrate --source llmcompass --measured {notckpt}", "no measurement files found"),
    case("sim calibrate --source llmcompass --measured {file}", "is a file, not a directory"),
    case("sim calibrate --source llmcompass --measured {notckpt} --system a100-80gb-x8",
         "--system belongs to --source aiconfigurator"),
    case("sim calibrate --source aiconfigurator --system nope", "unknown system 'nope'"),
    case(f"{AIC} --output x.yaml --install", "give either --output or --install"),
    case(f"{AIC} --tables {{file}}", "holds no data/<system>/... tables"),
    case(f"{AIC} --framework nope", "unknown framework 'nope'"),
    case(f"{AIC} --measured {{notckpt}}", "--measured belongs to --source llmcompass"),
    case("sim calibrate --source aiconfigurator --variant bf16", "give the family too"),
    case("sim calibrate --family gemm", "--family belongs to --source aiconfigurator"),
    case("sim calibrate --source vidur", "--source vidur needs --system"),
    case("sim calibrate --source vidur --system mi210-x4", "no streaming-kernel rows for mi210-x4"),
    case("sim validate --level nope", "--level 'nope'"),
    case("sim validate --level operators --measured {tmp}/missing", "does not exist"),
    case("sim validate --level models --calibration {badjson}",
         "--calibration belong to the LLMCompass set"),
    case("sim validate --level models --device-system nope",
         "--device-system belong to the LLMCompass set"),
    case("sim validate --level operators --tables {file}", "--tables"),
    case("sim validate --level models --out {file}", "File exists"),
    case("sim fit-software --software nope", "unknown software 'nope'"),
    case("sim fit-software --software trtllm --system nope", "unknown system 'nope'"),
    case("sim fit-software --software trtllm --install --output {tmp}/x.yaml",
         "give either --install or --output"),
    case("sim fit-software --software trtllm --output {file}/x.yaml", "Not a directory"),
    case("sim cost --system {emptyfile}", "expected a mapping, got NoneType"),
    BadInput(("sim", "cost", "--system", ""), "unknown system ''"),
    case("sim cost --system {tmp}", "unknown system"),
    # sim run: sizes (a prompt of 10^9 tokens), parallelism, files of every wrong kind
    case("sim run --system a100-80gb-x8 --model llama3-8b --tp 0 --prompt 8 --gen 2",
         "--tp must be at least 1, got 0"),
    case("sim run --system a100-80gb-x8 --model llama3-8b --tp -8 --prompt 8 --gen 2",
         "--tp must be at least 1, got -8"),
    case("sim run --system a100-80gb-x8 --model llama3-8b --tp 16 --prompt 8 --gen 2",
         "--tp 16 exceeds the 8 devices of a100-80gb-x8"),
    case("sim run --system a100-80gb-x4 --model llama3-8b --tp 8 --prompt 8 --gen 2",
         "--tp 8 exceeds the 4 devices of a100-80gb-x4"),
    case("sim run --system gb200-nvl72 --model llama3-8b --tp 72 --prompt 8 --gen 2",
         "--tp 72 does not divide the model's 32 attention heads"),
    case("sim run --system a100-80gb-x8 --model kraken-tiny-2way --tp 3 --prompt 8 --gen 2",
         "--tp must divide the degree 2, got 3"),
    case(f"{SIM_RUN} --batch 0 --prompt 8 --gen 2", "--batch must be at least 1, got 0"),
    case(f"{SIM_RUN} --prompt 8 --gen 0", "--gen must be at least 1, got 0"),
    case(f"{SIM_RUN} --prompt -5 --gen 2", "--prompt must be at least 1, got -5"),
    case(f"{SIM_RUN} --prompt 1000000000 --gen 2", "has a context of 8192 tokens"),
    case(f"{SIM_RUN} --prompt 1000000000 --gen 2 --beyond-context",
         "does not fit on a100-80gb-x8"),
    case(f"{SIM_RUN} --batch 100000000 --prompt 8 --gen 2", "does not fit on a100-80gb-x8"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --arch nope", "--arch 'nope' is not one of"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --arch kraken --kraken-rule nope",
         "--kraken-rule 'nope' is not one of"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --kraken-rule nope", "--kraken-rule 'nope' is not one of"),
    warning(f"{SIM_RUN} --prompt 8 --gen 2 --kraken-rule head-count",
            "--kraken-rule head-count only applies to --arch kraken"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --mode nope", "mode 'nope' is not one of"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --attention nope", "attention 'nope' is not"),
    BadInput((*SIM_RUN.split(), "--prompt", "8", "--gen", "2", "--dtype", ""),
             "dtype '' is not one of"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --dtype fp8", "has no matrix rate for dtype 'fp8'"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --software {{badjson}}", "is not valid YAML"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --software {{emptyfile}}", "expected a mapping"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --software {{badsince}}",
         "collectives.custom_since: 'abc' is not an engine version"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --software {{baduntil}}",
         "host.per_sequence_until: 'soon' is not an engine version"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --software {{badkvsince}}",
         "attention.rocm_shared_kv_since: 'later' is not an engine version"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --software {{badpad}}",
         "graphs.pad_tiers needs pad_max (the largest captured size) from 4 to 65536, got "
         "1000000000"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --software {{badtiers}}",
         "graphs.pad_tiers: expected a list of [first size, step] pairs of whole numbers >= 1"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --calibration {{tmp}}/missing.yaml",
         "No such file or directory"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --calibration {{emptyfile}}",
         "must hold a mapping with a devices section"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --gpu-calibration {{tmp}}/missing.yaml",
         "cannot read calibration file"),
    case(f"{SIM_RUN} --prompt 8 --gen 2 --gpu-calibration {{emptyfile}}",
         "not a GPU calibration file"),
    case("sim run --system a100-80gb-x8 --model {hfllama} --prompt 8 --gen 2",
         "is a directory; give the config.json in it"),
    case("sim run --system a100-80gb-x8 --model {file} --prompt 8 --gen 2", "is not valid JSON"),
    case("sim run --system a100-80gb-x8 --model {hfbert}/config.json --prompt 8 --gen 2",
         "unsupported model_type 'bert'"),
    case("sim run --system a100-80gb-x8 --model {zeroheads} --prompt 8 --gen 2",
         "'n_heads': must be a positive integer"),
    case("sim run --system a100-80gb-x8 --model {hugevocab} --prompt 8 --gen 2",
         "does not fit on a100-80gb-x8"),
    case("sim run --system {file} --model llama3-8b --prompt 8 --gen 2",
         "expected a mapping, got str"),
    case("sim run --system {emptyfile} --model llama3-8b --prompt 8 --gen 2",
         "expected a mapping, got NoneType"),
    BadInput(("sim", "run", "--system", "", "--model", "llama3-8b", "--prompt", "8", "--gen",
              "2"), "unknown system ''"),
    warning("sim run --system a100-80gb-x8 --model llama3-8b --tp 4 --prompt 8 --gen 2 "
            "--gpu-calibration {h100calibration}", "holds fits measured on H100"),
    # sim sweep
    case("sim sweep --cores abc", "expected comma-separated numbers, got 'abc'"),
    case("sim sweep --cores -64", "--cores takes whole numbers of at least 1, got -64"),
    BadInput(("sim", "sweep", "--cores", ""), "--cores needs at least one value"),
    case("sim sweep --memories nope", "--memories: unknown ['nope']"),
    case("sim sweep --global-buffers nan", "--global-buffers takes sizes above 0 MiB, got nan"),
    case("sim sweep --tp 0", "--tp must be at least 1, got 0"),
    case("sim sweep --batch 0", "--batch must be at least 1, got 0"),
    case("sim sweep --prompt 0", "--prompt must be at least 1, got 0"),
    case("sim sweep --gen -1", "--gen must be at least 1, got -1"),
    case("sim sweep --model nope", "unknown model 'nope'"),
    case("sim sweep --top -1", "--top must be >= 0"),
    # sim explore
    case("sim explore", "give a design space"),
    case("sim explore --space {badspace} --knob cores=64", "give --space or --knob, not both"),
    case("sim explore --knob nope=1", "unknown knob 'nope'"),
    case("sim explore --knob cores", "write name=values"),
    case("sim explore --knob cores=", "empty list of values"),
    case("sim explore --knob cores=abc", "expected a number, got 'abc'"),
    case("sim explore --knob cores=-5", "outside the physical range"),
    case("sim explore --knob cores=64:16", "range 64:16 is empty"),
    case("sim explore --knob cores=16:160", "has no finite size"),
    case("sim explore --knob cores=64 --knob cores=108", "--knob cores is given twice"),
    case(f"{EXPLORE} --processes 0", "--processes must be at least 1, got 0"),
    case(f"{EXPLORE} --backend nope", "--backend 'nope' is not one of"),
    case(f"{EXPLORE} --address tcp://127.0.0.1:8786", "add --backend dask"),
    case(f"{EXPLORE} --top -1", "--top must be >= 0"),
    case(f"{EXPLORE} --objective nope", "objective 'nope' is not one of"),
    case(f"{EXPLORE} --metric nope", "metric 'nope' is not one of"),
    case(f"{EXPLORE} --objective latency --slo nan", "the SLO must be a positive number"),
    case(f"{EXPLORE} --max-batch 0", "max_batch must be at least 1, got 0"),
    case(f"{EXPLORE} --model nope", "unknown model 'nope'"),
    case(f"{EXPLORE} --slo 1", "cannot run the objective"),
    case(f"{EXPLORE} --model gpt-tiny --arch kraken", "exceed gpt-tiny's context of 256"),
    case(f"{EXPLORE} --out {{notckpt}}", "is a directory; give the CSV file"),
    case(f"{EXPLORE} --out {{readonly}}/table.csv", "check its permissions"),
    case(f"{EXPLORE} --out {{file}}/table.csv", "File exists"),
    case("sim explore --space {emptyfile}", "a design space is a mapping"),
    case("sim explore --space {badspace}", "unknown knob 'corez'"),
    # sim serve-search (the configuration space file, checked before any replay)
    case("sim serve-search --space {emptyfile}", "a configuration space is a mapping"),
    case("sim serve-search --space {latin1}", "is not UTF-8 text"),
    case("sim serve-search --space {badspace}", "needs a non-empty `space:` mapping"),
    case("sim serve-search --space {tmp}/none.yaml", "none.yaml"),
    case("sim serve-search --space {badservespace}", "space option 'tpp' cannot be searched"),
    case("sim serve-search --space {zerotpspace}", "space option 'tp' takes positive integers"),
    case("sim serve-search --space {badyamlspace}", "is not valid YAML at line"),
    case("sim serve-search --space {badratespace}", "option 'rate' takes float, got 'fast'"),
    case("sim serve-search --space {servespace} --out {file}", "is a file; give a directory"),
    case("sim serve-search --space {servespace} --objective capacity",
         "--objective capacity needs an SLO: give slo_ttft_s and/or slo_tpot_s"),
    case("sim serve-search --space {servespace} --objective fastest",
         "--objective 'fastest' is not one of goodput, capacity"),
    # sim search
    case("sim search --knob cores=16:160 --trials 0", "--trials must be at least 1, got 0"),
    case("sim search --knob cores=16:160 --population 0", "--population must be at least 2"),
    case(f"{SEARCH} --seed -1", "--seed must be a whole number from 0 to 2**32 - 1, got -1"),
    case(f"{SEARCH} --seed 99999999999", "--seed must be a whole number from 0 to 2**32 - 1"),
    case(f"{SEARCH} --top -5", "--top must be >= 0"),
    case(f"{SEARCH} --out {{file}}", "File exists"),
    # study ttft, design-space
    case("study ttft --batch 0 --out {tmp}/ttft", "--batch must be at least 1, got 0"),
    case("study ttft --kraken-rule nope --out {tmp}/ttft", "--kraken-rule 'nope'"),
    case("study ttft --software nope --out {tmp}/ttft", "unknown software 'nope'"),
    case("study ttft --system all --system a100-80gb-x8 --out {tmp}/ttft",
         "unknown system 'all'"),
    case("study ttft --system {badhw} --out {tmp}/ttft", "bandwith"),
    case("study design-space --trials 0", "--trials must be at least 1, got 0"),
    case("study design-space --seed -1 --out {tmp}/ds", "--seed must be a whole number from 0"),
    case("study design-space --out {file}", "File exists"),
    # a plain option given twice: click would keep the last value without a word
    case(f"{SIM_RUN} --tp 4 --prompt 8 --gen 2", "--tp was given 2 times (8, 4)"),
    case(f"{TRAIN} --lr 1e-3 --lr=1e-2 --dry-run", "--lr was given 2 times (1e-3, 1e-2)"),
    case("sim sweep --cores 64 --top 1 --cores 128", "--cores was given 2 times (64, 128)"),
    # plausible but suspicious: the work is done, with one warning
    warning(f"train --out {{tmp}}/warm {MICRO_RUN} --warmup-steps 5",
            "--warmup-steps 5 is not shorter than --max-steps 2"),
    warning(f"train --out {{tmp}}/threads {MICRO_RUN} --warmup-steps 1 --threads 256",
            "--threads 256 is more than the"),
    warning("eval --checkpoint {gpt} --data {latin1corpus} --max-batches 1 --batch-size 1 "
            "--seq-len 16", "is not UTF-8 (byte 0xe9"),
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
    def profile(name: str) -> str:  # a shipped software profile's text
        return resources.files("krakenlm.simulator.constants").joinpath(
            f"software_profiles/{name}.yaml").read_text()

    for file, name, good, bad in (
            ("bad-since.yaml", "trtllm", 'custom_since: "0.8"', 'custom_since: "abc"'),
            ("bad-until.yaml", "vllm-v0", 'per_sequence_until: "0.6.0"',
             'per_sequence_until: "soon"'),
            ("bad-kv-since.yaml", "vllm-v0", 'rocm_shared_kv_since: "0.6.2"',
             'rocm_shared_kv_since: "later"'),
            ("bad-pad.yaml", "vllm", "pad_max: 512 ", "pad_max: 1000000000 "),
            ("bad-tiers.yaml", "sglang", "pad_tiers: [[8, 4], [16, 8], [256, 16], [512, 32]]",
             "pad_tiers: [8, 4, 16, 8]")):
        text = profile(name)
        assert good in text, (name, good)  # a fixture that changed nothing would test nothing
        (root / file).write_text(text.replace(good, bad, 1))
    (root / "bad-host-link.yaml").write_text(preset.read_text().replace(
        "host_link_bandwidth_bytes_per_s: 32e9", "host_link_bandwidth_bytes_per_s: fast", 1))
    (root / "big-visible.yaml").write_text(preset.read_text().replace(
        "runtime_visible_bytes: 84986665370", "runtime_visible_bytes: 84986665370e3", 1))
    (root / "big-sustained.yaml").write_text(preset.read_text().replace(
        "sustained_read_fraction: 0.883", "sustained_read_fraction: 88.3", 1))
    (root / "bad-network.yaml").write_text(preset.read_text().replace(
        "    bandwidth_bytes_per_s: 25e9", "    bandwidth_bytes_per_s: -25e9", 1))
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
    (root / "badrope").mkdir()
    (root / "badrope" / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
        "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0}}))
    (root / "tiny-corpus").mkdir()
    (root / "tiny-corpus" / "a.txt").write_text("To be, or not to be.\n")
    (root / "binary-corpus").mkdir()
    (root / "binary-corpus" / "a.txt").write_bytes(bytes(range(256)) * 16)
    damaged = _damaged_checkpoints(checkpoint)
    _write_small_files(root)
    return {"tmp": str(root / "tmp"), "gpt": str(gpt), "kraken": str(kraken),
            "mismatch": str(mismatch), "nan": str(nan), "notckpt": str(root / "notckpt"),
            "file": str(root / "file"), "badhw": str(root / "bad-hw.yaml"),
            "badhostlink": str(root / "bad-host-link.yaml"),
            "bigvisible": str(root / "big-visible.yaml"),
            "bigsustained": str(root / "big-sustained.yaml"),
            "badnetwork": str(root / "bad-network.yaml"),
            "badsince": str(root / "bad-since.yaml"),
            "baduntil": str(root / "bad-until.yaml"),
            "badkvsince": str(root / "bad-kv-since.yaml"), "badpad": str(root / "bad-pad.yaml"),
            "badtiers": str(root / "bad-tiers.yaml"),
            "badjson": str(root / "bad.json"), "tinycorpus": str(root / "tiny-corpus"),
            "readonly": "/sys/krakenlm-bad-input", "binary": str(root / "binary.png"),
            "latin1": str(root / "latin1.yaml"), "badmeta": str(root / "table.csv"),
            "moe": str(root / "moe" / "config.json"), "smallvocab": str(root / "smallvocab"),
            "badrope": str(root / "badrope" / "config.json"),
            "binarycorpus": str(root / "binary-corpus"), **damaged,
            "h100calibration": str(resources.files("krakenlm.simulator.constants")
                                   .joinpath("devices/H100.yaml")),
            **{name: str(root / file) for name, file in _SMALL_FILES.items()}}


def _damaged_checkpoints(checkpoint) -> dict[str, str]:
    """gpt-tiny checkpoints with one file damaged as a crash, a full disk or a hand edit would."""
    import os

    from krakenlm.runtime.checkpoint import CONFIG_FILE, MODEL_FILE, STATE_FILE, current_checkpoint

    paths = {}
    for name in ("truncated", "emptyweights", "noconfig", "badstate"):
        paths[name] = str(checkpoint(name, "gpt-tiny"))
    files = {name: current_checkpoint(paths[name]) for name in paths}
    weights = files["truncated"] / MODEL_FILE
    os.truncate(weights, weights.stat().st_size // 2)
    os.truncate(files["emptyweights"] / MODEL_FILE, 0)
    (files["noconfig"] / CONFIG_FILE).unlink()
    (files["badstate"] / STATE_FILE).write_text('{"step": ')
    return paths


# Small files and Hugging Face directories of the new-user rows: placeholder -> path under root.
_SMALL_FILES = {
    "emptyfile": "empty.yaml",
    "listjson": "list.json",
    "zeroheads": "zero-heads.json",
    "hugevocab": "huge-vocab.json",
    "badspace": "bad-space.yaml",
    "badservespace": "bad-serve-space.yaml",
    "zerotpspace": "zero-tp-space.yaml",
    "badyamlspace": "bad-yaml-space.yaml",
    "badratespace": "bad-rate-space.yaml",
    "servespace": "serve-space.yaml",
    "hfbert": "hf-bert",
    "hfllama": "hf-llama",
    "hfbadweights": "hf-bad-weights",
    "microconfig": "micro.json",
    "smallcorpus": "small-corpus",
    "latin1corpus": "latin1-corpus",
}
_TINY_LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
               "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 2,
               "vocab_size": 1000, "max_position_embeddings": 128}
# GPT-2's own vocabulary: import reaches the weights (no tokenizer files needed)
_TINY_GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 1, "n_head": 2,
              "vocab_size": 50257, "n_positions": 64}


def _write_small_files(root: Path) -> None:
    from krakenlm.models import get_preset

    tiny = get_preset("gpt-tiny").to_dict()
    (root / "empty.yaml").write_bytes(b"")
    (root / "list.json").write_text("[]\n")
    (root / "zero-heads.json").write_text(json.dumps({**tiny, "n_heads": 0}))
    (root / "huge-vocab.json").write_text(json.dumps({**tiny, "vocab_size": 10**12}))
    (root / "bad-space.yaml").write_text("corez: [64, 108]\n")
    serve = "trace: synthetic\nmodel: gpt3-1.3b\nsystem: a100-80gb-x8\nspace:\n"
    (root / "bad-serve-space.yaml").write_text(serve + "  tpp: [1, 2]\n")
    (root / "zero-tp-space.yaml").write_text(serve + "  tp: [0, 2]\n")
    (root / "bad-yaml-space.yaml").write_text(serve + "  tp: [1, 2\n")
    (root / "serve-space.yaml").write_text(serve + "  tp: [1, 2]\n")
    (root / "bad-rate-space.yaml").write_text("rate: fast\n" + serve + "  tp: [1, 2]\n")
    for name, config in (("hf-bert", {"model_type": "bert", "hidden_size": 64}),
                         ("hf-llama", _TINY_LLAMA), ("hf-bad-weights", _TINY_GPT2)):
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(config))
    (root / "hf-bad-weights" / "model.safetensors").write_bytes(b"not safetensors at all")
    # a model that trains two steps in a moment, on 40 short documents
    (root / "micro.json").write_text(json.dumps({**tiny, "n_layers": 1, "d_model": 64,
                                                 "n_heads": 2, "ffn_dim": 128,
                                                 "context_len": 64}))
    texts = [f"Document {i}: caf\u00e9 and bread, " * 8 for i in range(40)]
    (root / "small-corpus").mkdir()
    (root / "small-corpus" / "docs.jsonl").write_text(
        "".join(json.dumps({"text": text}, ensure_ascii=False) + "\n" for text in texts),
        encoding="utf-8")
    (root / "latin1-corpus").mkdir()  # the same lines saved as Latin-1: é is the byte 0xe9
    (root / "latin1-corpus" / "docs.jsonl").write_bytes(
        (root / "small-corpus" / "docs.jsonl").read_text(encoding="utf-8").encode("latin-1"))


def filled(bad: BadInput, paths: dict[str, str]) -> list[str]:
    return [part.format(**paths) for part in bad.argv]


def filled_env(bad: BadInput, paths: dict[str, str]) -> dict[str, str]:
    return {name: value.format(**paths) for name, value in bad.env}
