"""A replay's logs (Python lists of floats or ints) read into numpy arrays by `struct`, in
chunks.

`np.fromiter(values, dtype, n)` converts each value through numpy's generic scalar
assignment (about 200 instructions a value); `struct` converts a Python float to its C
double and a Python int to a C long long directly (about 40). A pack's values are its
arguments, so a list is packed in chunks of `CHUNK` values into the array itself
(`Struct.pack_into`): one pack of 10^6 values would build an argument tuple of 8 MB,
which leaves the caches and is no faster than `fromiter` (measured on this machine: ~8 ns
a value in chunks of 4,096, 16-19 ns at 32,768 and for `fromiter` at any size).

Exact: a Python float is a C double, packed as its own 8 bytes ("d"); a Python int within
int64 packs as that C long long ("q", 8 bytes; `struct.error` outside it, where `fromiter`
raises OverflowError). The formats are struct's native mode (no prefix: the machine's byte
order and sizes, which the array reads; a format of one repeated code has no padding), whose
packers copy the value where the standard mode ("=") rebuilds a double's bytes field by
field (`PyFloat_Pack8`).
"""

from __future__ import annotations

import struct

import numpy as np

CHUNK = 4096  # values per pack
_CODES = {np.dtype(np.float64): "d", np.dtype(np.int64): "q"}
_FULL = {code: struct.Struct(f"{CHUNK}{code}") for code in _CODES.values()}


def packed_array(values: list, dtype: type | np.dtype) -> np.ndarray:
    """`np.fromiter(values, dtype, len(values))` for a list of floats (float64) or ints
    (int64), by `struct` in chunks: the same array (see the module docstring)."""
    dtype = np.dtype(dtype)
    code = _CODES[dtype]
    n = len(values)
    out = np.empty(n, dtype)
    size = dtype.itemsize
    pack_full = _FULL[code].pack_into
    whole = n - n % CHUNK
    for start in range(0, whole, CHUNK):
        pack_full(out, start * size, *values[start:start + CHUNK])
    if whole < n:
        struct.pack_into(f"{n - whole}{code}", out, whole * size, *values[whole:])
    return out
