"""Tile geometry of prefill (context) attention kernels, for attention.py's `context/flash`.

Which tiles a prefill kernel uses is read from the libraries' sources, not fitted
(attention.CONTEXT_MENUS names the menus each framework's fit tries):

* `block_m`: 64 for FlashAttention-2's split-KV kernel (vLLM on Ampere: a paged KV cache
  forces that kernel, `kBlockM = 64` for every head size) and TensorRT-LLM's fmha_v2 Ampere
  kernels (`fmha_v2_flash_attention_*_64_128_S_*_sm80`: 64-row Q steps); 128 for FA3 on
  Hopper, fmha_v2's warp-specialised Hopper kernels (two 64-row consumer warpgroups) and FA3's
  sm8x path (SGLang on Ampere: `tile_size_fwd_sm8x`, 128 x 64 at head_dim 128).
* `kv_tile`: the keys x head_dim elements one K (or V) tile holds in shared memory; the key
  block is the largest power of two that fits (`block_n`): FA2's split kernel and fmha_v2's
  Hopper kernels take 256 / 128 / 64 keys for head_dim <= 64 / <= 128 / <= 256 (16384
  elements), FA3's sm8x path 64 keys at head_dim 128 (8192). 0 keeps the fixed 128-key block
  (FA3 on Hopper at head_dim 128).
* `gqa_packing`: "none" one head per tile; "packed" the query heads of a GQA group packed into
  the rows of a tile (FA3's PackGQA, forced with a non-TMA paged KV cache); "single_query"
  packed only for single-token queries (FA2 swaps a GQA group into the query rows when
  seqlen_q == 1, `seqlenq_ngroups_swapped`, and runs unpacked otherwise).

Causal work is counted per tile: tile j (1-based) holds the queries up to token
ceil(j block_m / g), so it visits ceil(min(ceil(j block_m / g), isl) / block_n) key blocks.
"""

from __future__ import annotations

import functools
import math

import numpy as np

BLOCK_M = 128  # query rows per tile unless a kernel's menu says otherwise
BLOCK_N = 128  # keys per block of the inner loop when `kv_tile` is 0
MIN_BLOCK_N, MAX_BLOCK_N = 16, 256  # key blocks the libraries compile
# vLLM's KV-cache write (reshape_and_cache_flash) launches one CTA per token with
# min(kv_heads * head_dim, 512) threads (csrc/cache_kernels.cu)
CACHE_WRITE_MAX_THREADS = 512

_cache: dict = {}
_CACHE_SIZE = 8


def block_n(head_dim, kv_tile: float) -> np.ndarray:
    """Keys per block: the largest power of two with block_n x head_dim <= kv_tile (0: 128)."""
    d = np.asarray(head_dim, float)
    if kv_tile <= 0:
        return np.full(d.shape, float(BLOCK_N))
    n = 2.0 ** np.floor(np.log2(kv_tile / d))
    return np.clip(n, MIN_BLOCK_N, MAX_BLOCK_N)


PACKINGS = ("none", "packed", "single_query")


def query_group(isl, heads, kv_heads, packing: str) -> np.ndarray:
    """Query heads sharing one tile's rows (1 unless the kernel packs GQA, see the docstring)."""
    g = np.asarray(heads, float) / np.asarray(kv_heads, float)
    if packing == "single_query":  # FA2: only a single-token query is swapped into the rows
        return np.where(np.asarray(isl) == 1, g, 1.0)
    if packing == "packed":
        return g
    if packing == "none":
        return np.ones_like(g)
    raise ValueError(f"unknown GQA packing {packing!r}; known: {', '.join(PACKINGS)}")


@functools.lru_cache(maxsize=4096)
def _one(isl: int, group: float, bm: int, bn: int) -> tuple[float, float, float]:
    tiles = math.ceil(isl * group / bm)
    j = np.arange(1, tiles + 1, dtype=float)
    keys = np.minimum(np.ceil(j * bm / group), isl)
    blocks = np.ceil(keys / bn)
    return float(tiles), float(blocks.mean()), float(blocks.max())


def causal_tiles(isl, group, bm, bn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tiles per sequence and head group, mean and largest key blocks a tile visits)."""
    arrays = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x, float))
                                   for x in (isl, group, bm, bn)))
    key = tuple(a.tobytes() for a in arrays)
    hit = _cache.get(key)
    if hit is not None:
        return hit
    stacked = np.stack(arrays, axis=1)
    if len(stacked) == 1:  # a query's one operator: nothing to deduplicate
        shapes, inverse = stacked, np.zeros(1, int)
    else:
        shapes, inverse = np.unique(stacked, axis=0, return_inverse=True)
    table = np.array([_one(int(s), float(g), int(m), int(n)) for s, g, m, n in shapes])
    rows = table[inverse.reshape(-1)]
    out = (rows[:, 0], rows[:, 1], rows[:, 2])
    if len(_cache) >= _CACHE_SIZE:
        _cache.pop(next(iter(_cache)))
    _cache[key] = out
    return out


def cache_write_threads(kv_heads, head_dim) -> np.ndarray:
    """Threads of vLLM's per-token KV-cache write CTA (see CACHE_WRITE_MAX_THREADS)."""
    return np.minimum(np.asarray(kv_heads, float) * np.asarray(head_dim, float),
                      CACHE_WRITE_MAX_THREADS)
