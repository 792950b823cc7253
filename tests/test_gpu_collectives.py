"""Collective forms fitted on measured kernels (kernels/gpu/collectives.py): NCCL ring / NVLS
with NCCL's own protocol choice, and the frameworks' one-/two-shot all-reduce."""

import math

import numpy as np
import pytest

from krakenlm.hardware import load_system
from krakenlm.simulator.calibration.fit import fit_model
from krakenlm.simulator.kernels.base import Measured, Setting
from krakenlm.simulator.kernels.gpu import allreduce_routes as R
from krakenlm.simulator.kernels.gpu import collectives as C

A100 = load_system("a100-80gb-x8")
H100 = load_system("h100-80gb-x8")
B200 = load_system("b200-x8")
MiB = 2 ** 20

# rounded constants of the fits on aiconfigurator-core's tables (A100: no NVLS)
NCCL_A100 = {"floor_s": 8.1e-6, "ll_step_s": 0.95e-6, "ll_ramp_s": 2.5e-6, "ll_efficiency": 0.40,
             "ll128_latency_s": 9.8e-6, "ll128_efficiency": 0.50, "simple_latency_s": 13.8e-6,
             "simple_step_s": 7.5e-6, "simple_efficiency": 0.78, "ring_fill_steps": 0.47}
NCCL_H100 = {"floor_s": 4.8e-6, "ll_step_s": 0.84e-6, "ll_ramp_s": 0.67e-6, "ll_efficiency": 0.47,
             "ll128_latency_s": 5.5e-6, "ll128_efficiency": 0.64, "simple_latency_s": 5.8e-6,
             "simple_step_s": 3.8e-6, "simple_efficiency": 0.83, "ring_fill_steps": 0.62,
             "nvls_peer_s": 2.4e-6, "nvls_efficiency": 0.66}
CUSTOM_H100 = {"oneshot_latency_s": 4.2e-6, "barrier_peer_s": 0.07e-6, "blocks_peer_s": 0.05e-6,
               "oneshot_efficiency": 0.48, "twoshot_latency_s": 7.7e-6,
               "twoshot_efficiency": 0.62, "eager_host_s": 22e-6}
SYMM_H100 = {"symm_latency_s": 9.4e-6, "multimem_efficiency": 0.65,
             "symm_twoshot_efficiency": 0.69, "staged_eager_host_s": 40e-6}


def custom(system, cols, p, nccl_params=None, eager=True, **kwargs):
    """The framework all-reduce's time, NCCL's messages by NCCL's model with `nccl_params`,
    the eager rows as the collector's eager calls (`eager`)."""
    nccl = None if nccl_params is None else (lambda c: C.predict_nccl(system, c, nccl_params))
    return C.predict_custom(system, cols, p, nccl=nccl, eager=eager, **kwargs)


def nccl_params(system, cols=None):
    """The NCCL constants a fit on `cols` (every protocol without rows) reads on `system`."""
    setting = Setting(system, "nccl", "any")
    measured = None if cols is None else Measured(cols, np.ones(len(cols["n"])),
                                                  np.ones(len(cols["n"]), bool))
    (structure,) = C.NCCL.structures(setting, measured)
    return C.NCCL.params(setting, structure)


def rows(op, n, sizes):
    sizes = np.asarray(sizes, float)
    return {"op": np.full(len(sizes), op, object), "n": np.full(len(sizes), n),
            "bytes": sizes, "graph": np.ones(len(sizes), bool)}


def grid(ops=C.OPS, ns=(2, 4, 8), log2_sizes=range(9, 30)):
    o, n, b = np.meshgrid(np.array(ops, object), list(ns), 2.0 ** np.array(list(log2_sizes)),
                          indexing="ij")
    return {"op": o.ravel(), "n": n.ravel(), "bytes": b.ravel(), "graph": np.ones(o.size, bool)}


def saturated(p):
    """Fitted-looking constants with every efficiency at its ceiling (the worst case for the
    bandwidth bound)."""
    return {k: (0.999 if k.endswith("efficiency") else v) for k, v in p.items()}


