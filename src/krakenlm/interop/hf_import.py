"""`krakenlm import hf`: a local Hugging Face model directory -> a krakenlm run directory.

Imports what our model computes exactly: GPT-2, Llama and Mistral (full attention), and
krakenlm's own remote-code exports (any architecture). Anything else is refused with a
one-line error naming the unsupported model_type or feature. The run is written through
`runtime.checkpoint.save_checkpoint` (step 0, no optimizer state), so `krakenlm eval` and
`krakenlm generate` read it like a trained run. The model's own tokenizer comes with it (see
`hf_tokenizer`): recorded in train_state.json and, unless it is GPT-2's, saved as the run's
tokenizer.json, so every command feeds the model its own ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from ..data.vocab import tokenizer_files as checkpoint_tokenizer_files
from ..data.vocab import tokenizer_record
from ..errors import KrakenError
from ..models.config import ModelConfig, read_json_object
from ..models.transformer import Transformer
from ..runtime.checkpoint import save_checkpoint
from . import native
from .atomic_dir import check_output_dir, write_directory_atomically
from .hf_tokenizer import read_hf_tokenizer

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
# Buffers some transformers versions saved with the weights: derived, never learned.
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")
PREFIXES = {"gpt2": "transformer.", "llama": "model.", "mistral": "model.", "krakenlm": "model."}


@dataclass(frozen=True)
class ImportResult:
    """What an import of a Hugging Face checkpoint produced: the run directory written, the
    checkpoint's model_type, the krakenlm ModelConfig it maps to, its parameter count, the
    tokenizer the run records and where it came from, and warnings (plausible but suspicious
    values, printed as `warning:` lines)."""
    out_dir: Path
    model_type: str
    config: ModelConfig
    num_params: int
    tokenizer: object  # the tokenizer the run records (GPT-2's or the model's tokenizer.json)
    tokenizer_source: str  # "read from tokenizer.json", ... (hf_tokenizer.DirTokenizer)
    warnings: tuple[str, ...] = ()  # plausible but suspicious: printed as `warning:` lines


def read_config(hf_dir: Path) -> tuple[dict, ModelConfig]:
    """config.json -> (its content, the ModelConfig it maps to exactly)."""
    if not hf_dir.exists():
        raise KrakenError(f"{hf_dir} does not exist; give a local Hugging Face model directory "
                          "(one written by save_pretrained)")
    if not hf_dir.is_dir():
        raise KrakenError(f"{hf_dir} is a file; give the model's directory (with config.json)")
    path = hf_dir / "config.json"
    if not path.is_file():
        raise KrakenError(f"{hf_dir} has no config.json: it is not a Hugging Face model "
                          "directory (save one with model.save_pretrained(DIR))")
    data = read_json_object(path)
    if data.get("model_type") == "krakenlm":
        fields = {k: data[k] for k in ModelConfig.__dataclass_fields__ if k in data}
        try:
            return data, ModelConfig.from_dict(fields)
        except TypeError as exc:
            raise KrakenError(f"{path}: {exc}") from None
    return data, native.config_from_native(data, str(path))


def _load_weight_file(path: Path) -> dict[str, torch.Tensor]:
    try:
        if path.suffix == ".safetensors":
            return load_file(str(path))
        return torch.load(path, map_location="cpu", weights_only=True)
    except (SafetensorError, OSError, RuntimeError, EOFError) as exc:
        raise KrakenError(f"cannot read the weights {path} ({str(exc).splitlines()[0]}); the "
                          "file may be truncated or not a weight file") from None


def read_weights(hf_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint, from one file or the shards an index names."""
    present = [name for name in WEIGHT_FILES if (hf_dir / name).is_file()]
    if not present:
        raise KrakenError(f"{hf_dir} holds no weights: expected one of {', '.join(WEIGHT_FILES)} "
                          "(other formats, e.g. TensorFlow or Flax, are not supported)")
    name = present[0]
    if not name.endswith(".index.json"):
        return _load_weight_file(hf_dir / name)
    index = read_json_object(hf_dir / name)
    shards = sorted(set((index.get("weight_map") or {}).values()))
    if not shards:
        raise KrakenError(f"{hf_dir / name} has no weight_map; the index file is damaged")
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        if not (hf_dir / shard).is_file():
            raise KrakenError(f"{hf_dir / name} names the shard {shard}, which is missing")
        state.update(_load_weight_file(hf_dir / shard))
    return state


