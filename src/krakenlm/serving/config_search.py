"""One serving configuration, evaluated: the replay of a trace (`command.serve_command`) with
a configuration's TP, replicas, token budget per step (the prefill chunk), max_num_seqs,
system, architecture and KV cache dtype, reduced to a row with its goodput, its $ per hour and goodput per $
and per GPU. With the objective "capacity" the configuration's capacity under the SLOs is
searched instead (`command.capacity_command`, as `sim serve --capacity`: the largest rate
scale of the trace whose percentile TTFT and TPOT meet them, to 1 %), and the row carries that
capacity, its requests per $ and per GPU, and the figures of the replay at the capacity. Also
the search-space file: the fixed `sim serve` options plus a list of values per searched
option. The search itself runs the rows through design's runner
(studies/serving_search.py)."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import KrakenError
from .command import ServeOptions, capacity_command, serve_command
from .kv_cache import KV_CACHE_DTYPES

# the options a space may search, with the type of their values
SEARCHED = {"tp": int, "replicas": int, "max_num_batched_tokens": int, "max_num_seqs": int,
            "system": str, "arch": str, "kv_cache_dtype": str}
ROW_FIELDS = ("key", "devices", "goodput_requests_per_s", "attainment", "usd_per_hour",
              "goodput_requests_per_usd", "goodput_requests_per_s_per_gpu",
              "output_tokens_per_s", "p99_ttft_s", "p99_tpot_s", "overloaded", "error")
# what a configuration is ranked by: its goodput at the space's offered rate, or its capacity
# under the SLOs (the largest rate meeting them)
OBJECTIVES = ("goodput", "capacity")
CAPACITY_FIELDS = ("capacity_requests_per_s", "capacity_requests_per_usd",
                   "capacity_requests_per_s_per_gpu")


def row_fields(objective: str = "goodput") -> tuple[str, ...]:
    """The figures of a row: ROW_FIELDS, and CAPACITY_FIELDS for the capacity objective (whose
    goodput, percentiles and attainment are then the replay's at the capacity)."""
    return ROW_FIELDS + CAPACITY_FIELDS if objective == "capacity" else ROW_FIELDS


class ConfigSpaceError(KrakenError, ValueError):
    """A configuration-space file that cannot be searched; the message says what to fix."""


@dataclass(frozen=True)
class ConfigSpace:
    """A serving configuration search space from its file: the `sim serve` options every
    configuration shares (`fixed`, ServeOptions fields) and, per searched option (SEARCHED), its
    list of values; `grid()` is their product."""
    fixed: dict[str, Any]           # ServeOptions fields every configuration shares
    space: dict[str, list[Any]]     # searched option -> its values

    def grid(self) -> list[dict[str, Any]]:
        """Every combination of the searched values, in file order."""
        names = list(self.space)
        return [dict(zip(names, values))
                for values in itertools.product(*(self.space[n] for n in names))]

    def to_dict(self) -> dict[str, Any]:
        return {"fixed": self.fixed, "space": self.space}


def parse_space(data: Any, where: str) -> ConfigSpace:
    """A ConfigSpace from a mapping `{space: {option: [values]}, <sim serve option>: value}`;
    a ConfigSpaceError naming the problem in `where` otherwise."""
    if not isinstance(data, dict):
        raise ConfigSpaceError(f"{where}: a configuration space is a mapping with a `space:` "
                               "section (option: [values]) and the fixed `sim serve` options")
    fields = ServeOptions.__dataclass_fields__
    space = data.get("space")
    if not isinstance(space, dict) or not space:
        raise ConfigSpaceError(f"{where}: needs a non-empty `space:` mapping of searched "
                               f"options ({', '.join(SEARCHED)}) to lists of values")
    fixed = {k: v for k, v in data.items() if k != "space"}
    unknown = [k for k in fixed if k not in fields]
    if unknown:
        raise ConfigSpaceError(f"{where}: unknown option {unknown[0]!r}; the fixed options are "
                               "`sim serve`'s (trace, model, system, rate, requests, lengths, "
                               "seed, slo_ttft_s, ...)")
    for name, value in fixed.items():
        _check_fixed(where, name, value, str(fields[name].type))
    if "kv_cache_dtype" in fixed:
        _check_kv_cache_dtype(where, "option", fixed["kv_cache_dtype"])
    for need in ("trace", "model"):
        if need not in fixed:
            raise ConfigSpaceError(f"{where}: give `{need}:` (as `sim serve --{need}`)")
    checked: dict[str, list[Any]] = {}
    for name, values in space.items():
        kind = SEARCHED.get(name)
        if kind is None:
            raise ConfigSpaceError(f"{where}: space option {name!r} cannot be searched; "
                                   f"searchable: {', '.join(SEARCHED)}")
        if name in fixed:
            raise ConfigSpaceError(f"{where}: {name!r} is both fixed and searched; keep one")
        if not isinstance(values, list) or not values:
            raise ConfigSpaceError(f"{where}: space option {name!r} needs a non-empty list of "
                                   f"values, got {values!r}")
        for v in values:
            if kind is int and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigSpaceError(f"{where}: space option {name!r} takes positive "
                                       f"integers, got {v!r}")
            if kind is str and not isinstance(v, str):
                raise ConfigSpaceError(f"{where}: space option {name!r} takes names, got {v!r}")
            if name == "kv_cache_dtype":
                _check_kv_cache_dtype(where, "space option", v)
        checked[name] = list(values)
    if "system" not in fixed and "system" not in checked:
        raise ConfigSpaceError(f"{where}: give `system:` (fixed) or search it in `space:`")
    return ConfigSpace(fixed, checked)


def _check_kv_cache_dtype(where: str, what: str, value: Any) -> None:
    if value not in KV_CACHE_DTYPES:
        raise ConfigSpaceError(f"{where}: {what} 'kv_cache_dtype' takes "
                               f"{', '.join(KV_CACHE_DTYPES)}, got {value!r}")


def _check_fixed(where: str, name: str, value: Any, annotation: str) -> None:
    """A fixed option's value has the type `sim serve` takes for it (from ServeOptions'
    annotation), so that a typo is one error here rather than one per configuration."""
    kinds = {k.strip() for k in annotation.split("|")} - {"None"}
    if value is None and "None" in annotation:
        return
    if kinds == {"bool"}:
        ok = isinstance(value, bool)
    elif kinds <= {"int", "float"}:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = ok and ("float" in kinds or isinstance(value, int))
    elif kinds == {"str"}:
        ok = isinstance(value, str)
    else:  # int | str (replicas): a count or a pool spec
        ok = isinstance(value, (int, str)) and not isinstance(value, bool)
    if not ok:
        raise ConfigSpaceError(f"{where}: option {name!r} takes {' or '.join(sorted(kinds))}, "
                               f"got {value!r}")


def load_space(path: str | Path) -> ConfigSpace:
    import yaml

    from .. import yamlio
    from ..fileio import read_user_text

    try:
        data = yamlio.safe_load(read_user_text(path, "configuration space file",
                                               ConfigSpaceError))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigSpaceError(f"{path} is not valid YAML{at}: fix the file") from None
    return parse_space(data, str(path))


def config_key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def evaluate_config(fixed: dict[str, Any], config: dict[str, Any], objective: str = "goodput",
                    percentile: int = 99) -> dict[str, Any]:
    """One replay of `fixed` with `config`'s options: its goodput (requests/s meeting the
    SLOs), $ per hour of its GPUs (the report's amortised cost), goodput per $ and per GPU.
    With `objective` "capacity", the capacity search of that configuration (its `percentile`
    TTFT and TPOT within the SLOs): the capacity in requests/s, per $ (capacity x 3600 / $ per
    hour) and per GPU, and the other figures from the replay at the capacity. A configuration
    that cannot run (does not fit, a TP the model cannot split, SLOs no rate meets) is a row
    with its `error` and no figures, so that a search goes on."""
    options = ServeOptions(**{**fixed, **config})
    row: dict[str, Any] = {f"cfg_{k}": v for k, v in config.items()}
    row.update({k: None for k in row_fields(objective)}, key=config_key(config), error="")
    try:
        if objective == "capacity":
            capacity = capacity_command(options, percentile)
            report = capacity.report
        else:
            report = serve_command(options)
    except KrakenError as exc:
        row["error"] = str(exc)
        return row
    s = report.summary
    goodput = s["slo"]["goodput_requests_per_s"] or 0.0
    usd_per_hour = s["cost"]["usd"] / s["makespan_s"] * 3600 if s["makespan_s"] else None
    devices = int(report.setup["devices"])
    row.update(devices=devices, goodput_requests_per_s=goodput,
               attainment=s["slo"]["attainment"], usd_per_hour=usd_per_hour,
               goodput_requests_per_usd=goodput * 3600 / usd_per_hour if usd_per_hour else None,
               goodput_requests_per_s_per_gpu=goodput / devices,
               output_tokens_per_s=s["throughput"]["output_tokens_per_s"],
               p99_ttft_s=s["ttft_s"]["p99"], p99_tpot_s=s["tpot_s"].get("p99"),
               overloaded=bool(s["overloaded"]))
    if objective == "capacity":
        rate = capacity.rate_per_s
        row.update(capacity_requests_per_s=rate,
                   capacity_requests_per_usd=rate * 3600 / usd_per_hour if usd_per_hour
                   else None,
                   capacity_requests_per_s_per_gpu=rate / devices)
    return row


def evaluate_configs(fixed: dict[str, Any], objective: str, percentile: int,
                     configs: list[dict[str, Any]]) -> list[dict]:
    """A worker's unit of work for design's runner (module level, picklable arguments; the
    runner passes the chunk of configurations last)."""
    return [evaluate_config(fixed, c, objective, percentile) for c in configs]
