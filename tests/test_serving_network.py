"""The network between nodes (hardware/schema.py `InterNode`, serving/transfer.py
`resolve_network`): the optional `interconnect.inter_node` section of a hardware YAML, the
order a replay picks its network in (--network-gbps, else the YAML, else the default with one
warning), and that every inter-node transfer of a replay uses that network."""

from __future__ import annotations

import math

import numpy as np
import pytest

from krakenlm.hardware import load_system
from krakenlm.hardware.schema import HardwareError, system_from_dict, system_to_dict
from krakenlm.models import get_preset
from krakenlm.serving.cluster import PoolSpec, parse_pools, pools_network, serve_cluster
from krakenlm.serving.command import ServeOptions, serve_command
from krakenlm.serving.disagg import pd_search, serve_disaggregated
from krakenlm.serving.traces import Request, Trace, synthetic_trace
from krakenlm.serving.transfer import (
    DEFAULT_NETWORK_GBPS,
    DEFAULT_NETWORK_LATENCY_S,
    resolve_network,
    send_s,
)

MODEL = "gpt3-1.3b"
SMALL = {"max_num_batched_tokens": 1024, "max_num_seqs": 16}
WARNING = "has no interconnect.inter_node in the hardware YAML"


# ------------------------------------------------------------------------------- the schema
def test_the_inter_node_section_round_trips_and_is_optional():
    system = load_system("h100-80gb-x8")
    net = system.interconnect.inter_node
    assert (net.bandwidth_bytes_per_s, net.latency_s, net.nics_per_node) == (50e9, 5e-6, 8)
    data = system_to_dict(system)
    assert data["interconnect"]["inter_node"]["bandwidth_bytes_per_s"] == 50e9
    assert system_from_dict(data) == system
    # units are read as everywhere else; the section may be absent or null
    data["interconnect"]["inter_node"] = {"bandwidth_bytes_per_s": "25 GB/s",
                                          "latency_s": "2 us"}
    parsed = system_from_dict(data).interconnect.inter_node
    assert (parsed.bandwidth_bytes_per_s, parsed.latency_s) == (25e9, 2e-6)
    assert parsed.nics_per_node is None and parsed.technology is None
    for absent in (None, "drop"):
        if absent == "drop":
            del data["interconnect"]["inter_node"]
        else:
            data["interconnect"]["inter_node"] = None
        assert system_from_dict(data).interconnect.inter_node is None
    assert load_system("mi210-x4").interconnect.inter_node is None
    # `sim systems` lists it per preset (None: not described)
    from krakenlm.hardware.report import presets_report
    rows = {r["name"]: r for r in presets_report().to_json()}
    assert rows["h100-80gb-x8"]["inter_node_bandwidth_bytes_per_s"] == 50e9
    assert rows["mi210-x4"]["inter_node_bandwidth_bytes_per_s"] is None


@pytest.mark.parametrize("field,value,message", [
    ("bandwidth_bytes_per_s", -25e9,
     "interconnect.inter_node.bandwidth_bytes_per_s: must be positive"),
    ("bandwidth_bytes_per_s", "fast",
     "interconnect.inter_node.bandwidth_bytes_per_s: expected a number in bytes_per_s"),
    ("latency_s", -1e-6, "interconnect.inter_node.latency_s: must not be negative"),
    ("latency_s", "5 GB/s", "interconnect.inter_node.latency_s: '5 GB/s' is in bytes per s"),
    # a NIC's speed as written on its datasheet: bits, not the field's bytes
    ("bandwidth_bytes_per_s", "400 Gb/s",
     "'400 Gb/s' is in bits per second (a lowercase b) but this field is in bytes; write 50 GB/s"),
    ("nics_per_node", 2.5, "interconnect.inter_node.nics_per_node: must be a whole number"),
    ("bandwith_bytes_per_s", 1e9, "unknown field(s) interconnect.inter_node.bandwith_bytes_per_s"),
])
def test_a_malformed_network_field_is_one_hardware_error(field, value, message):
    data = system_to_dict(load_system("h100-80gb-x8"))
    data["interconnect"]["inter_node"][field] = value
    with pytest.raises(HardwareError) as err:
        system_from_dict(data)
    assert message in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------ cli > yaml > default
