"""Kernel constants fitted on one part and used on another part of the same die.

A device's fitted constants (constants/devices/<key>.yaml) come from kernel tables measured on
one part (`meta.system`, e.g. the A100 80GB SXM for `A100`). Another part of the same die with
another memory (the A100 40GB: HBM2 at 1,555 GB/s against the 80GB part's HBM2e at 2,039 GB/s)
reads those constants too (`device.identity.calibration` in its hardware YAML). Every fitted
form prices memory traffic as bytes / (bandwidth_bytes_per_s x a fitted efficiency): the
efficiency is a fraction of the *fitted* part's datasheet bandwidth, and part of it is that
memory's own loss between datasheet and sustained rate (refresh, bank and bus turnarounds),
which differs between memories; the rest (how a kernel's tiles, waves and tails use what the
memory sustains) belongs to the die and its kernels.

So the forms time the borrowing part as if its datasheet bandwidth were

    bandwidth_equiv = bandwidth(part) x sustained_read_fraction(part)
                      / sustained_read_fraction(fitted),

which keeps the die's share of the efficiency and swaps the memory's share: a kernel that
reached a fraction f of what the fitted part's memory sustains reaches f of what this part's
memory sustains. `sustained_read_fraction` is each part's measured streaming-read rate over
its datasheet bandwidth (hardware YAML, sourced; a fraction, so a design sweep that changes the
bandwidth still scales it); where either part lacks it, or the part is the fitted one, the
forms see the system unchanged (the rule before: a fixed fraction of the datasheet bandwidth).

Collectives borrow nothing across links. The fitted NCCL and custom all-reduce constants
(kernels/gpu/collectives.py) are latencies and efficiencies of the fitted system's links: a
ring step's flag round trip, a protocol's payload rate over B = links_per_device x
link_bandwidth. They describe a part with the same links (count and per-link rate: the A100
80GB SXM4's twelve NVLink3 links, whether they go to NVSwitches on an 8-GPU board or straight
to the three peers on a 4-GPU one), not the same die on other links (an A100 PCIe card whose
peers are reached over one PCIe Gen4 x16 link through the host). `same_links` says which:
where it is False the collectives take the template model, as on a device with no fitted
collectives (the l40s-x8 preset, whose tables were not fitted: calibration/gpu.py).
"""

from __future__ import annotations

import dataclasses

from ....hardware.schema import System


def memory_equivalent_bandwidth(system: System, fitted_on: System | None) -> float | None:
    """The datasheet bandwidth (bytes/s) at which the fitted forms time `system` (module
    docstring); None where the system is the fitted one or a sustained rate is missing."""
    if fitted_on is None or fitted_on.device.name == system.device.name:
        return None
    own, fit = system.device.memory, fitted_on.device.memory
    if own.sustained_read_fraction is None or fit.sustained_read_fraction is None:
        return None
    return own.bandwidth_bytes_per_s * own.sustained_read_fraction / fit.sustained_read_fraction


def kernel_system(system: System, fitted_on: System | None) -> System:
    """The system the fitted kernel forms time: `system` with its memory bandwidth replaced by
    `memory_equivalent_bandwidth` where that applies, else `system` itself."""
    bandwidth = memory_equivalent_bandwidth(system, fitted_on)
    if bandwidth is None:
        return system
    dev = system.device
    memory = dataclasses.replace(dev.memory, bandwidth_bytes_per_s=bandwidth)
    return dataclasses.replace(system, device=dataclasses.replace(dev, memory=memory))


def same_links(system: System, fitted_on: System | None) -> bool:
    """Whether collective constants fitted on `fitted_on` time `system`'s collectives (module
    docstring): the same `links_per_device` and `link_bandwidth_bytes_per_s`. Topology and
    link latency may differ (both are inputs of the fitted forms); True where the
    calibration names no loadable system (nothing to compare: the rule before)."""
    if fitted_on is None:
        return True
    own, fit = system.interconnect, fitted_on.interconnect
    return (own.links_per_device == fit.links_per_device
            and own.link_bandwidth_bytes_per_s == fit.link_bandwidth_bytes_per_s)
