"""Point-to-point transfers between devices of a serving cluster (the KV cache of a prompt
from a prefill instance to a decode instance, a pipeline stage's activations to the next
stage), timed by the simulator's collective model.

A send of B bytes from one device to another is the traffic of a two-device all-gather of
2B bytes: each device puts B on its links, in one step. `collective_time` (simulator/kernels/
template/collectives.py) times it as the pipelined alpha-beta model of the interconnect:
(sqrt(link latency) + sqrt(B / device bandwidth))^2, the bandwidth being the device's links
to the switch (or to its peer) from the hardware YAML. Devices on different nodes talk over
the network (per device, per direction), timed by the same model on a two-device switch.

`resolve_network` picks that network once per command, so every inter-node transfer of a
replay (KV transfers, pipeline sends across nodes, every split of the P:D search) uses the
same one: `--network-gbps` if given, else the systems' `interconnect.inter_node` from their
hardware YAML (the slowest of them when pools differ), else the default below, said once by a
warning when a transfer crosses nodes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import KrakenError, warn
from ..hardware.schema import Interconnect, System
from ..simulator.kernels.template.collectives import collective_time

# for systems whose hardware YAML has no interconnect.inter_node: a 400 Gb/s NIC per GPU (the
# DGX/HGX H100 reference design: one ConnectX-7 per GPU) and a few microseconds through the
# RDMA stack and a switch; assumptions, overridden by --network-gbps
DEFAULT_NETWORK_GBPS = 400.0
DEFAULT_NETWORK_LATENCY_S = 5e-6
SOURCES = ("cli", "yaml", "default")


class TransferError(KrakenError, ValueError):
    """A network that cannot carry a transfer (a bandwidth that is not positive)."""


@dataclass(frozen=True)
class Network:
    """The inter-node network, per device and direction; `source` says where its bandwidth
    came from (cli, yaml or default), `latency_source` its latency (yaml or default);
    `missing` names the systems without a network section (said by the default's warning)."""
    gbps: float = DEFAULT_NETWORK_GBPS
    latency_s: float = DEFAULT_NETWORK_LATENCY_S
    source: str = "default"
    latency_source: str = "default"
    missing: tuple[str, ...] = ()
    _warned: list = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self):
        if not (math.isfinite(self.gbps) and self.gbps > 0):
            raise TransferError(f"--network-gbps must be a positive number, got {self.gbps}")
        if self.source not in SOURCES:
            raise TransferError(f"network source {self.source!r} is not one of {SOURCES}")

    def interconnect(self) -> Interconnect:
        """The network as a two-device switch, for a transfer that crosses nodes (the first
        such transfer of a default network says so, once)."""
        if self.source == "default" and not self._warned:
            self._warned.append(True)
            which = (", ".join(self.missing) + " ha" + ("ve" if len(self.missing) > 1 else "s")
                     + " no interconnect.inter_node in the hardware YAML") if self.missing \
                else "no hardware YAML describes the network"
            warn(f"{which}: transfers between nodes assume {self.gbps:g} Gb/s per device and "
                 f"direction, {self.latency_s * 1e6:g} us; give --network-gbps or add the "
                 "section (docs/adding-a-gpu.md)")
        return Interconnect(device_count=2, topology="switch", links_per_device=1,
                            link_bandwidth_bytes_per_s=self.gbps * 1e9 / 8,
                            link_latency_s=self.latency_s)

    def describe(self) -> dict:
        """The network as the report shows it."""
        return {"gbps": self.gbps, "latency_s": self.latency_s, "source": self.source,
                "latency_source": self.latency_source}


def resolve_network(systems: Iterable[System], gbps: float | None = None) -> Network:
    """The network between nodes of `systems`: bandwidth from `gbps` (--network-gbps) if
    given, else from every system's `interconnect.inter_node` (the slowest when they differ:
    a transfer runs at its slower end), else the default; latency from the YAML when every
    system has it, else the default."""
    nets = {s.name: s.interconnect.inter_node for s in systems}
    missing = tuple(sorted(name for name, net in nets.items() if net is None))
    given = [net for net in nets.values() if net is not None]
    from_yaml = bool(given) and not missing
    latency = max(n.latency_s for n in given) if from_yaml else DEFAULT_NETWORK_LATENCY_S
    latency_source = "yaml" if from_yaml else "default"
    if gbps is not None:
        return Network(float(gbps), latency, "cli", latency_source, missing)
    if from_yaml:
        return Network(min(n.bandwidth_bytes_per_s for n in given) * 8 / 1e9, latency,
                       "yaml", "yaml")
    return Network(missing=missing)


def send_s(bytes_per_device: float, interconnect: Interconnect) -> float:
    """Seconds to send `bytes_per_device` from one device to one other over `interconnect`
    (every device of a group sends its share at once, so a group takes the same time)."""
    if bytes_per_device <= 0:
        return 0.0
    return collective_time("all_gather", interconnect, 2.0 * bytes_per_device, 2)[0]


def link_between(a: System, node_a: int, b: System, node_b: int,
                 network: Network) -> Interconnect:
    """The interconnect two devices share: their node's (NVLink and the like) when both sit in
    the same node of the same system, else the network."""
    if a.name == b.name and node_a == node_b and node_a >= 0:
        return a.interconnect
    return network.interconnect()
