"""yamlio: the libyaml and pure-Python loaders read the same values and fail in the same words."""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path

import pytest
import yaml

from krakenlm import yamlio


def _same(a, b) -> bool:
    """Equal values of equal types, dict keys in the same order (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _shipped_yaml_files() -> list[Path]:
    root = Path(str(resources.files("krakenlm")))
    return sorted(root.rglob("*.yaml"))


def test_the_package_ships_yaml_files():
    names = {p.name for p in _shipped_yaml_files()}
    assert len(names) >= 10  # hardware presets, software profiles, calibrations


@pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="PyYAML built without libyaml")
@pytest.mark.parametrize("path", _shipped_yaml_files(), ids=lambda p: p.name)
def test_every_shipped_file_reads_the_same_with_either_loader(path):
    text = path.read_text()
    assert _same(yamlio.safe_load(text), yaml.load(text, Loader=yaml.SafeLoader))


@pytest.mark.parametrize("loader", ["CSafeLoader", "SafeLoader"])
@pytest.mark.parametrize("text,message", [
    ("[" * 5000, "^lists or mappings nest too deeply$"),    # libyaml's limit / the recursion limit
    ("when: 2024-13-45\n", "^a value cannot be read"),   # a constructor's ValueError
])
def test_damaged_text_is_one_yaml_error_in_the_same_words_with_either_loader(
        loader, text, message, monkeypatch):
    if not hasattr(yaml, loader):
        pytest.skip("PyYAML built without libyaml")
    monkeypatch.setattr(yamlio, "_LOADER", getattr(yaml, loader))
    with pytest.raises(yaml.YAMLError, match=message):
        yamlio.safe_load(text)
