"""The precision a process computes in: `--precision auto|bf16|fp32` and its autocast."""

from __future__ import annotations

import contextlib

import torch

from ..errors import KrakenError

PRECISIONS = ("auto", "bf16", "fp32")


def _cpu_has_fast_bf16() -> bool:
    # bf16 matmuls are only faster than fp32 on CPUs with AMX or AVX512-BF16 units.
    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def resolve_precision(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for `precision` on `device` (None = plain fp32)."""
    if precision not in PRECISIONS:
        raise KrakenError(f"unknown precision {precision!r}; use one of {PRECISIONS}")
    if precision == "fp32":
        return None
    if device.type == "cuda":
        supported = torch.cuda.is_bf16_supported()
    else:
        supported = _cpu_has_fast_bf16()
    if precision == "bf16" and not supported and device.type == "cuda":
        raise KrakenError("this GPU has no bf16 support; use --precision fp32")
    if precision == "auto":
        return torch.bfloat16 if supported else None
    return torch.bfloat16


def autocast(device: torch.device, dtype: torch.dtype | None):
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)
