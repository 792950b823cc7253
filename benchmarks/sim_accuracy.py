"""Simulator accuracy against the measured operators and the GPT-3 175B layer.

    python benchmarks/sim_accuracy.py [--measured ../shared/data/measured] [--out runs/sim-accuracy]

Equivalent to `krakenlm sim validate --measured DIR --csv OUT/validation.csv --plot
OUT/validation.png`; prints the JSON summary (MAPE per operator and device on the fit half, the
held-out half and all points; the layer's per-op and summed errors).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from krakenlm.simulator.constants.template import default_calibration
from krakenlm.simulator.validation.template import validate, write_csv, write_plot

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measured", default=str(ROOT.parent / "shared" / "data" / "measured"))
    parser.add_argument("--out", default=str(ROOT / "runs" / "sim-accuracy"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = validate(args.measured, default_calibration())
    write_csv(report, out / "validation.csv")
    write_plot(report, out / "validation.png")
    summary = report.to_json()
    summary["per_device"] = report.per_device
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
