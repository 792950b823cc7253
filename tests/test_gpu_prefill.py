"""Prefill (context) attention: tile menus, causal block counts, vLLM's KV-cache write, warm L2.

Synthetic inputs with known outcomes only (kernels/gpu/prefill_tiles.py, attention.py).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from krakenlm.hardware import load_system
from krakenlm.simulator.kernels.base import SERVING, Conditions, Setting
from krakenlm.simulator.kernels.gpu import attention as A
from krakenlm.simulator.kernels.gpu import prefill_tiles as T

CTX = {"floor_s": 1.2e-5, "mma_efficiency": 0.78, "softmax_s": 3e-11, "item_s": 1e-6,
       "memory_efficiency": 0.6, "kv_passes": 2.0, "overlap_exponent": 1.1}


H100, L40S = load_system("h100-80gb-x8"), load_system("l40s-x8")


@pytest.fixture(scope="module")
def h100():
    return H100.device


@pytest.fixture(scope="module")
def l40s():
    return L40S.device


SQUARE = A.ContextStructure()  # 128 x 128 tiles, one head per tile, no cache write


def predict(c, p, structure=SQUARE, dtype="bf16", system=H100, conditions=SERVING):
    return A.FLASH_CONTEXT.predict(Setting(system, "vllm", dtype), c, p, structure, conditions)


def supported(framework, c):
    return A.FLASH_CONTEXT.supported(Setting(H100, framework, "bf16"), c)


def cols(batch, isl, heads, kv_heads, head_dim):
    arrays = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x)) for x in
                                   (batch, isl, heads, kv_heads, head_dim)))
    out = {n: a.astype(np.int64) for n, a in
           zip(("batch", "isl", "heads", "kv_heads", "head_dim"), arrays)}
    out["window"] = np.zeros_like(out["batch"])
    return out


def all_menu_variants():
    return [s for fw in ("trtllm", "vllm", "sglang")
            for s in A.FLASH_CONTEXT.structures(Setting(H100, fw, "bf16"))]


def test_key_block_holds_a_fixed_number_of_elements():
    # fmha_v2's Hopper kernels and FA2's split kernel: 256 / 128 / 64 keys by head size
    assert list(T.block_n([64, 128, 192, 256], 16384)) == [256, 128, 64, 64]
    assert list(T.block_n([128], 8192)) == [64]  # FA3's sm8x path at head_dim 128
    assert list(T.block_n([64, 256], 0.0)) == [128, 128]  # the fixed 128-key form


def test_causal_tiles_by_hand():
    # block_m == block_n, one head per tile: tile j visits j blocks
    tiles, mean, longest = T.causal_tiles([1024], [1.0], [128], [128])
    assert (tiles[0], mean[0], longest[0]) == (8, 4.5, 8)
    # 64-row tiles over 128-key blocks: two tiles per block row, (1, 1, 2, 2, ..., 8, 8)
    tiles, mean, longest = T.causal_tiles([1024], [1.0], [64], [128])
    assert (tiles[0], mean[0], longest[0]) == (16, 4.5, 8)
    # a GQA group of 8 packed into 128 rows: 16 tokens per tile, 8 tiles per key block
    tiles, mean, longest = T.causal_tiles([1024], [8.0], [128], [128])
    assert (tiles[0], longest[0]) == (64, 8) and mean[0] == pytest.approx(4.5)
    # a single token: one tile, one block, whatever the tile
    assert [float(x[0]) for x in T.causal_tiles([1], [1.0], [64], [256])] == [1.0, 1.0, 1.0]


def test_causal_tiles_of_one_row_are_that_rows_tiles_among_many():
    isl, group, bm, bn = [1000, 3000, 1000, 77], [1.0, 8.0, 1.0, 4.0], [128, 64, 128, 128], \
        [128, 128, 128, 64]
    many = T.causal_tiles(isl, group, bm, bn)
    for i in range(len(isl)):
        one = T.causal_tiles([isl[i]], [group[i]], [bm[i]], [bn[i]])
        assert [float(x[0]) for x in one] == [float(x[i]) for x in many]


def test_causal_tiles_cover_the_causal_triangle():
    for s, g, bm, bn in itertools.product([1, 16, 100, 1024, 3000], [1.0, 3.0, 8.0, 96.0],
                                          [64, 128], [64, 128, 256]):
        tiles, mean, longest = T.causal_tiles([s], [g], [bm], [bn])
        computed = tiles[0] * mean[0] * bm * bn / g  # (query, key) slots per head
        assert computed >= s * (s + 1) / 2 - 1e-9, (s, g, bm, bn)
        assert longest[0] == np.ceil(s / bn)


def test_fa2_packs_gqa_only_for_single_token_queries():
    g = T.query_group([1, 16, 1], [32, 32, 32], [8, 8, 32], "single_query")
    assert list(g) == [4.0, 1.0, 1.0]
    assert list(T.query_group([16], [32], [8], "packed")) == [4.0]
    assert list(T.query_group([1], [32], [8], "none")) == [1.0]
    with pytest.raises(ValueError, match="unknown GQA packing 'pack'"):
        T.query_group([1], [32], [8], "pack")


def test_every_menu_variant_never_beats_the_tensor_peak(h100):
    grid = list(itertools.product([1, 4, 32, 256], [1, 16, 128, 1024, 8192], [8, 32, 96],
                                  [1, 8], [64, 128, 256]))
    b, s, h, kv, d = (np.array(x) for x in zip(*grid))
    c = cols(b, s, h, np.minimum(kv, h), d)
    fast = {**CTX, "mma_efficiency": 0.999, "softmax_s": 1e-15, "item_s": 1e-9,
            "floor_s": 1e-7, "overlap_exponent": 50.0}
    for v in all_menu_variants():
        for dtype in ("bf16", "fp8"):
            p = {**fast, "cache_write_thread_s": 1e-15}
            t = predict(c, p, v, dtype)
            assert (A.context_flops(c) / t).max() <= h100.matrix_rate(dtype), v


@pytest.mark.parametrize("variant", all_menu_variants())
def test_every_menu_variant_is_monotone_in_isl(h100, variant):
    isl = np.array([1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384])
    for b, h, kv, d in [(1, 32, 8, 128), (8, 64, 8, 64), (64, 16, 16, 256), (2, 96, 1, 128)]:
        t = predict(cols(b, isl, h, kv, d), {**CTX, "cache_write_thread_s": 2e-9}, variant)
        assert np.all(np.diff(t) >= 0), (variant, t)


def test_menus_keep_the_square_form_they_replace():
    """A refit can always fall back on the 128 x 128 form (both packings) it replaced."""
    for fw in ("trtllm", "vllm", "sglang", "other"):
        setting = Setting(H100, fw, "bf16")
        structures = A.FLASH_CONTEXT.structures(setting)
        for pack in ("none", "packed"):
            assert any(s.gqa_packing == pack and s.block_m == 128 and s.kv_tile == 0
                       for s in structures), fw
        # vLLM times its KV-cache write with the op: only its structures carry it
        writes = {s.cache_write for s in structures}
        assert writes == {fw == "vllm"}
        names = [p.name for p in A.FLASH_CONTEXT.params(setting, structures[0])]
        assert ("cache_write_thread_s" in names) == (fw == "vllm")


def test_vllm_cache_write_is_one_cta_per_token(h100):
    """Same FLOPs and bytes (batch x heads fixed), fewer KV heads: more tokens, each a CTA."""
    p = {**CTX, "cache_write_thread_s": 2e-9}
    write = A.ContextStructure(cache_write=True)
    few = cols(128, 256, 4, 4, 128)   # 32768 tokens, 512 threads per CTA
    many = cols(8, 256, 64, 64, 128)  # 2048 tokens, 512 threads per CTA
    extra = [predict(c, p, write)[0] - predict(c, CTX)[0] for c in (few, many)]
    assert extra[0] == pytest.approx(32768 * 512 * 2e-9 / h100.core_count)
    assert extra[0] == pytest.approx(16 * extra[1])
    # one KV head of 128 dims: a 128-thread CTA, a quarter of the time per token
    one = cols(128, 256, 1, 1, 128)
    assert predict(one, p, write)[0] - predict(one, CTX)[0] == pytest.approx(extra[0] / 4)
    # a model graph that writes the cache in an op of its own leaves it out (column)
    assert predict(dict(few, cache_write=np.array([False])), p, write)[0] == \
        pytest.approx(predict(few, CTX)[0])


def test_warm_replay_streams_small_footprints_at_the_l2_bandwidth(l40s):
    """Memory-bound rows (short prompts, many sequences) of a benchmark that replays the op:
    below the L2 capacity the memory time shrinks by the L2 / DRAM bandwidth ratio, above it
    nothing changes; a query (no harness conditions) never has it."""
    p = {**CTX, "floor_s": 1e-12, "item_s": 1e-12, "overlap_exponent": 50.0,
         "mma_efficiency": 0.999, "softmax_s": 1e-15}  # small packed tiles: compute is cheap
    tiles = A.ContextStructure(64, 8192, "packed")
    warm = Conditions(warm_replay=True)
    small, big = cols(128, 16, 32, 8, 128), cols(4096, 16, 32, 8, 128)
    fp_small = 128 * 16 * 128 * 2 * (2 * 32 + 4 * 8)
    assert fp_small < l40s.global_buffer.capacity_bytes < 32 * fp_small
    ratio = l40s.global_buffer_bandwidth_bytes_per_s / l40s.memory.bandwidth_bytes_per_s
    cold = predict(small, p, tiles, system=L40S)[0]
    hot = predict(small, p, tiles, system=L40S, conditions=warm)[0]
    assert cold / hot == pytest.approx(ratio, rel=0.1)
    assert predict(big, p, tiles, system=L40S, conditions=warm)[0] == \
        pytest.approx(predict(big, p, tiles, system=L40S)[0])


def test_context_supported_keeps_one_kernel_per_fit(h100):
    c = cols([1, 1, 1, 1], [64, 64, 64, 64], [8, 8, 8, 8], [8, 8, 8, 8], [128, 64, 192, 256])
    c["kernel"] = np.array(["flashinfer", "triton", "triton", "flashinfer"], dtype=object)
    assert list(supported("sglang", c)) == [True, False, False, True]
    # a dataset measured only with the fallback is fitted on it
    only = dict(c, kernel=np.array(["triton"] * 4, dtype=object))
    assert list(supported("sglang", only)) == [True, True, True, True]
    # vLLM-FlashInfer's decode kernel for single-token queries is another kernel
    v = dict(c, kernel=np.array(["vllm_flashinfer_trtllmdecode"] + ["x_trtllmprefill"] * 3,
                                dtype=object))
    assert list(supported("vllm", v)) == [False, True, True, True]
    # SGLang's FA3 at head_dim 192 pays an extra pass: not this model; other frameworks keep it
    fa3 = dict(c, kernel=np.array(["fa3"] * 4, dtype=object))
    assert list(supported("sglang", fa3)) == [True, True, False, True]
    assert supported("vllm", fa3).all()


def test_trtllm_fp8_fmha_follows_an_fp8_cache_on_hopper_not_on_ada(h100, l40s):
    assert A.context_kernel_dtype("trtllm", "bf16", "fp8", h100) == "fp8"
    assert A.context_kernel_dtype("trtllm", "bf16", "fp8", l40s) == "bf16"
    assert A.context_kernel_dtype("trtllm", "fp8", "fp8", l40s) == "fp8"
    assert A.context_kernel_dtype("vllm", "bf16", "fp8", h100) == "bf16"
