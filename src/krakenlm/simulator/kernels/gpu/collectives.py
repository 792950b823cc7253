"""Collectives over NVLink / NVSwitch: NCCL (ring and NVLS; form `nccl/nccl`) and the serving
frameworks' own all-reduce kernels (form `custom_all_reduce/framework`), each a few fitted
constants on top of the interconnect's link bandwidth.

Notation: n GPUs, S the message in bytes in nccl-tests' convention (the whole buffer: for
all-reduce the array every GPU holds, for all-gather the gathered output, for reduce-scatter
the input; the aiconfigurator collector runs nccl-tests with `-b S -e S`), B =
links_per_device x link_bandwidth (bytes/s leaving one GPU, one direction).

NCCL
----
A ring collective takes `steps` = 2(n-1) (all-reduce) or n-1 (all-gather, reduce-scatter) steps
of S/n bytes. Per protocol (NCCL's LL, LL128, Simple: lower latency, lower bandwidth):

    wire      = (steps + ring_fill_steps) * S / n            bytes through a GPU's port
    LL        = floor + steps * ll_step + ramp(S, n) * ll_ramp     + wire / (B * ll_efficiency)
    LL128     = floor + ll128_latency + steps * ll_step           + wire / (B * ll128_efficiency)
    Simple    = floor + simple_latency + steps * simple_step      + wire / (B * simple_efficiency)

`ramp` rises from 0 to 1 (in log2 S) between S = 2 KiB x n and 8 KiB x n, where NCCL grows LL's
thread block to 512 threads and adds channels (enqueue.cc thread thresholds: 8 B per thread per
rank).

NVLS (all-reduce with NVLink SHARP, n > 2: NCCL disables NVLS for two GPUs, nvls.cc): the switch
reduces (multimem.ld_reduce) and multicasts (multimem.st); every GPU sends and receives
S + S/n bytes:

    W    = (n + 1) / n * S / (B * nvls_efficiency)
    NVLS = floor + (n - 1) nvls_peer + W + W F / (W + F),   F = n * C / (B * nvls_efficiency)

The reduce-scatter and all-gather halves overlap only once each NVLS channel has several chunks
in flight: below C = channels x 128 KiB per rank (NVLS_NCHANNELS_SM90 = 16, _SM100 = 32,
src/transport/nvls.cc) they run back to back, above it one pipeline fill F stays exposed.

Which (algorithm, protocol) runs is NCCL's choice by its own cost model (tuning.cc: latency =
baseLat + steps x hwLat, bandwidth = channels x per-link NVLink bandwidth x protocol factor),
which `nccl_choice` evaluates with NCCL's constants (NCCL_TUNER). Tree, PAT and NVLS
all-gather / reduce-scatter are not modelled. One constant set per device serves every op and n.

Framework all-reduce ("custom")
-------------------------------
TensorRT-LLM, vLLM and SGLang reduce small messages with their own kernels over CUDA IPC /
symmetric memory:

    barrier  = barrier_peer + ramp'(S) * blocks_peer          per peer and barrier
    one-shot = oneshot_latency + (n-1) barrier + (n-1) S / (B * oneshot_efficiency)
    two-shot = twoshot_latency + 2 (n-1) barrier + 2 (n-1)/n S / (B * twoshot_efficiency)
    symm     = symm_latency + 4 S / memory bandwidth + W / (B * efficiency)

ramp'(S) rises from 0 to 1 between 2 and 16 KiB (in log2 S), where the kernels go from one
thread block to many. `symm` is PyTorch's symmetric-memory path (vLLM on Hopper and Blackwell:
input copied in and out), W = (n+1)/n S for multimem_all_reduce_ (NVLink SHARP;
multimem_efficiency) or 2 (n-1)/n S for two_shot_all_reduce_ (symm_twoshot_efficiency).

Which kernel runs for a message, and which messages go to NCCL (timed by the device's NCCL
constants, `Setting.nccl`), is the framework's own rule, read from its sources
(allreduce_routes.py; structure `route` "framework"). Without a known rule, or where the fit
half's NCCL messages are not NCCL's measured times (`nccl_mismatch`), `detect_handoff` reads the
hand-off off the fit half (`route` "handoff").

Eager (not CUDA-graph) rows, `graph` False, run under the harness's `Conditions.eager`
(measurements/harness.py; a query is always a CUDA-graph call): the call waits for the host,
and the collector's eager loop clones the input:

    eager = smooth_max(eager_host, device + 2 S / memory bandwidth; p = 8)

with `staged_eager_host` for kernels that stage their input through a shared buffer (vLLM's
symmetric memory; SGLang V2's pull kernels, which also copy in and out: + 4 S / memory
bandwidth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from ....hardware.identity import lookup
from ....hardware.schema import System
from ..base import SERVING, Conditions, KernelForm, Measured, Setting, one_of, register
from ..numerics import smooth_max
from ..params import Param
from . import allreduce_routes as R

OPS = ("all_reduce", "all_gather", "reduce_scatter")
KNOWN_OPS = frozenset(OPS)

NCCL_PARAMS = (
    Param("floor_s", "seconds", 5e-6,
          "launch and completion of the smallest collective, any n (nccl-tests back to back)"),
    Param("ll_step_s", "seconds", 1e-6,
          "LL and LL128: latency of one ring step (a flag round trip through the switch)"),
    Param("ll_ramp_s", "seconds", 1e-6,
          "LL: extra latency once NCCL runs full 512-thread blocks and several channels"),
    Param("ll_efficiency", "fraction", 0.4,
          "LL: payload bandwidth over B (8-byte stores, half of them flags: at most ~0.5)"),
    Param("ll128_latency_s", "seconds", 5e-6, "LL128: fixed latency above the floor"),
    Param("ll128_efficiency", "fraction", 0.6, "LL128: payload bandwidth over B"),
    Param("simple_latency_s", "seconds", 6e-6, "Simple: fixed latency above the floor"),
    Param("simple_step_s", "seconds", 3e-6, "Simple: latency of one ring step (chunk handshake)"),
    Param("simple_efficiency", "fraction", 0.8, "Simple: payload bandwidth over B"),
    Param("ring_fill_steps", "positive", 0.5,
          "ring pipeline fill, in steps of S/n bytes (why 2-GPU rings are slower than (n-1)/n)"),
    Param("nvls_peer_s", "seconds", 2e-6,
          "NVLS: latency per peer GPU (synchronising the multicast group), above the floor"),
    Param("nvls_efficiency", "fraction", 0.65,
          "NVLS: bandwidth of multimem loads/stores over B (per direction)"),
)

CUSTOM_PARAMS = (
    Param("oneshot_latency_s", "seconds", 4e-6,
          "one-shot: launch, one cross-GPU barrier and the local reduction of a tiny message"),
    Param("barrier_peer_s", "seconds", 1e-7,
          "per peer and barrier: signalling and polling one more GPU's flag"),
    Param("blocks_peer_s", "seconds", 1e-7,
          "per peer: extra barrier cost once the kernel runs many thread blocks (ramp 2-16 KiB)"),
    Param("oneshot_efficiency", "fraction", 0.5,
          "one-shot: bandwidth of reading the n-1 peers' buffers, over B"),
    Param("twoshot_latency_s", "seconds", 8e-6, "two-shot: launch and two barriers"),
    Param("twoshot_efficiency", "fraction", 0.7, "two-shot: bandwidth over B"),
    Param("symm_latency_s", "seconds", 1e-5,
          "symmetric-memory path (vLLM on Hopper/Blackwell): launches of the copy into the "
          "symmetric buffer, the torch symm-mem kernel and the copy out, and its barriers"),
    Param("multimem_efficiency", "fraction", 0.6,
          "torch multimem_all_reduce_ (NVLink SHARP ld_reduce + multicast store): bandwidth "
          "over B"),
    Param("symm_twoshot_efficiency", "fraction", 0.6,
          "torch two_shot_all_reduce_ (reduce-scatter, all-gather over peer loads): bandwidth "
          "over B"),
    Param("eager_host_s", "seconds", 3e-5,
          "eager (no CUDA graph) host time of one framework all-reduce call"),
    Param("staged_eager_host_s", "seconds", 4e-5,
          "eager host time of an all-reduce that stages its input through a shared buffer "
          "(vLLM's symmetric memory, SGLang V2's pull kernels): the copy in, the kernel and the "
          "copy out issued per call"),
)

# Extra starting points of a custom all-reduce fit: the objective is kinked where a kernel's
# time crosses the eager host time, so each side is a separate basin.
CUSTOM_FIT_STARTS = tuple({"oneshot_efficiency": one, "twoshot_efficiency": two,
                           "multimem_efficiency": two, "symm_twoshot_efficiency": two}
                          for one in (0.45, 0.75) for two in (0.45, 0.75))

# NCCL's tuner (NCCL 2.19-2.29 src/graph/tuning.cc, topo.h, nvls.cc): what NCCL *believes*
# a protocol costs; used only to decide which protocol runs. Latencies in us.
NCCL_BASE_LAT = {"ll": 6.6, "ll128": 14.0, "simple": 8.4}  # ring baseLat
NCCL_HW_LAT = {"ll": 0.6, "ll128": 1.9, "simple": 3.4}  # ring NVLink hwLat per step
NCCL_NVLS_LAT = 25.0  # NVLS NVLink hwLat (baseLat 0)
NCCL_LL128_FACTOR = 0.92  # LL128 bandwidth = 0.92 x Simple
# per architecture: NVLink bandwidth per link NCCL assumes (topo.h SMxx_NVLINK_BW), ring LL cap
# (llMaxBws, single node), NVLS efficiency (nvlsEfficiency), NVLS channels (nvls.cc)
NCCL_TUNER = {
    "ampere": {"link_bw": 20.0e9, "ll_max_bw": 87.7e9, "nvls_eff": 0.0, "nvls_channels": 0},
    "hopper": {"link_bw": 20.6e9, "ll_max_bw": 141.0e9, "nvls_eff": 0.85, "nvls_channels": 16},
    "blackwell": {"link_bw": 40.1e9, "ll_max_bw": 282.0e9, "nvls_eff": 0.74, "nvls_channels": 32},
}
NVLS_CHUNK_BYTES = 128 * 1024  # NCCL_NVLS_CHUNKSIZE default
LL_RAMP_BYTES_PER_RANK = (2048.0, 8192.0)  # LL ramp from 2 KiB x n to 8 KiB x n (see docstring)
PROTOCOLS = ("ll", "ll128", "simple", "nvls")

# Fallback without a route (detect_handoff): the frameworks' one-shot -> two-shot switch
# (one-shot below, in bytes). vLLM/SGLang: allreduce_routes.ONESHOT_BELOW; TensorRT-LLM
# one-shot up to the hand-off before Blackwell, the faster kernel on it (oneshot_below_for).
ONESHOT_BELOW = {
    "vllm": R.ONESHOT_BELOW,
    "sglang": R.ONESHOT_BELOW,
    "trtllm": {2: math.inf, 4: math.inf, 8: math.inf},
}

EAGER_SMOOTH_P = 8.0  # smooth max of host time and device time in eager calls


def nccl_arch(system: System) -> str:
    """Which row of NCCL_TUNER applies: the kernel generation the device declares by its
    sm_version (hardware/identity.py; NCCL tunes per compute capability). NVLS stays a
    property of the fabric (nvls_available)."""
    return lookup(system.device).kernel_generation


def nvls_available(system: System) -> bool:
    ic = system.interconnect
    return ic.topology == "switch" and bool(ic.in_switch_reduction)


KERNEL_PARAMS = {  # custom kernel code (allreduce_routes) -> the constants it uses
    R.ONESHOT: ("oneshot_latency_s", "barrier_peer_s", "blocks_peer_s", "oneshot_efficiency"),
    R.TWOSHOT: ("twoshot_latency_s", "barrier_peer_s", "blocks_peer_s", "twoshot_efficiency"),
    R.SYMM_MULTIMEM: ("symm_latency_s", "multimem_efficiency"),
    R.SYMM_TWOSHOT: ("symm_latency_s", "symm_twoshot_efficiency"),
}
KERNEL_PARAMS[R.FASTER] = KERNEL_PARAMS[R.ONESHOT] + KERNEL_PARAMS[R.TWOSHOT]
KERNEL_PARAMS[R.PULL_ONESHOT] = KERNEL_PARAMS[R.ONESHOT]
KERNEL_PARAMS[R.PULL_TWOSHOT] = KERNEL_PARAMS[R.TWOSHOT]
SYMM_KERNELS = (R.SYMM_MULTIMEM, R.SYMM_TWOSHOT)
PEER_KERNELS = (R.ONESHOT, R.TWOSHOT, R.FASTER, R.PULL_ONESHOT, R.PULL_TWOSHOT)  # peer stores
STAGED_KERNELS = SYMM_KERNELS + (R.PULL_ONESHOT, R.PULL_TWOSHOT)  # copy in/out when eager


def custom_params_for(has_eager_rows: bool, kernels: Iterable[int]) -> tuple[Param, ...]:
    """The CUSTOM_PARAMS the framework's kernels on these rows use (`kernels`: codes of
    allreduce_routes), with the eager host times only when eager rows are fitted."""
    kernels = set(kernels)
    names = {name for k in kernels for name in KERNEL_PARAMS.get(k, ())}
    if has_eager_rows:
        names.add("eager_host_s")
        if kernels & set(STAGED_KERNELS):
            names.add("staged_eager_host_s")
    return tuple(p for p in CUSTOM_PARAMS if p.name in names)


def oneshot_below_for(framework: str, system: System) -> dict[int, float] | None:
    """Fallback for a framework version without a known route: its one-/two-shot switch on
    `system` (None: the faster kernel)."""
    if framework == "trtllm" and nccl_arch(system) == "blackwell":
        return None
    return ONESHOT_BELOW.get(framework)


def route_for(framework: str, version: str, system: System) -> R.Route | None:
    """The framework's kernel choice (allreduce_routes) on `system`'s fabric generation."""
    return R.route_for(framework, version, nccl_arch(system))


def _arrays(cols: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, bytes, is_all_reduce) as float, float, bool arrays; checks the op names."""
    n = np.asarray(cols["n"], float)
    size = np.asarray(cols["bytes"], float)
    if "op" not in cols:
        return n, size, np.ones(len(n), bool)
    op = np.asarray(cols["op"])
    names = set(np.ravel(op).tolist())
    if not names <= KNOWN_OPS:
        raise ValueError(f"unknown collective(s) {sorted(names - KNOWN_OPS)}; known: "
                         f"{', '.join(OPS)}")
    return n, size, op == "all_reduce"


