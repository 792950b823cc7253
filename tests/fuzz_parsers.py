"""Every file krakenlm parses, as a fuzz target: damaged inputs and the property they must keep.

The property: whatever the file holds, the entry point the CLI uses gives a result or a
`KrakenError` whose message is one line; never another exception (a traceback). A target run
through `krakenlm.cli.main` must exit 0, or exit 2 with exactly one `error: ` line on stderr.

Used by tests/test_fuzz_parsers.py (a bounded Hypothesis profile in `make test`, a long one with
HYPOTHESIS_PROFILE=long) and benchmarks/fuzz_parsers.py (N examples per target, a table of
examples run and failures). Seeds are real files: the shipped hardware presets, software
profiles and calibrations, real Hugging Face config.json files, a tiny real checkpoint, a real
explore table; they are built once per process, on first use.

A target whose known failure is on another change's list carries `known_failure` (the reason);
the tests mark it xfail (not strict), so it turns into an XPASS once that change lands.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import yaml
from hypothesis import strategies as st

import fuzz_mutations as fm
from krakenlm.errors import KrakenError


# --------------------------------------------------------------------------- the property
class PropertyViolation(AssertionError):
    """The input gave neither a result nor a one-line KrakenError."""


def one_line_or_result(call: Callable[[], Any]) -> Any:
    """Run `call`: its result, or the KrakenError it raised, whose message must be non-empty and
    one line. Any other exception propagates: it is the traceback a user would see."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # warnings: not part of this property
            return call()
    except KrakenError as exc:
        message = str(exc)
        if len(message.splitlines()) != 1 or not message.strip():
            raise PropertyViolation(f"{type(exc).__name__} message is not one line: "
                                    f"{message!r}") from exc
        return exc


def cli_one_line_or_success(argv: list[str]) -> str:
    """Run `krakenlm ARGV` in this process: exit 0, or exit 2 with one `error: ` line on stderr
    (after any `warning: ` lines). Returns stderr."""
    from krakenlm.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    text = err.getvalue()
    if code == 0:
        return text
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if not line.startswith("warning: ")]
    if code != 2 or len(errors) != 1 or not errors[0].startswith("error: "):
        raise PropertyViolation(f"krakenlm {' '.join(argv)}: exit {code}, stderr {text!r}")
    return text


# ------------------------------------------------------------------------------ targets
@dataclass(frozen=True)
class Target:
    """One parser fed one family of damaged inputs."""

    id: str                                   # test id, e.g. "hardware-yaml"
    parser: str                               # what is parsed, for the benchmark's table
    entry: str                                # the entry point exercised
    strategy: Callable[[], st.SearchStrategy]  # built on first use (seeds are real files)
    check: Callable[[Any], Any]               # result or KrakenError; raises on a violation
    cost: float = 1.0                         # relative time per example: scales max_examples
    known_failure: str | None = None          # reason for xfail: on another change's list


def _scratch() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="krakenlm-fuzz-")


def _write_and_call(data: bytes, suffix: str, call: Callable[[Path], Any]) -> Any:
    with _scratch() as tmp:
        path = Path(tmp) / f"input{suffix}"
        path.write_bytes(data)
        return one_line_or_result(lambda: call(path))


def _cli_with_file(name: str, data: bytes, argv: Callable[[str], list[str]]) -> str:
    """`krakenlm ARGV` with the damaged file written as NAME in a scratch directory."""
    with _scratch() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        return cli_one_line_or_success(argv(str(path)))


# `sim run` of a small model: the simulator reads every file the options name.
SIM_RUN = ["sim", "run", "--model", "gpt2-124m", "--prompt", "16", "--gen", "2", "--json"]


def _package_texts(package: str) -> list[str]:
    """The text of every YAML file a package ships, by name."""
    root = resources.files(package)
    return [p.read_text() for p in sorted(root.iterdir(), key=lambda p: p.name)
            if p.name.endswith(".yaml")]


# ------------------------------------------------------------------ hardware YAML (presets)
@functools.cache
def hardware_seeds() -> list[str]:
    return _package_texts("krakenlm.hardware.presets")


def check_hardware(data: bytes) -> Any:
    from krakenlm.hardware.loader import load_system
    # a fresh path per example: load_system caches by path
    return _write_and_call(data, ".yaml", lambda p: load_system(str(p)))


def check_hardware_cli(data: bytes) -> Any:
    return _cli_with_file("system.yaml", data, lambda p: SIM_RUN + ["--system", p])


# --------------------------------------------------------------------- software profiles
@functools.cache
def software_seeds() -> list[str]:
    return _package_texts("krakenlm.simulator.constants.software_profiles")


def check_software(data: bytes) -> Any:
    from krakenlm.simulator.constants.software import load_software
    return _write_and_call(data, ".yaml", lambda p: load_software(str(p)))


def check_software_cli(data: bytes) -> Any:
    return _cli_with_file("software.yaml", data,
                          lambda p: SIM_RUN + ["--system", "h100-80gb-x8", "--software", p])


# ------------------------------------------------------------------- calibration files
@functools.cache
def template_calibration_seeds() -> list[str]:
    return [resources.files("krakenlm.simulator.constants").joinpath("template.yaml").read_text()]


def check_template_calibration(data: bytes) -> Any:
    from krakenlm.simulator.constants.template import load_calibration
    return _write_and_call(data, ".yaml", lambda p: load_calibration(str(p)))


@functools.cache
def gpu_calibration_seeds() -> list[str]:
    from krakenlm.simulator.constants.gpu_kernels import shipped_dir

    return [p.read_text() for p in sorted(shipped_dir().glob("*.yaml"))]


