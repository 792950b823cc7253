"""Every number the simulator gives, written once and compared later: the check that a refactor
of the simulator changed no prediction.

    python benchmarks/sim_invariants.py write runs/invariants-before.json   # on the old tree
    python benchmarks/sim_invariants.py write runs/invariants-after.json    # on the new tree
    python benchmarks/sim_invariants.py compare runs/invariants-before.json runs/invariants-after.json

`write` records:
- a grid of `simulate` queries: every hardware preset x software profile x architecture
  (gpt, parallel, kraken) x TP x batch x prompt/generation lengths x dtype in mode "simulate",
  and a smaller grid in modes "tile" and "roofline": TTFT, TPOT, end-to-end, memory, the
  per-category times of both phases and which kernel model timed each family;
- the JSON of `sim validate --level all` (with the LLMCompass set of `$KRAKENLM_MEASURED_DIR`,
  default ../shared/data/measured, when that directory exists), `benchmarks/sim_fidelity.py`, `study ttft --system all
  --sensitivity`, `sim sweep`, `sim cost` of every preset and `study design-space` (its CSVs).

`compare` lists every number that differs by more than a relative 1e-9 (floating-point
summation order moves the last digits, nothing else should), and every key present on one side
only (wall-clock fields such as `seconds` are skipped); exit status 1 when anything differs.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KRAKENLM = str(Path(sys.executable).with_name("krakenlm"))
REL_TOL = 1e-9
# wall-clock fields: how long a run took, not what it predicted
WALL_CLOCK = {"seconds", "simulated_in_s", "elapsed_s", "wall_s"}


def grid() -> dict[str, dict]:
    """The `simulate` grid, keyed by a readable query string."""
    from krakenlm.hardware.loader import load_system
    from krakenlm.hardware.loader import preset_system_names as list_systems
    from krakenlm.models import get_preset
    from krakenlm.simulator import Simulator, arch_variant
    from krakenlm.simulator.constants.software import software_names as list_software

    out: dict[str, dict] = {}
    models = ("llama2-7b", "gpt3-13b", "llama3-70b", "gpt3-175b")
    for system_name in list_systems():
        system = load_system(system_name)
        for software in list_software():
            for mode, dtypes in (("simulate", ("fp16", "fp8")), ("tile", ("fp16",)),
                                 ("roofline", ("fp16",))):
                if mode != "simulate" and software != "trtllm":
                    continue
                for dtype in dtypes:
                    try:
                        sim = Simulator(system, software, mode, dtype=dtype)
                    except Exception as exc:  # noqa: BLE001  (recorded: it must stay the same)
                        out[f"{system_name}|{software}|{mode}|{dtype}"] = {"error": str(exc)}
                        continue
                    for model in models:
                        base = get_preset(model)
                        for tp in (1, 2, 4, 8):
                            if tp > system.device_count:
                                continue
                            for arch in ("gpt", "parallel", "kraken"):
                                if arch == "kraken" and tp == 1:
                                    continue
                                config = arch_variant(base, arch, tp)
                                for batch, prompt, gen in ((1, 128, 4), (1, 2048, 129),
                                                           (16, 512, 65), (64, 1024, 33)):
                                    if mode != "simulate" and batch == 16:
                                        continue
                                    key = (f"{system_name}|{software}|{mode}|{dtype}|{model}|"
                                           f"{arch}|tp{tp}|b{batch}|p{prompt}|g{gen}")
                                    try:
                                        r = sim.run(config, tp, batch, prompt, gen,
                                                    check_memory=False, check_context=False,
                                                    model_name=model)
                                    except Exception as exc:  # noqa: BLE001
                                        out[key] = {"error": f"{type(exc).__name__}: {exc}"}
                                        continue
                                    out[key] = {
                                        "ttft_s": r.ttft_s, "tpot_s": r.tpot_s, "e2e_s": r.e2e_s,
                                        "memory": r.memory.to_dict(),
                                        "categories": {"prefill": r.prefill.categories,
                                                       "decode": r.decode.categories},
                                        "kernel_sources": r.kernel_sources,
                                        "decode_method": r.decode_method}
    return out


def _cli_json(argv: list[str], env: dict) -> object:
    done = subprocess.run([KRAKENLM, *argv], capture_output=True, text=True, env=env,
                          timeout=3600)
    if done.returncode != 0:
        return {"exit": done.returncode, "stderr": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout)


def _csv_rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def _number(text: str):
    try:
        return float(text)
    except (TypeError, ValueError):
        return text


def write(path: Path) -> None:
    env = dict(os.environ, COLUMNS="200")
    record: dict[str, object] = {}
    print("simulate grid ...", file=sys.stderr)
    record["grid"] = grid()
    print(f"  {len(record['grid'])} queries", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        print("sim validate --level all ...", file=sys.stderr)
        # the LLMCompass operator set is scored only when its directory is given
        measured = os.environ.get("KRAKENLM_MEASURED_DIR", str(ROOT.parent / "shared" / "data"
                                                               / "measured"))
        llmcompass = ["--measured", measured] if Path(measured).is_dir() else []
        if not llmcompass:
            print(f"  (no {measured}: the LLMCompass set is not recorded)", file=sys.stderr)
        record["validate"] = _cli_json(["sim", "validate", "--level", "all", *llmcompass,
                                        "--out", str(tmp / "validation"), "--json"], env)
        print("sim_fidelity ...", file=sys.stderr)
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sim_fidelity.py"), "--json",
                        str(tmp / "fidelity.json")], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        record["fidelity"] = json.loads((tmp / "fidelity.json").read_text())
        print("study ttft ...", file=sys.stderr)
        subprocess.run([KRAKENLM, "study", "ttft", "--system", "all", "--sensitivity", "--out",
                        str(tmp / "ttft")], check=True, env=env, stdout=subprocess.DEVNULL)
        record["ttft"] = {p.name: json.loads(p.read_text())
                          for p in sorted((tmp / "ttft").glob("*.json"))}
        print("sim sweep, sim cost ...", file=sys.stderr)
        record["sweep"] = _cli_json(["sim", "sweep", "--json"], env)
        from krakenlm.hardware.loader import preset_system_names as list_systems
        record["cost"] = {s: _cli_json(["sim", "cost", "--system", s, "--json"], env)
                          for s in list_systems()}
        print("study design-space ...", file=sys.stderr)
        subprocess.run([KRAKENLM, "study", "design-space", "--trials", "60", "--seed", "0",
                        "--out", str(tmp / "ds")], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        record["design_space"] = {p.name: _csv_rows(p) for p in sorted((tmp / "ds").glob("*.csv"))}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=1, sort_keys=True, default=str))
    print(f"wrote {path}", file=sys.stderr)


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isnan(a) and math.isnan(b):
            return True
        return a == b or abs(a - b) <= REL_TOL * max(abs(a), abs(b))
    return a == b


def differences(a, b, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            if key in WALL_CLOCK:
                continue
            if key not in a:
                out.append(f"{where}/{key}: only after")
            elif key not in b:
                out.append(f"{where}/{key}: only before")
            else:
                out.extend(differences(a[key], b[key], f"{where}/{key}"))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items before, {len(b)} after"]
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out.extend(differences(x, y, f"{where}[{i}]"))
        return out
    return [] if _same(a, b) else [f"{where}: {a!r} -> {b!r}"]


def compare(before: Path, after: Path, limit: int) -> int:
    a, b = json.loads(Path(before).read_text()), json.loads(Path(after).read_text())
    diffs = differences(a, b)
    for line in diffs[:limit]:
        print(line)
    if len(diffs) > limit:
        print(f"... and {len(diffs) - limit} more")
    sections = sorted({d.split("/")[1] for d in diffs if d.count("/") >= 1})
    print(f"{len(diffs)} differences" + (f" (in {', '.join(sections)})" if diffs else ""),
          file=sys.stderr)
    return 1 if diffs else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("path", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--limit", type=int, default=60)
    args = parser.parse_args()
    if args.command == "write":
        write(args.path)
    else:
        sys.exit(compare(args.before, args.after, args.limit))


if __name__ == "__main__":
    main()
