"""What `krakenlm sim run` and `sim software` show, as reports: a simulated query of a model
(its operators, categories, kernel sources, latencies and memory) and the serving-software
profiles."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..console import table_of
from ..errors import KrakenError, warn
from .run import Result


@dataclass
class RunReport:
    """What `krakenlm sim run` prints for one Result: its JSON, or its tables (time per operator and
    per category in prefill and decode, in ms) and lines (software and kernel sources, TTFT,
    TPOT, end-to-end, the interval, memory per device in GB)."""
    result: Result

    def to_json(self) -> dict[str, Any]:
        return self.result.to_json()

    def to_table(self) -> list[Any]:
        r = self.result
        ops = table_of(f"{r.model} ({r.arch}) on {r.system}, TP {r.tp}, batch {r.batch}, prompt "
                       f"{r.prompt_tokens}, gen {r.gen_tokens}, {r.mode}, {r.dtype}: time per "
                       "operator (a collective overlapped with compute counts in full here)",
                       ("op", "category", "prefill ms", "decode ms (all steps)",
                        "% of end-to-end"), left=("op", "category"))
        for op in dict.fromkeys(list(r.prefill.ops) + list(r.decode.ops)):
            p, d = r.prefill.ops.get(op, {}), r.decode.ops.get(op, {})
            t = p.get("time_s", 0.0) + d.get("time_s", 0.0)
            ops.add_row(op, (p or d)["category"], f"{p.get('time_s', 0.0) * 1e3:,.3f}",
                        f"{d.get('time_s', 0.0) * 1e3:,.3f}", f"{100 * t / r.e2e_s:.1f}")
        cats = table_of("Wall time by category (adds up to the total; communication overlapped "
                        "with compute is not counted twice)",
                        ("category", "prefill ms", "decode ms"), left=("category",))
        for cat in dict.fromkeys(list(r.prefill.categories) + list(r.decode.categories)):
            cats.add_row(cat, f"{r.prefill.categories.get(cat, 0.0) * 1e3:,.3f}",
                         f"{r.decode.categories.get(cat, 0.0) * 1e3:,.3f}")
        m = r.memory
        return [ops, cats, f"software {r.software}; attention {r.attention_path}"
                + _graph_padding_note(r),
                *(f"  {family}: {how}" for family, how in r.kernel_sources.items()),
                f"TTFT {r.ttft_s * 1e3:,.2f} ms | mean TPOT {r.tpot_s * 1e3:,.3f} ms | "
                f"end-to-end {r.e2e_s:,.3f} s", *_interval_lines(r),
                f"memory per device: weights {m.weights_bytes / 1e9:.2f} GB + KV cache "
                f"{m.kv_cache_bytes / 1e9:.2f} GB + activations {m.activation_bytes / 1e9:.2f} GB"
                f" + reserve {m.reserve_bytes / 1e9:.2f} GB = {m.total_bytes / 1e9:.2f} GB of "
                f"{m.capacity_bytes / 1e9:.2f} GB" + ("" if m.fits else "  [DOES NOT FIT]")]


def _graph_padding_note(r: Result) -> str:
    """Where the engine replays a CUDA graph captured for more tokens than a step holds
    (`Graphs.padded_tokens`; `run.padded_graphs` times its layers at that size), or runs a
    step of a captured phase without one, above its largest graph: say so."""
    graphs = r.profile.graphs if r.profile is not None else None
    if graphs is None or r.attention_path != "fused":
        return ""
    if not graphs.prefill and not graphs.decode:  # e.g. `--cuda-graph-max 0`
        return "; CUDA graphs: none, every kernel issued from the host"
    g = r.cuda_graphs()
    tokens, largest, decodes = g["prefill_tokens"], g["largest_captured"], r.gen_tokens > 1
    notes = []
    if g["prefill_runs_at_tokens"] != tokens:
        notes.append(f"prefill's {tokens} tokens run the graph captured for "
                     f"{g['prefill_runs_at_tokens']}")
    if decodes and g["decode_runs_at_batch"] != r.batch:
        notes.append(f"decode's batch of {r.batch} runs the graph captured for "
                     f"{g['decode_runs_at_batch']}")
    # a phase the engine captures whose step is above the largest graph runs without one
    if graphs.prefill and not g["prefill"]:
        notes.append(f"prefill's {tokens} tokens run without one (the largest is {largest})")
    if decodes and graphs.decode and not g["decode"]:
        notes.append(f"decode's batch of {r.batch} runs without one (the largest is "
                     f"{largest})")
    return "; CUDA graphs: " + ", ".join(notes) if notes else ""


def run_report(system: str, model: str, tp: int, batch: int, prompt: int, gen: int, *,
               arch: str | None = None, kraken_rule: str = "engine", mode: str = "simulate",
               software: str | None = None, dtype: str = "fp16", attention: str = "fused",
               check_memory: bool = True, check_context: bool = True,
               calibration_path: str | None = None,
               gpu_calibration_path: str | None = None,
               cuda_graph_max: int | None = None) -> RunReport:
    """Simulate `model` (a preset or a config.json), as `arch` if given, on `system` (a preset
    or a YAML file); the constants files default to the package's."""
    from ..hardware import load_system
    from .constants.gpu_kernels import load_file
    from .constants.template import load_calibration
    from .run import KRAKEN_RULES, arch_variant, resolve_model, simulate

    name, original = resolve_model(model)
    if kraken_rule not in KRAKEN_RULES:
        raise KrakenError(f"--kraken-rule {kraken_rule!r} is not one of {KRAKEN_RULES}")
    if kraken_rule != "engine" and (arch != "kraken" or original.arch == "kraken"):
        warn(f"--kraken-rule {kraken_rule} only applies to --arch kraken of a GPT or parallel "
             "model; this run ignores it")
    config = arch_variant(original, arch, tp, kraken_rule)
    label = name if arch in (None, original.arch) else f"{name} as {arch}"
    report = RunReport(simulate(
        config, load_system(system), tp, batch, prompt, gen, mode, dtype=dtype,
        attention=attention,
        calibration=None if calibration_path is None else load_calibration(calibration_path),
        gpu_calibration=None if gpu_calibration_path is None else load_file(gpu_calibration_path),
        software=software, check_memory=check_memory, check_context=check_context,
        model_name=label, cuda_graph_max=cuda_graph_max))
    interval = report.result.interval
    if interval and interval.get("extrapolation"):
        warn(f"this query extrapolates beyond the validated cases: {interval['extrapolation']}")
    return report


