"""How stored custom all-reduce constants choose their kernels: the framework's route (read from
its source, allreduce_routes.py) where the calibration used it, else the hand-off to NCCL read
off the fit half.
"""

from __future__ import annotations

from typing import Any

from ....hardware.schema import System


def route_args(module: Any, framework: str, version: str, system: System,
               p: dict[str, float]) -> dict[str, Any]:
    """How stored custom all-reduce constants choose kernels: the framework's route where the
    calibration used it (kernel_route 1), else the hand-off read off the fit half (handoff_<n>)
    and the framework's one-/two-shot switch."""
    route = module.route_for(framework, version, system) if p.get("kernel_route") else None
    if route is not None:
        return {"route": route}
    return {"handoff": handoff_of(p), "oneshot_below": module.oneshot_below_for(framework, system)}


def handoff_of(p: dict[str, float]) -> dict[int, float]:
    """The {n: bytes} hand-off stored with custom all-reduce constants as handoff_<n>."""
    return {int(k.split("_", 1)[1]): v for k, v in p.items() if k.startswith("handoff_")}
