"""The cluster layer of the serving simulator (serving/cluster.py, routing.py, pipeline.py,
transfer.py, disagg.py): pool specs, token-weighted join-shortest-queue, heterogeneous pools,
pipeline-parallel virtual engines, disaggregated prefill/decode with the KV transfer, and the
P:D search. Small engines (GPT-3 1.3B, 1024 tokens and 16 sequences per step)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from krakenlm.hardware import load_system
from krakenlm.models import get_preset
from krakenlm.serving.cluster import PoolSpec, Replica, parse_pools, placements, serve_cluster
from krakenlm.serving.disagg import pd_search, serve_disaggregated
from krakenlm.serving.pipeline import PipelineTimer
from krakenlm.serving.replay import ServeError, serve
from krakenlm.serving.routing import choose
from krakenlm.serving.traces import Request, Trace, synthetic_trace
from krakenlm.serving.transfer import Network
from krakenlm.simulator.memory import kv_cache_bytes

MODEL = "gpt3-1.3b"
SMALL = {"max_num_batched_tokens": 1024, "max_num_seqs": 16}


def _trace(n=120, rate=30.0, lengths="fixed:512,32", seed=1) -> Trace:
    return synthetic_trace(np.random.default_rng(seed), n, rate, lengths, "poisson", 1.0)


# ------------------------------------------------------------------------------ pool specs
def test_pool_specs_parse_with_defaults_and_any_field_order():
    assert parse_pools("h100-80gb-x8:tp4:2,a100-80gb-x8:tp8:1") == (
        PoolSpec("h100-80gb-x8", 4, 1, 2), PoolSpec("a100-80gb-x8", 8, 1, 1))
    assert parse_pools("h100-80gb-x8") == (PoolSpec("h100-80gb-x8"),)
    assert parse_pools("h200-x8:pp2:x3:tp2") == (PoolSpec("h200-x8", 2, 2, 3),)


@pytest.mark.parametrize("spec,message", [
    ("h100-80gb-x8:tq4", "'tq4' is not tpN, ppN or a replica count"),
    ("h100-80gb-x8:tp4:tp2", "gives tp twice"),
    ("h100-80gb-x8:0", "count must be at least 1, got 0"),
    ("h100-80gb-x8:tp2,", "a pool without a system"),
])
def test_bad_pool_specs_say_what_is_wrong(spec, message):
    with pytest.raises(ServeError, match=message):
        parse_pools(spec)


def test_replicas_are_placed_node_by_node_without_straddling():
    def pool(system, tp, pp, count):
        return SimpleNamespace(system=load_system(system), spec=PoolSpec(system, tp, pp, count))
    # 8-GPU nodes: tp4 x 3 -> nodes 0, 0, 1; then tp8 replicas of another system from node 0;
    # a tp4 x pp4 replica (16 devices) spans nodes (-1)
    nodes = placements([pool("h100-80gb-x8", 4, 1, 3), pool("a100-80gb-x8", 8, 1, 2),
                        pool("h100-80gb-x8", 4, 4, 1)])
    assert nodes == [0, 0, 1, 0, 1, -1]


# ---------------------------------------------------------------------------------- routing
def _replica(index, seqs):
    """A replica holding `seqs` as (prompt, output, computed) in one engine's queues."""
    queue = [SimpleNamespace(prompt=p, output=o, computed=c) for p, o, c in seqs]
    engine = SimpleNamespace(running=queue, waiting=[], outstanding=len(queue),
                             advance=lambda t: None)
    return Replica([engine], index, 0, 0)


def test_jsq_tokens_picks_the_replica_with_the_fewest_outstanding_tokens():
    # replica 0: one request with a 4000-token prompt not started; replica 1: three requests
    # almost done (10 + 5 + 5 tokens left). Least-loaded picks 0 (1 request), JSQ picks 1.
    busy = _replica(0, [(4000, 100, 0)])
    light = _replica(1, [(100, 20, 110), (50, 10, 55), (50, 10, 55)])
    assert busy.outstanding_tokens() == 4100 and light.outstanding_tokens() == 20
    req = Request(0, 0.0, 200, 20)
    assert choose([busy, light], req, "jsq-tokens", 0) is light
    assert choose([busy, light], req, "least-loaded", 0) is busy


def _dp_engine(waiting: int, running: int):
    return SimpleNamespace(waiting=[0] * waiting, running=[0] * running, advance=lambda t: None)


