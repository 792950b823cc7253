"""`krakenlm export hf` and `krakenlm import hf`: Hugging Face model directories both ways."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from . import app
from ..console import stderr_console

export_app = typer.Typer(help="Write a checkpoint in another ecosystem's format.", no_args_is_help=True)
import_app = typer.Typer(help="Turn another ecosystem's model into a krakenlm run.", no_args_is_help=True)
app.add_typer(export_app, name="export")
app.add_typer(import_app, name="import")


@export_app.command("hf")
def export_hf_command(
    checkpoint_dir: Path = typer.Option(..., "--checkpoint", help="A checkpoint directory (a `train --out` DIR)."),
    out: Path = typer.Option(..., "--out", help="The Hugging Face model directory to write (must not exist or be empty)."),
    force: bool = typer.Option(False, "--force", help="Replace a non-empty --out."),
    remote_code: bool = typer.Option(False, "--remote-code", help="Write krakenlm's own modelling code even when a native transformers class (GPT-2, Llama) fits."),
) -> None:
    """A checkpoint as a Hugging Face model: AutoModelForCausalLM.from_pretrained(OUT) and AutoTokenizer work offline."""
    from ..interop.hf_export import export_hf

    console = stderr_console()
    with console.status(f"exporting {checkpoint_dir} ..."):
        result = export_hf(checkpoint_dir, out, force=force, remote_code=remote_code)
    if result.remote_code:
        how = ("AutoModelForCausalLM.from_pretrained(OUT, trust_remote_code=True) "
               "(modelling code in modeling_krakenlm.py)")
    else:
        how = f"AutoModelForCausalLM.from_pretrained(OUT) (native {result.family} classes)"
    console.print(f"wrote {out} as a {result.family} model: load it with {how}", soft_wrap=True)


@import_app.command("hf")
def import_hf_command(
    hf_dir: Path = typer.Argument(..., help="A local Hugging Face model directory (config.json + model.safetensors or pytorch_model.bin)."),
    out: Path = typer.Option(..., "--out", help="The krakenlm run directory to write (must not exist or be empty)."),
    force: bool = typer.Option(False, "--force", help="Replace a non-empty --out."),
) -> None:
    """A GPT-2, Llama or Mistral model (or a krakenlm export) as a krakenlm run for eval/generate."""
    from ..interop.hf_import import import_hf

    console = stderr_console()
    with console.status(f"importing {hf_dir} ..."):
        result = import_hf(hf_dir, out, force=force)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    c, tok = result.config, result.tokenizer
    console.print(f"imported {result.model_type} ({result.num_params:,} parameters, {c.arch} "
                  f"block, {c.n_layers} layers, width {c.d_model}) with tokenizer {tok.name} "
                  f"({tok.vocab_size:,} tokens, {result.tokenizer_source}) "
                  f"into {out}: use `krakenlm eval --checkpoint {out}` or "
                  f"`krakenlm generate --checkpoint {out}`", soft_wrap=True, markup=False)