def _one_of(kernels: np.ndarray, codes: Iterable[int]) -> np.ndarray:
    """`np.isin(kernels, codes)` for a few codes, without isin's set-up cost (a query's
    all-reduce asks several times per call)."""
    return np.logical_or.reduce([kernels == c for c in codes])


def _steps(ar: np.ndarray, n: np.ndarray) -> np.ndarray:
    return np.where(ar, 2.0 * (n - 1), n - 1)


def port_bandwidth(system: System) -> float:
    ic = system.interconnect
    return ic.links_per_device * ic.link_bandwidth_bytes_per_s


RING_PROTOCOLS = PROTOCOLS[:3]  # ll, ll128, simple
# the tuner's ring latencies as columns (protocol x 1), to cost every protocol in one expression
_RING_BASE_LAT = np.array([[NCCL_BASE_LAT[p]] for p in RING_PROTOCOLS])
_RING_HW_LAT = np.array([[NCCL_HW_LAT[p]] for p in RING_PROTOCOLS])
_choice_cache: list = []  # [(system, n, bytes, op arrays, choice)]: fits call with the same rows


def nccl_choice(system: System, cols: dict[str, Any],
                arrays: tuple[np.ndarray, ...] | None = None) -> np.ndarray:
    """Index into PROTOCOLS of what NCCL's tuner picks per row (its own cost model; it does not
    depend on the fitted constants, so a fit computes it once for its rows). `arrays`:
    `_arrays(cols)` where the caller has them."""
    key = (system, cols["n"], cols["bytes"], cols.get("op"))
    for entry in _choice_cache:
        if all(a is b for a, b in zip(entry[:4], key)):
            return entry[4]
    n, size, ar = _arrays(cols) if arrays is None else arrays
    steps = np.maximum(_steps(ar, n), 1.0)
    t = NCCL_TUNER[nccl_arch(system)]
    links = system.interconnect.links_per_device
    simple_bw = links * t["link_bw"] / 1e6  # busBw in bytes per microsecond
    bw = {"ll": min(t["ll_max_bw"] / 1e6, 0.5 * simple_bw), "simple": simple_bw,
          "ll128": NCCL_LL128_FACTOR * simple_bw}
    n_safe = np.maximum(n, 1.0)
    # per ring protocol (rows): baseLat + steps x hwLat + S x steps / (n x busBw)
    cost = _RING_BASE_LAT + steps * _RING_HW_LAT + size * steps / (
        n_safe * np.array([[bw[p]] for p in RING_PROTOCOLS]))
    if nvls_available(system) and t["nvls_channels"] > 1:
        ch = t["nvls_channels"]
        nvls_bus = 2.0 * simple_bw * t["nvls_eff"] * (ch - 1) / ch
        nvls = NCCL_NVLS_LAT + size * 2.0 * (n - 1) / (n_safe * nvls_bus)
        cost = np.concatenate([cost, np.where(ar & (n > 2), nvls, np.inf)[None]])
    # without NVLS its row would be inf, never the first minimum: the ring protocols decide
    choice = np.argmin(cost, axis=0)
    if all(isinstance(a, np.ndarray) for a in key[1:3]):
        _choice_cache[:] = [(*key, choice)] + _choice_cache[:3]
    return choice


