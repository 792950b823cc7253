"""How the source tree is built: rooms, the imports between them against the layer contract,
function sizes and complexity, prose, the structural switches stored as calibration constants
and the places that decide a device's identity (by a rule of their own, or by reading its
declared identity: the lookup). Reads src/krakenlm as text (AST and tokens; krakenlm is never
imported); rooms and the contract: docs/architecture.md.

    python benchmarks/architecture.py [--json PATH]
"""

from __future__ import annotations

import argparse
import ast
import functools
import io
import json
import re
import sys
import tokenize
import tomllib
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import yaml

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "krakenlm"
TOP_FUNCTIONS, COMPLEX, LONG = 15, 20, 80  # the largest, then any other over either is listed
KERNEL_MODELS = "simulator/kernels/gpu"  # the GPU kernel models' room
LINE_KINDS = ("code", "docstring", "comment", "blank")

# Calibration keys that say which kernel form a parameter set means, not a fitted constant
SWITCHES = {
    "library": "GEMM kernel library 0 cuBLAS / 1 vLLM / 2 SGLang CUTLASS: int() in gemm.predict",
    "tile_table": "which SGLang CUTLASS tile table, 0-3: `tile_table == 3` in gemm_cutlass.tiles",
    "weight_copies": "benchmark weight copies kept in L2, 0/5/6: int() in gemm.predict",
    "pack_gqa": "context attention GQA packing 0/1/2: prefill_tiles.query_group branches on it",
    "block_m": "context attention query-tile rows 64/128/192: a tile menu entry, not a fit",
    "kv_tile": "context attention key-tile menu 0/8192/16384: prefill_tiles.block_n",
    "warm_l2": "context benchmark replays on L2-resident tensors: `> 0.5`",
    "decode_kernels": "TensorRT-LLM decode dispatch 0 discrete / 1 XQA-HMMA / 2 XQA-QGMMA",
    "q_tile_rows": "TensorRT-LLM discrete form's query-tile rows, 8 or 16",
    "qgmma_residency": "QGMMA large-tile residency rule on/off: `> 0.5`",
    "split_ctas_per_sm": "split-KV heuristic's CTA slots per SM, 1 or 2 (SPLITKV_VARIANTS)",
    "split_mha": "whether MHA (group 1) decode is split at all, 0/1 (SPLITKV_VARIANTS)",
    "fa2_swap": "FlashAttention-2 varlen decode with query heads swapped into rows: `> 0.5`",
    "fa3": "FlashAttention-3 decode form: the flag `p.get('fa3')` selects it",
    "fa3_graph_splits": "vLLM's CUDA-graph split cap, 0 (none) or 32: a launch rule",
    "fa3_rule": "FA3 split heuristic, 1 vllm-flash-attn / 2 upstream: int(round())",
    "fa3_mma": "FA3 key loop bound by its MMAs: `== 1.0`",
    "row_kernel": "elementwise per-row kernel term on/off (ROW_STRUCTURES)",
    "kernel_route": "all-reduce kernel per message by the framework's rule: `if p.get(...)`",
}


@functools.lru_cache(maxsize=None)
def parse(path: Path) -> tuple[str, ast.Module]:
    return (text := path.read_text()), ast.parse(text, str(path))


@dataclass(frozen=True)
class Contract:
    entry_modules: tuple[str, ...]
    may_import: dict[str, tuple[str, ...]]

    def verdict(self, src: str, dst: str) -> str:
        """"down" along the contract's arrows, "upward" against them, else "sideways"."""
        if dst in reachable(self.may_import, src):
            return "down"
        return "upward" if src in reachable(self.may_import, dst) else "sideways"


def read_contract(pyproject: Path = ROOT / "pyproject.toml") -> Contract:
    table = tomllib.loads(pyproject.read_text())["tool"]["krakenlm"]["layers"]
    return Contract(tuple(table["entry-modules"]),
                    {k: tuple(v) for k, v in table["may-import"].items()})