def test_vllm_dp_balances_on_published_counts_plus_what_it_sent_since():
    """vLLM V1's DP balancer before 0.14: the lowest 4 x waiting + running from counts
    published every 100 ms, each raised by one waiting request per request sent since; ties to
    the first."""
    from krakenlm.serving.routing import DPLoadBalancer

    engine = _dp_engine
    a, b = engine(0, 1), engine(0, 0)
    lb = DPLoadBalancer([a, b], published=True)
    at = [lb.choose(Request(i, t, 10, 2)) for i, t in enumerate((0.01, 0.02, 0.03, 0.04))]
    # scores (a, b): (1, 0) -> b; (1, 4) -> a; (5, 4) -> b; (5, 8) -> a
    assert at == [b, a, b, a]
    b.running = [0] * 5  # the next publication: (1, 5) -> a; (5, 5) -> a, a tie to the first
    assert [lb.choose(Request(9, t, 10, 2)) for t in (0.12, 0.13)] == [a, a]


def test_vllm_dp_from_0_14_balances_a_dense_model_blind_to_the_engines_load():
    """From vLLM 0.14 a dense model's DP engines send no counts: the balancer alternates on
    its own increments whatever the engines hold, and starts again from zeros (the first
    engine) at each 5 s republication."""
    from krakenlm.serving.routing import DPLoadBalancer, dp_counts_published

    assert dp_counts_published("0.13.0") and dp_counts_published("0.8.5")
    assert not dp_counts_published("0.14.0") and not dp_counts_published("0.19.0")
    assert not dp_counts_published(None)  # no version: a current release
    a, b = _dp_engine(0, 7), _dp_engine(0, 0)  # a busy, b idle: a load-aware choice is b
    lb = DPLoadBalancer([a, b])
    times = (0.1, 0.2, 0.3, 4.9, 5.1, 5.2)
    assert [lb.choose(Request(i, t, 10, 2)) for i, t in enumerate(times)] == [a, b, a, b, a, b]
    lb = DPLoadBalancer([a, b])
    assert [lb.choose(Request(i, t, 10, 2)) for i, t in enumerate((0.1, 0.2, 0.3, 5.1))] \
        == [a, b, a, a]  # three sent before the reset, so the fourth ties to the first again
    published = DPLoadBalancer([a, b], published=True)
    assert published.choose(Request(0, 0.1, 10, 2)) is b


def test_a_cluster_replay_takes_the_engine_version_for_vllm_dp():
    """`serve_cluster(engine_version=)` sets the balancer as `serve` does: before 0.14 on the
    engines' counts, from 0.14 blind; the same replay either way as `serve`'s."""
    trace, config = _trace(), get_preset(MODEL)
    from dataclasses import replace

    from krakenlm.serving.replay import default_options
    opt = replace(default_options("vllm-v1", load_system("h100-80gb-x8"), config), **SMALL)
    for version in ("0.10.0", "0.19.0"):
        a = serve(trace, config, "h100-80gb-x8", replicas=2, router="vllm-dp", options=opt,
                  engine_version=version)
        b = serve_cluster(trace, config, parse_pools("h100-80gb-x8:tp1:2"), router="vllm-dp",
                          overrides=SMALL, engine_version=version)
        assert a.rows == b.rows, version


def test_vllm_dp_routes_serve_clusters_and_decode_pools_alike():
    """The `vllm-dp` balancer in `serve` and in a cluster of the same pool gives the same
    replay; a disaggregated decode pool routes with it too (its pending requests wait)."""
    trace, config = _trace(), get_preset(MODEL)
    from dataclasses import replace

    from krakenlm.serving.replay import default_options
    opt = replace(default_options("vllm-v1", load_system("h100-80gb-x8"), config), **SMALL)
    a = serve(trace, config, "h100-80gb-x8", replicas=2, router="vllm-dp", options=opt)
    b = serve_cluster(trace, config, parse_pools("h100-80gb-x8:tp1:2"), router="vllm-dp",
                      overrides=SMALL)
    assert a.rows == b.rows and sorted({r["replica"] for r in a.rows}) == [0, 1]
    spec = parse_pools("h100-80gb-x8:tp1:2")
    pd = serve_disaggregated(trace, config, spec[:1], spec, router="vllm-dp", overrides=SMALL)
    assert len(pd.rows) == len(trace.requests)