def nccl_protocol_times(system: System, cols: dict[str, Any], p: dict[str, float],
                        ll128: bool = True, nvls: bool = True,
                        arrays: tuple[np.ndarray, ...] | None = None) -> np.ndarray:
    """Seconds per row for each of PROTOCOLS (rows x 4; inf where a protocol does not apply or
    its constants were not fitted: `ll128`, `nvls` False). `arrays`: as nccl_choice's."""
    n, size, ar = _arrays(cols) if arrays is None else arrays
    B = port_bandwidth(system)
    steps = _steps(ar, n)
    n_safe = np.maximum(n, 1.0)
    wire = (steps + p["ring_fill_steps"]) * size / n_safe
    lo, hi = (b * n_safe for b in LL_RAMP_BYTES_PER_RANK)
    ramp = np.clip(np.log2(np.maximum(size, 1.0) / lo) / np.log2(hi / lo), 0.0, 1.0)
    ll = steps * p["ll_step_s"] + ramp * p["ll_ramp_s"] + wire / (B * p["ll_efficiency"])
    ll128 = (p["ll128_latency_s"] + steps * p["ll_step_s"] + wire / (B * p["ll128_efficiency"])
             if ll128 else np.full(len(n), np.inf))
    simple = (p["simple_latency_s"] + steps * p["simple_step_s"]
              + wire / (B * p["simple_efficiency"]))
    with_nvls, nvls = nvls, np.full(len(n), np.inf)
    if with_nvls and nvls_available(system):
        eff = p["nvls_efficiency"]
        w = (n_safe + 1) / n_safe * size / (B * eff)
        chunk = NCCL_TUNER[nccl_arch(system)]["nvls_channels"] * NVLS_CHUNK_BYTES
        fill = n_safe * chunk / (B * eff)
        t = p["nvls_peer_s"] * (n_safe - 1) + w + w * fill / (w + fill)
        nvls = np.where(ar & (n > 2), t, np.inf)
    return p["floor_s"] + np.array([ll, ll128, simple, nvls]).T


