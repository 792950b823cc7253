"""Hypothesis strategies that damage real, valid files: the inputs of the parser fuzz tests.

Three families, all starting from a valid file (a shipped preset, profile or calibration, a real
config.json, a tiny real checkpoint) so that most examples get past the first check and reach
the deeper ones:

* `mutated_tree`: the file parsed, then 1-3 edits at random key paths (a value replaced by a
  wrong type, None, a negative, huge, NaN or infinite number, a long or multi-line string; a
  key deleted; an unknown key of any type added; a number scaled into another unit), and
  written back as YAML or JSON;
* `mutated_text`: 1-3 edits of the text (a character changed, the file cut short, text
  inserted, a span deleted or duplicated), always valid UTF-8;
* `mutated_bytes`: the same on bytes (so possibly not UTF-8 any more), plus re-encodings
  (Latin-1, UTF-16, a byte-order mark) and whole random files; `not_utf8` always yields a file
  that is not valid UTF-8.

Plus fully random text and bytes (`random_text`, `random_bytes`).
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any, Callable, Sequence

import yaml
from hypothesis import strategies as st

# ------------------------------------------------------------------------------ values
WEIRD_SCALARS: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 3, 2**31, 2**64, 10**400, -10**30, 0.5, -0.0, 5e-324,
    1e308, -1e300, math.nan, math.inf, -math.inf,
    "", " ", "abc", "1 GB", "80 GB/s", "1.41 GHz", "1e999", "nan", "-inf", "-5", "0x10",
    "\x00", "line one\nline two", "tab\there", "\u00e9t\u00e9", "\u2028", "{", "[1, 2",
    "x" * 5000,
)
WEIRD_KEYS: tuple[Any, ...] = (None, True, 0, 7, -1, 1.5, "", "unknown_field", "x" * 300,
                               "name\nother", "\u00e9")


def weird_values() -> st.SearchStrategy:
    """What a hand-edited file can hold where a number, a string or a mapping is expected."""
    scalars = st.one_of(
        st.sampled_from(WEIRD_SCALARS),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=20),
    )
    return st.one_of(
        scalars,
        st.lists(scalars, max_size=4),
        st.dictionaries(st.text(max_size=8), scalars, max_size=3),
        st.sampled_from(([], {}, [[]], [{}], {"low": 1}, [None], {"a": {"b": None}})),
    )


def weird_keys() -> st.SearchStrategy:
    return st.one_of(st.sampled_from(WEIRD_KEYS), st.text(max_size=12), st.integers())


# ------------------------------------------------------------------------------ trees
def _paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    """Every node's path (keys and list indices), the root () first."""
    out = [prefix]
    if isinstance(tree, dict):
        for key, value in tree.items():
            out += _paths(value, prefix + (key,))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            out += _paths(value, prefix + (index,))
    return out


def _get(tree: Any, path: tuple) -> Any:
    for part in path:
        tree = tree[part]
    return tree