class ImportSite(NamedTuple):
    file: str  # relative to the repository
    line: int
    kind: str  # "module" (runs when the module is imported) or "function" (inside a def)
    source: str  # importing module
    target: str  # imported module
    src_room: str
    dst_room: str


def module_files(src: Path) -> dict[str, Path]:
    """Dotted module name -> file for every .py under `src` (__init__.py is the package)."""
    out = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def room_of(path: Path, src: Path, contract: Contract) -> str:
    """The directory of `path` (a data directory holding only an __init__.py belongs to its
    parent's room); top-level modules are `entry` (the contract's entry points) or `root`."""
    folder = path.parent
    while folder != src and all(p.name == "__init__.py" for p in folder.glob("*.py")):
        folder = folder.parent
    return folder.relative_to(src).as_posix() if folder != src else \
        "entry" if path.name in contract.entry_modules else "root"


def imported_modules(node: ast.Import | ast.ImportFrom, package: str,
                     modules: dict[str, Path]) -> list[str]:
    """The package's modules an import statement names, relative imports resolved."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:  # `from ..x import y` in package a.b.c: a.b.x
            parts = package.split(".")
            base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                 for a in node.names]
    out = []
    for name in names:
        while name and name not in modules:  # an attribute of a module: the module
            name = name.rpartition(".")[0]
        out.append(name)
    return [name for name in dict.fromkeys(out) if name]


def import_sites(src: Path, contract: Contract) -> list[ImportSite]:
    """Every import of one module of `src` by another, module-level and inside functions."""
    modules = module_files(src)
    rooms, sites = {name: room_of(path, src, contract) for name, path in modules.items()}, []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        todo = [(n, False) for n in ast.iter_child_nodes(parse(path)[1])]
        while todo:
            node, in_def = todo.pop()
            in_def = in_def or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            todo.extend((child, in_def) for child in ast.iter_child_nodes(node)  # statements
                        if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)))
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                sites += [ImportSite(path.relative_to(src.parents[1]).as_posix(), node.lineno,
                                     "function" if in_def else "module", name, target,
                                     rooms[name], rooms[target])
                          for target in imported_modules(node, package, modules)]
    return sorted(sites)


def reachable(graph: dict, start: str) -> set[str]:
    """The nodes reachable from `start` by one or more of `graph`'s arrows."""
    seen, todo = set(), list(graph.get(start, ()))
    while todo:
        if (node := todo.pop()) not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen


def cycles(arrows: list[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one node, each sorted."""
    graph = {a: {b for x, b in arrows if x == a and b != a} for a, _ in arrows}
    reach = {node: reachable(graph, node) for node in graph}
    return sorted({tuple(sorted({node} | {o for o in reach[node] if node in reach.get(o, ())}))
                   for node in graph if node in reach[node]})


def violations(sites: list[ImportSite], contract: Contract) -> list[tuple[ImportSite, str]]:
    """The imports between rooms that the contract does not allow, with "upward"/"sideways"."""
    return [(s, v) for s in sites if s.src_room != s.dst_room
            and (v := contract.verdict(s.src_room, s.dst_room)) != "down"]


def line_kinds(path: Path) -> Counter:
    """Physical lines by kind: code, docstring, comment (only a comment on it), blank."""
    text, tree = parse(path)
    doc: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and ast.get_docstring(node, clean=False) is not None:
            doc.update(range(node.body[0].lineno, node.body[0].end_lineno + 1))
    code, comment = set(), set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            comment.add(tok.start[0])
        elif tok.string.strip():  # not a newline, indent, dedent or the end
            code.update(range(tok.start[0], tok.end[0] + 1))
    kinds = Counter({"code": len(code - doc), "docstring": len(doc),
                     "comment": len(comment - code - doc)})
    kinds["blank"] = len(text.splitlines()) - sum(kinds.values())
    return kinds


def prose_pct(kinds: Counter) -> float:
    """Docstring and comment lines as a share of the lines that are not blank."""
    prose = kinds["docstring"] + kinds["comment"]
    return round(100.0 * prose / max(prose + kinds["code"], 1), 1)


def mccabe(func: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Cyclomatic complexity of a function's body as radon counts it (nested defs and classes
    apart): 1 + ifs, loops (+ their else), except handlers (+ try's else), boolean operands
    beyond the first, comprehension loops and their ifs, asserts, match cases."""
    count, todo = 1, list(func.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, (ast.If, ast.IfExp, ast.Assert)):
            count += 1
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            count += 1 + bool(node.orelse)
        elif isinstance(node, ast.Try):
            count += len(node.handlers) + bool(node.orelse)
        elif isinstance(node, (ast.BoolOp, ast.comprehension)):
            count += len(node.values) - 1 if isinstance(node, ast.BoolOp) else 1 + len(node.ifs)
        elif isinstance(node, ast.Match):
            count += len(node.cases) - any(getattr(c.pattern, "pattern", 0) is None
                                           for c in node.cases)
        todo.extend(ast.iter_child_nodes(node))
    return count


def radon_complexity(text: str) -> dict[int, int] | None:
    """radon's complexity of every def, by line, when radon is installed."""
    try:
        from radon.complexity import cc_visit
    except ImportError:
        return None
    blocks = list(cc_visit(text))
    for block in blocks:  # grows while walked: methods and closures are blocks too
        blocks += [*getattr(block, "methods", ()), *getattr(block, "closures", ())]
    return {block.lineno: block.complexity for block in blocks}


def functions(src: Path) -> list[dict]:
    """Every def, largest first: lines from def to end, complexity (radon's, else `mccabe`)."""
    out = []
    for path in module_files(src).values():
        by_radon = radon_complexity(parse(path)[0]) or {}
        out += [{"function": f.name, "at": f"{path.relative_to(src.parents[1])}:{f.lineno}",
                 "lines": f.end_lineno - f.lineno + 1,
                 "complexity": by_radon.get(f.lineno) or mccabe(f)}
                for f in ast.walk(parse(path)[1])
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return sorted(out, key=lambda f: (-f["lines"], -f["complexity"], f["at"]))


def calibration_constants(src: Path) -> dict:
    """The calibration YAMLs' stored params: how many, how many are SWITCHES, the typed
    structural choices stored apart (format 3 `structure:`), and the stored names that are
    neither a switch nor a `Param(...)` of a GPU kernel form or harness, or both (none)."""
    sim = src / "simulator"
    declared = {node.args[0].value for path in [*(src / KERNEL_MODELS).glob("*.py"),
                                                sim / "measurements" / "harness.py"]
                for node in ast.walk(parse(path)[1])
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Param"
                and node.args and isinstance(node.args[0], ast.Constant)}
    names, refits = Counter(), 0
    structures = 0
    for path in sorted((sim / "constants" / "devices").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        refits += len(data["meta"].get("refits", []))
        entries = [entry for info in data["frameworks"].values()
                   for variants in info["families"].values() for entry in variants.values()]
        names.update(name for entry in entries for name in entry["params"])
        structures += sum(len(entry.get("structure") or {}) + len(entry.get("harness") or {})
                          for entry in entries)
    switches = {k: names[k] for k in SWITCHES}
    return {"constants": sum(names.values()), "switches": sum(switches.values()),
            "fitted_or_pinned": sum(names.values()) - sum(switches.values()),
            "switches_by_name": switches, "logged_refits": refits,
            "typed_structure_fields": structures,
            "misclassified": sorted(n for n in names if (n in declared) == (n in SWITCHES))}


def device_rule(node: ast.AST) -> str | None:
    """The rule by which `node` tells a device's kind, if it does: without a declared field
    (thresholds on its rates or links, its name, a vendor guess), or by reading the declared
    `identity` off a device (the lookup; consumers call it and are not counted)."""
    if isinstance(node, ast.Attribute) and node.attr == "identity":
        return "declared identity field (lookup)"
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        names = {getattr(n, "id", None) or getattr(n, "attr", None)
                 for side in sides for n in ast.walk(side)}
        if any(n and n.endswith("_FLOP_PER_CLK") for n in names):
            return "FLOP per clock threshold"
        if "link_bandwidth_bytes_per_s" in names and any(isinstance(c, ast.Constant)
                                                         for c in sides):
            return "link bandwidth threshold"
        if any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(
                re.search(r"\bdev(ice)?\.name\b", ast.unparse(side)) for side in sides):
            return "device name (substring or map)"
    if (isinstance(node, ast.Call) and re.search(r"\bdev(ice)?\.name\.lower$",
                                                 ast.unparse(node.func))) or (
            isinstance(node, ast.Assign) and "DEVICE_KEYS" in ast.unparse(node.targets[0])):
        return "device name (substring or map)"
    if isinstance(node, ast.For) and "VENDOR" in ast.unparse(node.iter):
        return "vendor fallback"
    return None


def device_identity_sites(src: Path) -> list[dict]:
    """One row per (function or module constant, rule) anywhere in the package; a function
    that only combines such functions (`return a(dev) and not b(dev)`) is one too."""
    sites, deciders, trees = [], {}, {}
    for path in sorted(src.rglob("*.py")):
        trees[path] = tree = parse(path)[1]
        owner = {id(n): f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                 for n in ast.walk(f)}
        for node in ast.walk(tree):
            if rule := device_rule(node):
                where = owner.get(id(node)) or ast.unparse(getattr(node, "targets", [node])[0])
                if (where, rule) not in {(s["in"], s["rule"]) for s in sites}:
                    sites.append({"at": f"{path.relative_to(src.parents[1])}:{node.lineno}",
                                  "in": where, "rule": rule})
                    deciders[where] = rule
    for path, tree in trees.items():
        for f in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            ret = f.body[-1]
            calls = [getattr(c.func, "id", None) for c in ast.walk(ret) if isinstance(c, ast.Call)]
            if (isinstance(ret, ast.Return) and isinstance(ret.value, (ast.BoolOp, ast.UnaryOp))
                    and calls and all(c in deciders for c in calls)):
                sites.append({"at": f"{path.relative_to(src.parents[1])}:{f.lineno}",
                              "in": f.name, "rule": deciders[calls[0]] + " (combined)"})
    return sorted(sites, key=lambda s: (s["rule"], s["at"]))


def measure(src: Path = SRC, contract: Contract | None = None) -> dict:
    contract = contract or read_contract()
    sites = import_sites(src, contract)
    edges = Counter((s.src_room, s.dst_room, s.kind) for s in sites if s.src_room != s.dst_room)
    rooms: dict[str, Counter] = defaultdict(Counter)
    for path in module_files(src).values():
        rooms[room_of(path, src, contract)].update(line_kinds(path), files=1)
    return {
        "rooms": {r: {**{k: c[k] for k in ("files", *LINE_KINDS)}, "prose_pct": prose_pct(c)}
                  for r, c in sorted(rooms.items())},
        "edges": [{"from": a, "to": b, "module": edges[a, b, "module"],
                   "function": edges[a, b, "function"], "verdict": contract.verdict(a, b)}
                  for a, b in sorted({(a, b) for a, b, _ in edges})],
        "room_cycles": cycles([(s.src_room, s.dst_room) for s in sites]),
        # a package's __init__ registering its own submodules (and back) is left out
        "module_cycles": cycles([(s.source, s.target) for s in sites
                                 if not (s.source.startswith(s.target + ".")
                                         or s.target.startswith(s.source + "."))]),
        "violations": [dict(s._asdict(), verdict=v) for s, v in violations(sites, contract)],
        "complexity_by": "AST" if radon_complexity("") is None else "radon",
        "functions": [f for i, f in enumerate(functions(src)) if i < TOP_FUNCTIONS
                      or f["complexity"] > COMPLEX or f["lines"] > LONG],
        "calibration": calibration_constants(src),
        "device_identity": device_identity_sites(src),
    }


def table(head: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(str(c) for c in r) + " |" for r in rows), ""]


def markdown(m: dict) -> str:
    out = ["### Rooms and lines", ""] + table(
        ["room", "files", "lines", *LINE_KINDS, "prose % of non-blank"],
        [[r, k["files"], sum(k[c] for c in LINE_KINDS), *(k[c] for c in LINE_KINDS),
          k["prose_pct"]] for r, k in m["rooms"].items()])
    out += ["### Imports between rooms", ""] + table(
        ["from", "to", "module-level", "in functions", "contract"],
        [[e["from"], e["to"], e["module"], e["function"], e["verdict"]] for e in m["edges"]])
    kinds = Counter(v["verdict"] for v in m["violations"])
    mutual = [f"{e['from']} <-> {e['to']}" for e in m["edges"] if e["from"] < e["to"]
              and any((f["from"], f["to"]) == (e["to"], e["from"]) for f in m["edges"])]
    out += [f"Cycles between {what}: {len(m[key])} ("
            + "; ".join(" <-> ".join(c) for c in m[key]) + ")." for what, key in
            (("rooms", "room_cycles"), ("modules", "module_cycles"))]
    out += ["", f"Rooms importing each other: {len(mutual)} ({'; '.join(mutual)}).", "",
            f"Imports against the contract: {kinds['upward']} upward and {kinds['sideways']} "
            f"sideways, in {len({(v['src_room'], v['dst_room']) for v in m['violations']})} room "
            "pairs:", ""]
    out += [f"- {v['file']}:{v['line']} {v['src_room']} -> {v['dst_room']} {v['verdict']} "
            f"({v['kind']}-level): {v['target']}" for v in m["violations"]] + [""]
    out += [f"### The {TOP_FUNCTIONS} largest functions, then any other over complexity "
            f"{COMPLEX} or {LONG} lines", ""] + table(
        ["function", "at", "lines", f"complexity ({m['complexity_by']})"],
        [[f["function"], f["at"], f["lines"], f["complexity"]] for f in m["functions"]])
    g, c = m["rooms"][KERNEL_MODELS], m["calibration"]
    out += [f"### Prose in the kernel models ({KERNEL_MODELS})", "",
            f"{g['docstring']} docstring and {g['comment']} comment lines beside {g['code']} "
            f"code lines ({g['blank']} blank): {g['prose_pct']} % of the non-blank lines.", "",
            "### Structural switches stored as floats (calibration YAMLs)", "",
            f"{c['switches']} switches among {c['constants']} stored constants "
            f"({c['fitted_or_pinned']} fitted or pinned); {c['typed_structure_fields']} "
            "structural and harness choices stored typed apart (`structure:`, `harness:`); "
            f"{c['logged_refits']} refits logged in their meta. Stored names that are neither a switch nor a Param, or both: "
            f"{', '.join(c['misclassified']) or 'none'}.", ""] + table(
        ["switch", "stored", "why it is a switch"],
        [[k, n, SWITCHES[k]] for k, n in c["switches_by_name"].items()])
    rules = {s["rule"].replace(" (combined)", "") for s in m["device_identity"]}
    n = len(m["device_identity"])
    out += ["### Places that decide a device's identity", "", f"{n} place{'s' * (n != 1)} by "
            f"{len(rules)} rule{'s' * (len(rules) != 1)}:", ""] + table(
        ["at", "in", "rule"], [[s["at"], s["in"], s["rule"]] for s in m["device_identity"]])
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split(". ")[0] + ".")
    parser.add_argument("--json", metavar="PATH", help="also write the measurements as JSON")
    args = parser.parse_args(argv)
    sys.stdout.write(markdown(m := measure()))
    if args.json:
        Path(args.json).write_text(json.dumps(m, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
