"""Engine decode-progress log lines that measure the pure-decode step, and the step-time
oracle's prediction of each.

`data/step_logs.json` holds public server logs (sources in `data/SOURCES.md`, section
step_logs). SGLang prints every `decode_log_interval` (40) decode steps `Decode batch[.,]
#running-req: N, #token: T, ..., gen throughput (token/s): X, #queue-req: Q`, X being the
tokens generated since its previous such line over the wall time since it
(`Scheduler.log_decode_stats`). Two consecutive lines with Q = 0 and no `Prefill batch` line
between them bracket an interval of pure decode steps, so

    measured step_s = N / X,  N = mean #running-req of the two lines,
    KV per request = T / N,   T = mean #token of the two lines,

the mean of the two lines standing for the interval's (N, T fall or grow through it). An entry
stores the two verbatim lines (`lines`), the engine and version, the model (a preset), dtype,
system (a hardware preset) and TP, whether the lines report CUDA-graph decode (`cuda_graph`,
None where the version does not print it), and the derived N, T, X and step; `load_logs`
parses the lines again and rejects an entry whose stored numbers differ from them, whose
lines queue a request, or whose step is not N / X.

`predict` times the same step with the serving simulator's oracle:
`StepTimer(Simulator(system, profile, dtype), preset, tp).batch_s([], [T // N] * N)` with the
engine's software profile (`ENGINES`), decode CUDA graphs as the line reports them. Nothing is
fitted on these lines; `benchmarks/serve_step_logs.py` scores them.

Other engines join through `ENGINES` (profile, parser): a vLLM V1 `Avg prompt throughput: 0.0
tokens/s, Avg generation throughput: X tokens/s, Running: N reqs, Waiting: 0 reqs` line
measures N / X only when its prompt throughput is 0 over the interval.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import KrakenError
from ..hardware import load_system
from ..models import get_preset
from ..simulator import Simulator
from ..simulator.constants.software import load_software
from .log_files import read_log_entries
from .step_time import StepTimer

LOGS_FILE = Path(__file__).resolve().parent / "data" / "step_logs.json"
FIELDS = ("id", "source", "locator", "lines", "engine", "engine_version", "model", "hf_model",
          "dtype", "system", "tp", "cuda_graph", "running_requests", "kv_tokens",
          "gen_throughput_tok_s", "measured_step_s")
DTYPES = ("bf16", "fp16")
# relative tolerance of the stored derived numbers against the ones the lines give
REL_TOL = 1e-9

_SGLANG_DECODE = re.compile(
    r"Decode batch[.,] #running-req: (?P<running>\d+), #token: (?P<tokens>\d+),"
    r".*?gen throughput \(token/s\): (?P<throughput>[0-9.]+),.*?#queue-req: (?P<queued>\d+)")
_SGLANG_GRAPH = re.compile(r"cuda graph: (True|False),")


@dataclass(frozen=True)
class LineStats:
    """What one decode-progress line reports: running requests, KV tokens in use, decode
    throughput since the engine's previous such line (tokens/s), queued requests, and whether
    the step ran a CUDA graph (None: the line does not say)."""
    running_requests: int
    kv_tokens: int
    gen_throughput_tok_s: float
    queued_requests: int
    cuda_graph: bool | None


def parse_sglang_line(line: str) -> LineStats | None:
    """An SGLang `Decode batch` line's numbers, None if the line is not one."""
    m = _SGLANG_DECODE.search(line)
    if m is None:
        return None
    g = _SGLANG_GRAPH.search(line)
    graph = None if g is None else g[1] == "True"
    return LineStats(int(m["running"]), int(m["tokens"]), float(m["throughput"]),
                     int(m["queued"]), graph)


# the engine a log names -> (software profile, parser of its decode-progress line)
ENGINES = {"sglang": ("sglang", parse_sglang_line)}


class StepLogDataError(KrakenError, ValueError):
    """A step-logs file that cannot be used; the message names the log and the field."""


@dataclass(frozen=True)
class StepLog:
    """Two consecutive decode-progress lines of one public server log (module docstring):
    where they are, the setup they ran, and the pure-decode step they measure."""
    id: str
    source: str
    locator: str
    lines: tuple[str, str]
    engine: str
    engine_version: str
    model: str
    hf_model: str
    dtype: str
    system: str
    tp: int
    cuda_graph: bool | None
    running_requests: float
    kv_tokens: float
    gen_throughput_tok_s: float
    measured_step_s: float

    @property
    def kv_per_request(self) -> int:
        """Mean KV length of a running request (tokens): T / N, rounded down."""
        return int(self.kv_tokens / self.running_requests)

    @property
    def batch(self) -> int:
        """The running requests the prediction decodes: N rounded to a whole request."""
        return max(1, round(self.running_requests))


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL_TOL * max(abs(a), abs(b), 1e-300)


