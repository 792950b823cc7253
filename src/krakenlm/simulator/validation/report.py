"""`krakenlm sim validate` as one report: the levels asked for (operators, layers, models) and
optionally the LLMCompass set, scored by the modules of this package, with their tables, JSON,
CSVs and predicted-vs-measured plots.

Errors are mean absolute percentage errors (MAPE); a level that cannot run here (kernel tables
not installed, rows without a profile) adds a line to `skipped` instead of failing.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...console import table_of
from ...errors import KrakenError
from ...fileio import write_csv_atomically

LEVELS = {"all": ("operators", "layers", "models"), "operators": ("operators",),
          "layers": ("layers",), "models": ("models",)}


@dataclass
class ValidationReport:
    """The level reports that ran (None: not asked for) and the notes of what was skipped."""
    llmcompass: Any = None    # template.TemplateReport
    operators: Any = None     # kernels.KernelReport
    layers: Any = None        # layers.LayerReport
    models: Any = None        # models.ModelReport
    models_loso: Any = None   # calibration/loso.LosoReport (set by the caller: fitting is not ours)
    model_rows: Any = None    # the whole-model rows scored (None: the shipped set)
    skipped: list[str] = field(default_factory=list)
    written_to: Path | None = None  # the directory of write(), printed with the tables

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"skipped": self.skipped}
        for name in ("llmcompass", "operators", "layers", "models", "models_loso"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name).to_json()
        return out

    def to_table(self) -> list[Any]:
        out: list[Any] = []
        if self.llmcompass is not None:
            out += _llmcompass_tables(self.llmcompass)
        if self.operators is not None and self.operators.groups:
            out.append(_operators_table(self.operators))
        if self.layers is not None:
            out.append(_layers_table(self.layers))
        if self.models_loso is not None:
            out += self.models_loso.to_table()
        if self.models is not None:
            out += _models_tables(self.models)
        out += [f"skipped: {note}" for note in self.skipped]
        if self.written_to is not None:
            out.append(f"CSV and plots in {self.written_to}/")
        return out

    def write(self, outdir: str | Path) -> None:
        """Every point as CSV and a predicted-vs-measured log-log plot per level."""
        from .plots import scatter

        outdir = self.written_to = Path(outdir)
        outdir.mkdir(parents=True, exist_ok=True)
        if self.llmcompass is not None:
            self.write_llmcompass(outdir / "llmcompass.csv", outdir / "llmcompass.png")
        if self.operators is not None and self.operators.points:
            _write_rows(outdir / "operators.csv", self.operators.points)
            scatter(self.operators.points, outdir / "operators.png",
                    "Operators: kernel tables (hollow: fit half)", "family", "device",
                    hollow=lambda p: p["half"] == "fit")
        if self.layers is not None:
            _write_rows(outdir / "layers.csv", self.layers.rows + self.layers.gemm_sums)
            scatter(self.layers.rows, outdir / "layers.png",
                    "Layers: Llama-2-70B operators (Vidur)", "op", "system")
        if self.models is not None:
            _write_rows(outdir / "models.csv", self.models.rows)
            scatter([r for r in self.models.rows if not r["anomalous"]], outdir / "models.png",
                    "Whole models: published TTFT / TPOT / end-to-end", "source", "metric")
        if self.models_loso is not None:
            _write_rows(outdir / "models_loso.csv", self.models_loso.rows)

    def write_llmcompass(self, csv_path: str | Path | None = None,
                         plot_path: str | Path | None = None) -> None:
        """The LLMCompass set's points as CSV and its plot (PNG)."""
        from .template import write_csv, write_plot

        if csv_path:
            write_csv(self.llmcompass, csv_path)
        if plot_path:
            write_plot(self.llmcompass, plot_path)


def validate(level: str = "all", measured: str | Path | None = None,
             calibration_path: str | Path | None = None, tables: str | None = None,
             device_systems: dict[str, str] | None = None, console=None,
             models_csv: str | Path | None = None, loso: bool = False) -> ValidationReport:
    """Score the simulator at `level` (operators, layers, models or all), and the LLMCompass
    set in `measured` when given. `tables`: kernel tables in the layout of
    aiconfigurator_core/systems instead of the installed package; `device_systems`: which
    system each device name of the LLMCompass set ran on. `console` (a rich Console on stderr)
    shows a status line while a slow level runs. `models_csv`: a whole-model measurement file
    scored instead of the shipped one (kept in `model_rows`). `loso`: only checked here (it needs
    the models level); the caller adds the leave-one-source-out report, which refits."""
    if level not in LEVELS:
        raise KrakenError(f"--level {level!r}: use operators, layers, models or all")
    wanted = LEVELS[level]
    if (loso or models_csv) and "models" not in wanted:
        flag = "--loso" if loso else "--models-csv"
        raise KrakenError(f"{flag} scores whole models: use it with --level models or all, "
                          f"not --level {level}")
    status = console.status if console is not None else (lambda _: nullcontext())
    report = ValidationReport()
    if models_csv:
        from ..measurements.models import load_rows

        if not Path(models_csv).is_file():
            raise KrakenError(f"--models-csv {models_csv}: no such file")
        report.model_rows = load_rows(models_csv)
    if measured:
        from ..constants.template import load_calibration
        from .template import validate as validate_template

        report.llmcompass = validate_template(measured, load_calibration(calibration_path),
                                              device_systems)
    if "operators" in wanted:
        from .kernels import validate_kernels

        with status("operators: scoring the kernel tables..."):
            report.operators = validate_kernels(root=tables)
        report.skipped += report.operators.skipped
    if "layers" in wanted:
        from .layers import validate_layers

        report.layers = validate_layers()
    if "models" in wanted:
        from .models import validate_models

        with status("models: simulating the published setups..."):
            report.models = validate_models(report.model_rows)
        report.skipped += report.models.skipped
    return report