# ----------------------------------------------------------------------------- no communication
@pytest.mark.parametrize("system,p", [(A100, NCCL_A100), (H100, NCCL_H100)])
def test_one_gpu_or_empty_message_costs_nothing(system, p):
    for op in C.OPS:
        assert np.all(C.predict_nccl(system, rows(op, 1, [1e3, 1e6, 1e9]), p) == 0.0)
        assert C.predict_nccl(system, rows(op, 8, [0.0]), p)[0] == 0.0
    eager = {"n": np.array([1, 1]), "bytes": np.array([1e3, 1e9]), "graph": np.array([True, False])}
    assert np.all(custom(system, eager, CUSTOM_H100, nccl_params=p,
                                   handoff={1: 0.0}) == 0.0)


# ------------------------------------------------------------------------- size and bandwidth
@pytest.mark.parametrize("system,p", [(A100, NCCL_A100), (H100, NCCL_H100), (B200, NCCL_H100)])
def test_latency_increases_with_message_size_at_large_sizes(system, p):
    sizes = 2.0 ** np.arange(24, 33, 0.5)  # 16 MiB .. 4 GiB, past every protocol switch
    for op in C.OPS:
        for n in (2, 4, 8):
            t = C.predict_nccl(system, rows(op, n, sizes), p)
            assert np.all(np.diff(t) > 0), (op, n)
            # and it approaches a bandwidth: doubling S less than doubles t, never more
            assert np.all(t[2:] / t[:-2] <= 2.0 + 1e-9)
    for n in (2, 4, 8):
        t = custom(system, rows("all_reduce", n, sizes), CUSTOM_H100,
                             oneshot_below=C.ONESHOT_BELOW["vllm"])
        assert np.all(np.diff(t) > 0)


@pytest.mark.parametrize("system,p", [(A100, NCCL_A100), (H100, NCCL_H100), (B200, NCCL_H100)])
def test_bytes_moved_never_exceed_the_port_bandwidth(system, p):
    port = system.interconnect.links_per_device * system.interconnect.link_bandwidth_bytes_per_s
    cols = grid(log2_sizes=range(9, 34))
    for params in (p, saturated(p)):
        t = C.predict_nccl(system, cols, params)
        assert np.all(C.nccl_wire_bytes(system, cols) / t <= port)
        ring_rows = C.nccl_choice(system, cols) != C.PROTOCOLS.index("nvls")
        bus = np.array([C.bus_bandwidth(o, n, s, x) for o, n, s, x
                        in zip(cols["op"], cols["n"], cols["bytes"], t)])
        assert np.all(bus[ring_rows] <= port)  # rings: nccl-tests' bus bandwidth is the port's
    for below in (C.ONESHOT_BELOW["vllm"], None):
        for n in (2, 4, 8):
            sizes = 2.0 ** np.arange(8, 34)
            t = custom(system, rows("all_reduce", n, sizes), saturated(CUSTOM_H100),
                                 oneshot_below=below)
            assert np.all(C.bus_bandwidth("all_reduce", n, sizes, t) <= port)


def test_nvls_bus_bandwidth_can_pass_the_port_but_its_traffic_cannot():
    """NCCL's bus bandwidth assumes a ring's 2(n-1)/n S per GPU; NVLS moves (n+1)/n S."""
    cols = rows("all_reduce", 8, [8 * 2.0 ** 30])
    assert C.nccl_choice(H100, cols)[0] == C.PROTOCOLS.index("nvls")
    t = C.predict_nccl(H100, cols, NCCL_H100)[0]
    port = C.port_bandwidth(H100)
    assert C.bus_bandwidth("all_reduce", 8, cols["bytes"][0], t) > port
    assert C.nccl_wire_bytes(H100, cols)[0] / t < port