def nccl_wire_bytes(system: System, cols: dict[str, Any]) -> np.ndarray:
    """Bytes each GPU sends (and receives) per row with the algorithm NCCL's tuner picks: ring
    steps x S / n, NVLS (n + 1) / n x S."""
    n, size, ar = _arrays(cols)
    n_safe = np.maximum(n, 1.0)
    ring = _steps(ar, n) * size / n_safe
    nvls = (n_safe + 1) / n_safe * size
    return np.where(nccl_choice(system, cols) == PROTOCOLS.index("nvls"), nvls, ring)


@dataclass(frozen=True)
class NcclStructure:
    """Which protocols have constants: LL128's when NCCL's tuner picks it for some fitted row,
    NVLS's on a fabric that reduces in the switch; otherwise the fastest fitted one times it."""

    ll128: bool = True
    nvls: bool = True


class Nccl(KernelForm):
    """NCCL's ring and NVLS collectives, the protocol chosen by NCCL's own tuner (the module
    docstring); one constant set per device for every op and GPU count."""

    family = "nccl"
    name = "nccl/nccl"
    Structure = NcclStructure

    def structures(self, setting: Setting, measured: Measured | None = None) -> tuple:
        ll128 = measured is None or bool(
            (nccl_choice(setting.system, measured.cols) == PROTOCOLS.index("ll128")).any())
        return (NcclStructure(ll128=ll128, nvls=nvls_available(setting.system)),)

    def params(self, setting: Setting, structure: NcclStructure,
               measured=None) -> tuple[Param, ...]:
        drop = set() if structure.nvls else {"nvls_peer_s", "nvls_efficiency"}
        if not structure.ll128:
            drop |= {"ll128_latency_s", "ll128_efficiency"}
        return tuple(p for p in NCCL_PARAMS if p.name not in drop)

    def key(self, cols) -> list[str]:
        return nccl_key(cols)

    def predict(self, setting: Setting, cols, constants, structure: NcclStructure,
                conditions: Conditions = SERVING) -> np.ndarray:
        return predict_nccl(setting.system, cols, constants, structure.ll128, structure.nvls)