def _few(items: list[str], limit: int = 3) -> str:
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def normalise_names(state: dict[str, torch.Tensor], kind: str,
                    config: ModelConfig) -> dict[str, torch.Tensor]:
    """Names without the causal-LM prefix, derived buffers dropped, a tied head dropped
    (transformers ties it to the embedding on load, whatever the file holds)."""
    prefix = PREFIXES[kind]
    out = {}
    for name, tensor in state.items():
        if name.endswith(IGNORED_SUFFIXES):
            continue
        if name == "lm_head.weight" and config.tie_embeddings:
            continue
        out[name[len(prefix):] if name.startswith(prefix) else name] = tensor
    return out


def check_shapes(state: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]],
                 source: str) -> None:
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = [f"{n} is {tuple(state[n].shape)} but config.json implies {expected[n]}"
             for n in sorted(set(state) & set(expected)) if tuple(state[n].shape) != expected[n]]
    problems = ([f"missing {_few(missing)}"] if missing else []) + \
               ([f"unexpected {_few(unexpected)}"] if unexpected else []) + \
               ([_few(wrong)] if wrong else [])
    if problems:
        raise KrakenError(f"{source}: the weights do not match config.json "
                          f"({'; '.join(problems)}); is config.json from another model?")


def check_finite(state: dict[str, torch.Tensor], source: str) -> None:
    bad = [name for name, t in state.items() if t.is_floating_point() and
           not bool(torch.isfinite(t).all())]
    if bad:
        raise KrakenError(f"{source}: weights hold NaN or infinite values ({_few(sorted(bad))}); "
                          "the checkpoint is damaged")


def convert(data: dict, config: ModelConfig, hf_state: dict[str, torch.Tensor],
            source: str) -> Transformer:
    """The Hugging Face tensors as our fp32 Transformer (every tensor checked first)."""
    kind = data["model_type"]
    state = normalise_names(hf_state, kind, config)
    with torch.device("meta"):
        model = Transformer(config)
    if kind == "gpt2":
        check_shapes(state, native.gpt2_expected_shapes(config), source)
        ours = native.from_gpt2(state, config)
    elif kind in ("llama", "mistral"):
        check_shapes(state, native.llama_expected_shapes(config), source)
        ours = native.from_llama(state, config)
    else:
        check_shapes(state, {n: tuple(t.shape) for n, t in model.state_dict().items()}, source)
        ours = state
    check_finite(ours, source)
    # fp16/bf16 checkpoints are widened: krakenlm keeps fp32 master weights.
    return model.assign_weights({n: t.to(torch.float32) for n, t in ours.items()}).eval()


def import_hf(hf_dir: Path, out_dir: Path, *, force: bool = False) -> ImportResult:
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    data, config = read_config(hf_dir)
    check_output_dir(out_dir, force, "imported run", hf_dir)
    found = read_hf_tokenizer(hf_dir, data, config.vocab_size)  # before the (large) weights
    model = convert(data, config, read_weights(hf_dir), str(hf_dir))
    train_state = {"step": 0, "tokens_seen": 0, "corpus": None, "val_loss": None,
                   "imported_from": str(hf_dir.resolve()), "model_type": data["model_type"],
                   "tokenizer": tokenizer_record(found.tokenizer)}

    def fill(tmp: Path) -> None:
        save_checkpoint(tmp, model, None, train_state,
                        files=checkpoint_tokenizer_files(found.tokenizer))

    write_directory_atomically(out_dir, fill, force=force, what="imported run",
                               source=hf_dir)
    return ImportResult(out_dir, data["model_type"], config, model.num_params(),
                        found.tokenizer, found.source,
                        (found.warning,) if found.warning else ())
