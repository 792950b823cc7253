"""The knobs of a design and the design space they span, validated against physical ranges.

A *design* is a plain dict {knob name: value}; knobs it does not name keep the base system's
value. A *design space* gives each knob either a list of values (grid) or a range
`{low: .., high: .., log: bool}` (search only; a grid needs lists). Both come from YAML or
from CLI strings such as `cores=32,64,108` and `memory_units=4:16`.

Physical ranges are deliberately wide (a knob outside them is almost surely a unit mistake or
an impossible part, e.g. a 1 GB local SRAM), not a statement of what is economic.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .. import yamlio
from ..errors import KrakenError
from ..fileio import read_user_text


class DesignSpaceError(KrakenError, ValueError):
    """A design space or design is malformed or outside physical ranges; the message says how."""


@dataclass(frozen=True)
class Knob:
    """One design knob: its name (a key of a design dict), kind ("int", "float" or "choice"), the
    inclusive physical range `low`..`high` a number must lie in (wide on purpose: outside it is a
    unit mistake or an impossible part, not an uneconomic one), the allowed `choices` of a choice
    knob, and `doc`, the one-line meaning `krakenlm sim knobs` shows (units in the knob's name)."""
    name: str
    kind: str                     # "int", "float" or "choice"
    low: float | None = None      # physical range (inclusive) for numbers
    high: float | None = None
    choices: tuple[str, ...] = ()
    doc: str = ""


@dataclass(frozen=True)
class MemoryTechnology:
    """An off-chip memory technology, per unit (an HBM stack or a 64-bit DRAM channel)."""
    name: str
    bandwidth_bytes_per_s: float       # per unit
    gib: float                         # capacity per unit when a design does not set it
    gib_range: tuple[float, float]     # the capacities per unit its parts come in
    latency_s: float                   # loaded access latency
    phy_edge_mm: float                 # die edge ("beachfront") one unit's PHY needs
    source: str


# The one memory-technology table of the design tools (the knob `memory`, and the
# TECHNOLOGY-UNITS configurations of `sim sweep`). Loaded DRAM latencies are ~0.5-0.9 us. PHY
# edges are estimates from die shots: an HBM2e/HBM3 PHY is ~7 mm wide (GA100 fits 6 sites on
# two ~29 mm edges), a DDR5/LPDDR5 64-bit channel's 2-2.5 mm.
MEMORY_TECHNOLOGIES: dict[str, MemoryTechnology] = {m.name: m for m in (
    MemoryTechnology("HBM2e", 410e9, 16, (4, 16), 4.7e-7, 7.0,
                     "3.2 Gb/s x 1024 bits = 410 GB/s; 16 GiB stacks (the A100 80GB's)"),
    MemoryTechnology("HBM3", 819e9, 16, (8, 24), 4.8e-7, 7.0,
                     "6.4 Gb/s x 1024 bits = 819 GB/s; 16-24 GiB stacks (JESD238)"),
    MemoryTechnology("DDR5", 38.4e9, 64, (16, 256), 9.0e-7, 2.5,
                     "DDR5-4800: 38.4 GB/s per 64-bit channel; 16-256 GiB per channel (one or "
                     "two RDIMMs of up to 128 GiB; JESD79-5)"),
    MemoryTechnology("LPDDR5", 51.2e9, 32, (8, 64), 9.0e-7, 2.0,
                     "LPDDR5-6400: 51.2 GB/s per 64-bit (4 x 16-bit) channel; 8-64 GiB "
                     "(JESD209-5)"),
)}

ARCHES = ("gpt", "parallel", "kraken")
TOPOLOGY_CHOICES = ("ring", "fully_connected", "switch")

KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob("cores", "int", 1, 1024, doc="cores (SMs) per device"),
    Knob("lanes", "int", 1, 16, doc="lanes per core, each a systolic array + a vector unit"),
    Knob("systolic_array", "int", 2, 256, doc="systolic array side (height = width)"),
    Knob("vector_width", "int", 1, 256, doc="fp32 FMA units per lane"),
    Knob("local_sram_kib", "float", 8, 8192, doc="local SRAM per core, KiB"),
    Knob("global_buffer_mib", "float", 0.5, 2048, doc="global buffer (L2), MiB"),
    Knob("frequency_ghz", "float", 0.3, 3.5, doc="core clock"),
    Knob("memory", "choice", choices=tuple(MEMORY_TECHNOLOGIES), doc="off-chip memory technology"),
    Knob("memory_units", "int", 1, 64, doc="HBM stacks or 64-bit DRAM channels per device"),
    Knob("memory_gib_per_unit", "float", 4, 256,
         doc="capacity per stack/channel (within the technology's range)"),
    Knob("memory_bandwidth_gb_per_s", "float", 10, 20000,
         doc="overrides the technology's bandwidth (a bandwidth sweep at constant capacity)"),
    Knob("devices", "int", 1, 64, doc="devices in the system"),
    Knob("link_gb_per_s", "float", 1, 2000, doc="per inter-device link, per direction, GB/s"),
    Knob("links_per_device", "int", 1, 64, doc="links leaving each device"),
    Knob("link_latency_us", "float", 0.05, 100, doc="per link (hop), microseconds"),
    Knob("topology", "choice", choices=TOPOLOGY_CHOICES, doc="interconnect topology"),
    Knob("arch", "choice", choices=ARCHES, doc="model architecture (Kraken degree = tp)"),
    Knob("tp", "int", 1, 64, doc="tensor-parallel degree (Kraken: its degree); default: best"),
)}


