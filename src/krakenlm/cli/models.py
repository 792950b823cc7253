"""`krakenlm models`: the named presets."""

from __future__ import annotations

import json

import typer

from ..models import PRESETS
from . import app
from ..console import stdout_console, table as _table


@app.command("models")
def list_models(as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table.")) -> None:
    """List the model presets (architecture, shape and parameter count)."""
    if as_json:
        rows = [{"name": name, "arch": cfg.arch, "params": cfg.num_params()}
                for name, cfg in PRESETS.items()]
        print(json.dumps(rows, indent=2))
        return
    table = _table(title="krakenlm model presets (e, h, FFN are per sub-layer; d = sub-layers)")
    for column in ("name", "arch", "L", "d", "e", "h", "FFN", "vocab", "ctx", "params"):
        table.add_column(column, justify="left" if column in ("name", "arch") else "right",
                         no_wrap=True)
    for name, cfg in PRESETS.items():
        table.add_row(name, cfg.arch, str(cfg.n_layers), str(cfg.degree), str(cfg.d_model),
                      str(cfg.n_heads), str(cfg.ffn_dim), str(cfg.vocab_size),
                      str(cfg.context_len), f"{cfg.num_params() / 1e6:,.2f}M")
    stdout_console().print(table)
