"""krakenlm: inherently parallel Transformers (Kraken) and a hardware evaluation framework."""

__version__ = "0.1.0"