def test_bytes_are_the_whole_buffer_as_in_nccl_tests():
    """All-gather of S bytes (the gathered output) over n GPUs moves (n-1)/n S per GPU, so 8 GPUs
    take less than twice as long as 2 at large S (per-GPU input bytes would make it 7x)."""
    big = [2.0 ** 29]
    t2 = C.predict_nccl(A100, rows("all_gather", 2, big), NCCL_A100)[0]
    t8 = C.predict_nccl(A100, rows("all_gather", 8, big), NCCL_A100)[0]
    assert 1.0 < t8 / t2 < 1.5
    # reduce-scatter of S moves the same bytes as all-gather of S; all-reduce twice that
    rs = C.predict_nccl(A100, rows("reduce_scatter", 8, big), NCCL_A100)[0]
    ar = C.predict_nccl(A100, rows("all_reduce", 8, big), NCCL_A100)[0]
    assert rs == pytest.approx(t8) and 1.8 < ar / rs < 2.1


# ------------------------------------------------------------------------------ NCCL's choice
def test_protocol_choice_follows_nccl_tuner():
    choice = {k: i for i, k in enumerate(C.PROTOCOLS)}
    # A100, 2 GPUs: NCCL's model moves all-reduce from LL to Simple at ~1 MB (measured: 19 us at
    # 512 KiB, 41 us at 1 MiB)
    pick = C.nccl_choice(A100, rows("all_reduce", 2, [512 * 1024, MiB]))
    assert list(pick) == [choice["ll"], choice["simple"]]
    # LL128 only where many steps amortise its latency: 8-GPU rings, mid sizes
    assert choice["ll128"] in C.nccl_choice(A100, rows("all_reduce", 8, 2.0 ** np.arange(20, 26)))
    small_ring = C.nccl_choice(A100, rows("all_gather", 2, 2.0 ** np.arange(9, 30)))
    assert choice["ll128"] not in small_ring
    # NVLS: all-reduce on NVLink SHARP fabrics with more than 2 GPUs (nvls.cc), from ~1 MiB
    sizes = 2.0 ** np.arange(9, 31)
    assert choice["nvls"] not in C.nccl_choice(A100, rows("all_reduce", 8, sizes))
    assert choice["nvls"] not in C.nccl_choice(H100, rows("all_reduce", 2, sizes))
    assert choice["nvls"] not in C.nccl_choice(H100, rows("all_gather", 8, sizes))
    h8 = C.nccl_choice(H100, rows("all_reduce", 8, sizes))
    assert h8[0] == choice["ll"] and np.all(h8[sizes >= 2 * MiB] == choice["nvls"])


def test_nvls_constants_missing_fall_back_on_the_ring():
    ring_only = {k: v for k, v in NCCL_H100.items() if not k.startswith("nvls")}
    t = C.predict_nccl(H100, rows("all_reduce", 8, [64 * MiB]), ring_only, nvls=False)
    assert np.isfinite(t).all() and t[0] > 0


def test_unknown_collective_is_an_error():
    with pytest.raises(ValueError, match="all_to_all"):
        C.predict_nccl(H100, rows("all_to_all", 8, [1e6]), NCCL_H100)


# ----------------------------------------------------------------------- framework all-reduce
def test_custom_handoff_eager_and_kernel_switch():
    sizes = 2.0 ** np.arange(10, 30)
    cols = rows("all_reduce", 8, sizes)
    handoff = {8: 8 * MiB}
    t = custom(H100, cols, CUSTOM_H100, nccl_params=NCCL_H100, handoff=handoff,
                         oneshot_below=C.ONESHOT_BELOW["vllm"])
    nccl = C.predict_nccl(H100, cols, NCCL_H100)
    above = sizes > 8 * MiB
    assert np.allclose(t[above], nccl[above]) and not np.allclose(t[~above], nccl[~above])
    # vLLM on 8 GPUs: one-shot below 256 KiB, two-shot from it
    one_only = custom(H100, cols, CUSTOM_H100, oneshot_below=C.ONESHOT_BELOW["trtllm"])
    at = sizes == 256 * 1024
    assert t[at][0] < one_only[at][0]
    # eager: the host time for small messages, device time + the input clone for large ones
    eager = dict(cols, graph=np.zeros(len(sizes), bool))
    te = custom(H100, eager, CUSTOM_H100, nccl_params=NCCL_H100, handoff=handoff,
                          oneshot_below=C.ONESHOT_BELOW["vllm"])
    assert np.all(te >= t) and te[0] == pytest.approx(CUSTOM_H100["eager_host_s"], rel=0.01)
    copy = 2 * sizes[-1] / H100.device.memory.bandwidth_bytes_per_s
    assert te[-1] == pytest.approx(t[-1] + copy, rel=0.01)
    with pytest.raises(ValueError, match="eager_host_s"):
        custom(H100, eager, {k: v for k, v in CUSTOM_H100.items() if k != "eager_host_s"})
    # a query (no harness) runs every call as a CUDA graph: the eager rows' marks are ignored
    assert np.array_equal(custom(H100, eager, CUSTOM_H100, nccl_params=NCCL_H100,
                                 handoff=handoff, oneshot_below=C.ONESHOT_BELOW["vllm"],
                                 eager=False), t)