def _sig3(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _interval_lines(r: Result) -> list[str]:
    """The nominal 80 % interval of the times, from the leave-one-source-out residuals of
    comparable public measurements (simulator/uncertainty.py)."""
    iv = r.interval
    if not iv:
        return []
    parts = []
    for name, label, scale, unit in (("ttft_s", "TTFT", 1e3, "ms"), ("tpot_s", "TPOT", 1e3, "ms"),
                                     ("e2e_s", "end-to-end", 1, "s")):
        if name in iv and getattr(r, name) > 0:
            lo, hi = iv[name]
            parts.append(f"{label} {_sig3(lo * scale)}-{_sig3(hi * scale)} {unit}")
    return [f"{iv['level']:.0%} interval (leave-one-source-out residuals of comparable public "
            "measurements): " + " | ".join(parts)]


@dataclass
class SoftwareReport:
    """The table `krakenlm sim software` prints (constants.software.SoftwareProfile): per profile
    its kernels, CUDA graphs, host time per kernel and per step, all-reduce, attention kernel and
    the systems whose host constants are fitted."""
    profiles: list[Any]  # constants.software.SoftwareProfile

    def to_json(self) -> list[dict[str, Any]]:
        return [dataclasses.asdict(p) for p in self.profiles]

    def to_table(self) -> list[Any]:
        columns = ("name", "kernels", "CUDA graphs", "host us/kernel", "step ms (prefill/decode)",
                   "all-reduce", "attention (max head dim)", "host fitted for")
        table = table_of("krakenlm serving-software profiles", columns, left=columns)
        for p in self.profiles:
            graphs = "+".join(k for k, v in (("prefill", p.graphs.prefill),
                                             ("decode", p.graphs.decode)) if v) or "none"
            if p.graphs.pads:  # the captured sizes a step is padded to (default knobs)
                graphs += f", padded <= {p.graphs.largest_captured()}"
            ar = p.collectives.all_reduce + (f" <= {p.collectives.custom_max_bytes / 2**20:g} MiB"
                                             if p.collectives.custom_max_bytes else "")
            steps = f"{p.host.prefill_step_s * 1e3:g} / {p.host.decode_step_s * 1e3:g}"
            if p.host.per_sequence_s:
                steps += f" + {p.host.per_sequence_s * 1e3:g} per sequence"
            if p.host.tp_step_s:
                steps += f" (+{p.host.tp_step_s * 1e3:g} at TP > 1)"
            if p.host.step_overlaps_gpu and (p.host.prefill_step_s or p.host.decode_step_s):
                steps += ", beside the GPU"
            table.add_row(p.name, p.kernels, graphs, f"{p.host.per_kernel_s * 1e6:g}", steps,
                          ar, f"{p.attention.kernel} ({p.attention.max_head_dim})",
                          ", ".join(sorted(p.host_systems)) or "-")
        return [table]


def software_report() -> SoftwareReport:
    """Every shipped serving-software profile."""
    from .constants.software import load_software, software_names

    return SoftwareReport([load_software(n) for n in software_names()])
