"""Convert GPU calibration files of format 2 to format 3, keeping every constant.

    python -m krakenlm.simulator.constants.format2 FILE...

Format 2 stored a kernel's structural choices as floats among its constants and told its form
by which keys were present (`library: 1.0`, `"mha_floor_s" in p`, `fa3: 1.0`, `handoff_4`...);
format 3 names the form and its typed structure, keeps under `params` only the constants that
form reads (the pinned zeros of terms it does not use are dropped), and the measurement
harness's choices and constants under `harness` (constants/gpu_kernels.py). `meta` keeps the
command and date of the last fit instead of a log of refits.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from ... import yamlio
from ...fileio import read_user_text
from ...hardware import load_system
from ..kernels import base
from ..kernels.gpu import attention, collectives, fa3_decode, gemm_cutlass, trtllm_decode
from ..kernels.gpu.gemm import CublasStructure
from .gpu_kernels import FORMAT, DeviceCalibration, Entry, FileParams, GpuCalibrationError, save

PACKINGS = {0: "none", 1: "packed", 2: "single_query"}
FA3_RULES = {1: "vllm-flash-attn", 2: "upstream"}
HARNESS_KEYS = ("heat_s", "heat_gain")
SWITCHES = ("library", "tile_table", "weight_copies", "pack_gqa", "block_m", "kv_tile", "warm_l2",
            "decode_kernels", "q_tile_rows", "qgmma_residency", "split_ctas_per_sm", "split_mha",
            "fa2_swap", "fa3", "fa3_graph_splits", "fa3_rule", "fa3_mma", "row_kernel",
            "kernel_route")


def form_of(family: str, p: dict[str, float]) -> tuple[str, Any, dict[str, Any]]:
    """(form name, structure, harness) a format-2 entry of `family` meant."""
    if family == "gemm":
        harness: dict[str, Any] = {"weight_copies": int(p.get("weight_copies", 0))}
        if "heat_s" in p:
            if "heat_gain" not in p:
                raise GpuCalibrationError("a GEMM entry with the first-order heating (heat_s "
                                          "without heat_gain) has no format 3: refit it")
            harness.update(heat_s=p["heat_s"], heat_gain=p["heat_gain"])
        library = int(p.get("library", 0))
        if library == 1:
            return gemm_cutlass.VLLM_CUTLASS.name, base.NoStructure(), harness
        if library == 2:
            table = int(p.get("tile_table", 0))
            if table not in gemm_cutlass.SGLANG_TABLES:
                raise GpuCalibrationError(f"SGLang tile table {table} is no longer a form: refit")
            return gemm_cutlass.SGLANG_CUTLASS.name, gemm_cutlass.SglangStructure(table), harness
        return "gemm/cublas", CublasStructure("power_efficiency" in p), harness
    if family == "context_attention":
        return attention.FLASH_CONTEXT.name, attention.ContextStructure(
            int(p.get("block_m", attention.BLOCK_M)), int(p.get("kv_tile", 0)),
            PACKINGS[round(p.get("pack_gqa", 0.0))], "cache_write_thread_s" in p), {
            "warm_replay": p.get("warm_l2", 0.0) > 0.5}
    if family == "generation_attention":
        if p.get("decode_kernels", 0.0) > 0.5:
            return trtllm_decode.TRTLLM_XQA.name, trtllm_decode.XqaStructure(
                "qgmma" if p["decode_kernels"] > 1.5 else "hmma",
                p.get("qgmma_residency", 0.0) > 0.5), {}
        if p.get("fa3", 0.0) > 0.5:
            return fa3_decode.FA3_DECODE.name, fa3_decode.Fa3Structure(
                int(p.get("fa3_graph_splits", 0.0)), FA3_RULES[round(p.get("fa3_rule", 1.0))],
                p.get("fa3_mma", 0.0) > 0.5), {}
        if "mha_floor_s" in p:
            return trtllm_decode.TRTLLM_DISCRETE.name, trtllm_decode.DiscreteStructure(
                int(p.get("q_tile_rows", 16))), {}
        if "split_ctas_per_sm" in p:
            return attention.FLASH_SPLITKV.name, attention.SplitKVStructure(
                int(p["split_ctas_per_sm"]), p["split_mha"] > 0.5, p.get("fa2_swap", 0.0) > 0.5), {}
        return attention.SMOOTH_DECODE.name, base.NoStructure(), {}
    if family == "elementwise":
        row = "row_bandwidth" in p and p.get("row_kernel", 1.0) != 0
        return ("elementwise/row" if row else "elementwise/flat"), base.NoStructure(), {}
    if family == "nccl":
        return collectives.NCCL.name, collectives.NcclStructure(
            "ll128_efficiency" in p, "nvls_efficiency" in p), {}
    if family == "custom_all_reduce":
        if p.get("kernel_route"):
            return collectives.FRAMEWORK_ALL_REDUCE.name, collectives.CustomStructure(), {}
        handoff = tuple(sorted((int(k.split("_", 1)[1]), float(v)) for k, v in p.items()
                               if k.startswith("handoff_")))
        return (collectives.FRAMEWORK_ALL_REDUCE.name,
                collectives.CustomStructure("handoff", handoff), {})
    raise GpuCalibrationError(f"unknown kernel family {family!r}")


def convert(data: dict[str, Any], source: str) -> tuple[DeviceCalibration, int]:
    """The format-3 calibration of a format-2 file's content, and how many stored constants no
    form reads (dropped)."""
    if not isinstance(data, dict) or not isinstance(data.get("meta"), dict) or \
            data["meta"].get("format") != 2:
        raise GpuCalibrationError(f"{source}: not a GPU calibration file of format 2")
    meta = dict(data["meta"])
    meta.pop("format")
    key = meta.pop("device_key")
    refits = meta.pop("refits", None) or []
    if refits:  # the last fit's command and date
        meta["command"], meta["created"] = refits[-1]["command"], refits[-1]["created"]
    system = load_system(meta["system"])
    cal = DeviceCalibration(str(key), meta, path=source)
    dropped = 0
    for fw, info in data["frameworks"].items():
        for family, variants in info["families"].items():
            for variant, e in variants.items():
                p = {k: float(v) for k, v in e["params"].items()}
                name, structure, harness = form_of(family, p)
                form = base.form(name)
                setting = base.Setting(system, fw, str(variant), str(info.get("version", "")))
                reads = {q.name for q in form.params(setting, structure)}
                where = f"{source}: frameworks.{fw}.families.{family}.{variant}"
                missing = sorted(reads - set(p))
                if missing and family != "custom_all_reduce":  # its constants: the rows' kernels
                    raise GpuCalibrationError(f"{where} lacks {', '.join(missing)}: refit it")
                kept = {k: v for k, v in p.items() if k in reads}
                dropped += len([k for k in p if k not in reads and k not in HARNESS_KEYS
                                and k not in SWITCHES and not k.startswith("handoff_")])
                notes = [str(n).replace("(kernel_route 1)", "(route framework)")
                         for n in e.get("notes") or []]
                cal.put(fw, str(info.get("version", "")), family, str(variant),
                        Entry(name, structure, FileParams(kept, where), harness,
                              dict(e.get("fit") or {}), notes))
    return cal, dropped


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print("usage: python -m krakenlm.simulator.constants.format2 FILE...", file=sys.stderr)
        return 2
    for path in paths:
        try:
            data = yamlio.safe_load(read_user_text(Path(path), "calibration file",
                                                   GpuCalibrationError))
            cal, dropped = convert(data, path)
        except (GpuCalibrationError, OSError, yaml.YAMLError) as exc:
            print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
            return 2
        save(cal, path)
        entries = sum(len(v) for info in cal.frameworks.values()
                      for v in info["families"].values())
        print(f"{path}: format {FORMAT}, {entries} entries, {dropped} unused constants dropped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