def predict_nccl(system: System, cols: dict[str, Any], p, ll128: bool = True,
                 nvls: bool = True) -> np.ndarray:
    """Seconds per row of `cols` (arrays op, n, bytes): the protocol NCCL's tuner picks, timed
    with `p` (`ll128`, `nvls`: whether those protocols' constants are in `p`)."""
    arrays = _arrays(cols)
    n, size, _ = arrays
    times = nccl_protocol_times(system, cols, p, ll128, nvls, arrays)
    pick = nccl_choice(system, cols, arrays)
    t = times[np.arange(len(pick)), pick]
    # a protocol without constants: the fastest fitted protocol instead
    t = np.where(np.isfinite(t), t, times.min(axis=1))
    return np.where((n <= 1) | (size <= 0), 0.0, t)


NCCL = register(Nccl())


def nccl_timer(system: System, constants, structure: NcclStructure):
    """NCCL's all-reduce time of a framework's hand-off (`Setting.nccl`), from the device's
    fitted NCCL entry."""
    setting = Setting(system, "nccl", "any")
    return lambda cols: NCCL.predict(setting, cols, constants, structure)


def legacy_kernels(cols: dict[str, Any], handoff: dict[int, float] | None = None,
                   oneshot_below: dict[int, float] | None = None) -> np.ndarray:
    """Kernel codes without a framework route: NCCL above handoff[n] bytes (read off the fit
    half), one-shot below oneshot_below[n], two-shot above; without `oneshot_below` the faster."""
    n, size, _ = _arrays(cols)
    if oneshot_below is None:
        codes = np.full(len(n), R.FASTER)
    else:
        limit = np.array([oneshot_below.get(int(k), math.inf) for k in n], float)
        codes = np.where(size < limit, R.ONESHOT, R.TWOSHOT)
    if handoff:
        codes = np.where(size > np.array([handoff.get(int(k), math.inf) for k in n], float),
                         R.NCCL, codes)
    return codes


