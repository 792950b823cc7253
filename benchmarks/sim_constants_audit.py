"""Which shipped kernel constants sit at a physical limit, or ran away from any physical value.

    python benchmarks/sim_constants_audit.py [--system h100-80gb-x8 ...] [--all]

Every constant of the shipped calibrations (`simulator/calibrations/*.yaml`) is read with the
definition of its parameter (`gpu/*.py` `Param`s: its kind, and the device's ceilings where a
family's fit carries them) and classified:

* **above ceiling**: a bounded constant past its device's ceiling (generation attention and
  elementwise kernels: `attention.generation_ceilings`, `elementwise.params_for`; a
  calibration written before the ceiling existed; refit it);
* **at ceiling**: at its ceiling (the data never made the term bind; a fine statement);
* **fraction at 1**: an efficiency at 100 % of the datasheet peak: either its term never binds
  in the data (as "at ceiling"), or the model misses something the constant absorbs (an MMA
  efficiency of 1 in compute-bound prefill attention); which one needs the data, not this list;
* **runaway**: an unbounded constant more than RUNAWAY times above its initial value (a term
  switched off by running it to a huge value reads as a physical claim).

Not listed: constants far below their initial value (a gain of 1e-15: "no gain"; a term that
does not matter is physical at zero), `overlap_exponent` however large (p -> infinity is the
plain maximum of compute and memory time, a physical limit), and constants a variant does not
use (`quantize_efficiency` of a 16-bit GEMM, the MMA efficiency of a decode form that is not
MMA-bound). With --all, every classified constant is printed;
otherwise a count per class and the list of the non-fine ones. Pure reading, no tables needed.
"""

from __future__ import annotations

import argparse
from collections import Counter

from krakenlm.hardware import load_system
from krakenlm.simulator.constants import gpu_kernels as store
from krakenlm.simulator.kernels.gpu import attention, collectives, elementwise, gemm, gemm_cutlass
from krakenlm.simulator.kernels.params import Param

RUNAWAY = 1e4  # times the initial value
FRACTION_AT_ONE = 0.999
NOT_AUDITED = {"overlap_exponent"}  # large is the plain maximum: physical


def used(name: str, family: str, variant: str, params: dict[str, float]) -> bool:
    """False for a stored constant the entry's model never reads (a structural variant fixes
    it at a placeholder)."""
    return not (name in NOT_AUDITED or (name == "quantize_efficiency" and variant != "fp8")
                or (name == "row_bandwidth" and params.get("row_kernel", 1.0) == 0.0)
                or (name == "mma_efficiency" and family == "generation_attention"
                    and params.get("fa3_mma", 0.0) != 1.0))


def ceilings_of(family: str, framework: str, dev) -> dict[str, float]:
    """The device's ceilings on a family's constants (the families whose fits carry them)."""
    if family == "generation_attention":
        params = attention.generation_params_for(framework, dev)
    elif family == "elementwise":
        params = elementwise.params_for(dev)
    else:
        return {}
    return {q.name: q.upper for q in params if q.upper is not None}


def param_definitions() -> dict[str, Param]:
    """Every Param the GPU models define, by name (a name means one kind everywhere)."""
    found: dict[str, Param] = {}
    for module in (attention, collectives, elementwise, gemm, gemm_cutlass):
        for value in vars(module).values():
            items = value if isinstance(value, tuple) else (value,)
            for p in items:
                if isinstance(p, Param):
                    found.setdefault(p.name, p)
    return found


STORED_REL = 1e-5  # constants are stored to 6 significant digits: a value at its ceiling may
# read back up to 5e-6 above it


def classify(value: float, p: Param, upper: float | None) -> str | None:
    if upper is not None and value > upper * (1 + STORED_REL):
        return "above ceiling"
    if upper is not None and value >= upper * (1 - 1e-3):
        return "at ceiling"
    if p.kind == "fraction" and value >= FRACTION_AT_ONE:
        return "fraction at 1"
    if p.kind != "fraction" and upper is None and value > p.initial * RUNAWAY:
        return "runaway"
    return None


def audit(systems: list[str]) -> list[dict]:
    defs = param_definitions()
    rows = []
    for system in systems:
        dev = load_system(system).device
        cal = store.for_device(dev)
        if cal is None:
            continue
        for framework, body in cal.frameworks.items():
            for family, variants in body.get("families", {}).items():
                ceilings = ceilings_of(family, framework, dev)
                for variant in variants:
                    entry = cal.entry(framework, family, variant)
                    for name, value in sorted(entry.params.items()):
                        p = defs.get(name)
                        if (p is None or p.kind not in ("fraction", "positive", "seconds")
                                or not used(name, family, variant, entry.params)):
                            continue  # structural choices (tile tables, variants) are not fitted
                        label = classify(float(value), p, ceilings.get(name))
                        if label:
                            rows.append({"device": cal.device_key, "framework": framework,
                                         "family": family, "variant": variant, "constant": name,
                                         "value": float(value), "ceiling": ceilings.get(name),
                                         "class": label})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", action="append",
                    help="preset system (repeatable; default: one per shipped calibration)")
    ap.add_argument("--all", action="store_true", help="also list constants at their ceiling")
    args = ap.parse_args()
    systems = args.system or ["a100-80gb-x8", "h100-80gb-x8", "h200-x8", "b200-x8",
                              "gb200-nvl72", "l40s-x8"]
    rows = audit(systems)
    print("| class | constants |\n|---|---:|")
    for label, n in sorted(Counter(r["class"] for r in rows).items()):
        print(f"| {label} | {n} |")
    shown = [r for r in rows if args.all or r["class"] != "at ceiling"]
    if shown:
        print("\n| device | framework | family | variant | constant | value | ceiling | class |")
        print("|---|---|---|---|---|---:|---:|---|")
        for r in shown:
            ceiling = f"{r['ceiling']:.3g}" if r["ceiling"] is not None else "-"
            print(f"| {r['device']} | {r['framework']} | {r['family']} | {r['variant']} | "
                  f"{r['constant']} | {r['value']:.4g} | {ceiling} | {r['class']} |")


if __name__ == "__main__":
    main()