def test_detect_handoff_reads_the_switch_to_nccl():
    sizes = 2.0 ** np.arange(8, 31)
    cols = {"n": np.repeat([2, 8], len(sizes)), "bytes": np.tile(sizes, 2),
            "graph": np.ones(2 * len(sizes), bool)}
    nccl = np.tile(20e-6 + sizes / 2e11, 2)
    measured = nccl.copy()
    own = cols["bytes"] < 8 * MiB
    measured[own] *= 0.5
    measured[(cols["n"] == 2) & ~own] *= 1.05  # within tolerance: still NCCL's
    nccl[(cols["bytes"] == 2.0 ** 30)] = np.nan  # not measured by NCCL: ignored
    got = C.detect_handoff(cols, measured, nccl)
    assert got == {2: pytest.approx(math.sqrt(4 * MiB * 8 * MiB)),
                   8: pytest.approx(math.sqrt(4 * MiB * 8 * MiB))}
    # a framework whose largest messages are its own has no hand-off
    assert C.detect_handoff(cols, nccl * 0.5, nccl) == {}


def test_routed_prediction_times_each_kernel_by_its_model():
    route = C.route_for("vllm", "0.24.0", H100)
    p = {**CUSTOM_H100, **SYMM_H100}
    sizes = np.array([128 * 1024, 32 * MiB, 128 * MiB])
    cols = rows("all_reduce", 8, sizes)
    t = custom(H100, cols, p, nccl_params=NCCL_H100, route=route)
    # 128 KiB: vLLM's one-shot kernel, as without a route
    assert t[0] == pytest.approx(custom(H100, cols, p, oneshot_below={8: MiB})[0])
    # 32 MiB: multimem with the copy in and out of the symmetric buffer
    B = C.port_bandwidth(H100)
    copies = 4 * sizes[1] / H100.device.memory.bandwidth_bytes_per_s
    assert t[1] == pytest.approx(p["symm_latency_s"] + copies
                                 + 9 / 8 * sizes[1] / (B * p["multimem_efficiency"]))
    # 128 MiB: NCCL's time
    assert t[2] == pytest.approx(C.predict_nccl(H100, cols, NCCL_H100)[2])
    # eager: the staged path's host time for small symmetric-memory messages
    small = rows("all_reduce", 8, [256 * 1024])
    eager = dict(small, graph=np.array([False]))
    te = custom(H100, eager, p, nccl_params=NCCL_H100, route=route)
    assert te[0] == pytest.approx(p["staged_eager_host_s"], rel=0.02)


def test_sglang_v2_pull_kernels_copy_in_and_out_only_when_eager():
    route = C.route_for("sglang", "0.5.14", H100)
    p = {**CUSTOM_H100, "staged_eager_host_s": 30e-6}
    cols = rows("all_reduce", 8, [8 * MiB])
    assert route(cols["n"], cols["bytes"])[0] == R.PULL_TWOSHOT
    graph = custom(H100, cols, p, nccl_params=NCCL_H100, route=route)[0]
    two = custom(H100, cols, p, oneshot_below={8: 0})[0]
    assert graph == pytest.approx(two)
    eager = custom(H100, dict(cols, graph=np.array([False])), p,
                             nccl_params=NCCL_H100, route=route)[0]
    mem_bw = H100.device.memory.bandwidth_bytes_per_s
    assert eager == pytest.approx(graph + 6 * 8 * MiB / mem_bw, rel=0.01)  # clone + in + out