def custom_device_time(system: System, cols: dict[str, Any], p: dict[str, float],
                       kernels: np.ndarray,
                       arrays: tuple[np.ndarray, ...] | None = None) -> np.ndarray:
    """Seconds per row of the framework's own kernels (`kernels`: allreduce_routes codes per
    row; NaN for NCCL rows, which predict_custom times with NCCL's model). `arrays`:
    `_arrays(cols)` where the caller has them."""
    n, size, _ = _arrays(cols) if arrays is None else arrays
    B = port_bandwidth(system)
    n_safe = np.maximum(n, 1.0)
    t = np.full(len(n), np.nan)
    present = set(kernels.tolist())  # a query's large all-reduce: NCCL only
    if not present.isdisjoint(PEER_KERNELS):
        ramp = np.clip(np.log2(np.maximum(size, 1.0) / 2048.0) / 3.0, 0.0, 1.0)
        peers = (n_safe - 1) * (p.get("barrier_peer_s", 0.0) + ramp * p.get("blocks_peer_s", 0.0))
        inf = np.full(len(n), np.inf)
        one = inf if "oneshot_efficiency" not in p else (
            p["oneshot_latency_s"] + peers + (n_safe - 1) * size / (B * p["oneshot_efficiency"]))
        two = inf if "twoshot_efficiency" not in p else (
            p["twoshot_latency_s"] + 2 * peers
            + 2 * (n_safe - 1) / n_safe * size / (B * p["twoshot_efficiency"]))
        t = np.where(_one_of(kernels, (R.ONESHOT, R.PULL_ONESHOT)), one, t)
        t = np.where(_one_of(kernels, (R.TWOSHOT, R.PULL_TWOSHOT)), two, t)
        t = np.where(kernels == R.FASTER, np.minimum(one, two), t)
    if not present.isdisjoint(SYMM_KERNELS):
        symm = _one_of(kernels, SYMM_KERNELS)
        # copy into the symmetric buffer and back out: 2 x (read S + write S) of device memory
        copies = 4.0 * size / system.device.memory.bandwidth_bytes_per_s
        eff = np.where(kernels == R.SYMM_MULTIMEM, p.get("multimem_efficiency", np.nan),
                       p.get("symm_twoshot_efficiency", np.nan))
        # NVLink SHARP moves (n+1)/n S through a port (like NCCL's NVLS), two-shot 2(n-1)/n S
        wire = np.where(kernels == R.SYMM_MULTIMEM, (n_safe + 1) / n_safe * size,
                        2 * (n_safe - 1) / n_safe * size)
        t = np.where(symm, p.get("symm_latency_s", np.nan) + copies + wire / (B * eff), t)
    return t


@dataclass(frozen=True)
class CustomStructure:
    """How the framework picks a kernel per message: "framework", its own rule for the measured
    version (allreduce_routes), or "handoff", NCCL above `handoff_bytes` (per GPU count, read
    off the fit half) and the framework's one-/two-shot switch below."""

    route: str = "framework"
    handoff_bytes: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        one_of("route", self.route, ("framework", "handoff"))