def check_value(name: str, value: Any) -> Any:
    """The value, normalised (int/float/str), or a DesignSpaceError naming knob and range."""
    knob = KNOBS.get(name)
    if knob is None:
        raise DesignSpaceError(f"unknown knob {name!r}; known knobs: {', '.join(KNOBS)}")
    if knob.kind == "choice":
        if value not in knob.choices:
            raise DesignSpaceError(f"knob {name}: {value!r} is not one of {knob.choices}")
        return value
    try:
        number = float(value)
    except OverflowError:  # an integer beyond the float range: outside every physical range
        number = math.inf
    except (TypeError, ValueError):
        raise DesignSpaceError(f"knob {name}: expected a number, got {value!r}") from None
    if not math.isfinite(number) or not knob.low <= number <= knob.high:
        raise DesignSpaceError(f"knob {name}: {value!r} is outside the physical range "
                               f"{knob.low:g}..{knob.high:g} ({knob.doc}); fix the value or "
                               "its unit")
    if knob.kind == "int":
        if number != int(number):
            raise DesignSpaceError(f"knob {name}: must be a whole number, got {value!r}")
        return int(number)
    return number


def check_design(design: dict[str, Any]) -> dict[str, Any]:
    return {name: check_value(name, value) for name, value in design.items()}


