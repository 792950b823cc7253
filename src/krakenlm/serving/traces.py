"""Request traces for the serving simulator: real arrivals and lengths, or synthetic ones.

Readers (the format is told by the file's suffix and header, `read_trace`):

* Azure LLM inference trace 2023 (Patel et al., Splitwise; Azure/AzurePublicDataset
  `data/AzureLLMInferenceTrace_{conv,code}.csv`): `TIMESTAMP, ContextTokens, GeneratedTokens`,
  timestamps `2023-11-16 18:15:46.6805900` (seven fractional digits), arrival = seconds since
  the first row.
* Mooncake (kvcache-ai/Mooncake `FAST25-release/traces/*.jsonl`): one JSON object a line,
  `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (one id per 512-token prefix
  block; equal ids are reusable KV, what prefix caching replays).
* Vidur-style CSV (microsoft/vidur@01f216fe `vidur/request_generator/
  trace_replay_request_generator.py`): `Time` (s), `PromptTokenCount`, `CompletionTokenCount`
  (a `Date` column is ignored), or Vidur's request columns `arrived_at, num_prefill_tokens,
  num_decode_tokens`.

Synthetic workloads (`synthetic_trace`): Poisson arrivals, or Gamma inter-arrival times with a
coefficient of variation (shape 1/CV^2; CV 1 is Poisson, above 1 burstier), lengths fixed,
resampled (prompt and output together) from a trace, or drawn from a log-normal with a given
mean and CV. Every draw comes from one `numpy.random.Generator` seeded by the caller.

`scale_rate(trace, k)` multiplies the request rate by k (arrival times divided by k), what
Vidur calls its time scale and BLIS its rate scale. Bad input raises `TraceError` (a
KrakenError): one line naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from ..errors import KrakenError, warn
from ..fileio import read_user_text

MOONCAKE_BLOCK_TOKENS = 512  # the Mooncake traces' prefix-block size (their README)
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
VIDUR_COLUMNS = (("Time", "PromptTokenCount", "CompletionTokenCount"),
                 ("arrived_at", "num_prefill_tokens", "num_decode_tokens"))
ARRIVALS = ("poisson", "gamma")


class TraceError(KrakenError, ValueError):
    """A trace file or a synthetic workload that cannot be replayed; the message says why."""


@dataclass(frozen=True)
class Request:
    """One request: arrival (s from the trace's start), prompt and output tokens, and the
    prefix-block ids of its prompt (empty when the trace has none)."""
    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Trace:
    """A request trace (module docstring: read from a file or synthetic): its name, the requests in
    arrival order (arrival in seconds from the start, prompt and output tokens, prefix-block ids)
    and the tokens per prefix-block id (e.g. Mooncake's 512; 0: the trace gives none)."""
    name: str
    requests: tuple[Request, ...]
    hash_block_tokens: int = 0  # tokens per prefix-block id (0: no ids)

    @property
    def duration_s(self) -> float:
        return self.requests[-1].arrival_s - self.requests[0].arrival_s if self.requests else 0.0

    def rate_per_s(self) -> float:
        """Mean arrival rate over the trace (requests per second)."""
        n = len(self.requests)
        return (n - 1) / self.duration_s if n > 1 and self.duration_s > 0 else math.inf


# ----------------------------------------------------------------------------- checking
def _count(value: object, where: str, field: str, low: int) -> int:
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        raise TraceError(f"{where}: {field} {text[:40]!r} is not a number") from None
    if not math.isfinite(number) or number != int(number):
        raise TraceError(f"{where}: {field} {text[:40]!r} is not a whole number of tokens")
    if number < low:
        raise TraceError(f"{where}: {field} is {int(number)}; it must be at least {low}")
    if number > 10**8:
        raise TraceError(f"{where}: {field} {int(number)} is beyond any model's context")
    return int(number)


def _seconds(value: object, where: str, field: str) -> float:
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        raise TraceError(f"{where}: {field} {text[:40]!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise TraceError(f"{where}: {field} {text[:40]!r} must be a finite time >= 0")
    return number


def _azure_time(text: str, where: str) -> float:
    """Seconds since the epoch of an Azure timestamp (fractions of any length)."""
    base, _, frac = text.strip().partition(".")
    try:
        stamp = datetime.strptime(base, "%Y-%m-%d %H:%M:%S")
        fraction = float("0." + frac) if frac else 0.0
    except ValueError:
        raise TraceError(f"{where}: TIMESTAMP {text[:40]!r} is not a time like "
                         "'2023-11-16 18:15:46.6805900'") from None
    if frac and not frac.isdigit():
        raise TraceError(f"{where}: TIMESTAMP {text[:40]!r} has a bad fraction of a second")
    return stamp.replace(tzinfo=UTC).timestamp() + fraction


def _finish(name: str, rows: list[tuple[float, int, int, tuple[int, ...]]],
            block_tokens: int = 0) -> Trace:
    if not rows:
        raise TraceError(f"trace {name} holds no requests; give a trace with at least one row")
    times = np.array([r[0] for r in rows])
    if np.any(np.diff(times) < 0):
        warn(f"trace {name}: arrival times are not in order; the requests are sorted by arrival")
    order = np.argsort(times, kind="stable")
    start = float(times[order[0]])
    requests = tuple(Request(i, float(rows[j][0] - start), rows[j][1], rows[j][2], rows[j][3])
                     for i, j in enumerate(order))
    return Trace(name, requests, block_tokens)


# ------------------------------------------------------------------------------ readers
def _csv_rows(text: str, name: str) -> tuple[list[str], list[list[str]]]:
    try:
        table = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise TraceError(f"trace {name} is not valid CSV: {exc}") from None
    table = [row for row in table if any(cell.strip() for cell in row)]
    if not table:
        raise TraceError(f"trace {name} is empty; give a CSV with a header and one row per "
                         "request")
    return [c.strip().lstrip("\ufeff") for c in table[0]], table[1:]


def _columns(header: list[str], wanted: tuple[str, ...]) -> list[int] | None:
    if not all(w in header for w in wanted):
        return None
    return [header.index(w) for w in wanted]


def read_csv_trace(path: Path, text: str) -> Trace:
    name = path.name
    header, body = _csv_rows(text, name)
    azure = _columns(header, AZURE_COLUMNS)
    vidur = next((c for c in (_columns(header, w) for w in VIDUR_COLUMNS) if c), None)
    if azure is None and vidur is None:
        raise TraceError(
            f"trace {name}: header {','.join(header)[:80]!r} is neither Azure's "
            f"({', '.join(AZURE_COLUMNS)}) nor Vidur's ({', '.join(VIDUR_COLUMNS[0])} or "
            f"{', '.join(VIDUR_COLUMNS[1])})")
    cols = azure or vidur
    rows = []
    for n, row in enumerate(body, start=2):
        where = f"trace {name} line {n}"
        if len(row) < len(header):
            raise TraceError(f"{where}: {len(row)} fields, the header has {len(header)}")
        t, p, o = (row[i] for i in cols)
        arrival = _azure_time(t, where) if azure else _seconds(t, where, header[cols[0]])
        rows.append((arrival, _count(p, where, header[cols[1]], 1),
                     _count(o, where, header[cols[2]], 1), ()))
    return _finish(name, rows)


def read_jsonl_trace(path: Path, text: str) -> Trace:
    """Mooncake's JSONL: timestamp (ms), input_length, output_length, hash_ids."""
    name = path.name
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"trace {name} line {n}"
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise TraceError(f"{where} is not JSON: {str(exc)[:60]}") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{where}: expected an object with timestamp, input_length, "
                             "output_length (and hash_ids)")
        missing = [k for k in ("timestamp", "input_length", "output_length") if k not in obj]
        if missing:
            raise TraceError(f"{where}: missing {', '.join(missing)}")
        for key in ("timestamp", "input_length", "output_length"):
            if isinstance(obj[key], (bool, list, dict)) or obj[key] is None:
                raise TraceError(f"{where}: {key} must be a number")
        prompt = _count(obj["input_length"], where, "input_length", 1)
        ids = obj.get("hash_ids", [])
        if not isinstance(ids, list) or not all(type(i) is int for i in ids):
            raise TraceError(f"{where}: hash_ids must be a list of integers")
        if len(ids) > -(-prompt // MOONCAKE_BLOCK_TOKENS):
            raise TraceError(f"{where}: {len(ids)} hash_ids for {prompt} prompt tokens; at most "
                             f"one per {MOONCAKE_BLOCK_TOKENS} tokens")
        rows.append((_seconds(obj["timestamp"], where, "timestamp") / 1e3, prompt,
                     _count(obj["output_length"], where, "output_length", 1), tuple(ids)))
    return _finish(name, rows, MOONCAKE_BLOCK_TOKENS)


def read_trace(path: str | Path) -> Trace:
    """A trace file: .jsonl (Mooncake) or .csv (Azure 2023 or Vidur-style)."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"trace {path} does not exist or is not a file; give an Azure 2023 CSV, "
                         "a Mooncake JSONL or a Vidur-style CSV (docs/serving.md)")
    text = read_user_text(path, "trace", TraceError)
    if path.suffix.lower() in (".jsonl", ".json"):
        return read_jsonl_trace(path, text)
    if path.suffix.lower() == ".csv":
        return read_csv_trace(path, text)
    raise TraceError(f"trace {path.name}: unknown suffix {path.suffix!r}; give a .csv (Azure "
                     "2023, Vidur-style) or a .jsonl (Mooncake)")


# ---------------------------------------------------------------------------- workloads
def scale_rate(trace: Trace, rate_scale: float) -> Trace:
    """The same requests arriving `rate_scale` times as fast (arrival times divided by it)."""
    if not (math.isfinite(rate_scale) and rate_scale > 0):
        raise TraceError(f"--rate-scale must be a positive number, got {rate_scale}")
    if rate_scale == 1:
        return trace
    return replace(trace, requests=tuple(replace(r, arrival_s=r.arrival_s / rate_scale)
                                         for r in trace.requests))


def arrival_times(rng: np.random.Generator, n: int, rate_per_s: float,
                  process: str = "poisson", cv: float = 1.0) -> np.ndarray:
    """`n` arrival times (s, the first at 0) at mean rate `rate_per_s`: Poisson (exponential
    gaps) or Gamma gaps with coefficient of variation `cv`."""
    if not (math.isfinite(rate_per_s) and rate_per_s > 0):
        raise TraceError(f"--rate must be a positive number of requests per second, got "
                         f"{rate_per_s}")
    if process not in ARRIVALS:
        raise TraceError(f"--arrival {process!r} is not one of {', '.join(ARRIVALS)}")
    if not (math.isfinite(cv) and cv > 0):
        raise TraceError(f"--cv must be a positive number, got {cv}")
    if n < 1:
        raise TraceError(f"--requests must be at least 1, got {n}")
    if process == "poisson":
        gaps = rng.exponential(1.0 / rate_per_s, n)
    else:
        shape = 1.0 / cv**2
        gaps = rng.gamma(shape, 1.0 / (rate_per_s * shape), n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def parse_lengths(spec: str) -> tuple[str, tuple]:
    """`fixed:PROMPT,OUTPUT`, `trace:PATH` or `lognormal:PROMPT_MEAN,OUTPUT_MEAN[,CV]`."""
    kind, _, rest = spec.partition(":")
    try:
        if kind == "fixed":
            p, o = (int(x) for x in rest.split(","))
            if p >= 1 and o >= 1:
                return kind, (p, o)
        elif kind == "trace" and rest:
            return kind, (rest,)
        elif kind == "lognormal":
            parts = [float(x) for x in rest.split(",")]
            if len(parts) in (2, 3) and all(math.isfinite(x) and x > 0 for x in parts):
                return kind, tuple(parts) if len(parts) == 3 else (*parts, 1.0)
    except ValueError:
        pass
    raise TraceError(f"--lengths {spec!r}: give fixed:PROMPT,OUTPUT (e.g. fixed:512,128), "
                     "trace:PATH (resampled from a trace) or lognormal:PROMPT_MEAN,OUTPUT_MEAN[,CV]")


def synthetic_trace(rng: np.random.Generator, n: int, rate_per_s: float, lengths: str,
                    process: str = "poisson", cv: float = 1.0) -> Trace:
    """`n` requests arriving at `rate_per_s` with lengths from `lengths` (parse_lengths)."""
    times = arrival_times(rng, n, rate_per_s, process, cv)
    kind, args = parse_lengths(lengths)
    ids: list[tuple[int, ...]] = [()] * n
    block = 0
    if kind == "fixed":
        prompts, outputs = np.full(n, args[0]), np.full(n, args[1])
    elif kind == "trace":
        source = read_trace(args[0])
        pick = rng.integers(0, len(source.requests), n)
        prompts = np.array([source.requests[i].prompt_tokens for i in pick])
        outputs = np.array([source.requests[i].output_tokens for i in pick])
    else:
        mean_p, mean_o, cv_len = args
        sigma = math.sqrt(math.log1p(cv_len**2))

        def draw(mean: float) -> np.ndarray:
            return np.maximum(1, np.rint(rng.lognormal(math.log(mean) - sigma**2 / 2, sigma, n)))
        prompts, outputs = draw(mean_p), draw(mean_o)
    label = f"{process}{'' if process == 'poisson' else f' cv {cv:g}'} {rate_per_s:g}/s, {lengths}"
    # Python numbers from the arrays at once (the same values as float(times[i]) etc.)
    times, prompts, outputs = times.tolist(), prompts.tolist(), outputs.tolist()
    return Trace(label, tuple(Request(i, times[i], int(prompts[i]), int(outputs[i]), ids[i])
                              for i in range(n)), block)
