"""`krakenlm sim calibrate` and `sim fit-software` below the CLI: one function per source that
fits, writes the constants and returns what it wrote.

* aiconfigurator: NVIDIA's measured kernel tables, every kernel family of one GPU (gpu.py);
* vidur: the streaming kernels of real Llama-2-70B layers, merged into a GPU file (layers.py);
* llmcompass: the template constants from a directory of operator measurements (template.py);
* fit-software: a software profile's host constants from the public end-to-end set
  (software.py).

The package's shipped constants are what every user of the presets gets, so they are replaced
only on purpose (`install`), never by an `output` that happens to point at them, and never with
fits of private tables.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...console import Plain, table_of
from ...errors import KrakenError

SOURCES = ("aiconfigurator", "vidur", "llmcompass")


@dataclass
class CalibrationReport:
    """The file written, what it holds, and one line per fit that was printed on stdout."""
    path: Path
    summary: str = ""
    fits: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "summary": self.summary, "fits": self.fits}

    def to_table(self) -> list[Any]:
        return [Plain(line) for line in self.fits] + [Plain(f"wrote {self.path}{self.summary}")]


def calibration_target(output: str | None, install: bool, default: Path, shipped: Path,
                       tables: str | None = None, console=None) -> Path:
    """Where a calibration is written: `output`, the package's `shipped` file with `install`,
    else `default`."""
    if install and output:
        raise KrakenError("give either --output or --install, not both")
    if install:
        if tables:
            raise KrakenError("--install replaces the shipped constants, which come from the "
                              "published tables; write fits of --tables with --output FILE and "
                              "use them with --gpu-calibration FILE")
        if console is not None:
            console.print(f"replacing the shipped constants in {shipped} (--install; "
                          "reinstall krakenlm to restore them)")
        return shipped
    path = Path(output) if output else default
    if path.resolve() == shipped.resolve():
        raise KrakenError(f"--output {output} is the package's shipped calibration; pass "
                          "--install to replace it on purpose, or write elsewhere")
    return path


def calibrate(source: str, *, system: str | None = None, frameworks: list[str] | None = None,
              tables: str | None = None, measured: str | None = None,
              output: str | None = None, install: bool = False,
              device_systems: list[str] | None = None, families: list[str] | None = None,
              variants: list[str] | None = None, console=None) -> CalibrationReport:
    """Fit the constants of `source` (aiconfigurator, vidur or llmcompass) and write them.
    `console` (a rich Console on stderr) shows the progress of a long fit."""
    if families and source != "aiconfigurator":
        raise KrakenError("--family belongs to --source aiconfigurator")
    if variants and not families:
        raise KrakenError("--variant narrows a --family refit; give the family too")
    if source == "aiconfigurator":
        return from_aiconfigurator(system, frameworks, tables, output, install, measured,
                                   families, variants, console)
    if source == "vidur":
        return from_vidur(system, output, install, console)
    if source == "llmcompass":
        return from_llmcompass(measured, output, install, device_systems, system, console)
    raise KrakenError(f"--source {source!r}: use aiconfigurator, vidur or llmcompass")


def from_vidur(system: str | None, output: str | None, install: bool,
               console=None) -> CalibrationReport:
    """Streaming kernels per kind (norm, activation, rotary, residual) from Vidur's layers,
    merged into the device's GPU calibration file."""
    from ..constants import gpu_kernels as store
    from ..measurements.kernel_tables import device_key
    from .layers import calibrate_layers

    if not system:
        raise KrakenError("--source vidur needs --system (a100-80gb-x8 or h100-80gb-x8: the GPUs "
                          "Vidur's layer profiles were measured on)")
    key = device_key(system)
    path = calibration_target(output, install, Path(f"calibration-{key}.yaml"),
                              store.shipped_dir() / f"{key}.yaml", console=console)
    if not path.is_file():
        raise KrakenError(f"{path} does not exist: calibrate the kernel tables first "
                          f"(krakenlm sim calibrate --source aiconfigurator --system {system})")
    cal = store.load_file(path)
    fits = calibrate_layers(system, cal)
    if not fits:
        raise KrakenError(f"the layer measurements have no streaming-kernel rows for {system}")
    store.save(cal, path)
    return CalibrationReport(path, fits=[
        f"  vllm    elementwise ({kind:10s}) n={r.n_fit:>4}  fit {r.mape_fit:5.1f} %  "
        f"held-out {r.mape_held_out:5.1f} %" for kind, r in fits])


