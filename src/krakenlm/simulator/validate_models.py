"""Whole-model validation against public end-to-end measurements (validation_data/).

Every row of `model_measurements.csv` (a published serving benchmark: model, GPUs, tensor
parallelism, framework and version, precision, batch, prompt and output lengths, and a measured
TTFT, TPOT or end-to-end latency, with its source in SOURCES.md) is simulated with the
software profile of its framework and compared. Rows the data's curator flagged `ANOMALY`
(runs that did not do what their setup says) are reported apart and left out of the error.

Software per row: TensorRT-LLM (and NVIDIA NIM, which serves these models with TensorRT-LLM
engines) -> `trtllm`; vLLM before 0.8 -> `vllm-v0`, later -> `vllm`, Splitwise's 2023 engine
-> `vllm-eager` (SOURCE_SOFTWARE says why); LMDeploy's TurboMind (a C++
engine with its own kernels, not measured in the kernel tables) -> `lmdeploy`; SGLang ->
`sglang`; plain PyTorch -> `eager`. A row whose software has no profile is listed as skipped.
"""

from __future__ import annotations

import csv
import math
import zlib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from ..models import PRESETS, ModelConfig
from .software import SoftwareProfile, load_software, software_names

DATA_PACKAGE = "krakenlm.simulator"
DATA_DIR = "validation_data"
# Sources whose engine is known from the source itself rather than a version number. Splitwise's
# characterisation (2023, "an internal vLLM branch") decodes host-bound: its Llama-2-70B TP 2
# TPOT on H100 is 37 ms where streaming the weights takes ~10 ms, i.e. kernels issued from
# Python one by one, as vLLM did before CUDA graphs (0.2.2, Nov 2023).
SOURCE_SOFTWARE = {"splitwise": "vllm-eager"}
# How a source's harness ran its prompts: a structural choice made on the fit half, not a
# sourced mechanism. Splitwise's batched TTFT is modelled as B sequential single-prompt
# prefills (decode still runs the whole batch); at TP 2 the data cannot tell (prompt 512:
# batch 2/4/8/16/32 take 2.1x/4.3x/8.1x/16.4x/33.7x the batch-1 time, as a compute-bound
# batched prefill would too). The sources say one batched forward pass (vLLM 0.1-0.2's
# scheduler admits the waiting prompts into one prefill step up to max_num_batched_tokens;
# SplitwiseSim's DatabasePerformanceModel interpolates prompt_time on batch x prompt tokens),
# and the TP 8 H100 rows agree (b x 512 tokens take what one prompt of b*512 tokens takes,
# within 5 %). But the measured time per token of one forward pass grows past 2048 tokens
# (H100, measured / modelled GPU time: TP 8 1.4 up to 2048 tokens, 2.1-2.4 from 4096; TP 4
# 1.4 -> 1.7; TP 2 1.4 throughout), by no mechanism found in vLLM 0.1-0.2 or the harness (not
# attention: 16 x 512 tokens behave like one 8192-token prompt), and a batched prefill exposes
# that growth: host fit on the fit half 10.5 / 11.4 % (A100 / H100) batched against 6.1 /
# 8.3 % sequential (held-out 12.4 / 12.5 against 9.9 / 9.7 %).
SEQUENTIAL_PREFILL = {"splitwise"}
HF_TO_PRESET = {
    "EleutherAI/gpt-j-6b": "gpt-j-6b",
    "mistralai/Mistral-7B-v0.1": "mistral-7b",
    "tiiuae/falcon-180B": "falcon-180b",
}


@dataclass(frozen=True)
class ModelRow:
    source: str
    model: str
    system: str
    tp: int
    framework: str
    version: str
    dtype: str
    batch: int
    prompt: int
    output: int
    metric: str
    measured_s: float
    split: str
    notes: str

    @property
    def anomalous(self) -> bool:
        return "ANOMALY" in self.notes

    @property
    def setup(self) -> str:
        """The configuration, without the metric: what the fit/held-out split hashes."""
        return (f"{self.source}|{self.model}|{self.system}|{self.tp}|{self.dtype}|{self.batch}|"
                f"{self.prompt}|{self.output}")


@dataclass
class ModelReport:
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def groups(self, keys: tuple[str, ...], half: str | None = None) -> list[dict[str, Any]]:
        out: dict[tuple, list[dict]] = {}
        for r in self.rows:
            if r["anomalous"] or (half and r["half"] != half):
                continue
            out.setdefault(tuple(r[k] for k in keys), []).append(r)
        return [{**dict(zip(keys, k)), **stats(v)} for k, v in sorted(out.items())]

    def overall(self, half: str | None = None) -> dict[str, float]:
        return stats([r for r in self.rows if not r["anomalous"]
                      and (half is None or r["half"] == half)])

    def to_json(self) -> dict[str, Any]:
        return {"overall": self.overall(), "held_out": self.overall("held_out"),
                "fit": self.overall("fit"),
                "by_source_system_metric": self.groups(("source", "system", "metric")),
                "rows": self.rows, "skipped": self.skipped}


def stats(rows: list[dict[str, Any]]) -> dict[str, float]:
    if not rows:
        return {"n": 0, "mape_pct": float("nan"), "mean_signed_pct": float("nan"),
                "too_fast": 0}
    errors = [r["error_pct"] for r in rows]
    return {"n": len(rows), "mape_pct": sum(abs(e) for e in errors) / len(errors),
            "mean_signed_pct": sum(errors) / len(errors),
            "too_fast": sum(1 for e in errors if e < 0)}