def check_gpu_calibration(data: bytes) -> Any:
    from krakenlm.simulator.constants.gpu_kernels import load_file
    return _write_and_call(data, ".yaml", load_file)


@functools.cache
def gpu_calibration_cli_seeds() -> list[str]:
    """H100's shipped file cut to what `sim run --software trtllm` reads (the trtllm kernels and
    NCCL), so that most edits land on parameters the run uses."""
    from krakenlm.simulator.constants.gpu_kernels import shipped_dir

    data = yaml.safe_load((shipped_dir() / "H100.yaml").read_text())
    data["frameworks"] = {k: v for k, v in data["frameworks"].items() if k in ("trtllm", "nccl")}
    data["meta"] = {k: data["meta"][k] for k in ("format", "device_key", "system")}
    return [fm.dump_yaml(data)]


def check_gpu_calibration_cli(data: bytes) -> Any:
    return _cli_with_file("calibration-H100.yaml", data, lambda p: SIM_RUN + [
        "--system", "h100-80gb-x8", "--software", "trtllm", "--gpu-calibration", p])


# ---------------------------------------------------------------- Hugging Face config.json
@functools.cache
def hf_config_seeds() -> list[str]:
    """Real config.json files: transformers' own for every model_type krakenlm reads, and
    krakenlm's files (a checkpoint's config.json and an `export hf` config.json)."""
    import transformers

    from krakenlm.interop.hf_export import remote_config_dict
    from krakenlm.models import get_preset

    seeds = []
    for kind in ("gpt2", "llama", "mistral", "bloom", "gptj", "gpt_neox"):
        config = transformers.AutoConfig.for_model(kind)
        if kind in ("llama", "mistral"):  # a small model: the simulator runs it in a moment
            config.num_hidden_layers, config.hidden_size, config.intermediate_size = 2, 256, 512
            config.num_attention_heads, config.num_key_value_heads, config.head_dim = 4, 2, 64
        seeds.append(config.to_json_string())
    seeds.append(json.dumps(get_preset("gpt-tiny").to_dict(), indent=2))
    seeds.append(json.dumps(remote_config_dict(get_preset("kraken-tiny-2way")), indent=2))
    return seeds


def check_hf_config(data: bytes) -> Any:
    from krakenlm.models.hf import load_model_config
    return _write_and_call(data, ".json", load_model_config)


def check_hf_config_import(data: bytes) -> Any:
    from krakenlm.interop.hf_import import read_config
    with _scratch() as tmp:
        (Path(tmp) / "config.json").write_bytes(data)
        return one_line_or_result(lambda: read_config(Path(tmp)))


def check_hf_config_cli(data: bytes) -> Any:
    argv = ["sim", "run", "--system", "a100-80gb-x8", "--prompt", "16", "--gen", "2", "--json",
            "--skip-memory-check", "--beyond-context"]
    return _cli_with_file("config.json", data, lambda p: argv + ["--model", p])


# ------------------------------------------------------------------------ design spaces
@functools.cache
def space_seeds() -> list[str]:
    """Spaces as docs/design-space.md writes them: lists (grid), ranges, a `knobs:` section."""
    return [
        "cores: [64, 108, 132]\nmemory: [HBM2e, HBM3]\nmemory_units: [4, 5, 6]\n",
        "knobs:\n  frequency_ghz: {low: 1.0, high: 2.0}\n  local_sram_kib: {low: 64, high: 512,"
        " log: true}\n  topology: [ring, switch]\n",
        "systolic_array: [8, 16, 32]\nlanes: 4\nlink_gb_per_s: 50:600:log\narch: [gpt, kraken]\n",
    ]


def check_space(data: bytes) -> Any:
    from krakenlm.design.knobs import load_space

    def load(path: Path) -> None:
        space = load_space(path)
        if space.is_grid:  # what `sim explore` does next: size it, then walk the grid
            space.size
            next(space.grid(), None)
    return _write_and_call(data, ".yaml", load)


def serve_space_seeds() -> list[str]:
    """Serving configuration spaces as docs/serving.md writes them (`sim serve-search`)."""
    return [
        (Path(__file__).parent.parent / "benchmarks" / "serve_search_space.yaml").read_text(),
        ("trace: synthetic\nmodel: gpt2-124m\nrate: 2\nslo_ttft_s: 2\n"
         "space:\n  system: [h100-80gb-x8, a100-80gb-x8]\n  replicas: [2, 1]\n"),
    ]


def check_serve_space(data: bytes) -> Any:
    from krakenlm.serving.config_search import load_space

    def load(path: Path) -> None:
        load_space(path).grid()  # what `sim serve-search` does before any replay
    return _write_and_call(data, ".yaml", load)


# --------------------------------------------------------------- explore table + sidecar
EXPLORE_KNOBS = ("cores", "memory")


@functools.cache
def explore_seed() -> tuple[str, str]:
    """(CSV text, sidecar text) of a real `sim explore --out` table of four designs."""
    from krakenlm.design.knobs import space_from_dict
    from krakenlm.design.objectives import Objective
    from krakenlm.design.runner import run_designs

    space = space_from_dict({"cores": [64, 108], "memory": ["HBM2e", "HBM3"]})
    objective = Objective(kind="latency", model="gpt2-124m", prompt_tokens=64, gen_tokens=4)
    with _scratch() as tmp:
        out = Path(tmp) / "explore.csv"
        run_designs(space.grid(), objective, "a100-80gb-x8", knob_names=list(EXPLORE_KNOBS),
                    out=out, progress=False)
        return out.read_text(), out.with_name(out.name + ".meta.json").read_text()