class FrameworkAllReduce(KernelForm):
    """A framework's own all-reduce kernels (one-shot, two-shot, symmetric memory), handing
    large messages to NCCL (the module docstring)."""

    family = "custom_all_reduce"
    name = "custom_all_reduce/framework"
    Structure = CustomStructure

    def _route(self, setting: Setting, measured: Measured | None) -> tuple[R.Route | None, dict]:
        """The framework's rule, unless the fit half's NCCL messages say it is not this rule
        (then also the per-n ratios that say so)."""
        route = route_for(setting.framework, setting.version, setting.system)
        if route is None or measured is None:
            return route, {}
        cols = measured.cols
        odd = nccl_mismatch(cols, measured.latency_s, cols["nccl_s"],
                            route(cols["n"], cols["bytes"]), measured.fit)
        return (None, odd) if odd else (route, {})

    def structures(self, setting: Setting, measured: Measured | None = None) -> tuple:
        route, _ = self._route(setting, measured)
        if route is not None or measured is None:
            return (CustomStructure("framework"),)
        handoff = detect_handoff(measured.cols, measured.latency_s, measured.cols["nccl_s"],
                                 mask=measured.fit)
        return (CustomStructure("handoff", tuple(sorted(handoff.items()))),)

    def notes(self, setting: Setting, structure: CustomStructure, measured: Measured) -> list[str]:
        route, odd = self._route(setting, measured)
        out = []
        if odd:
            rule = route_for(setting.framework, setting.version, setting.system)
            ratios = ", ".join(f"n={k}: x{v:.2f}" for k, v in sorted(odd.items()))
            out.append(f"not the route of {setting.framework} {setting.version} ({rule.source}): "
                       f"its NCCL messages on the fit half are not NCCL's measured times "
                       f"({ratios})")
        if structure.route == "framework" and route is not None:
            out.append(f"kernel per message (route framework): {route.source}")
        else:
            out.append("hand-off to NCCL read off the fit half: " + (", ".join(
                f"n={k} above {v / 2**20:.3g} MiB" for k, v in structure.handoff_bytes)
                or "none"))
        return out

    def params(self, setting: Setting, structure: CustomStructure,
               measured: Measured | None = None) -> tuple[Param, ...]:
        """The constants of the kernels the rows of `measured` run (every kernel's without
        rows), the eager host times only where eager rows are fitted."""
        if measured is None:
            return CUSTOM_PARAMS
        cols = measured.cols
        has_eager = bool((~np.asarray(cols.get("graph", np.ones(len(cols["n"]), bool)),
                                      bool)).any())
        kernels = self.kernels(setting, cols, structure)
        return custom_params_for(has_eager, set(kernels.tolist()))

    def starts(self, setting: Setting, structure) -> tuple[dict[str, float], ...]:
        return CUSTOM_FIT_STARTS

    def key(self, cols) -> list[str]:
        return custom_key(cols)

    def kernels(self, setting: Setting, cols, structure: CustomStructure) -> np.ndarray:
        """Kernel codes (allreduce_routes) per row, NCCL included."""
        route = self.route(setting, structure)
        if route is None:
            return legacy_kernels(cols, dict(structure.handoff_bytes),
                                  oneshot_below_for(setting.framework, setting.system))
        return route(*_arrays(cols)[:2])

    def route(self, setting: Setting, structure: CustomStructure) -> R.Route | None:
        if structure.route != "framework":
            return None
        return route_for(setting.framework, setting.version, setting.system)

    def predict(self, setting: Setting, cols, constants, structure: CustomStructure,
                conditions: Conditions = SERVING) -> np.ndarray:
        return predict_custom(setting.system, cols, constants, nccl=setting.nccl,
                              route=self.route(setting, structure),
                              handoff=dict(structure.handoff_bytes),
                              oneshot_below=oneshot_below_for(setting.framework, setting.system),
                              eager=conditions.eager)


def predict_custom(system: System, cols: dict[str, Any], p, *, nccl=None,
                   route: R.Route | None = None, handoff: dict[int, float] | None = None,
                   oneshot_below: dict[int, float] | None = None,
                   eager: bool = False) -> np.ndarray:
    """Seconds per row of `cols` (arrays n, bytes and optionally graph) for a framework's
    all-reduce: kernels by `route` (route_for), else by legacy_kernels; NCCL rows by `nccl`;
    with `eager`, rows with graph False take the eager host path (the module docstring)."""
    arrays = _arrays(cols)
    n, size, _ = arrays
    if route is None:
        kernels = legacy_kernels(cols, handoff if nccl is not None else None, oneshot_below)
    else:
        kernels = route(n, size)
        if nccl is None:  # no NCCL model: the framework's own kernel stands in
            kernels = np.where(kernels == R.NCCL, R.FASTER if "twoshot_efficiency" in p
                               else R.ONESHOT, kernels)
    to_nccl = kernels == R.NCCL
    device = custom_device_time(system, cols, p, kernels, arrays)
    if to_nccl.any():
        device[to_nccl] = nccl({"n": n[to_nccl], "bytes": size[to_nccl]})  # no "op": all-reduces
    t = device
    graph = np.asarray(cols.get("graph", np.ones(len(n), bool)), bool)
    if eager and (~graph).any():
        if "eager_host_s" not in p:
            raise ValueError("eager rows (graph False) need the eager_host_s constant")
        mem_bw = system.device.memory.bandwidth_bytes_per_s
        copy = 2.0 * size / mem_bw  # the collector's eager loop clones the input
        staged = _one_of(kernels, STAGED_KERNELS)
        pull = _one_of(kernels, (R.PULL_ONESHOT, R.PULL_TWOSHOT))
        # SGLang V2's pull kernels copy the input into their workspace and the result out
        busy = device + copy + np.where(pull, 4.0 * size / mem_bw, 0.0)
        host = np.where(staged, p["staged_eager_host_s"], p["eager_host_s"]) \
            if staged.any() else p["eager_host_s"]
        t = np.where(graph, device, smooth_max(busy, host, EAGER_SMOOTH_P))
    return np.where((n <= 1) | (size <= 0), 0.0, t)