def test_a_homogeneous_pool_replays_exactly_like_serve():
    trace, config = _trace(), get_preset(MODEL)
    from dataclasses import replace

    from krakenlm.serving.replay import default_options
    opt = replace(default_options("vllm-v1", load_system("h100-80gb-x8"), config), **SMALL)
    a = serve(trace, config, "h100-80gb-x8", replicas=2, router="least-loaded", options=opt)
    b = serve_cluster(trace, config, parse_pools("h100-80gb-x8:tp1:2"), router="least-loaded",
                      overrides=SMALL)
    assert a.rows == b.rows
    assert b.summary["requests_per_replica"] == [
        sum(r["replica"] == i for r in a.rows) for i in (0, 1)]


def test_the_router_sends_more_to_the_faster_pool():
    """An H100 and an A100 replica behind the token-weighted router: the H100 finishes its
    tokens sooner, so it takes more requests; round-robin splits them evenly. The cost adds
    each pool's device price."""
    trace, config = _trace(n=200, rate=60.0), get_preset(MODEL)
    pools = parse_pools("h100-80gb-x8:tp1:1,a100-80gb-x8:tp1:1")
    jsq = serve_cluster(trace, config, pools, router="jsq-tokens", overrides=SMALL)
    rr = serve_cluster(trace, config, pools, router="round-robin", overrides=SMALL)
    h100, a100 = jsq.summary["requests_per_replica"]
    assert h100 > a100 and h100 + a100 == 200
    assert rr.summary["requests_per_replica"] == [100, 100]
    assert jsq.setup["devices"] == 2 and [p["system"] for p in jsq.setup["pools"]] == [
        "h100-80gb-x8", "a100-80gb-x8"]
    from krakenlm.hardware.cost import system_cost
    per_s = sum(system_cost(load_system(s)).system_usd / 8 for s in ("h100-80gb-x8",
                                                                       "a100-80gb-x8"))
    years = jsq.summary["cost"]["amortisation_years"]
    assert jsq.summary["cost"]["usd"] == pytest.approx(
        per_s / (years * 365.25 * 24 * 3600) * jsq.summary["makespan_s"])


# --------------------------------------------------------------------------------- pipeline
def test_a_pipeline_step_is_pp_stage_steps_plus_the_sends():
    stage = SimpleNamespace(step_s=lambda *a: 0.010,
                            decode_steps_s=lambda d, kv, k: np.full(k, 0.004))
    timer = PipelineTimer(stage, 4, lambda tokens: 1e-6 * tokens)
    assert timer.step_s(100, 2, 2, 0.0, True) == pytest.approx(4 * 0.010 + 3 * 100e-6)
    assert timer.decode_steps_s(8, 100.0, 3) == pytest.approx([4 * 0.004 + 3 * 8e-6] * 3)


def test_pipeline_replicas_run_pp_virtual_engines_with_a_share_of_the_blocks():
    trace, config = _trace(n=60), get_preset(MODEL)
    report = serve_cluster(trace, config, parse_pools("h100-80gb-x8:tp1:pp2:1"),
                           overrides=SMALL)
    pool = report.setup["pools"][0]
    assert pool["pp"] == 2 and pool["blocks_per_virtual_engine"] == pool["kv_cache"]["blocks"] // 2
    assert report.summary["requests"] == 60 and report.summary["ttft_s"]["p50"] > 0


# ---------------------------------------------------------------------- disaggregated serving
def _p2p_s(bytes_, bandwidth, latency):
    return (math.sqrt(latency) + math.sqrt(bytes_ / bandwidth)) ** 2


@pytest.mark.parametrize("pool,bandwidth,latency", [
    # two tp1 instances share an 8-GPU node: NVLink, 18 links x 25 GB/s through the switch
    ("h100-80gb-x8:tp1:1", 18 * 25e9, 1.5e-6),
    # two tp8 instances fill a node each: the network, 400 Gb/s per device
    ("h100-80gb-x8:tp8:1", 400e9 / 8, 5e-6),
])
def test_one_prefill_one_decode_transfer_takes_bytes_over_bandwidth(pool, bandwidth, latency):
    trace = Trace("two", (Request(0, 0.0, 512, 8), Request(1, 5.0, 1000, 1)))
    config = get_preset(MODEL)
    spec = parse_pools(pool)
    report = serve_disaggregated(trace, config, spec, spec, overrides=SMALL)
    first, single = report.rows
    tp = spec[0].tp
    per_device = kv_cache_bytes(config, tp, 1, 512, "fp16") * tp / tp
    assert per_device == 2 * 24 * 2048 * 2 * 512 / tp
    assert first["kv_transfer_s"] == pytest.approx(_p2p_s(per_device, bandwidth, latency),
                                                    rel=1e-9)
    # the pipelined alpha-beta model: between the bandwidth term and twice the alpha-beta sum
    assert per_device / bandwidth < first["kv_transfer_s"] < 2 * (per_device / bandwidth
                                                                  + latency)
    # the decode instance admits it when the KV has landed; TTFT is the prefill's
    assert first["kv_ready_s"] == pytest.approx(first["first_token_s"] + first["kv_transfer_s"])
    assert first["decode_admitted_s"] == pytest.approx(first["kv_ready_s"])
    assert first["decode_replica"] == 1 and first["finish_s"] > first["kv_ready_s"]
    assert first["tpot_s"] == pytest.approx(
        (first["finish_s"] - first["first_token_s"]) / 7)
    # a one-token output ends on the prefill instance: nothing to transfer
    assert single["kv_transfer_s"] == 0.0 and single["decode_replica"] == -1