def _csv_rows(text: str) -> list[list[str]]:
    import csv
    return list(csv.reader(io.StringIO(text)))


def _csv_text(rows: list[list[Any]]) -> str:
    import csv
    buffer = io.StringIO(newline="")
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()


@st.composite
def explore_inputs(draw) -> tuple[bytes, bytes]:
    """(table, sidecar): one of them damaged. Table damage: a cell replaced (by text, an
    all-digit key, a float, nothing), a row cut short or lengthened, the text edited; sidecar
    damage: JSON tree edits, text edits, random bytes."""
    table, sidecar = explore_seed()
    which = draw(st.sampled_from(("cell", "row", "table_text", "table_bytes", "sidecar_tree",
                                  "sidecar_text", "sidecar_bytes")))
    if which == "cell":
        rows = _csv_rows(table)
        r = draw(st.integers(0, len(rows) - 1))
        c = draw(st.integers(0, len(rows[r]) - 1))
        rows[r][c] = draw(st.one_of(st.sampled_from(("", "123456", "1e400", "nan", "True",
                                                     "-0", "x" * 1000, "a,b", "\"")),
                                    st.text(max_size=10)))
        table = _csv_text(rows)
    elif which == "row":
        rows = _csv_rows(table)
        r = draw(st.integers(0, len(rows) - 1))
        k = draw(st.integers(0, len(rows[r]) + 2))
        rows[r] = (rows[r] + ["extra", "cells"])[:k]
        table = _csv_text(rows)
    elif which == "table_text":
        table = draw(fm.mutated_text([table]))
    elif which == "sidecar_tree":
        sidecar = draw(fm.mutated_tree([json.loads(sidecar)], fm.dump_json))
    elif which == "sidecar_text":
        sidecar = draw(fm.mutated_text([sidecar]))
    if which == "table_bytes":
        return draw(fm.mutated_bytes([table.encode()])), sidecar.encode()
    if which == "sidecar_bytes":
        return table.encode(), draw(st.one_of(fm.mutated_bytes([sidecar.encode()]),
                                             fm.random_bytes()))
    return table.encode(), sidecar.encode()


def check_explore_table(data: tuple[bytes, bytes]) -> Any:
    """What `sim explore --out TABLE` does with an existing table before evaluating anything:
    compare the sidecar, load the rows (dropping a torn tail), collect the keys, and at the end
    write the Parquet copy of every row."""
    from krakenlm.design.runner import Table, _columns, write_parquet

    table_bytes, sidecar_bytes = data
    _, sidecar = explore_seed()
    meta = json.loads(sidecar)
    with _scratch() as tmp:
        path = Path(tmp) / "explore.csv"
        path.write_bytes(table_bytes)
        path.with_name(path.name + ".meta.json").write_bytes(sidecar_bytes)

        def resume() -> None:
            table = Table(path, _columns(list(EXPLORE_KNOBS)), meta, resume=True)
            table.keys()
            if table.rows:
                write_parquet(table.rows, path)
        return one_line_or_result(resume)


# -------------------------------------------------------------------------------- corpora
@functools.cache
def corpus_seed() -> dict[str, bytes]:
    """A local corpus directory: 22 .txt documents, a .jsonl and a .parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = {f"doc{i:02d}.txt": f"Document {i}: to be, or not to be.\n".encode() * 3
             for i in range(22)}
    files["lines.jsonl"] = "".join(json.dumps({"text": f"a line of text {i}", "id": i}) + "\n"
                                   for i in range(4)).encode()
    buffer = io.BytesIO()
    pq.write_table(pa.table({"text": [f"a parquet row {i}" for i in range(4)],
                             "id": list(range(4))}), buffer)
    files["rows.parquet"] = buffer.getvalue()
    return files


def _parquet_variant(draw) -> bytes:
    """A well-formed Parquet file with the wrong content: no text column, a text column of
    numbers, nulls or lists, no rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    column = draw(st.sampled_from((
        ("text", pa.array([1, 2, 3])), ("text", pa.array([None, "a", None])),
        ("text", pa.array([["a"], ["b"], []])), ("body", pa.array(["a", "b", "c"])),
        ("text", pa.array([], type=pa.string())), ("text", pa.array([b"\xff\xfe", b"a", b""])),
        ("text", pa.array([{"a": 1}, {"a": 2}, None])))))
    buffer = io.BytesIO()
    pq.write_table(pa.table({column[0]: column[1]}), buffer)
    return buffer.getvalue()


@st.composite
def corpus_inputs(draw) -> dict[str, bytes]:
    """The seed corpus with one file damaged (or replaced, or a strange file added)."""
    files = dict(corpus_seed())
    name = draw(st.sampled_from(("doc00.txt", "lines.jsonl", "rows.parquet", "new.txt",
                                 "new.jsonl", "new.parquet")))
    original = files.get(name, b"")
    how = draw(st.sampled_from(("bytes", "text", "random", "jsonl_tree", "parquet")))
    if how == "bytes" and original:
        files[name] = draw(fm.mutated_bytes([original]))
    elif how == "text" and original and name.endswith((".txt", ".jsonl")):
        files[name] = draw(fm.mutated_text([original.decode()])).encode()
    elif how == "jsonl_tree" and name.endswith(".jsonl"):
        lines = (original or b'{"text": "x"}\n').decode().splitlines()
        i = draw(st.integers(0, len(lines) - 1))
        lines[i] = json.dumps(draw(fm.tree_edits(json.loads(lines[i]))), allow_nan=True,
                              default=str).replace("\n", " ")
        files[name] = ("\n".join(lines) + "\n").encode()
    elif how == "parquet" and name.endswith(".parquet"):
        files[name] = _parquet_variant(draw)
    else:
        files[name] = draw(fm.random_bytes())
    return files


