"""FlashAttention-2's varlen decode as the split-KV form's `fa2_swap` structure
(kernels/gpu/attention.py), on synthetic inputs."""

from __future__ import annotations

import numpy as np

from krakenlm.hardware import load_system
from krakenlm.simulator.kernels.base import Conditions, Setting
from krakenlm.simulator.kernels.gpu import attention as A

SPLIT = {"floor_s": 5e-6, "item_s": 4.5e-6, "mha_item_s": 3.2e-6, "head_s": 7e-8,
         "sm_bandwidth": 2.3e10, "memory_efficiency": 0.9, "l2_gain": 0.1,
         "overlap_exponent": 1.5, "multiblock_s": 6e-6, "swap_copy_s": 6e-6}
A100 = load_system("a100-80gb-x8")


def predict(c, structure):
    return A.FLASH_SPLITKV.predict(Setting(A100, "vllm", "bf16"), c, SPLIT, structure,
                                   Conditions(warm_replay=True))


def cols(batch, heads, kv_heads, kv_len=1024):
    b, h, k, L = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x)) for x in
                                       (batch, heads, kv_heads, kv_len)))
    return {"batch": b, "heads": h, "kv_heads": k, "head_dim": np.full(len(b), 128),
            "kv_len": L}


def test_swap_copies_only_when_the_transpose_is_not_a_view():
    """GQA rows with batch >= 2 and kv_heads >= 2 pay swap_copy_s once; batch 1, one KV head
    and MHA reshape in place (no copy); without the structure nothing changes."""
    c = cols([1, 2, 2, 8, 8, 2], [32, 32, 8, 8, 32, 4], [8, 8, 1, 8, 2, 2])
    plain = predict(c, A.SplitKVStructure(2, False))
    fa2 = predict(c, A.SplitKVStructure(2, False, True))
    np.testing.assert_allclose(fa2 - plain, [0, 6e-6, 0, 0, 6e-6, 6e-6], atol=1e-15)


def test_fa2_structure_is_offered_with_its_source_rule():
    setting = Setting(A100, "vllm", "bf16")
    fa2 = [s for s in A.FLASH_SPLITKV.structures(setting) if s.fa2_swap]
    assert fa2 == [A.SplitKVStructure(ctas_per_sm=2, split_mha=False, fa2_swap=True)]
    # only it reads the copy cost; FA3's own constants (fa3_decode.py) are no part of the form
    for s in A.FLASH_SPLITKV.structures(setting):
        names = {q.name for q in A.FLASH_SPLITKV.params(setting, s)}
        assert ("swap_copy_s" in names) == s.fa2_swap
        assert not names & {"split_item_s", "combine_row_s", "seq_s", "serial_gain",
                            "mma_efficiency"}
