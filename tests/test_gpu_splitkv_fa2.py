"""FlashAttention-2's varlen decode as the split-KV form's `fa2_swap` variant
(simulator/gpu/attention.py), on synthetic inputs."""

from __future__ import annotations

import numpy as np
import pytest

from krakenlm.hardware import load_system
from krakenlm.simulator.kernels.gpu import attention as A

SPLIT = {"floor_s": 5e-6, "item_s": 4.5e-6, "mha_item_s": 3.2e-6, "head_s": 7e-8,
         "sm_bandwidth": 2.3e10, "memory_efficiency": 0.9, "l2_gain": 0.1,
         "overlap_exponent": 1.5, "multiblock_s": 6e-6, "swap_copy_s": 6e-6,
         "split_ctas_per_sm": 2.0, "split_mha": 0.0}


@pytest.fixture(scope="module")
def a100():
    return load_system("a100-80gb-x8").device


def cols(batch, heads, kv_heads, kv_len=1024):
    b, h, k, L = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x)) for x in
                                       (batch, heads, kv_heads, kv_len)))
    return {"batch": b, "heads": h, "kv_heads": k, "head_dim": np.full(len(b), 128),
            "kv_len": L}


def test_swap_copies_only_when_the_transpose_is_not_a_view(a100):
    """GQA rows with batch >= 2 and kv_heads >= 2 pay swap_copy_s once; batch 1, one KV head
    and MHA reshape in place (no copy); without the variant nothing changes."""
    c = cols([1, 2, 2, 8, 8, 2], [32, 32, 8, 8, 32, 4], [8, 8, 1, 8, 2, 2])
    plain = A.predict_generation(a100, c, SPLIT)
    fa2 = A.predict_generation(a100, c, {**SPLIT, "fa2_swap": 1.0})
    np.testing.assert_allclose(fa2 - plain, [0, 6e-6, 0, 0, 6e-6, 6e-6], atol=1e-15)


def test_fa2_variant_is_offered_with_its_source_rule():
    fa2 = [v for v in A.SPLITKV_VARIANTS if v.get("fa2_swap")]
    # FA3's own constants (fa3_decode.py) are fixed in every split-KV variant: the times at 0,
    # the MMA efficiency of its MMA-bound form at a placeholder 1 (not read)
    assert fa2 == [{"split_ctas_per_sm": 2.0, "split_mha": 0.0, "fa2_swap": 1.0,
                    "split_item_s": 0.0, "combine_row_s": 0.0, "seq_s": 0.0,
                    "serial_gain": 0.0, "mma_efficiency": 1.0}]
    # the other variants do not use the copy cost: fixed (and stored) at 0
    assert all(v["swap_copy_s"] == 0.0 for v in A.SPLITKV_VARIANTS if not v.get("fa2_swap"))