def check_corpus(files: dict[str, bytes]) -> Any:
    from krakenlm.data.prepare import prepare_corpus

    with _scratch() as tmp:
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        for name, data in files.items():
            (corpus / name).write_bytes(data)
        return one_line_or_result(lambda: prepare_corpus(
            str(corpus), cache_dir=Path(tmp) / "cache", progress=False))


@functools.cache
def prepared_corpus_seed() -> tuple[Path, Path]:
    """(corpus directory, cache directory) of the seed corpus, prepared once. The cache key
    depends on the corpus's path, so every example reuses this directory with a copy of the
    cache."""
    from krakenlm.data.prepare import prepare_corpus

    root = Path(tempfile.mkdtemp(prefix="krakenlm-fuzz-corpus-"))
    atexit.register(shutil.rmtree, root, True)
    corpus, cache = root / "corpus", root / "cache"
    corpus.mkdir()
    for name, data in corpus_seed().items():
        (corpus / name).write_bytes(data)
    prepare_corpus(str(corpus), cache_dir=cache, progress=False)
    return corpus, cache


PREPARED_FILES = ("meta.json", "train.bin", "val.bin")


@st.composite
def prepared_corpus_inputs(draw) -> tuple[str, bytes | None]:
    """(file of the prepared corpus, its damaged bytes or None for a deleted file)."""
    _, cache = prepared_corpus_seed()
    name = draw(st.sampled_from(PREPARED_FILES))
    original = next((cache / "corpora").glob(f"*/{name}")).read_bytes()
    if name == "meta.json":
        text = original.decode()
        return name, draw(st.one_of(fm.mutated_tree([json.loads(text)], fm.dump_json)
                                    .map(str.encode), fm.mutated_bytes([original]), st.none()))
    return name, draw(st.one_of(fm.mutated_bytes([original]), st.just(b""), st.none()))


def check_prepared_corpus(damage: tuple[str, bytes | None]) -> Any:
    """What `train --data DIR` reads from the cache on its second run: meta.json, then both
    splits as token arrays, then one training and one validation batch."""
    from krakenlm.data.batches import evaluation_batches, training_batch
    from krakenlm.data.prepare import prepare_corpus

    corpus, seed_cache = prepared_corpus_seed()
    name, data = damage
    with _scratch() as tmp:
        cache = Path(tmp) / "cache"
        shutil.copytree(seed_cache, cache)
        target = next((cache / "corpora").glob(f"*/{name}"))
        target.unlink()
        if data is not None:
            target.write_bytes(data)

        def read() -> None:
            prepared = prepare_corpus(str(corpus), cache_dir=cache, progress=False)
            train, val = prepared.split("train"), prepared.split("val")
            training_batch(train, 2, 8, seed=0, step=0)
            next(evaluation_batches(val, 2, 8), None)
        return one_line_or_result(read)


# ----------------------------------------------------------------------------- metrics.jsonl
@functools.cache
def metrics_seed() -> str:
    """metrics.jsonl as `train` writes it: training rows, then an evaluation row."""
    rows = [{"step": s, "loss": 10.5 - s, "lr": 1e-3 * s, "tokens": 512 * s,
             "tokens_per_s": 2048.0} for s in range(1, 5)]
    rows.append({"step": 4, "val_loss": 6.25, "val_perplexity": 518.0})
    return "".join(json.dumps(r) + "\n" for r in rows)


def check_metrics_resume(data: bytes) -> Any:
    """What `train --resume` does with the run's metrics.jsonl: keep the rows up to the
    checkpoint's step, drop the rest (and a line torn by a kill)."""
    from krakenlm.training.trainer import MetricsLog

    def resume(path: Path) -> None:
        MetricsLog(path, resume_step=2, enabled=True)
    return _write_and_call(data, ".jsonl", resume)


# ---------------------------------------------------------------------------- checkpoints
CHECKPOINT_FILES = ("config.json", "model.safetensors", "train_state.json", "optimizer.pt",
                    "tokenizer.json")