def data_path(name: str) -> Path:
    return Path(str(resources.files(DATA_PACKAGE).joinpath(DATA_DIR, name)))


def load_rows(path: str | Path | None = None) -> list[ModelRow]:
    path = Path(path) if path else data_path("model_measurements.csv")
    rows = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            model = r["model"] or HF_TO_PRESET.get(r["hf_model"], "")
            rows.append(ModelRow(r["source"], model, r["system"], int(r["tp"]), r["framework"],
                                 r["framework_version"], r["dtype"], int(r["batch"]),
                                 int(r["prompt_tokens"]), int(r["output_tokens"]), r["metric"],
                                 float(r["value_ms"]) * 1e-3, r.get("split", "held_out"),
                                 r.get("notes", "")))
    return rows


def _version(text: str) -> tuple[int, ...]:
    digits = []
    for part in text.split(" ")[0].split("."):
        num = "".join(ch for ch in part if ch.isdigit())
        digits.append(int(num) if num else 0)
    return tuple(digits)


def row_software(row: ModelRow) -> str | None:
    return SOURCE_SOFTWARE.get(row.source) or software_for(row.framework, row.version)


def software_for(framework: str, version: str) -> str | None:
    """The profile that models a measured framework (None: not modelled)."""
    framework = framework.lower()
    if framework in ("trtllm", "nim"):
        return "trtllm"
    if framework == "vllm":
        return "vllm" if version and _version(version) >= (0, 8) else "vllm-v0"
    if framework in ("pytorch", "eager", "hf"):
        return "eager"
    if framework in software_names():
        return framework
    return None


def simulate_row(row: ModelRow, config: ModelConfig, software: SoftwareProfile,
                 **kwargs: Any) -> float:
    ttft, tpot = simulate_row_times(row, config, software, **kwargs)
    if row.metric == "ttft":
        return ttft
    if row.metric == "tpot":
        return tpot
    return ttft + (max(2, row.output) - 1) * tpot


def simulate_row_times(row: ModelRow, config: ModelConfig, software: SoftwareProfile,
                       **kwargs: Any) -> tuple[float, float]:
    """(TTFT, TPOT) of the row's setup as its source's harness ran it."""
    results = row_results(row, config, software, **kwargs)
    return combine(row, *(r.retimed(r.profile.host) if r is not None else (0.0, 0.0)
                          for r in results))


def row_results(row: ModelRow, config: ModelConfig, software: SoftwareProfile, **kwargs: Any):
    """The simulations a row needs: (prefill run, decode run or None). A source that prefills
    its prompts one at a time gets a batch-1 prefill run (see SEQUENTIAL_PREFILL)."""
    from .run import simulate

    dtype = {"fp16": "fp16", "bf16": "bf16", "fp8": "fp8"}[row.dtype]
    gen = 1 if row.metric == "ttft" else max(2, row.output)
    # Published runs went past the model's context (e.g. 4096 + 128 on Llama-2); time them as run.
    common = dict(dtype=dtype, software=software, check_memory=False, check_context=False,
                  model_name=row.model, **kwargs)
    sequential = row.source in SEQUENTIAL_PREFILL and row.batch > 1
    main = simulate(config, row.system, row.tp, row.batch, row.prompt, gen, **common)
    if not sequential or row.metric == "tpot":
        return main, None
    return main, simulate(config, row.system, row.tp, 1, row.prompt, 1, **common)


def combine(row: ModelRow, main: tuple[float, float], single: tuple[float, float]
            ) -> tuple[float, float]:
    ttft, tpot = main
    if row.source in SEQUENTIAL_PREFILL and row.batch > 1 and row.metric != "tpot":
        ttft = row.batch * single[0]
    return ttft, tpot


def half_of(row: ModelRow) -> str:
    """A row's declared split, else the half of its setup's CRC-32 (for fitting software)."""
    if row.split == "fit":
        return "fit"
    return "held_out"


def fit_half_by_hash(row: ModelRow) -> bool:
    return zlib.crc32(row.setup.encode()) % 2 == 0


def validate_models(rows: list[ModelRow] | None = None,
                    software_override: Callable[[str], SoftwareProfile] | None = None,
                    progress: Callable[[int, int], None] | None = None,
                    **simulate_kwargs: Any) -> ModelReport:
    """Every row simulated with its software profile (or `software_override(name)`);
    `simulate_kwargs` go to `simulate` (e.g. mode="tile" for the template models)."""
    rows = load_rows() if rows is None else rows
    report = ModelReport()
    for i, row in enumerate(rows):
        if progress:
            progress(i, len(rows))
        name = row_software(row)
        if name is None:
            report.skipped.append(f"{row.source} {row.framework}: no software profile")
            continue
        if row.model not in PRESETS:
            report.skipped.append(f"{row.source} {row.model or '?'}: no model preset")
            continue
        profile = software_override(name) if software_override else load_software(name)
        predicted = simulate_row(row, PRESETS[row.model], profile, **simulate_kwargs)
        report.rows.append({
            "source": row.source, "model": row.model, "system": row.system, "tp": row.tp,
            "software": profile.name, "framework": row.framework, "dtype": row.dtype,
            "batch": row.batch, "prompt": row.prompt, "output": row.output,
            "metric": row.metric, "measured_s": row.measured_s, "predicted_s": predicted,
            "error_pct": (predicted / row.measured_s - 1) * 100 if row.measured_s else math.nan,
            "anomalous": row.anomalous, "half": half_of(row)})
    return report
