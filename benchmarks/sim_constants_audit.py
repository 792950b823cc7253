"""Which shipped kernel constants sit at a physical limit, or ran away from any physical value.

    python benchmarks/sim_constants_audit.py [--system h100-80gb-x8 ...] [--all]

Every constant of the shipped calibrations (`simulator/constants/devices/*.yaml`) is read with
the definition its entry's kernel form gives it (`form.params(setting, structure)`: its kind,
and the device's ceilings where the form's fit carries them) and classified:

* **above ceiling**: a bounded constant past its device's ceiling (generation attention and
  elementwise forms: `attention.generation_ceilings`, `elementwise.ceilings`; a calibration
  written before the ceiling existed; refit it);
* **at ceiling**: at its ceiling (the data never made the term bind; a fine statement);
* **fraction at 1**: an efficiency at 100 % of the datasheet peak: either its term never binds
  in the data (as "at ceiling"), or the model misses something the constant absorbs (an MMA
  efficiency of 1 in compute-bound prefill attention); which one needs the data, not this list;
* **runaway**: an unbounded constant more than RUNAWAY times above its initial value (a term
  switched off by running it to a huge value reads as a physical claim).

Not listed: constants far below their initial value (a gain of 1e-15: "no gain"; a term that
does not matter is physical at zero) and `overlap_exponent` however large (p -> infinity is the
plain maximum of compute and memory time, a physical limit); an entry stores only the constants
its form reads. With --all, every classified constant is printed; otherwise a count per class
and the list of the non-fine ones. Pure reading, no tables needed.
"""

from __future__ import annotations

import argparse
from collections import Counter

from krakenlm.hardware import load_system
from krakenlm.simulator.constants import gpu_kernels as store
from krakenlm.simulator.kernels.base import Setting
from krakenlm.simulator.kernels.params import Param

RUNAWAY = 1e4  # times the initial value
FRACTION_AT_ONE = 0.999
NOT_AUDITED = {"overlap_exponent"}  # large is the plain maximum: physical


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
    rows = []
    for system in systems:
        sysm = load_system(system)
        cal = store.for_device(sysm.device)
        if cal is None:
            continue
        for framework, body in cal.frameworks.items():
            for family, variants in body.get("families", {}).items():
                for variant in variants:
                    entry = cal.entry(framework, family, variant)
                    setting = Setting(sysm, framework, variant)
                    defs = {p.name: p for p in entry.kernel.params(setting, entry.structure)}
                    for name, value in sorted(entry.params.items()):
                        p = defs.get(name)
                        if p is None or name in NOT_AUDITED:
                            continue
                        label = classify(float(value), p, p.upper)
                        if label:
                            rows.append({"device": cal.device_key, "framework": framework,
                                         "family": family, "variant": variant, "constant": name,
                                         "value": float(value), "ceiling": p.upper,
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