@functools.cache
def checkpoint_seed() -> Path:
    """A tiny real run directory trained for one step with a BPE tokenizer of ~300 tokens
    (train_state.json records it; tokenizer.json is in the checkpoint): every file a resume
    reads, a few hundred kB in all."""
    import torch

    from krakenlm.data.bpe import BpeTokenizer, train_bpe_json
    from krakenlm.data.vocab import padded_vocab_size, tokenizer_files, tokenizer_record
    from krakenlm.models import ModelConfig
    from krakenlm.models.transformer import Transformer
    from krakenlm.runtime.checkpoint import save_checkpoint

    text = [f"Document {i}: to be, or not to be, that is the question.\n" for i in range(50)]
    tokenizer = BpeTokenizer("bpe-4k", train_bpe_json(iter(text), 300))
    config = ModelConfig(arch="gpt", n_layers=1, d_model=16, n_heads=2, ffn_dim=32,
                         vocab_size=padded_vocab_size(tokenizer.vocab_size), context_len=32)
    torch.manual_seed(0)
    model = Transformer(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.tensor([tokenizer.encode(text[0])[:16]])
    logits = model(ids)
    logits.float().mean().backward()
    optimizer.step()
    root = Path(tempfile.mkdtemp(prefix="krakenlm-fuzz-checkpoint-"))
    atexit.register(shutil.rmtree, root, True)
    run = root / "run"
    save_checkpoint(run, model, optimizer,
                    {"step": 1, "tokens_seen": 16, "corpus": "fuzz", "val_loss": None,
                     "tokenizer": tokenizer_record(tokenizer)},
                    files=tokenizer_files(tokenizer))
    return run


def _checkpoint_dir(run: Path) -> Path:
    from krakenlm.runtime.checkpoint import current_checkpoint
    return current_checkpoint(run)


@st.composite
def checkpoint_inputs(draw, files: tuple[str, ...] = CHECKPOINT_FILES) -> tuple[str, bytes | None]:
    """(file name, its damaged bytes or None for a deleted file)."""
    name = draw(st.sampled_from(files))
    original = (_checkpoint_dir(checkpoint_seed()) / name).read_bytes()
    if name.endswith(".json"):
        text = original.decode()
        damaged = draw(st.one_of(
            fm.mutated_tree([json.loads(text)], fm.dump_json).map(str.encode),
            fm.mutated_text([text]).map(str.encode),
            fm.mutated_bytes([original]),
            st.none()))
    else:
        damaged = draw(st.one_of(fm.mutated_bytes([original]), fm.random_bytes(), st.none(),
                                 st.just(b"")))
    return name, damaged


@contextlib.contextmanager
def damaged_run(damage: tuple[str, bytes | None]):
    """A copy of the seed run (hard links; the damaged file written anew)."""
    name, data = damage
    seed = checkpoint_seed()
    with _scratch() as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(seed, run, copy_function=os.link)
        target = _checkpoint_dir(run) / name
        target.unlink()
        if data is not None:
            target.write_bytes(data)
        yield run


def check_checkpoint_readers(damage: tuple[str, bytes | None]) -> Any:
    """What `eval`, `generate` and `lm-eval` read: the current checkpoint's config, weights,
    train state and tokenizer."""
    from krakenlm.runtime.checkpoint import load_model, read_train_state
    from krakenlm.runtime.model_and_tokenizer import checkpoint_tokenizer

    with damaged_run(damage) as run:
        def read() -> None:
            read_train_state(run)
            checkpoint_tokenizer(run)
            load_model(run)
        return one_line_or_result(read)


def check_checkpoint_resume(damage: tuple[str, bytes | None]) -> Any:
    """What `train --resume` reads before its first step: train state, config, tokenizer,
    weights, then the optimizer state of the recorded step."""
    import torch

    from krakenlm.runtime.checkpoint import load_model, load_optimizer_state, read_train_state
    from krakenlm.runtime.model_and_tokenizer import checkpoint_tokenizer

    with damaged_run(damage) as run:
        def resume() -> None:
            state = read_train_state(run)
            checkpoint_tokenizer(run)
            model = load_model(run)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            load_optimizer_state(run, optimizer, state["step"])
        return one_line_or_result(resume)


def check_checkpoint_cli(damage: tuple[str, bytes | None]) -> Any:
    with damaged_run(damage) as run:
        return cli_one_line_or_success(["generate", "--checkpoint", str(run), "--prompt",
                                        "to be", "--max-new-tokens", "2", "--greedy"])


# ------------------------------------------------------------------------------- registry
_TRAIN_STATE = "train_state.json"


def _yaml_inputs(seeds: Callable[[], list[str]]) -> Callable[[], st.SearchStrategy]:
    return lambda: fm.text_file_inputs(seeds(), fm.dump_yaml, yaml.safe_load)


def _yaml_any(seeds: Callable[[], list[str]]) -> Callable[[], st.SearchStrategy]:
    return lambda: fm.any_file_inputs(seeds(), fm.dump_yaml, yaml.safe_load)


def _json_any(seeds: Callable[[], list[str]]) -> Callable[[], st.SearchStrategy]:
    return lambda: fm.any_file_inputs(seeds(), fm.dump_json, json.loads)


def _not_utf8(seeds: Callable[[], list[str]]) -> Callable[[], st.SearchStrategy]:
    return lambda: fm.not_utf8([s.encode() for s in seeds()])


TARGETS: tuple[Target, ...] = (
    Target("hardware-yaml", "hardware YAML", "hardware.load_system",
           _yaml_inputs(hardware_seeds), check_hardware),
    Target("hardware-yaml-not-utf8", "hardware YAML, not UTF-8", "hardware.load_system",
           _not_utf8(hardware_seeds), check_hardware),
    Target("hardware-yaml-cli", "hardware YAML", "krakenlm sim run --system FILE",
           _yaml_inputs(hardware_seeds), check_hardware_cli, cost=3),
    Target("software-profile", "software profile YAML", "simulator.constants.software.load_software",
           _yaml_any(software_seeds), check_software),
    Target("software-profile-cli", "software profile YAML", "krakenlm sim run --software FILE",
           _yaml_inputs(software_seeds), check_software_cli, cost=3),
    Target("template-calibration", "template calibration (constants/template.yaml)",
           "simulator.constants.template.load_calibration",
           _yaml_inputs(template_calibration_seeds), check_template_calibration),
    Target("template-calibration-not-utf8", "template calibration, not UTF-8",
           "simulator.constants.template.load_calibration",
           _not_utf8(template_calibration_seeds), check_template_calibration),
    Target("gpu-calibration", "GPU calibration (constants/devices/*.yaml)",
           "simulator.constants.gpu_kernels.load_file",
           _yaml_inputs(gpu_calibration_seeds), check_gpu_calibration, cost=2),
    Target("gpu-calibration-not-utf8", "GPU calibration, not UTF-8",
           "simulator.constants.gpu_kernels.load_file",
           _not_utf8(gpu_calibration_seeds), check_gpu_calibration),
    Target("gpu-calibration-cli", "GPU calibration (constants/devices/*.yaml)",
           "krakenlm sim run --gpu-calibration FILE",
           _yaml_inputs(gpu_calibration_cli_seeds), check_gpu_calibration_cli, cost=4),
    Target("hf-config", "config.json (Hugging Face or krakenlm)",
           "models.hf.load_model_config (train --config, sim run --model)",
           _json_any(hf_config_seeds), check_hf_config),
    Target("hf-config-import", "config.json (Hugging Face or krakenlm)",
           "interop.hf_import.read_config (import hf)",
           _json_any(hf_config_seeds), check_hf_config_import),
    Target("hf-config-cli", "config.json (Hugging Face or krakenlm)",
           "krakenlm sim run --model config.json",
           lambda: fm.text_file_inputs(hf_config_seeds(), fm.dump_json, json.loads),
           check_hf_config_cli, cost=3),
    Target("design-space", "design space YAML (--space)", "design.knobs.load_space",
           _yaml_inputs(space_seeds), check_space),
    Target("design-space-not-utf8", "design space YAML, not UTF-8", "design.knobs.load_space",
           _not_utf8(space_seeds), check_space),
    Target("serve-space", "serving configuration space YAML (--space)",
           "serving.config_search.load_space", _yaml_inputs(serve_space_seeds),
           check_serve_space),
    Target("explore-table", "explore table + .meta.json sidecar",
           "design.runner.Table (sim explore --out, resumed)",
           explore_inputs, check_explore_table),
    Target("corpus", "corpus directory (.txt, .jsonl, .parquet)",
           "data.prepare.prepare_corpus (train --data DIR)", corpus_inputs, check_corpus,
           cost=2),
    Target("prepared-corpus", "prepared corpus cache (meta.json, train.bin, val.bin)",
           "data.prepare.prepare_corpus, PreparedCorpus.split, batches (train --data DIR)",
           prepared_corpus_inputs, check_prepared_corpus, cost=2),
    Target("metrics-jsonl", "metrics.jsonl", "training.trainer.MetricsLog (train --resume)",
           lambda: st.one_of(fm.mutated_tree([json.loads(line) for line in
                                              metrics_seed().splitlines()], fm.dump_json)
                             .map(lambda t: " ".join(t.split()) + "\n" + metrics_seed())
                             .map(str.encode),
                             fm.mutated_text([metrics_seed()]).map(str.encode),
                             fm.mutated_bytes([metrics_seed().encode()])),
           check_metrics_resume),
    Target("checkpoint", "checkpoint (config.json, model.safetensors, train_state.json, "
           "tokenizer.json)", "runtime.checkpoint.load_model, read_train_state; "
           "runtime.model_and_tokenizer.checkpoint_tokenizer (eval, generate, lm-eval)",
           lambda: checkpoint_inputs(tuple(f for f in CHECKPOINT_FILES if f != "optimizer.pt")),
           check_checkpoint_readers, cost=2),
    Target("checkpoint-optimizer", "checkpoint optimizer.pt", "train --resume's readers",
           lambda: checkpoint_inputs(("optimizer.pt",)), check_checkpoint_resume, cost=2),
    Target("checkpoint-cli", "checkpoint (every file)", "krakenlm generate --checkpoint RUN",
           checkpoint_inputs, check_checkpoint_cli, cost=3),
)

# Serving traces (the serving simulator's request traces: Azure and Vidur-style CSVs, Mooncake
# JSONL). Seeds: the excerpts of the real traces under tests/data/traces (the shared full files
# may be absent); checked through serving.traces.read_trace, the reader `sim serve --trace` uses.
TRACE_SEEDS = Path(__file__).parent / "data" / "traces"


@functools.cache
def csv_trace_seeds() -> list[str]:
    return [(TRACE_SEEDS / n).read_text() for n in ("azure_conv_head.csv", "vidur_style.csv")]


@functools.cache
def jsonl_trace_seeds() -> list[str]:
    return [(TRACE_SEEDS / "mooncake_conv_head.jsonl").read_text()]


def _csv_table(text: str) -> list:
    import csv
    return list(csv.reader(io.StringIO(text)))


def _dump_csv_table(tree: Any) -> str:
    rows = tree if isinstance(tree, list) else [[tree]]
    return "\n".join(",".join(str(c) for c in (r if isinstance(r, list) else [r])) for r in rows) + "\n"


def _jsonl_tree(text: str) -> list:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _dump_jsonl(tree: Any) -> str:
    items = tree if isinstance(tree, list) else [tree]
    return "".join(fm.dump_json(item).replace("\n", " ") + "\n" for item in items)


def check_trace(suffix: str) -> Callable[[bytes], Any]:
    def check(data: bytes) -> Any:
        from krakenlm.serving.traces import read_trace
        return _write_and_call(data, suffix, read_trace)
    return check


TRACE_TARGETS: tuple[Target, ...] = (
    Target("trace-csv", "request trace CSV (Azure 2023, Vidur-style)",
           "serving.traces.read_trace (sim serve --trace FILE.csv)",
           lambda: fm.any_file_inputs(csv_trace_seeds(), _dump_csv_table, _csv_table),
           check_trace(".csv")),
    Target("trace-jsonl", "request trace JSONL (Mooncake, with hash_ids)",
           "serving.traces.read_trace (sim serve --trace FILE.jsonl)",
           lambda: fm.any_file_inputs(jsonl_trace_seeds(), _dump_jsonl, _jsonl_tree),
           check_trace(".jsonl")),
)


# ---------------------------------------------------------------------------- regressions
@dataclass(frozen=True)
class Regression:
    """An input the fuzzer found that once gave a traceback (or a multi-line error), and a part
    of the one-line error it gives now."""

    target: str                      # Target.id
    name: str
    make: Callable[[], Any]          # the input (built on use: some start from seeds)
    expect: str


def _edited_yaml(seed: str, path: tuple, value: Any) -> bytes:
    tree = yaml.safe_load(seed)
    fm._set(tree, path, value)
    return fm.dump_yaml(tree).encode()


def _edited_json(seed: str, changes: dict[str, Any]) -> bytes:
    return fm.dump_json({**json.loads(seed), **changes}).encode()


def _llama() -> str:
    return hf_config_seeds()[1]


def _parquet(column: Any) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.table({"text": pa.array(column)}), buffer)
    return buffer.getvalue()


