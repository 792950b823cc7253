"""Read a directory of operator measurements (the format of shared/data/measured/).

File names say what they hold: `{matmul,softmax,layernorm,gelu}_{DEVICE}.csv`,
`allreduce_{DEVICE}x{N}.csv`, `transformer_{DEVICE}.csv` (one GPT-3 175B layer, prefill) and
`transformerAR_{DEVICE}.csv` (the same layer, decode). Separators are ", "; only the all-reduce
file has a header. Every point keeps its row index within its file. A point's half is
split.fit_half of its shape (`Point.key`); layer files are never fitted on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import KrakenError
from ...fileio import read_user_text
from .split import fit_half

OPERATOR_FILES = re.compile(r"^(matmul|softmax|layernorm|gelu)_([A-Za-z0-9-]+)\.csv$")
ALLREDUCE_FILE = re.compile(r"^allreduce_([A-Za-z0-9-]+)x(\d+)\.csv$")
LAYER_FILE = re.compile(r"^(transformer|transformerAR)_([A-Za-z0-9-]+)\.csv$")
LAYER_OPS = ("qkv", "qk", "av", "out_proj", "ffn_up", "ffn_down", "softmax", "layernorm_attn",
             "layernorm_ffn", "gelu", "allreduce_attn", "allreduce_ffn")
# Which system preset a device name of the set ran on (the set's README)
DEVICE_SYSTEMS = {"A100": "a100-80gb-x4", "MI210": "mi210-x4"}


class MeasurementError(KrakenError, ValueError):
    """A measurement file cannot be read; the message names the file and line."""


def device_systems(pairs: list[str] | None) -> dict[str, str] | None:
    """DEVICE_SYSTEMS with the `--device-system DEVICE=SYSTEM` pairs applied (None: no pairs)."""
    if not pairs:
        return None
    mapping = dict(DEVICE_SYSTEMS)
    for pair in pairs:
        device, sep, system = pair.partition("=")
        if not sep or not device or not system:
            raise KrakenError(f"--device-system {pair!r}: write DEVICE=SYSTEM, e.g. "
                              "A100=a100-80gb-x4")
        mapping[device] = system
    return mapping


@dataclass(frozen=True)
class Point:
    """One operator measurement of the LLMCompass-format set (module docstring): the device name as
    the file names it, the operator, its shape (matmul (M, N, K); softmax/layernorm (rows, cols);
    gelu (elements,); allreduce (bytes, devices)), the measured time in seconds (the files' rates
    and microseconds converted), and the file and row it came from."""
    device: str
    op: str
    shape: tuple  # matmul (M, N, K); row ops (rows, cols); gelu (elements,); allreduce (bytes, n)
    measured_s: float
    file: str
    row: int

    @property
    def key(self) -> str:
        """The shape as the split hashes it ("M,N,K" like a GEMM table's key)."""
        return ",".join(str(v) for v in self.shape)

    @property
    def fit_half(self) -> bool:
        return bool(fit_half([self.key])[0])


@dataclass
class MeasuredSet:
    """A directory of operator measurements read (module docstring): the operator points, the GPT-3
    175B layer files per (device, "prefill" | "decode") as seconds per LAYER_OPS entry, and the
    files that matched no known name."""
    points: list[Point] = field(default_factory=list)
    layers: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # (device, phase)
    skipped: list[str] = field(default_factory=list)


def _rows(path: Path, n_cols: int, header: bool = False) -> list[list[str]]:
    out = []
    lines = read_user_text(path, "measurement file", MeasurementError).splitlines()
    for i, line in enumerate(lines[1:] if header else lines, start=2 if header else 1):
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != n_cols:
            raise MeasurementError(f"{path.name} line {i}: expected {n_cols} columns, got "
                                   f"{len(cols)} ({line!r})")
        out.append(cols)
    return out


def _num(text: str, path: Path, strip: str = "") -> float:
    try:
        return float(text[: -len(strip)] if strip and text.endswith(strip) else text)
    except ValueError:
        raise MeasurementError(f"{path.name}: {text!r} is not a number") from None


def load_measured(directory: str | Path) -> MeasuredSet:
    root = Path(directory)
    if not root.is_dir():
        what = "is a file, not a directory" if root.exists() else "does not exist"
        raise MeasurementError(f"measurement directory {root} {what}; point --measured "
                               "at the LLMCompass measurement set (docs/simulator.md says how "
                               "to get it)")
    out = MeasuredSet()
    for path in sorted(root.glob("*.csv")):
        name = path.name
        if m := OPERATOR_FILES.match(name):
            op, device = m.groups()
            if op == "matmul":
                for i, (M, N, K, lat, _) in enumerate(_rows(path, 5)):
                    ms = _num(lat, path, "ms")
                    out.points.append(Point(device, op, (int(M), int(N), int(K)), ms * 1e-3,
                                            name, i))
            elif op == "gelu":
                for i, (n, rate) in enumerate(_rows(path, 2)):
                    out.points.append(Point(device, op, (int(n),),
                                            int(n) / (_num(rate, path) * 1e9), name, i))
            else:
                for i, (M, N, rate) in enumerate(_rows(path, 3)):
                    out.points.append(Point(device, op, (int(M), int(N)),
                                            int(M) * int(N) / (_num(rate, path) * 1e9), name, i))
        elif m := ALLREDUCE_FILE.match(name):
            device, n = m.group(1), int(m.group(2))
            for i, (size, lat) in enumerate(_rows(path, 2, header=True)):
                out.points.append(Point(device, "allreduce", (int(size), n),
                                        _num(lat, path) * 1e-6, name, i))
        elif m := LAYER_FILE.match(name):
            kind, device = m.groups()
            values = [_num(r[0], path) for r in _rows(path, 1)]
            if len(values) != len(LAYER_OPS):
                raise MeasurementError(f"{name}: expected {len(LAYER_OPS)} lines "
                                       f"({', '.join(LAYER_OPS)}), got {len(values)}")
            out.layers[(device, "prefill" if kind == "transformer" else "decode")] = values
        else:
            out.skipped.append(name)
    if not out.points and not out.layers:
        raise MeasurementError(f"no measurement files found in {root} (expected names like "
                               "matmul_A100.csv, allreduce_A100x4.csv, transformer_A100.csv)")
    return out