def _write_rows(path: Path, rows: list[dict]) -> None:
    if rows:
        write_csv_atomically(path, dict.fromkeys(k for r in rows for k in r), rows)


def _operators_table(kr) -> Any:
    t = table_of("Operators: kernel tables (MAPE %; constants fitted on one half of the shapes)",
                 ("device", "framework", "family", "variant", "n", "fit half", "held-out",
                  "median signed"), left=("device", "framework", "family", "variant"))
    for g in kr.groups:
        t.add_row(g["device"], g["framework"], g["family"], g["variant"], f"{g['n']:,}",
                  f"{g['mape_fit_pct']:.1f}", f"{g['mape_held_out_pct']:.1f}",
                  f"{g['median_signed_held_out_pct']:+.1f}")
    return t


def _layers_table(lr) -> Any:
    t = table_of("Layers: operators of Llama-2-70B layers (Vidur, MLSys 2024; MAPE %)",
                 ("system", "op", "n", "MAPE", "mean signed"), left=("system", "op"))
    for g in lr.by(("system", "op")) + lr.by(("system", "op"), lr.gemm_sums):
        t.add_row(g["system"], g["op"], str(g["n"]), f"{g['mape_pct']:.1f}",
                  f"{g['mean_signed_pct']:+.1f}")
    return t


def _half(g: dict) -> str:
    return f"{g['mape_pct']:.1f} ({g['n']})" if g["n"] else "-"


def _models_tables(mr) -> list[Any]:
    t = table_of("Models: published end-to-end measurements (MAPE %; rows flagged anomalous by "
                 "the data excluded)", ("source", "system", "metric", "n", "MAPE", "fit half",
                                        "held-out", "mean signed", "too fast"),
                 left=("source", "system", "metric"))
    keys = ("source", "system", "metric")
    by_half = {h: {tuple(g[k] for k in keys): g for g in mr.groups(keys, h)}
               for h in ("fit", "held_out")}
    empty = {"n": 0}
    for g in mr.groups(keys):
        k = tuple(g[c] for c in keys)
        t.add_row(g["source"], g["system"], g["metric"], str(g["n"]), f"{g['mape_pct']:.1f}",
                  _half(by_half["fit"].get(k, empty)), _half(by_half["held_out"].get(k, empty)),
                  f"{g['mean_signed_pct']:+.1f}", f"{g['too_fast']}/{g['n']}")
    o = mr.overall()
    t.add_row("all", "", "", str(o["n"]), f"{o['mape_pct']:.1f}", _half(mr.overall("fit")),
              _half(mr.overall("held_out")), f"{o['mean_signed_pct']:+.1f}",
              f"{o['too_fast']}/{o['n']}", style="bold")
    anomalous = sum(1 for r in mr.rows if r["anomalous"])
    note = [f"{anomalous} rows flagged anomalous in the data were not scored"] if anomalous else []
    return [t, *note]


def _llmcompass_tables(report) -> list[Any]:
    table = table_of("LLMCompass set: operator error (MAPE %, predicted vs measured)",
                     ("device", "op", "n", "fit half", "held-out", "all"), left=("device", "op"))
    for o in report.ops:
        table.add_row(o["device"], o["op"], str(o["n"]), f"{o['mape_fit_half']:.1f}",
                      f"{o['mape_held_out']:.1f}", f"{o['mape']:.1f}")
    for device, s in report.per_device.items():
        table.add_row(device, "all ops", str(s["n"]), f"{s['fit']:.1f}", f"{s['held_out']:.1f}",
                      f"{s['all']:.1f}", style="bold")
    o = report.overall
    table.add_row("all", "all ops", str(o["n"]), f"{o['fit']:.1f}", f"{o['held_out']:.1f}",
                  f"{o['all']:.1f}", style="bold")
    out: list[Any] = [table]
    for device, phases in report.layer.items():
        out.append(_layer_table(device, phases))
    return out + [f"skipped: {note}" for note in report.skipped]


def _layer_table(device: str, phases: dict) -> Any:
    lt = table_of(f"GPT-3 175B layer on {device} (TP 4, batch 8; never fitted on)",
                  ["op"] + [f"{phase} {col}" for phase in phases
                            for col in ("measured ms", "predicted ms", "error %")], left=["op"])
    names = [op["op"] for op in next(iter(phases.values()))["ops"]]
    for i, name in enumerate(names):
        cells = []
        for info in phases.values():
            op = info["ops"][i]
            cells += [f"{op['measured_s'] * 1e3:.4f}", f"{op['predicted_s'] * 1e3:.4f}",
                      f"{op['error_pct']:+.1f}"]
        lt.add_row(name, *cells)
    cells = []
    for info in phases.values():
        cells += [f"{info['sum_measured_s'] * 1e3:.4f}", f"{info['sum_predicted_s'] * 1e3:.4f}",
                  f"{info['sum_error_pct']:+.1f}"]
    lt.add_row("sum", *cells, style="bold")
    return lt
