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
