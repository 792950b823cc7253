"""`python -m krakenlm` is the `krakenlm` command (torchrun uses this form)."""

from .cli import main

main()
