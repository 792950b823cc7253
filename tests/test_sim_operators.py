"""Operator models: closed-form systolic timing, mapper bounds, memoisation, roofline bytes."""

import pytest

from krakenlm.hardware import load_system
from krakenlm.simulator.kernels.template.elementwise import roofline_stream, simulate_stream
from krakenlm.simulator.kernels.template.matmul import (
    _simulate_matmul,
    naive_matmul_time,
    roofline_matmul,
    simulate_matmul,
    systolic_cycles,
)

A100 = load_system("a100-80gb-x4").device
MI210 = load_system("mi210-x4").device


@pytest.mark.parametrize("m,n,k,h,w,cycles", [
    (16, 16, 16, 16, 16, 45),      # one block: 16 + 16 + 16 - 2 - 1
    (32, 16, 8, 16, 16, 75),       # two blocks of 8 + 30 cycles, minus 1
    (17, 17, 1, 16, 16, 4 * 31 - 1),  # a ragged edge costs a whole block
    (128, 128, 128, 128, 128, 128 + 254 - 1),
    (64, 64, 256, 16, 8, 4 * 8 * (256 + 22) - 1),
])
def test_systolic_closed_form(m, n, k, h, w, cycles):
    assert int(systolic_cycles(m, n, k, h, w)) == cycles


SHAPES = [(1, 4096, 4096, 1), (8, 9216, 12288, 1), (2048, 2048, 128, 96), (8192, 64, 64, 1),
          (4096, 12288, 12288, 1), (1000, 3000, 777, 1), (1, 3072, 128, 192)]


@pytest.mark.parametrize("dev", [A100, MI210], ids=["A100", "MI210"])
@pytest.mark.parametrize("M,N,K,batch", SHAPES)
def test_mapper_between_roofline_and_naive(dev, M, N, K, batch):
    best = simulate_matmul(dev, M, N, K, batch)
    assert best.time_s <= naive_matmul_time(dev, M, N, K, batch) * (1 + 1e-9)
    assert best.time_s >= roofline_matmul(dev, M, N, K, batch).time_s


def test_calibrated_matmul_never_beats_the_ideal_roofline():
    # efficiencies derate the hardware, so a calibrated time stays above the peak roofline
    t = simulate_matmul(A100, 4096, 4096, 4096, compute_eff=0.9, memory_eff=0.8).time_s
    assert t >= roofline_matmul(A100, 4096, 4096, 4096).time_s / 0.9 * 0.999


def test_roofline_counts_bytes_not_elements():
    r = roofline_matmul(A100, 1024, 2048, 512, dtype="fp16")
    assert r.bytes == (1024 * 512 + 512 * 2048 + 1024 * 2048) * 2
    r8 = roofline_matmul(A100, 1024, 2048, 512, dtype="int8")
    assert r8.bytes == r.bytes / 2
    # memory bound case: time is bytes / bandwidth
    g = roofline_matmul(A100, 1, 8192, 8192)
    assert g.time_s == pytest.approx((8192 + 8192 * 8192 + 8192) * 2 / 2.039e12)
    s = roofline_stream(A100, "residual", 100, 1000)
    assert s.bytes == 100 * 1000 * 2 * 3  # two inputs and one output, 2 bytes each


def test_matmul_is_memoised():
    _simulate_matmul.cache_clear()
    simulate_matmul(A100, 4096, 4096, 1024)
    simulate_matmul(A100, 4096, 4096, 1024)
    info = _simulate_matmul.cache_info()
    assert info.hits == 1 and info.misses == 1


def test_large_gemm_is_compute_bound_and_gemv_memory_bound():
    assert simulate_matmul(A100, 8192, 8192, 8192).bound == "compute"
    assert simulate_matmul(A100, 1, 8192, 8192).bound == "memory"


def test_small_k_batched_matmul_pays_its_epilogue():
    # Q K^T with K = head dim: the output write is not hidden behind the short main loop
    r = simulate_matmul(A100, 2048, 2048, 128, 192)
    roof = roofline_matmul(A100, 2048, 2048, 128, 192)
    assert r.time_s > 1.5 * roof.time_s


