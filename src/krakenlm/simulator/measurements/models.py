"""Public end-to-end measurements (`data/model_measurements.csv`) and the software profile each
row is simulated with.

Every row is a published serving benchmark: model, GPUs, tensor parallelism, framework and
version, precision, batch, prompt and output lengths, and a measured TTFT, TPOT or end-to-end
latency, with its source in data/SOURCES.md. Rows the data's curator flagged `ANOMALY` (runs
that did not do what their setup says) are marked.

Software per row: TensorRT-LLM (and NVIDIA NIM, which serves these models with TensorRT-LLM
engines) -> `trtllm`; FasterTransformer (NVIDIA's C++ engine that TensorRT-LLM's runtime and
kernels grew out of: static batch, fused kernels, no Python between steps) -> `trtllm`, an
approximation of its 2022 kernels stated in data/SOURCES.md; vLLM before 0.8 -> `vllm-v0`, later -> `vllm`, Splitwise's 2023 engine
-> `vllm-eager` (SOURCE_SOFTWARE says why); LMDeploy's TurboMind (a C++
engine with its own kernels, not measured in the kernel tables) -> `lmdeploy`; SGLang ->
`sglang`; plain PyTorch -> `eager`. A row whose software has no profile is listed as skipped.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ...errors import KrakenError
from ..constants.software import software_names
from .split import mape

DATA_PACKAGE = "krakenlm.simulator.measurements"


DATA_DIR = "data"


# Sources whose engine is known from the source itself rather than a version number. Splitwise's
# characterisation (2023, "an internal vLLM branch") decodes host-bound: its Llama-2-70B TP 2
# TPOT on H100 is 37 ms where streaming the weights takes ~10 ms, i.e. kernels issued from
# Python one by one, as vLLM did before CUDA graphs (0.2.2, Nov 2023).
SOURCE_SOFTWARE = {"splitwise": "vllm-eager"}

# Sources that repeat one another's measurements, so a left-out source must not be fitted on its
# copy: leave-one-source-out leaves a lineage out as a whole, and the intervals count it as one
# independent draw. TensorRT-LLM's v0.8.0 and v0.9.0 "Low Latency" tables time the same (GPU,
# model, input) grid with the same harness one release apart, 1-4 % apart where both ran the
# same TP (SOURCES.md, `trtllm_v080`); v0.5's tables are other runs and stay their own source.
# Hugging Face's optimum-benchmark "running-llamas" and "running-mistrals" examples are one lab,
# harness, GPU model and transformers release (4.35) measured the same way (SOURCES.md,
# `optimum_benchmark_mistrals`), so they count as one independent draw too.
SOURCE_LINEAGE = {"trtllm_v080": "trtllm_low_latency_v08_v09",
                  "trtllm_v090": "trtllm_low_latency_v08_v09",
                  "optimum_benchmark_llamas": "optimum_benchmark",
                  "optimum_benchmark_mistrals": "optimum_benchmark"}


def lineage(source: str) -> str:
    """The independent source a measured source belongs to: itself unless `SOURCE_LINEAGE`
    names the sources that copy it."""
    return SOURCE_LINEAGE.get(source, source)


HF_TO_PRESET = {
    "EleutherAI/gpt-j-6b": "gpt-j-6b",
    "mistralai/Mistral-7B-v0.1": "mistral-7b",
    "tiiuae/falcon-180B": "falcon-180b",
}


@dataclass(frozen=True)
class ModelRow:
    """One public end-to-end measurement of data/model_measurements.csv (module docstring; sources
    in data/SOURCES.md): source, model (a preset or Hugging Face name), system preset, TP,
    framework and version, dtype, batch, prompt and output tokens, the metric (ttft, tpot or e2e)
    and its measured value in seconds, the row's split ("fit" or "held_out"), and the curator's
    notes ("ANOMALY" marks a run that did not do what its setup says)."""
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


def stats(rows: list[dict[str, Any]], predicted: str = "predicted_s",
          error: str = "error_pct") -> dict[str, float]:
    """MAPE (split.mape of `predicted` against `measured_s`), mean signed error and how many
    rows are too fast, over scored rows."""
    if not rows:
        return {"n": 0, "mape_pct": float("nan"), "mean_signed_pct": float("nan"),
                "too_fast": 0}
    errors = [r[error] for r in rows]
    return {"n": len(rows),
            "mape_pct": mape([r[predicted] for r in rows], [r["measured_s"] for r in rows]),
            "mean_signed_pct": sum(errors) / len(errors),
            "too_fast": sum(1 for e in errors if e < 0)}


def data_path(name: str) -> Path:
    return Path(str(resources.files(DATA_PACKAGE).joinpath(DATA_DIR, name)))


REQUIRED_COLUMNS = ("source", "model", "hf_model", "system", "tp", "framework",
                    "framework_version", "dtype", "batch", "prompt_tokens", "output_tokens",
                    "metric", "value_ms")
METRICS = ("ttft", "tpot", "e2e")


class MeasurementsError(KrakenError, ValueError):
    """A whole-model measurement file is malformed; the message names the column or row."""


def load_rows(path: str | Path | None = None) -> list[ModelRow]:
    """The rows of a whole-model measurement file (default: the shipped one). Values are in
    milliseconds (`value_ms`); a missing column, a value in another unit (`value_s`), a number
    that does not parse or an unknown metric is an error naming it."""
    path = Path(path) if path else data_path("model_measurements.csv")
    rows = []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            units = [c for c in reader.fieldnames or [] if c.startswith("value_")]
            hint = f" (found {units[0]}: give the value in ms as value_ms)" if units and \
                "value_ms" in missing else ""
            raise MeasurementsError(f"{path}: missing column(s) {', '.join(missing)}{hint}")
        for line, r in enumerate(reader, start=2):
            try:
                model = r["model"] or HF_TO_PRESET.get(r["hf_model"], "")
                if r["metric"] not in METRICS:
                    raise ValueError(f"metric {r['metric']!r} is not one of {', '.join(METRICS)}")
                value = float(r["value_ms"])
                if not value > 0:
                    raise ValueError(f"value_ms {r['value_ms']!r} is not a positive number")
                rows.append(ModelRow(r["source"], model, r["system"], int(r["tp"]),
                                     r["framework"], r["framework_version"], r["dtype"],
                                     int(r["batch"]), int(r["prompt_tokens"]),
                                     int(r["output_tokens"]), r["metric"], value * 1e-3,
                                     r.get("split") or "held_out", r.get("notes") or ""))
            except (TypeError, ValueError) as exc:
                raise MeasurementsError(f"{path} line {line}: {exc}") from None
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
    if framework in ("trtllm", "nim", "fastertransformer"):
        return "trtllm"
    if framework == "vllm":
        return "vllm" if version and _version(version) >= (0, 8) else "vllm-v0"
    if framework in ("pytorch", "eager", "hf"):
        return "eager"
    if framework in software_names():
        return framework
    return None


def half_of(row: ModelRow) -> str:
    """A row's declared split, else the half of its setup's CRC-32 (for fitting software)."""
    if row.split == "fit":
        return "fit"
    return "held_out"