def test_the_network_comes_from_the_cli_else_the_yaml_else_the_default():
    """A 1e8-byte send per device over the pipelined alpha-beta model,
    (sqrt(latency) + sqrt(bytes / bandwidth))^2, with the latency 5 us in every case:
    yaml a100-80gb-x8 (200 Gb/s = 25e9 B/s): 5e-6 + 4e-3 + 2 sqrt(2e-8)  = 4.2878427e-3 s
    cli 100 Gb/s (12.5e9 B/s):              5e-6 + 8e-3 + 2 sqrt(4e-8)  = 8.405e-3 s
    default 400 Gb/s (50e9 B/s), mi210-x4:  5e-6 + 2e-3 + 2 sqrt(1e-8)  = 2.205e-3 s"""
    a100, mi210 = load_system("a100-80gb-x8"), load_system("mi210-x4")
    cases = [(resolve_network([a100]), "yaml", 200.0, 4.2878427124746e-3),
             (resolve_network([a100], gbps=100), "cli", 100.0, 8.405e-3),
             (resolve_network([mi210]), "default", DEFAULT_NETWORK_GBPS, 2.205e-3)]
    for net, source, gbps, seconds in cases:
        assert (net.source, net.gbps, net.latency_s) == (source, gbps, DEFAULT_NETWORK_LATENCY_S)
        assert send_s(1e8, net.interconnect()) == pytest.approx(seconds, rel=1e-9)
    # pools on systems with different networks: the slower end sets the pace
    assert resolve_network([a100, load_system("h100-80gb-x8")]).gbps == 200.0
    # one system without the section: the default (naming it), unless --network-gbps is given
    mixed = resolve_network([a100, mi210])
    assert (mixed.source, mixed.missing) == ("default", ("mi210-x4",))
    assert resolve_network([a100, mi210], gbps=800).describe() == {
        "gbps": 800.0, "latency_s": 5e-6, "source": "cli", "latency_source": "default"}


def _disaggregated(system: str, network_gbps: float | None = None):
    o = ServeOptions(trace="synthetic", rate=1.0, requests=2, lengths="fixed:512,8",
                     model=MODEL, system=system, tp=8, prefill_replicas="1",
                     decode_replicas="1", network_gbps=network_gbps, **SMALL)
    return serve_command(o)


@pytest.mark.parametrize("gbps,source,bandwidth", [(None, "yaml", 25e9), (100.0, "cli", 12.5e9)])
def test_sim_serve_times_the_kv_transfer_over_the_resolved_network(gbps, source, bandwidth):
    """Two tp8 instances of an 8-GPU a100 system sit on two nodes: the KV of a 512-token
    prompt crosses the network, per device its share of 2 x 24 layers x 2048 x 2 bytes x 512."""
    report = _disaggregated("a100-80gb-x8", gbps)
    assert report.setup["network"] == {"gbps": bandwidth * 8 / 1e9, "latency_s": 5e-6,
                                       "source": source, "latency_source": "yaml"}
    per_device = 2 * 24 * 2048 * 2 * 512 / 8
    first = report.rows[0]
    assert first["kv_transfer_s"] == pytest.approx(
        (math.sqrt(5e-6) + math.sqrt(per_device / bandwidth)) ** 2, rel=1e-9)
    assert any(f"network between nodes: {bandwidth * 8 / 1e9:g} Gb/s" in str(item)
               for item in report.to_table())


def test_a_system_without_a_network_says_so_once_when_a_transfer_crosses_nodes(capsys):
    config = get_preset(MODEL)
    trace = Trace("three", tuple(Request(i, 0.1 * i, 512, 8) for i in range(3)))
    crossing = parse_pools("mi210-x4:tp4:1")
    report = serve_disaggregated(trace, config, crossing, crossing, overrides=SMALL)
    err = capsys.readouterr().err
    assert err.count(WARNING) == 1 and "warning: mi210-x4 " + WARNING in err
    assert "400 Gb/s per device and direction, 5 us; give --network-gbps" in err
    assert report.setup["network"]["source"] == "default"
    assert all(r["kv_transfer_s"] > 0 for r in report.rows)
    # inside one node nothing crosses the network: no warning
    inside = parse_pools("mi210-x4:tp1:1")
    serve_disaggregated(trace, config, inside, inside, overrides=SMALL)
    assert WARNING not in capsys.readouterr().err
    # --network-gbps stands in for the missing section: no warning either
    serve_disaggregated(trace, config, crossing, crossing, overrides=SMALL,
                        network=pools_network(crossing, 200.0))
    assert WARNING not in capsys.readouterr().err


def test_the_pd_search_resolves_one_network_for_every_split(capsys):
    """Each split of the search replays many rates; the default network is still said once,
    and the result names it."""
    trace = synthetic_trace(np.random.default_rng(1), 80, 20.0, "fixed:512,32", "poisson", 1.0)
    result = pd_search(trace, get_preset(MODEL), PoolSpec("mi210-x4", 4), 2, percentile=90,
                       slo_ttft_s=0.05, slo_tpot_s=0.01, overrides=SMALL)
    assert result.network["source"] == "default"
    assert capsys.readouterr().err.count(WARNING) == 1


def test_pipeline_sends_between_nodes_read_the_same_network(capsys):
    """A tp4 x pp2 replica of a 4-GPU system spans two nodes: its stage sends cross the
    network, so a system without the section says so (once), and the report names it."""
    trace = Trace("three", tuple(Request(i, 0.1 * i, 256, 4) for i in range(3)))
    report = serve_cluster(trace, get_preset(MODEL), parse_pools("mi210-x4:tp4:pp2:1"),
                           overrides=SMALL)
    assert capsys.readouterr().err.count(WARNING) == 1
    assert report.setup["network"]["source"] == "default"
    # the same replica inside one node sends over its links: nothing to say
    serve_cluster(trace, get_preset(MODEL), parse_pools("mi210-x4:tp2:pp2:1"), overrides=SMALL)
    assert WARNING not in capsys.readouterr().err