def design_key(design: dict[str, Any]) -> str:
    """A stable hash of a design (its knobs, sorted): the key that resume matches on."""
    text = json.dumps(check_design(design), sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Range:
    """A continuous search range for a numeric knob, `low`..`high` inclusive, in the knob's own
    units; `log` samples it uniformly in log space. From YAML `{low, high, log}` or the CLI
    `low:high` (`low:high:log`). Search only: a grid needs a list of values."""
    low: float
    high: float
    log: bool = False


@dataclass
class DesignSpace:
    """knob -> list of values (grid) or Range (search)."""
    knobs: dict[str, list[Any] | Range]

    def __post_init__(self) -> None:
        if not self.knobs:
            raise DesignSpaceError("the design space names no knobs; give at least one, e.g. "
                                   "cores=64,108")
        for name, spec in self.knobs.items():
            if isinstance(spec, Range):
                if KNOBS.get(name) is None:
                    check_value(name, spec.low)  # unknown knob -> its error
                if KNOBS[name].kind == "choice":
                    raise DesignSpaceError(f"knob {name}: a choice knob takes a list, not a range")
                check_value(name, spec.low), check_value(name, spec.high)
                if spec.low > spec.high:
                    raise DesignSpaceError(f"knob {name}: range {spec.low:g}:{spec.high:g} is empty"
                                           "; write low:high")
            else:
                if not spec:
                    raise DesignSpaceError(f"knob {name}: empty list of values")
                self.knobs[name] = [check_value(name, v) for v in spec]

    @property
    def is_grid(self) -> bool:
        return all(isinstance(v, list) for v in self.knobs.values())

    @property
    def size(self) -> int:
        if not self.is_grid:
            raise DesignSpaceError("a space with ranges has no finite size; use lists to grid it")
        return math.prod(len(v) for v in self.knobs.values())

    def grid(self):
        """Every design of a grid space, lazily (10^5+ designs never sit in a list)."""
        if not self.is_grid:
            ranged = [k for k, v in self.knobs.items() if isinstance(v, Range)]
            raise DesignSpaceError(f"knobs {ranged} are ranges; a grid needs lists of values "
                                   "(use `krakenlm sim search` for ranges)")
        names = list(self.knobs)
        for values in itertools.product(*(self.knobs[n] for n in names)):
            yield dict(zip(names, values))


def _parse_spec(name: str, spec: Any) -> list[Any] | Range:
    if isinstance(spec, dict):
        unknown = set(spec) - {"low", "high", "log"}
        if unknown or not {"low", "high"} <= set(spec):
            raise DesignSpaceError(f"knob {name}: a range is {{low: .., high: .., log: bool}}, "
                                   f"got {spec!r}")
        try:
            return Range(float(spec["low"]), float(spec["high"]), bool(spec.get("log", False)))
        except (TypeError, ValueError, OverflowError):
            raise DesignSpaceError(f"knob {name}: range bounds must be numbers, got "
                                   f"{spec!r:.80}") from None
    if isinstance(spec, str):
        if ":" in spec:
            parts = spec.split(":")
            if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "log"):
                raise DesignSpaceError(f"knob {name}: write a range as low:high or low:high:log, "
                                       f"got {spec!r}")
            try:
                return Range(float(parts[0]), float(parts[1]), len(parts) == 3)
            except ValueError:
                raise DesignSpaceError(f"knob {name}: range bounds must be numbers, got "
                                       f"{spec!r}") from None
        return [v.strip() for v in spec.split(",") if v.strip()]
    if isinstance(spec, list):
        return spec
    return [spec]


def space_from_dict(data: Any) -> DesignSpace:
    if not isinstance(data, dict):
        raise DesignSpaceError("a design space is a mapping knob -> values or range, got "
                               f"{type(data).__name__}")
    return DesignSpace({str(k): _parse_spec(str(k), v) for k, v in data.items()})


def space_from_strings(items: list[str]) -> DesignSpace:
    """CLI form: ["cores=32,64,108", "memory=HBM2e,DDR5", "memory_units=4:16"]."""
    data: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise DesignSpaceError(f"--knob {item!r}: write name=values (e.g. cores=64,108 or "
                                   "memory_units=4:16)")
        name, spec = item.split("=", 1)
        if name.strip() in data:  # the last one would silently replace the first
            raise DesignSpaceError(f"--knob {name.strip()} is given twice; give all its values "
                                   f"in one --knob (e.g. {name.strip()}=64,108)")
        data[name.strip()] = spec.strip()
    return space_from_dict(data)


def load_space(path: str | Path) -> DesignSpace:
    path = Path(path)
    if not path.is_file():
        raise DesignSpaceError(f"design space file {path} does not exist")
    try:
        data = yamlio.safe_load(read_user_text(path, "design space file", DesignSpaceError))
    except yaml.YAMLError as exc:
        raise DesignSpaceError(f"{path}: not valid YAML ({exc.__class__.__name__}); fix the "
                               "syntax") from None
    knobs = data.get("knobs", data) if isinstance(data, dict) else data
    return space_from_dict(knobs)


def space_from_options(space_file: str | Path | None, knobs: list[str] | None) -> DesignSpace:
    """The space of `--space FILE` or of the `--knob name=values` strings (one of the two)."""
    if space_file is None and not knobs:
        raise DesignSpaceError("give a design space: --space FILE.yaml or --knob name=values "
                               "(e.g. --knob cores=64,108 --knob memory=HBM2e,DDR5)")
    if space_file is not None and knobs:
        raise DesignSpaceError("give --space or --knob, not both")
    return load_space(space_file) if space_file is not None else space_from_strings(knobs)
