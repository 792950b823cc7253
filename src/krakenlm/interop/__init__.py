"""Interoperability with other ecosystems: Hugging Face `transformers` export and import.

Nothing here needs `transformers` installed: an export is files (config.json, safetensors,
tokenizer files, and for non-native models the modelling code), an import reads files.
"""
