"""Reading YAML that a user wrote: PyYAML's safe loader, every way it fails as a YAMLError.

`yaml.safe_load` raises more than `yaml.YAMLError` on hostile or damaged input: a
RecursionError for nesting deeper than Python's recursion limit, a ValueError for a value its
constructors cannot build (an integer of more than 4,300 digits, a timestamp such as
2024-13-45). Loaders catch `yaml.YAMLError` to report "not valid YAML" in one line; this turns
the others into one too.
"""

from __future__ import annotations

from typing import Any

import yaml


def safe_load(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise yaml.YAMLError("lists or mappings nest too deeply") from None
    except ValueError as exc:
        raise yaml.YAMLError(f"a value cannot be read ({str(exc).splitlines()[0]})") from None
