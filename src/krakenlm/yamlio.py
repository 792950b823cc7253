"""Reading YAML that a user wrote: PyYAML's safe loader, every way it fails as a YAMLError.

`yaml.safe_load` raises more than `yaml.YAMLError` on damaged input: a RecursionError for
nesting deeper than Python's recursion limit, and plain exceptions from the constructors of
some values (a ValueError for an integer of more than 4,300 digits or the timestamp 2024-13-45,
an IndexError for an empty `!!float`). Loaders catch `yaml.YAMLError` to report "not valid
YAML" in one line; this turns the others into one too. Parsing a string touches nothing else,
so whatever it raises comes from the text.
"""

from __future__ import annotations

from typing import Any

import yaml


def safe_load(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        raise
    except RecursionError:
        raise yaml.YAMLError("lists or mappings nest too deeply") from None
    except Exception as exc:  # noqa: BLE001  (see the module docstring)
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise yaml.YAMLError(f"a value cannot be read ({detail})") from None
