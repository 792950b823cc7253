"""Multi-objective search over a design space with optuna's NSGA-II (seeded, reproducible).

Objectives, all from the same `evaluate` row: maximise performance (the workload objective's
score), minimise system $, minimise die area (the reticle limit is a feasibility bound, not an
objective). Power is not modelled. An infeasible design is reported to optuna as a constraint
violation (NSGA-II's constrained domination ranks every feasible design ahead of it), and
kept in the table with its reason. Returns every trial's row and the Pareto front of the
feasible ones.
"""

from __future__ import annotations

from typing import Any

from ..errors import KrakenError, check_seed
from .evaluate import Evaluator
from .knobs import KNOBS, DesignSpace, Range

OBJECTIVES = ("perf", "system_usd", "die_area_mm2")
DIRECTIONS = ("maximize", "minimize", "minimize")


def _suggest(trial, name: str, spec) -> Any:
    knob = KNOBS[name]
    if isinstance(spec, Range):
        if knob.kind == "int":
            return trial.suggest_int(name, int(spec.low), int(spec.high), log=spec.log)
        return trial.suggest_float(name, spec.low, spec.high, log=spec.log)
    return trial.suggest_categorical(name, list(spec))


def pareto_front(rows: list[dict[str, Any]], objectives=OBJECTIVES,
                 directions=DIRECTIONS) -> list[dict[str, Any]]:
    """The feasible rows no other feasible row dominates (>= on every objective, > on one)."""
    sign = [1 if d == "maximize" else -1 for d in directions]
    feas = [r for r in rows if r.get("feasible")]

    def vec(r):
        return [s * r[o] for s, o in zip(sign, objectives)]
    vecs = [vec(r) for r in feas]
    front = []
    for i, v in enumerate(vecs):
        dominated = any(all(a >= b for a, b in zip(w, v)) and any(a > b for a, b in zip(w, v))
                        for j, w in enumerate(vecs) if j != i)
        if not dominated:
            front.append(feas[i])
    return front


def search(space: DesignSpace, evaluator: Evaluator, trials: int, seed: int = 0,
           population: int = 24, progress: bool = False) -> dict[str, Any]:
    try:
        import optuna
    except ImportError:
        raise KrakenError("search needs optuna: pip install 'krakenlm[design]'") from None
    if trials < 1:
        raise KrakenError(f"--trials must be at least 1, got {trials}")
    if population < 2:  # NSGA-II breeds each child from two parents
        raise KrakenError(f"--population must be at least 2 (NSGA-II crosses two parents), "
                          f"got {population}")
    check_seed(seed, bits=32)  # the sampler seeds numpy's RandomState
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows: list[dict[str, Any]] = []
    sampler = optuna.samplers.NSGAIISampler(population_size=population, seed=seed)
    study = optuna.create_study(directions=list(DIRECTIONS), sampler=sampler)

    def objective(trial):
        design = {name: _suggest(trial, name, spec) for name, spec in space.knobs.items()}
        row = evaluator.evaluate(design)
        row["trial"] = trial.number
        rows.append(row)
        trial.set_constraint("infeasible", 0.0 if row["feasible"] else 1.0)
        if not row["feasible"]:
            # any finite values: the constraint ranks the trial behind every feasible one
            return 0.0, row["system_usd"], row["die_area_mm2"]
        return row["perf"], row["system_usd"], row["die_area_mm2"]

    study.optimize(objective, n_trials=trials, show_progress_bar=progress)
    return {"rows": rows, "front": pareto_front(rows), "baseline": evaluator.baseline,
            "trials": trials, "seed": seed}
