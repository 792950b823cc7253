"""Point-to-point transfers between devices of a serving cluster (the KV cache of a prompt
from a prefill instance to a decode instance, a pipeline stage's activations to the next
stage), timed by the simulator's collective model.

A send of B bytes from one device to another is the traffic of a two-device all-gather of
2B bytes: each device puts B on its links, in one step. `collective_time` (simulator/kernels/
template/collectives.py) times it as the pipelined alpha-beta model of the interconnect:
(sqrt(link latency) + sqrt(B / device bandwidth))^2, the bandwidth being the device's links
to the switch (or to its peer) from the hardware YAML. Devices on different nodes talk over
the network, which the hardware YAML does not describe: `Network` gives it (per device, per
direction), timed by the same model on a two-device switch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import KrakenError
from ..hardware.schema import Interconnect, System
from ..simulator.kernels.template.collectives import collective_time

# a 400 Gb/s NIC per GPU (the DGX/HGX H100 reference design: one ConnectX-7 per GPU) and a
# few microseconds through the RDMA stack and a switch; assumptions, set with --network-gbps
DEFAULT_NETWORK_GBPS = 400.0
DEFAULT_NETWORK_LATENCY_S = 5e-6


class TransferError(KrakenError, ValueError):
    """A network that cannot carry a transfer (a bandwidth that is not positive)."""


@dataclass(frozen=True)
class Network:
    """The inter-node network, per device and direction."""
    gbps: float = DEFAULT_NETWORK_GBPS
    latency_s: float = DEFAULT_NETWORK_LATENCY_S

    def __post_init__(self):
        if not (math.isfinite(self.gbps) and self.gbps > 0):
            raise TransferError(f"--network-gbps must be a positive number, got {self.gbps}")

    def interconnect(self) -> Interconnect:
        return Interconnect(device_count=2, topology="switch", links_per_device=1,
                            link_bandwidth_bytes_per_s=self.gbps * 1e9 / 8,
                            link_latency_s=self.latency_s)


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