def test_decode_admission_waits_for_free_kv_blocks():
    """A decode instance whose cache holds one request at a time admits the second request
    only when the first has finished and freed its blocks."""
    trace = Trace("two", (Request(0, 0.0, 512, 40), Request(1, 0.001, 512, 40)))
    config = get_preset(MODEL)
    spec = parse_pools("h100-80gb-x8:tp1:1")
    # 0.9 x 80 GB is plenty: shrink the cache through the memory share
    from krakenlm.serving.cluster import build_pools
    built, _ = build_pools(spec, trace, config, software="vllm", scheduler=None,
                           overrides=SMALL, dtype="fp16", model_name=MODEL, skip_long=False,
                           network=Network())
    per_block = built[0].sizing.bytes_per_block
    full = built[0].sizing
    # utilisation leaving room for 40 blocks (one request of 552 tokens needs 35)
    util = (full.weights_bytes + full.activation_bytes + full.reserve_bytes + 40 * per_block) \
        / full.capacity_bytes
    report = serve_disaggregated(trace, config, spec, spec,
                                 overrides={**SMALL, "gpu_memory_utilization": util})
    a, b = report.rows
    assert b["kv_ready_s"] < a["finish_s"]
    assert b["decode_admitted_s"] == pytest.approx(a["finish_s"])


def test_pd_search_reports_capacity_per_device_for_each_split():
    trace = _trace(n=80, rate=20.0, lengths="fixed:512,32")
    result = pd_search(trace, get_preset(MODEL), PoolSpec("h100-80gb-x8", 1), 3,
                       percentile=90, slo_ttft_s=0.05, slo_tpot_s=0.01, overrides=SMALL)
    assert [r["split"] for r in result.rows] == ["agg", "1:2", "2:1"]
    for r in result.rows:
        assert r["devices"] == 3
        assert r["per_device_per_s"] == pytest.approx(r["capacity_per_s"] / 3)
        assert r["capacity_per_s"] > 0 and r["per_usd_hour"] > 0
    assert result.rows[0]["kv_transfer_mean_s"] is None
    assert result.rows[1]["kv_transfer_mean_s"] > 0
    # every split's transfers used the network of h100-80gb-x8's hardware YAML
    assert result.to_json()["network"] == {"gbps": 400.0, "latency_s": 5e-6, "source": "yaml",
                                           "latency_source": "yaml"}


def test_the_cli_serves_disaggregated_and_writes_the_transfer_columns(tmp_path, capsys):
    import json

    from krakenlm.cli import main

    argv = ["sim", "serve", "--model", MODEL, "--system", "h100-80gb-x8",
            "--max-num-batched-tokens", "1024", "--max-num-seqs", "16", "--trace", "synthetic",
            "--rate", "30", "--requests", "120", "--lengths", "fixed:512,32", "--seed", "1",
            "--prefill-replicas", "1", "--decode-replicas", "h100-80gb-x8:tp1:1",
            "--router", "jsq-tokens", "--json", "--out", str(tmp_path / "pd")]
    with pytest.raises(SystemExit) as info:
        main(argv)
    out = capsys.readouterr()
    assert info.value.code == 0, out.err
    report = json.loads(out.out)
    assert report["setup"]["disaggregated"]["prefill"] == ["h100-80gb-x8:tp1:1"]
    assert report["setup"]["devices"] == 2 and report["summary"]["requests"] == 120
    # no --network-gbps: the network of h100-80gb-x8's hardware YAML, and the JSON says so
    assert report["setup"]["network"]["source"] == "yaml"
    header = (tmp_path / "pd" / "requests.csv").read_text().splitlines()[0]
    assert header.endswith("preemptions,decode_replica,kv_transfer_s,kv_ready_s,"
                           "decode_admitted_s")