def from_aiconfigurator(system: str | None, frameworks: list[str] | None, tables: str | None,
                        output: str | None, install: bool, measured: str | None = None,
                        families: list[str] | None = None, variants: list[str] | None = None,
                        console=None) -> CalibrationReport:
    """Every kernel family of `system`'s GPU from the installed tables (or `tables`); with
    `families` (and `variants`), only those entries of the existing file are refitted."""
    from ..constants import gpu_kernels as store
    from ..measurements.kernel_tables import check as check_tables
    from ..measurements.kernel_tables import device_key
    from .gpu import calibrate as fit_tables

    if measured:
        raise KrakenError("--measured belongs to --source llmcompass; aiconfigurator reads the "
                          "installed tables (or --tables DIR)")
    if not system:
        raise KrakenError("--source aiconfigurator needs --system, e.g. --system h100-80gb-x8")
    check_tables(system, frameworks or None, tables)
    key = device_key(system)
    path = calibration_target(output, install, Path(f"calibration-{key}.yaml"),
                              store.shipped_dir() / f"{key}.yaml", tables, console)
    base = store.load_file(path) if path.is_file() else None
    if families and base is None:
        raise KrakenError(f"--family refits part of an existing calibration, and {path} does not "
                          "exist: calibrate every family first (without --family)")
    if base is not None and base.device_key != key:
        raise KrakenError(f"{path} holds constants of {base.device_key}, not {key}; choose another "
                          "--output")
    command = "krakenlm sim calibrate --source aiconfigurator --system " + system + "".join(
        f" {flag} {value}" for flag, values in (("--framework", frameworks),
                                                ("--family", families), ("--variant", variants))
        for value in values or [])
    progress = _fit_progress(f"calibrating {system} ({key}) from aiconfigurator tables; every "
                             "fit on one half of the shapes, scored on the other", console)
    with console.status("fitting...") if console is not None else nullcontext():
        cal = fit_tables(system, frameworks or None, tables, command, base, progress,
                         families or None, variants or None)
    store.save(cal, path)
    fitted = sum(len(v) for info in cal.frameworks.values() for v in info["families"].values())
    return CalibrationReport(path, f" ({fitted} fitted families)")


def _fit_progress(banner: str, console):
    """A line per dataset on the console, after the banner (printed with the first fit, so
    that bad input gets its error line alone)."""
    if console is None:
        return None
    pending = [banner]

    def progress(job, result, problem):  # job: a measurements.kernel_tables.Dataset
        if pending:
            console.print(pending.pop())
        if result is None:
            console.print(f"  skipped {job.framework} {job.family} {job.variant}: {problem}")
        else:
            console.print(f"  {job.framework:7s} {job.family:22s} {job.variant:5s} "
                          f"n={result.n_fit:>6,}  fit {result.mape_fit:5.1f} %  "
                          f"held-out {result.mape_held_out:5.1f} %")
    return progress