FRAMEWORK_ALL_REDUCE = register(FrameworkAllReduce())


def nccl_mismatch(cols: dict[str, Any], latency_s: np.ndarray, nccl_s: np.ndarray,
                  kernels: np.ndarray, mask: np.ndarray, tolerance: float = 0.12
                  ) -> dict[int, float]:
    """Per n, the median ratio of the framework's time to NCCL's measured time (`nccl_s`, NaN
    where not measured) over the graph rows of `mask` its route sends to NCCL, where that ratio
    is more than `tolerance` off 1 (empty: the route's NCCL is the tables' NCCL)."""
    n, _, _ = _arrays(cols)
    graph = np.asarray(cols.get("graph", np.ones(len(n), bool)), bool)
    ratio = np.asarray(latency_s, float) / np.asarray(nccl_s, float)
    use = graph & np.asarray(mask, bool) & (np.asarray(kernels) == R.NCCL) & np.isfinite(ratio)
    out = {}
    for k in sorted(set(n[use].astype(int))):
        med = float(np.median(ratio[use & (n == k)]))
        if abs(med - 1.0) > tolerance:
            out[k] = med
    return out


def detect_handoff(cols: dict[str, Any], latency_s: np.ndarray, nccl_s: np.ndarray,
                   mask: np.ndarray | None = None, tolerance: float = 0.12) -> dict[int, float]:
    """Per n, the byte size above which the graph rows of `mask` are NCCL's (within
    `tolerance` of `nccl_s`, NaN rows skipped): the geometric middle between the largest size
    that is not and the next, when every larger size is; no entry otherwise."""
    n, size, _ = _arrays(cols)
    graph = np.asarray(cols.get("graph", np.ones(len(n), bool)), bool)
    ratio = np.asarray(latency_s, float) / np.asarray(nccl_s, float)
    use = graph & np.isfinite(ratio)
    if mask is not None:
        use &= np.asarray(mask, bool)
    out: dict[int, float] = {}
    for k in sorted(set(n[use].astype(int))):
        rows = np.flatnonzero(use & (n == k))
        sizes = np.unique(size[rows])
        near = np.array([np.median(np.abs(ratio[rows[size[rows] == s]] - 1.0)) <= tolerance
                         for s in sizes])
        if not near[-1]:
            continue
        far = np.flatnonzero(~near)
        out[k] = 0.0 if len(far) == 0 else math.sqrt(sizes[far[-1]] * sizes[far[-1] + 1])
    return out


def bus_bandwidth(op: str, n: int, size_bytes: float, seconds: float) -> float:
    """nccl-tests' bus bandwidth: S / t times 2(n-1)/n (all-reduce) or (n-1)/n (all-gather,
    reduce-scatter); above the port bandwidth for NVLS, which moves (n+1)/n S per GPU."""
    factor = 2.0 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
    return size_bytes / seconds * factor


def nccl_key(cols: dict[str, Any]) -> list[str]:
    """Split key (op, n, bytes, graph); custom graph rows share it with NCCL all-reduce rows, so
    a message size held out of one table is held out of the other."""
    n = np.asarray(cols["n"]).astype(int)
    graph = np.asarray(cols.get("graph", np.ones(len(n), bool)), bool)
    return [f"{o},{k},{int(b)},{int(g)}"
            for o, k, b, g in zip(cols["op"], n, cols["bytes"], graph)]


def custom_key(cols: dict[str, Any]) -> list[str]:
    n = np.asarray(cols["n"]).astype(int)
    graph = np.asarray(cols.get("graph", np.ones(len(n), bool)), bool)
    return [f"all_reduce,{k},{int(b)},{int(g)}" for k, b, g in zip(n, cols["bytes"], graph)]