def _set(tree: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    _get(tree, path[:-1])[path[-1]] = value
    return tree


def _delete(tree: Any, path: tuple) -> Any:
    if not path:
        return None
    parent = _get(tree, path[:-1])
    del parent[path[-1]]
    return tree


def _scaled(value: Any, factor: float) -> Any:
    """A number in another unit (x 1e9, x 1e-9, negated, zero)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    return value * factor


def _retyped(value: Any) -> Any:
    """The same value spelled as another type: 5 -> "5", "x" -> ["x"], [..] -> {"0": ..}."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return {str(i): v for i, v in enumerate(value)}
    if isinstance(value, dict):
        return list(value.values())
    return value


@st.composite
def tree_edits(draw: Callable, tree: Any, max_edits: int = 3) -> Any:
    """`tree` (a deep copy) with 1..max_edits edits at random key paths."""
    tree = copy.deepcopy(tree)
    for _ in range(draw(st.integers(1, max_edits))):
        edit = draw(st.sampled_from(("replace", "replace", "replace", "delete", "add_key",
                                     "scale", "retype")))
        paths = _paths(tree)
        if edit == "add_key":
            paths = [p for p in paths if isinstance(_get(tree, p), dict)] or paths
        elif edit == "scale":
            paths = [p for p in paths if isinstance(_get(tree, p), (int, float))] or paths
        path = draw(st.sampled_from(paths))
        target = _get(tree, path)
        if edit == "replace":
            tree = _set(tree, path, draw(weird_values()))
        elif edit == "delete":
            tree = _delete(tree, path)
        elif edit == "add_key" and isinstance(target, dict):
            target[draw(weird_keys())] = draw(weird_values())
        elif edit == "scale":
            factor = draw(st.sampled_from((1e9, 1e-9, -1.0, 0.0, 1e300)))
            tree = _set(tree, path, _scaled(target, factor))
        elif edit == "retype":
            tree = _set(tree, path, _retyped(target))
    return tree


def dump_yaml(tree: Any) -> str:
    return yaml.safe_dump(tree, sort_keys=False, allow_unicode=True, width=100)


def dump_json(tree: Any) -> str:
    # Python's json writes NaN/Infinity (as transformers' own configs can hold) and turns
    # non-string keys into strings.
    return json.dumps(tree, indent=2, allow_nan=True, default=str)


def mutated_tree(seeds: Sequence[Any], dump: Callable[[Any], str]) -> st.SearchStrategy[str]:
    """A parsed valid file with wrong values at random key paths, written back as text."""
    return st.sampled_from(list(seeds)).flatmap(tree_edits).map(dump)


# ------------------------------------------------------------------------------- text
# Text that parsers meet rarely by chance: YAML/JSON syntax (anchors, aliases, tags, merge
# keys, document markers), a number too long for int(), deep nesting, control characters.
TOKENS = ("&a ", "*a", "<<: *a\n", "!!binary ", "!!python/object:os.system ", "!!float ",
          "? ", "---\n", "...\n", "%YAML 1.1\n", "\ufeff", "\t", "\r", "\x00", "\\u0000",
          "9" * 5000, "[" * 2000, "{\"a\":" * 2000, "- " * 500, "1e999", "NaN", "Infinity",
          "-Infinity", ".nan", ".inf", "0x1F", "0o17", "1_000", "2001-12-14", "null", "~",
          "yes", "on", ": ", ",", "\"", "'", "#", "|\n", ">\n")
def _text_edit(draw: Callable, text: str) -> str:
    n = len(text)
    i = draw(st.integers(0, n))
    edit = draw(st.sampled_from(("change", "truncate", "insert", "delete", "duplicate")))
    if edit == "change" and n:
        i = min(i, n - 1)
        return text[:i] + draw(st.characters(exclude_categories=("Cs",))) + text[i + 1:]
    if edit == "truncate":
        return text[:i]
    if edit == "insert":
        return text[:i] + draw(st.one_of(st.text(max_size=12), st.sampled_from(TOKENS))) + text[i:]
    j = draw(st.integers(i, min(n, i + 200)))
    if edit == "delete":
        return text[:i] + text[j:]
    return text[:j] + text[i:j] + text[j:]  # duplicate


@st.composite
def _text_edits(draw: Callable, text: str) -> str:
    for _ in range(draw(st.integers(1, 3))):
        text = _text_edit(draw, text)
    return text


def mutated_text(seeds: Sequence[str]) -> st.SearchStrategy[str]:
    """A valid file's text with 1-3 character-level edits (still valid UTF-8)."""
    return st.sampled_from(list(seeds)).flatmap(_text_edits)


def random_text() -> st.SearchStrategy[str]:
    return st.text(max_size=400)


# ------------------------------------------------------------------------------ bytes
INVALID_UTF8 = (b"\xff", b"\xfe\xff", b"\xc3(", b"\x80", b"\xed\xa0\x80", b"\xc0\xaf",
                b"\xe9t\xe9")


def _byte_edit(draw: Callable, data: bytes) -> bytes:
    n = len(data)
    i = draw(st.integers(0, n))
    edit = draw(st.sampled_from(("flip", "truncate", "insert", "delete", "duplicate",
                                 "zero_tail")))
    if edit == "flip" and n:
        i = min(i, n - 1)
        return data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
    if edit == "truncate":
        return data[:i]
    if edit == "insert":
        return data[:i] + draw(st.binary(max_size=16)) + data[i:]
    if edit == "zero_tail":  # what a crash leaves on some filesystems: the length, no data
        return data[:i] + bytes(n - i)
    j = draw(st.integers(i, min(n, i + 4096)))
    if edit == "delete":
        return data[:i] + data[j:]
    return data[:j] + data[i:j] + data[j:]  # duplicate


@st.composite
def _byte_edits(draw: Callable, data: bytes) -> bytes:
    for _ in range(draw(st.integers(1, 3))):
        data = _byte_edit(draw, data)
    return data


@st.composite
def _reencoded(draw: Callable, data: bytes) -> bytes:
    text = data.decode("utf-8", errors="replace")
    how = draw(st.sampled_from(("latin-1", "utf-16", "utf-8-sig", "cp1252")))
    return (text + "\u00e9").encode(how, errors="replace")


def mutated_bytes(seeds: Sequence[bytes]) -> st.SearchStrategy[bytes]:
    """A valid file's bytes with 1-3 byte-level edits or another encoding (may not be UTF-8)."""
    base = st.sampled_from(list(seeds))
    return st.one_of(base.flatmap(_byte_edits), base.flatmap(_reencoded))


def random_bytes(max_size: int = 400) -> st.SearchStrategy[bytes]:
    return st.binary(max_size=max_size)


@st.composite
def _made_not_utf8(draw: Callable, data: bytes) -> bytes:
    i = draw(st.integers(0, len(data)))
    data = data[:i] + draw(st.sampled_from(INVALID_UTF8)) + data[i:]
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    return data + b"\xff"  # an insertion that happened to complete a character


def not_utf8(seeds: Sequence[bytes]) -> st.SearchStrategy[bytes]:
    """A valid file (possibly damaged further) that is not valid UTF-8: binary, Latin-1, ..."""
    return st.one_of(st.sampled_from(list(seeds)), mutated_bytes(seeds),
                     random_bytes()).flatmap(_made_not_utf8)


def text_file_inputs(seed_texts: Sequence[str], dump: Callable[[Any], str],
                     parse: Callable[[str], Any]) -> st.SearchStrategy[bytes]:
    """Every UTF-8 damage of a text file format: tree edits, text edits, random text."""
    trees = [parse(t) for t in seed_texts]
    return st.one_of(
        mutated_tree(trees, dump),
        mutated_text(seed_texts),
        random_text(),
    ).map(lambda text: text.encode("utf-8"))


def any_file_inputs(seed_texts: Sequence[str], dump: Callable[[Any], str],
                    parse: Callable[[str], Any]) -> st.SearchStrategy[bytes]:
    """`text_file_inputs` plus byte-level damage, other encodings and random bytes."""
    seeds = [t.encode("utf-8") for t in seed_texts]
    return st.one_of(text_file_inputs(seed_texts, dump, parse), mutated_bytes(seeds),
                     random_bytes())