def test_two_pass_row_reduction_reads_twice():
    one = simulate_stream(A100, "layernorm", 4096, 4096, single_pass_row_bytes=1e9)
    two = simulate_stream(A100, "layernorm", 4096, 4096, single_pass_row_bytes=1.0)
    assert two.bytes == pytest.approx(one.bytes * 1.5)


def test_few_rows_leave_cores_idle():
    few = simulate_stream(A100, "softmax", 4, 1 << 20, single_pass_row_bytes=1e9)
    many = simulate_stream(A100, "softmax", 1 << 12, 1 << 10, single_pass_row_bytes=1e9)
    assert few.bytes == many.bytes and few.time_s > many.time_s


def test_single_row_takes_the_gemv_path_and_streams_the_weight_once():
    r = simulate_matmul(A100, 1, 8192, 8192)
    assert r.mapping["path"] == "gemv" and r.bound == "memory"
    assert r.bytes == (8192 * 8192 + 2 * 8192) * 2
    # narrow outputs are split along K so the whole device streams
    narrow = simulate_matmul(A100, 1, 64, 1 << 20)
    assert narrow.mapping["split_k"] > 1


def test_two_specs_of_one_kernel_call_share_its_time_but_keep_their_own_names():
    from krakenlm.simulator.constants import gpu_kernels as store
    from krakenlm.simulator.constants.software import load_software
    from krakenlm.simulator.constants.template import default_calibration
    from krakenlm.simulator.graph import OpSpec
    from krakenlm.simulator.timing import OpTimer

    system = load_system("a100-80gb-x8")

    def timer():
        return OpTimer(system, load_software("trtllm"), "simulate", "fp16",
                       default_calibration(), store.for_device(system.device))

    first = OpSpec("allreduce_attn", "AllReduce", "collective", ("all_reduce", 16384000, 8),
                   "comm", ("out_proj",))
    second = OpSpec("allreduce_ffn", "AllReduce", "collective", ("all_reduce", 16384000, 8),
                    "comm", ("ffn_down",))
    shared = timer()
    a, b = shared(first), shared(second)
    alone = timer()(second)  # the same spec timed by a timer that has seen nothing
    assert (b.name, b.deps) == ("allreduce_ffn", ("ffn_down",))
    assert (a.name, a.deps) == ("allreduce_attn", ("out_proj",))
    assert b == alone and a.time_s == b.time_s and b.stream == "comm"
    norm = OpSpec("add_norm_ffn", "LayerNorm", "stream", ("add_rmsnorm", 1000, 8192))
    assert shared(norm) == timer()(norm)


def test_gemms_timed_ahead_in_one_call_equal_those_timed_one_by_one():
    """`OpTimer.prime` times a query's GEMMs as rows of one call: every time, bound and the
    kernel-source note must be what the one-by-one path gives, bit for bit."""
    from krakenlm.models import get_preset
    from krakenlm.simulator.constants import gpu_kernels as store
    from krakenlm.simulator.constants.software import load_software
    from krakenlm.simulator.constants.template import default_calibration
    from krakenlm.simulator.graph import model_graphs
    from krakenlm.simulator.timing import OpTimer

    for system_name, software in (("a100-80gb-x8", "vllm"), ("h100-80gb-x8", "trtllm")):
        system = load_system(system_name)

        def timer():
            return OpTimer(system, load_software(software), "simulate", "fp16",
                           default_calibration(), store.for_device(system.device))

        for prompt in (1, 77, 1024, 3001):
            graphs = model_graphs(get_preset("llama2-70b"), 4, 2, prompt, prompt, "prefill", 2)
            specs = [s for g in graphs for s in g.ops]
            assert sum(s.model == "matmul" for s in specs) >= 3
            primed, plain = timer(), timer()
            primed.prime(specs)
            assert primed._primed  # the GEMMs were timed ahead, not one by one
            assert [primed(s) for s in specs] == [plain(s) for s in specs]
            assert list(primed.sources.items()) == list(plain.sources.items())