def from_llmcompass(measured: str | None, output: str | None, install: bool,
                    device_systems: list[str] | None = None, system: str | None = None,
                    console=None) -> CalibrationReport:
    """The template constants per device and operator group from the LLMCompass set."""
    from importlib import resources

    from ...hardware import load_system
    from ..constants.template import CALIBRATION_FILE
    from ..measurements.llmcompass import DEVICE_SYSTEMS, load_measured
    from ..measurements.llmcompass import device_systems as parse_pairs
    from .template import fit_calibration, save_calibration

    if not measured:
        raise KrakenError("--source llmcompass needs --measured DIR, the LLMCompass measurement "
                          "set (docs/simulator.md says how to get it)")
    if system:
        raise KrakenError("--system belongs to --source aiconfigurator; llmcompass maps devices "
                          "with --device-system DEVICE=SYSTEM")
    data = load_measured(measured)
    names = parse_pairs(device_systems) or DEVICE_SYSTEMS
    systems = {d: load_system(s) for d, s in names.items()
               if any(p.device == d for p in data.points)}
    command = "krakenlm sim calibrate --source llmcompass --measured " + measured
    path = calibration_target(
        output, install, Path("calibration.yaml"),
        Path(str(resources.files("krakenlm.simulator.constants").joinpath(CALIBRATION_FILE))),
        console=console)
    calibration = fit_calibration(data, systems, command=command)
    save_calibration(calibration, str(path))
    return CalibrationReport(path, f" ({sum(len(v) for v in calibration.devices.values())} "
                                   "operator groups)")


@dataclass
class SoftwareFitReport:
    """The host constants fitted per system, the rows marked first (if asked) and the profile
    written (None: only printed)."""
    software: str
    fits: list[Any]                  # software.HostFit per system
    marked: int | None = None
    written: Path | None = None

    def to_json(self) -> dict[str, Any]:
        return {"software": self.software, "marked": self.marked,
                "written": None if self.written is None else str(self.written),
                "fits": [{"system": f.system, "host": f.host, **f.summary()} for f in self.fits]}

    def to_table(self) -> list[Any]:
        t = table_of(f"Host constants of {self.software}, fitted on the fit half (MAPE %)",
                     ("system", "constants", "n fit", "fit", "n held-out", "held-out",
                      "held-out before"), left=("system", "constants", "n fit", "fit",
                                                "n held-out", "held-out", "held-out before"))
        for fit in self.fits:
            t.add_row(fit.system, ", ".join(
                f"{k} {v * 1e6:,.1f} us" if k.endswith("_s") else f"{k} {v:.3f}"
                for k, v in fit.host.items()), str(fit.n_fit), f"{fit.mape_fit:.1f}",
                str(fit.n_held_out), f"{fit.mape_held_out:.1f}", f"{fit.mape_held_out_before:.1f}")
        marked = [] if self.marked is None else [
            Plain(f"marked {self.marked} rows as fit (the rest held out)")]
        return marked + [t] + ([] if self.written is None else [Plain(f"wrote {self.written}")])


def fit_software(software: str, systems: list[str] | None = None, install: bool = False,
                 output: str | None = None, mark_split: bool = False) -> SoftwareFitReport:
    """Fit the host constants of profile `software` on each system (default: every system with
    fit rows for it) and write them into the package's profile (`install`) or a copy
    (`output`)."""
    import shutil
    from importlib import resources

    from ..constants.software import software_names
    from ..measurements.models import load_rows, row_software
    from .software import fit_host, write_host
    from .software import mark_split as mark

    if software not in software_names():
        raise KrakenError(f"unknown software {software!r}; profiles: {', '.join(software_names())}")
    if install and output:
        raise KrakenError("give either --install or --output, not both")
    marked = mark() if mark_split else None
    rows = load_rows()
    systems = systems or sorted({r.system for r in rows if row_software(r) == software
                                 and r.split == "fit"})
    if not systems:
        raise KrakenError(f"no rows of the end-to-end set are fit rows for software {software!r}; "
                          "run with --mark-split first")
    src = Path(str(resources.files("krakenlm.simulator.constants.software_profiles")
                   .joinpath(f"{software}.yaml")))
    target = src if install else (Path(output) if output else None)
    if target is not None and target != src:
        shutil.copyfile(src, target)
    command = f"krakenlm sim fit-software --software {software}" + "".join(
        f" --system {s}" for s in systems)
    fits = []
    for name in systems:
        fits.append(fit_host(software, name, rows))
        if target is not None:
            write_host(target, fits[-1], command)
    return SoftwareFitReport(software, fits, marked, target)