def test_nccl_mismatch_flags_a_framework_whose_nccl_is_not_the_tables():
    sizes = 2.0 ** np.arange(20, 28)
    cols = rows("all_reduce", 2, sizes)
    nccl = 20e-6 + sizes / 2e11
    kernels = np.where(sizes > 8 * MiB, R.NCCL, R.ONESHOT)
    half = np.ones(len(sizes), bool)
    assert C.nccl_mismatch(cols, nccl * 1.05, nccl, kernels, half) == {}
    slow = np.where(kernels == R.NCCL, nccl * 2.5, nccl * 0.5)
    assert C.nccl_mismatch(cols, slow, nccl, kernels, half) == {2: pytest.approx(2.5)}


def test_split_keys_hold_a_size_out_of_both_tables():
    c = {"op": np.array(["all_reduce"], object), "n": np.array([8]), "bytes": np.array([4096]),
         "graph": np.array([True])}
    assert C.nccl_key(c) == C.custom_key(c) == ["all_reduce,8,4096,1"]
    assert C.custom_key(dict(c, graph=np.array([False]))) == ["all_reduce,8,4096,0"]


def _rows(op, n, sizes):
    sizes = np.asarray(sizes, float)
    return {"op": np.array([op] * len(sizes), object), "n": np.full(len(sizes), n),
            "bytes": sizes}


def test_a_protocol_no_measured_row_runs_is_not_fitted_and_not_used():
    gb200 = load_system("gb200-nvl72")
    # NCCL's tuner picks LL128 on GB200 only for 8+ GPU all-gathers / reduce-scatters
    eight = _rows("all_gather", 8, [2.0 ** 24, 2.0 ** 25])
    assert (C.nccl_choice(gb200, eight) == C.PROTOCOLS.index("ll128")).all()
    small = _rows("all_reduce", 4, 2.0 ** np.arange(10, 28))
    names = [p.name for p in nccl_params(gb200, small)]
    assert "ll128_latency_s" not in names and "ll128_efficiency" not in names
    assert len(nccl_params(gb200, eight)) == len(C.NCCL_PARAMS)
    # constants without LL128: where the tuner would run it, the fastest fitted protocol
    p = {q.name: q.initial for q in nccl_params(gb200, small)}
    times = C.nccl_protocol_times(gb200, eight, p, ll128=False)
    assert np.isinf(times[:, C.PROTOCOLS.index("ll128")]).all()
    assert C.predict_nccl(gb200, eight, p, ll128=False) == pytest.approx(np.min(times, axis=1))


def test_parameter_sets_match_the_fabric_and_the_kernels():
    assert [p.name for p in nccl_params(A100) if p.name.startswith("nvls")] == []
    assert nccl_params(H100) == C.NCCL_PARAMS
    names = [p.name for p in C.custom_params_for(False, {R.ONESHOT, R.NCCL})]
    assert names == ["oneshot_latency_s", "barrier_peer_s", "blocks_peer_s",
                     "oneshot_efficiency"]
    names = [p.name for p in C.custom_params_for(True, {R.ONESHOT, R.SYMM_MULTIMEM})]
    assert {"symm_latency_s", "multimem_efficiency", "eager_host_s",
            "staged_eager_host_s"} <= set(names)
    assert not any(n.startswith("twoshot") or n == "symm_twoshot_efficiency" for n in names)
    assert C.oneshot_below_for("trtllm", B200) is None
    assert C.oneshot_below_for("vllm", H100) == C.ONESHOT_BELOW["vllm"]