def _corpus_with(name: str, data: bytes) -> dict[str, bytes]:
    return {**corpus_seed(), name: data}


REGRESSIONS: tuple[Regression, ...] = (
    Regression("hardware-yaml", "a field name that is a number", lambda: b"1: a\nname: b\n",
               "1 is not a field name"),
    Regression("hardware-yaml", "an integer beyond the float range",
               lambda: _edited_yaml(hardware_seeds()[0], ("device", "frequency_hz"), 10**400),
               "field device.frequency_hz: must be finite"),
    Regression("hardware-yaml", "a unit with a line break",
               lambda: _edited_yaml(hardware_seeds()[0], ("device", "frequency_hz"), "5\nGB"),
               "field device.frequency_hz: '5\\nGB' is in bytes"),
    Regression("hardware-yaml", "a field name holding a line break (a two-line message)",
               lambda: hardware_seeds()[0].encode() + b'"\\r": null\n',
               "unknown field(s) \\r; known fields of the system"),
    Regression("hardware-yaml-cli", "a field name that is a record separator (two lines)",
               lambda: b'"\\x1E": null\n', "unknown field(s) \\x1e; known fields"),
    Regression("hardware-yaml", "nesting past the recursion limit", lambda: b"[" * 1500,
               "is not valid YAML: lists or mappings nest too deeply"),
    Regression("gpu-calibration", "an empty !!float (an IndexError in PyYAML)",
               lambda: b"!!float", "is not valid YAML: a value cannot be read"),
    Regression("hardware-yaml", "a 5000-digit integer", lambda: b"name: " + b"9" * 5000,
               "is not valid YAML: a value cannot be read"),
    Regression("software-profile", "not UTF-8", lambda: software_seeds()[0].encode("utf-16"),
               "is not UTF-8 text"),
    Regression("software-profile", "host is text", lambda: b"name: a\nkernels: b\nhost: abc\n",
               "host: expected a mapping, got 'abc'"),
    Regression("software-profile", "unknown keys of two types",
               lambda: b"name: a\nkernels: b\n1: 2\nzz: 3\n", "unknown field(s) ['1', 'zz']"),
    Regression("software-profile", "an integer beyond the float range",
               lambda: b"name: a\nkernels: b\nhost: {per_kernel_s: 1" + b"0" * 400 + b"}\n",
               "host.per_kernel_s: expected a number >= 0"),
    Regression("template-calibration", "invalid YAML (a multi-line message before)",
               lambda: b"devices: {A100: [\n", "is not valid YAML"),
    Regression("template-calibration", "a list", lambda: b"- 1\n",
               "must hold a mapping with a devices section"),
    Regression("template-calibration", "an operator without constants",
               lambda: b"devices: {A100: {matmul: null}}\n", "expected a mapping of constants"),
    Regression("template-calibration", "protocols that are not pairs",
               lambda: b"devices: {A100: {allreduce: {protocols: [1]}}}\n",
               "protocols: expected a list of {latency_s, efficiency}"),
    Regression("template-calibration", "an efficiency that is text",
               lambda: b"devices: {A100: {matmul: {compute_efficiency: high}}}\n",
               "compute_efficiency: expected a number in (0, 1]"),
    Regression("gpu-calibration", "frameworks is a list",
               lambda: b"meta: {format: 3, device_key: X}\nframeworks: [1]\n",
               "frameworks is not a mapping"),
    Regression("gpu-calibration", "families is a list",
               lambda: b"meta: {format: 3, device_key: X}\nframeworks: {a: {families: [1]}}\n",
               "frameworks.a.families is not a mapping"),
    Regression("gpu-calibration", "fit is a list",
               lambda: b"meta: {format: 3, device_key: X}\nframeworks: {a: {families: {nccl: "
                       b"{v: {form: nccl/nccl, params: {a: 1}, fit: [1]}}}}}\n",
               "fit must be a mapping"),
    Regression("gpu-calibration", "a parameter beyond the float range",
               lambda: b"meta: {format: 3, device_key: X}\nframeworks: {a: {families: {nccl: "
                       b"{v: {form: nccl/nccl, params: {a: 1" + b"0" * 400 + b"}}}}}}\n",
               "needs a params mapping of finite numbers"),
    Regression("gpu-calibration", "a structural choice the form does not have",
               lambda: b"meta: {format: 3, device_key: X}\nframeworks: {a: {families: {gemm: "
                       b"{v: {form: gemm/sglang-cutlass-fp8, structure: {tile_table: 2}, "
                       b"params: {a: 1}}}}}}\n", "structure tile_table must be one of 0, 1, 3"),
    Regression("gpu-calibration", "a calibration of format 2",
               lambda: b"meta: {format: 2, device_key: X}\nframeworks: {}\n",
               "convert it with `python -m krakenlm.simulator.constants.format2"),
    Regression("gpu-calibration-cli", "a parameter the kernel model needs is missing",
               lambda: gpu_calibration_cli_seeds()[0].replace("memory_efficiency:",
                                                              "memory_efficiency_x:").encode(),
               "has no parameter 'memory_efficiency'"),
    Regression("hf-config", "not UTF-8", lambda: _llama().encode("utf-16"), "is not UTF-8 text"),
    Regression("hf-config", "nesting past the recursion limit", lambda: b"[" * 100_000,
               "is not a model config"),
    Regression("hf-config", "an epsilon that is text",
               lambda: _edited_json(_llama(), {"rms_norm_eps": "abc"}),
               "field 'rms_norm_eps' must be a finite number"),
    Regression("hf-config", "rope_parameters is a list",
               lambda: _edited_json(_llama(), {"rope_theta": None, "rope_parameters": [1]}),
               "field 'rope_parameters' must be an object"),
    Regression("hf-config", "a RoPE base beyond the float range",
               lambda: _edited_json(_llama(), {"rope_theta": 10**400}),
               "field 'rope_theta' must be a finite number"),
    Regression("hf-config", "krakenlm config: n_kv_heads is text",
               lambda: _edited_json(hf_config_seeds()[6], {"n_kv_heads": "a"}),
               "field 'n_kv_heads': must be a positive integer"),
    Regression("hf-config", "krakenlm config: norm_eps is text",
               lambda: _edited_json(hf_config_seeds()[6], {"norm_eps": "x"}),
               "field 'norm_eps': must be a finite number"),
    Regression("hf-config-import", "head_dim that is an object",
               lambda: _edited_json(_llama(), {"head_dim": {}}), "head_dim={}"),
    Regression("hf-config-import", "rope_scaling that is true",
               lambda: _edited_json(_llama(), {"rope_parameters": None, "rope_scaling": True}),
               "rope scaling True"),
    Regression("hf-config-import", "a sliding window that is text",
               lambda: _edited_json(hf_config_seeds()[2], {"sliding_window": "all"}),
               "sliding_window='all'"),
    Regression("design-space", "range bounds that are not numbers",
               lambda: b"cores: {low: abc, high: 3}\n", "range bounds must be numbers"),
    Regression("design-space", "an integer beyond the float range",
               lambda: b"cores: [1" + b"0" * 400 + b"]\n", "is outside the physical range"),
    Regression("design-space", "a range bound that is null",
               lambda: b"cores: {low: null, high: 3}\n", "range bounds must be numbers"),
    Regression("corpus", ".jsonl not UTF-8", lambda: _corpus_with("x.jsonl", b"\xff\xfe{}\n"),
               "x.jsonl:1 is not a JSON object"),
    Regression("corpus", ".jsonl text that is a number",
               lambda: _corpus_with("x.jsonl", b'{"text": 5}\n'), "the 'text' field is int"),
    Regression("corpus", ".jsonl nesting past the recursion limit",
               lambda: _corpus_with("x.jsonl", b"[" * 100_000 + b"\n"),
               "x.jsonl:1 is not a JSON object with a 'text' field"),
    Regression("corpus", ".parquet that is not Parquet",
               lambda: _corpus_with("x.parquet", b"PAR1garbagePAR1"),
               "is not a readable Parquet file"),
    Regression("corpus", ".parquet text column of numbers",
               lambda: _corpus_with("x.parquet", _parquet([1, 2])), "holds int64, not text"),
    Regression("corpus", ".parquet null text", lambda: _corpus_with("x.parquet",
                                                                     _parquet(["a", None])),
               "row 1 has no 'text' (null)"),
    Regression("checkpoint-cli", "a BPE checkpoint whose train_state.json is gone (an IndexError)",
               lambda: (_TRAIN_STATE, None),
               "the gpt2 tokenizer has 50,257 tokens but the model's vocabulary is 320"),
    Regression("checkpoint", "train_state.json is a list", lambda: (_TRAIN_STATE, b"[1]"),
               "train_state.json is damaged"),
    Regression("checkpoint", "train_state.json without a step", lambda: (_TRAIN_STATE, b"{}"),
               "train_state.json is damaged"),
    Regression("checkpoint", "a tokenizer record that is text",
               lambda: (_TRAIN_STATE, b'{"step": 1, "tokenizer": "x"}'),
               "train_state.json is damaged"),
    Regression("checkpoint", "train_state.json nesting past the recursion limit",
               lambda: (_TRAIN_STATE, b"[" * 100_000), "train_state.json is not valid JSON"),
    Regression("checkpoint", "config.json not UTF-8", lambda: ("config.json", b"\xff{}"),
               "is not UTF-8 text"),
    Regression("checkpoint", "tokenizer.json not UTF-8",
               lambda: ("tokenizer.json", (_checkpoint_dir(checkpoint_seed()) / "tokenizer.json")
                        .read_text().encode("utf-8") + b"\xe9"), "is not UTF-8 text"),
)
