"""Predicted KV block counts against the engines' startup logs (serving/data/kv_cache_logs.json).

    python benchmarks/serve_kv_blocks.py [--json docs/data/serve-kv-blocks.json]

Every log of the file is sized with the code `sim serve` runs (`serving.kv_logs.predict`:
the engine's defaults, the logged utilisation, block size, batched-token budget and KV cache
dtype, and the version's profile accounting, then `serving.kv_cache.size_kv_cache`;
TensorRT-LLM's fraction is of the free memory). Prints one line per log (predicted, logged,
error, and the terms of the sizing) and the median and largest absolute error against the
issue's goal (within 3 % wherever a log gives the count). Nothing is fitted on these logs.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from krakenlm.fileio import write_text_atomically
from krakenlm.serving.kv_logs import accounting, load_logs, predict, relative_error

GOAL = 0.03
GIB = 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    print(f"{'log':44s} {'engine':8s} {'predicted':>9s} {'logged':>9s} {'error':>7s}  "
          "device GiB  weights  activ.  reserve")
    for log in load_logs():
        sizing = predict(log)
        err = relative_error(sizing.blocks, log)
        rows.append({"id": log.id, "engine": log.engine, "engine_version": log.engine_version,
                     "model": log.model, "system": log.system, "tp": log.tp,
                     "profile_charges": accounting(log),
                     "predicted_blocks": sizing.blocks, "logged_blocks": log.logged_blocks,
                     "error": err, "sizing": sizing.to_dict(), "locator": log.locator})
        print(f"{log.id:44s} {log.engine:8s} {sizing.blocks:9d} {log.logged_blocks:9d} "
              f"{100 * err:+6.1f}%  {sizing.capacity_bytes / GIB:9.2f}  "
              f"{sizing.weights_bytes / GIB:7.2f}  {sizing.activation_bytes / GIB:6.2f}  "
              f"{sizing.reserve_bytes / GIB:7.2f}")
    errors = np.abs([r["error"] for r in rows])
    within = int((errors <= GOAL).sum())
    summary = {"logs": len(rows), "median_abs_error": float(np.median(errors)),
               "max_abs_error": float(errors.max()), "within_goal": within, "goal": GOAL}
    print(f"median |error| {100 * summary['median_abs_error']:.1f} %, largest "
          f"{100 * summary['max_abs_error']:.1f} %; {within} of {len(rows)} logs within "
          f"the {100 * GOAL:.0f} % goal")
    if args.json:
        write_text_atomically(args.json, json.dumps({"summary": summary, "logs": rows},
                                                    indent=2) + "\n")


if __name__ == "__main__":
    main()