# ------------------------------------------------------------------------- synthetic recovery
def test_synthetic_nccl_fit_recovers_its_constants():
    cols = grid()
    truth = NCCL_H100
    measured = C.predict_nccl(H100, cols, truth)
    r = fit_model("synthetic nccl", lambda c, p: C.predict_nccl(H100, c, p), C.NCCL_PARAMS,
                  cols, measured, C.nccl_key(cols))
    assert r.mape_held_out < 1.0
    for name in ("floor_s", "ll_step_s", "ll_efficiency", "simple_latency_s", "simple_step_s",
                 "simple_efficiency", "ring_fill_steps", "nvls_peer_s", "nvls_efficiency"):
        assert r.params[name] == pytest.approx(truth[name], rel=0.03), name


def test_synthetic_custom_fit_recovers_its_constants():
    n, b, g = np.meshgrid([2, 4, 8], 2.0 ** np.arange(8, 30), [True, False], indexing="ij")
    cols = {"n": n.ravel(), "bytes": b.ravel(), "graph": g.ravel()}
    below = C.ONESHOT_BELOW["vllm"]
    measured = custom(H100, cols, CUSTOM_H100, oneshot_below=below)
    params = C.custom_params_for(True, {R.ONESHOT, R.TWOSHOT})
    r = fit_model("synthetic custom",
                  lambda c, p: custom(H100, c, p, oneshot_below=below),
                  params, cols, measured, C.custom_key(cols))
    assert r.mape_held_out < 1.0
    for name in ("oneshot_latency_s", "oneshot_efficiency", "twoshot_latency_s",
                 "twoshot_efficiency", "eager_host_s"):
        assert r.params[name] == pytest.approx(CUSTOM_H100[name], rel=0.03), name


def test_synthetic_routed_fit_recovers_the_symmetric_memory_constants():
    """vLLM on Hopper: its custom kernels, torch symmetric memory and NCCL by its own rule.
    From the parameters' default start alone: the constants are identifiable without the
    calibration's extra starts (CUSTOM_FIT_STARTS, four more fits of the same rows)."""
    n, b, g = np.meshgrid([2, 4, 8], 2.0 ** np.arange(8, 30), [True, False], indexing="ij")
    cols = {"n": n.ravel(), "bytes": b.ravel(), "graph": g.ravel()}
    route = C.route_for("vllm", "0.24.0", H100)
    truth = {**CUSTOM_H100, **SYMM_H100}
    measured = custom(H100, cols, truth, nccl_params=NCCL_H100, route=route)
    params = C.custom_params_for(True, set(route(cols["n"], cols["bytes"]).tolist()))
    r = fit_model("synthetic vllm", lambda c, p: custom(
        H100, c, p, nccl_params=NCCL_H100, route=route), params, cols, measured,
        C.custom_key(cols), starts=[{}])
    assert r.mape_held_out < 1.0
    for name in ("symm_latency_s", "multimem_efficiency", "symm_twoshot_efficiency",
                 "staged_eager_host_s", "oneshot_efficiency"):
        assert r.params[name] == pytest.approx(truth[name], rel=0.05), name


def test_an_unknown_collective_is_named_and_the_known_ones_listed():
    cols = {"op": np.array(["all_reduce", "broadcast", "all_gather"], object),
            "n": np.array([8, 8, 8]), "bytes": np.array([1.0, 2.0, 3.0])}
    with pytest.raises(ValueError, match=r"unknown collective\(s\) \['broadcast'\]; known: "
                                         r"all_reduce, all_gather, reduce_scatter"):
        C.predict_nccl(A100, cols, NCCL_A100)
    cols["op"][1] = "reduce_scatter"
    assert C.nccl_wire_bytes(A100, cols).shape == (3,)


def test_kernel_codes_are_matched_as_isin_matches_them():
    kernels = np.array([R.ONESHOT, R.TWOSHOT, R.NCCL, R.SYMM_MULTIMEM, R.PULL_TWOSHOT])
    for codes in (C.SYMM_KERNELS, C.STAGED_KERNELS, (R.ONESHOT,), (R.FASTER,)):
        assert np.array_equal(C._one_of(kernels, codes), np.isin(kernels, codes))