def _check(entry: dict, name: str, path: Path) -> StepLog:
    def bad(msg: str) -> StepLogDataError:
        return StepLogDataError(f"{path}: log {name}: {msg}")

    if entry["engine"] not in ENGINES:
        raise bad(f"engine {entry['engine']!r} is not one of {', '.join(ENGINES)}")
    if entry["dtype"] not in DTYPES:
        raise bad(f"dtype {entry['dtype']!r} is not one of {', '.join(DTYPES)}")
    if not (isinstance(entry["tp"], int) and entry["tp"] >= 1):
        raise bad("tp must be a positive integer")
    if entry["cuda_graph"] not in (True, False, None):
        raise bad("cuda_graph must be true, false or null")
    for key in ("running_requests", "kv_tokens", "gen_throughput_tok_s", "measured_step_s"):
        value = entry[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise bad(f"{key} must be a positive number")
    lines = entry["lines"]
    if not (isinstance(lines, list) and len(lines) == 2 and all(isinstance(s, str) for s in lines)):
        raise bad("lines must be the two consecutive log lines")
    _profile, parser = ENGINES[entry["engine"]]
    stats = [parser(line) for line in lines]
    if any(s is None for s in stats):
        raise bad(f"a line is not a {entry['engine']} decode-progress line")
    if any(s.queued_requests for s in stats):
        raise bad("a line queues requests: the interval is not pure decode of what runs")
    running = sum(s.running_requests for s in stats) / 2
    kv = sum(s.kv_tokens for s in stats) / 2
    throughput = stats[1].gen_throughput_tok_s
    graphs = {s.cuda_graph for s in stats}
    for key, derived in (("running_requests", running), ("kv_tokens", kv),
                         ("gen_throughput_tok_s", throughput),
                         ("measured_step_s", running / throughput)):
        if not _close(float(entry[key]), derived):
            raise bad(f"{key} {entry[key]} is not the {derived:.12g} its lines give")
    if len(graphs) != 1 or graphs.pop() != entry["cuda_graph"]:
        raise bad("cuda_graph differs from what the lines report")
    return StepLog(**{f: entry[f] for f in FIELDS if f != "lines"}, lines=tuple(lines))


def load_logs(path: Path | str = LOGS_FILE) -> tuple[StepLog, ...]:
    """The logs of a step-logs file, checked (module docstring)."""
    path = Path(path)
    return tuple(_check(entry, name, path) for name, entry in
                 read_log_entries(path, "step logs file", StepLogDataError, FIELDS))


def timer_for(log: StepLog) -> StepTimer:
    """The step-time oracle for the log's setup: the engine's software profile (decode CUDA
    graphs on or off as the lines report; the profile's own where they do not say) on the
    log's system, model preset, dtype and TP, tabulated up to the log's batch and KV length."""
    profile = load_software(ENGINES[log.engine][0])
    if log.cuda_graph is not None and log.cuda_graph != profile.graphs.decode:
        profile = dataclasses.replace(
            profile, graphs=dataclasses.replace(profile.graphs, decode=log.cuda_graph))
    sim = Simulator(load_system(log.system), profile, dtype=log.dtype)
    return StepTimer(sim, get_preset(log.model), log.tp, **timer_bounds(log))


def timer_bounds(log: StepLog) -> dict[str, int]:
    """The StepTimer tabulation bounds `timer_for` uses: the log's batch (at least 64 tokens,
    8 sequences) and twice its KV length per request (at least 4096)."""
    return {"max_tokens": max(64, log.batch), "max_sequences": max(8, log.batch),
            "max_context": max(4096, 2 * log.kv_per_request)}


def predict(log: StepLog, timer: StepTimer | None = None) -> float:
    """The oracle's pure-decode step (s) for the log: `batch` sequences of `kv_per_request`
    KV tokens each (`StepTimer.batch_s` with no prefill)."""
    timer = timer or timer_for(log)
    return timer.batch_s([], [log.kv_per_request] * log.batch)


def relative_error(predicted_s: float, log: StepLog) -> float:
    """predicted / measured - 1: negative where the oracle is faster than the engine."""
    return predicted_s / log.measured_step_s - 1
