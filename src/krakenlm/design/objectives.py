"""Workloads as objectives: what a design is scored on, with the deployment chosen per design.

* latency: one request stream at a fixed batch and lengths; the score is 1 / the chosen latency
  (TTFT, TPOT or end-to-end), optionally with an SLO on it (a design that misses it is
  infeasible, with the numbers as its reason).
* throughput: generated tokens per second over the whole system at the largest batch each
  replica's memory holds (weights, KV cache at prompt + gen, activations, runtime reserve),
  optionally capped by an SLO on TTFT, TPOT or end-to-end (the batch is then the largest that
  meets it). Replicas = devices / tp.

Per design the tensor-parallel degree is chosen as a deployment would: every power-of-two
degree that divides the devices (and the heads) is tried and the best score kept, unless the
design fixes `tp`. A Kraken model is built with degree = tp (parameter-matched to the GPT model,
run.arch_variant), so `arch=kraken, tp=4` is Kraken d = 4.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import KrakenError
from ..models import PRESETS

KINDS = ("latency", "throughput")
METRICS = ("ttft", "tpot", "e2e")


class ObjectiveError(KrakenError, ValueError):
    """An objective the workload cannot produce, or malformed; the message says how to fix it."""


@dataclass(frozen=True)
class Objective:
    """What a design is scored on (see the module docstring): `kind` "latency" (score 1 / `metric`
    seconds at a fixed `batch`) or "throughput" (generated tokens/s over the system at the
    largest batch per replica that fits, up to `max_batch`), for `model` (a preset name) at
    `prompt_tokens` + `gen_tokens`. `metric` is ttft, tpot or e2e; `slo_s` (seconds) bounds it: a
    design that misses it is infeasible (latency) or has its batch lowered (throughput). `arch`
    is the architecture unless a design's `arch` knob says otherwise. Checked on construction."""
    kind: str = "throughput"
    model: str = "gpt3-175b"
    prompt_tokens: int = 1024
    gen_tokens: int = 128
    batch: int = 1                 # latency only: the fixed batch
    metric: str = "e2e"            # latency: what is minimised; throughput: what the SLO bounds
    slo_s: float | None = None     # bound on `metric` (seconds)
    max_batch: int = 4096          # throughput: the largest batch considered per replica
    arch: str = "gpt"              # default architecture (a design's `arch` knob overrides)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ObjectiveError(f"objective {self.kind!r} is not one of {KINDS}")
        if self.metric not in METRICS:
            raise ObjectiveError(f"metric {self.metric!r} is not one of {METRICS}")
        if self.model not in PRESETS:
            raise ObjectiveError(f"unknown model {self.model!r}: run `krakenlm models` for the "
                                 "presets")
        for name in ("prompt_tokens", "gen_tokens", "batch", "max_batch"):
            if getattr(self, name) < 1:
                raise ObjectiveError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.metric == "tpot" and self.gen_tokens < 2:
            raise ObjectiveError("metric tpot needs at least 2 generated tokens (TPOT is the "
                                 "mean decode step); raise --gen or use ttft")
        if self.slo_s is not None and not self.slo_s > 0:
            raise ObjectiveError(f"the SLO must be a positive number of seconds, got {self.slo_s}")
        context = PRESETS[self.model].context_len
        if self.prompt_tokens + self.gen_tokens - 1 > context:  # the last token is not attended
            raise ObjectiveError(f"prompt {self.prompt_tokens} + gen {self.gen_tokens} tokens "
                                 f"exceed {self.model}'s context of {context}; shorten them")

    @property
    def perf_unit(self) -> str:
        return "tokens/s" if self.kind == "throughput" else f"1/{self.metric}_s"

    def describe(self) -> str:
        slo = f", {self.metric} SLO {self.slo_s:g} s" if self.slo_s else ""
        if self.kind == "throughput":
            return (f"throughput: {self.model}, prompt {self.prompt_tokens}, gen "
                    f"{self.gen_tokens}, largest batch that fits (<= {self.max_batch}){slo}")
        return (f"latency ({self.metric}): {self.model}, batch {self.batch}, prompt "
                f"{self.prompt_tokens}, gen {self.gen_tokens}{slo}")

    def to_dict(self) -> dict:
        return asdict(self)


def objective_from_dict(data: dict) -> Objective:
    unknown = set(data) - set(Objective.__dataclass_fields__)
    if unknown:
        raise ObjectiveError(f"unknown objective field(s) {sorted(unknown)}; known: "
                             f"{list(Objective.__dataclass_fields__)}")
    return Objective(**data)
