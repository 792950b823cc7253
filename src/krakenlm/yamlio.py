"""Reading YAML that a user wrote: PyYAML's safe loader, every way it fails as a YAMLError.

`yaml.safe_load` raises more than `yaml.YAMLError` on damaged input: a RecursionError for
nesting deeper than Python's recursion limit, and plain exceptions from the constructors of
some values (a ValueError for an integer of more than 4,300 digits or the timestamp 2024-13-45,
an IndexError for an empty `!!float`). Loaders catch `yaml.YAMLError` to report "not valid
YAML" in one line; this turns the others into one too. Parsing a string touches nothing else,
so whatever it raises comes from the text.

It parses with libyaml (PyYAML's `CSafeLoader`) when PyYAML was built with it, else with the
pure-Python `SafeLoader`: both run the same resolver and constructors, so they build the same
values, and libyaml reads a calibration file about ten times faster (a cold `krakenlm sim run`
reads four). libyaml stops at 1,000 levels of nesting, the pure-Python loader at the
recursion limit: both are reported in the same words.
"""

from __future__ import annotations

from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TOO_DEEP = "lists or mappings nest too deeply"
_LIBYAML_TOO_DEEP = "exceeded maximum nesting depth"


def safe_load(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_LOADER)  # noqa: S506  (a safe loader)
    except yaml.YAMLError as exc:
        if getattr(exc, "problem", None) == _LIBYAML_TOO_DEEP:  # the same words either loader
            raise yaml.YAMLError(_TOO_DEEP) from None
        raise
    except RecursionError:
        raise yaml.YAMLError(_TOO_DEEP) from None
    except Exception as exc:  # noqa: BLE001  (see the module docstring)
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise yaml.YAMLError(f"a value cannot be read ({detail})") from None
