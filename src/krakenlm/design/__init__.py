"""Hardware design-space exploration: knobs with physical ranges (and the one table of memory
technologies), workloads as objectives, `evaluate(design, objective) -> row`, grid and parallel
runners with a resumable table, multi-objective search (optuna NSGA-II), the preset grid of
`sim sweep` (sweep.py) and the reports the CLI prints (report.py). See docs/design-space.md.

    from krakenlm.design import Objective, evaluate
    row = evaluate({"cores": 64, "memory": "DDR5", "memory_units": 16},
                   Objective("throughput", "gpt3-175b", prompt_tokens=1024, gen_tokens=128))
"""

from .evaluate import Evaluator, evaluate
from .knobs import KNOBS, DesignSpace, DesignSpaceError, design_key, load_space, space_from_dict
from .objectives import Objective, ObjectiveError

__all__ = ["KNOBS", "DesignSpace", "DesignSpaceError", "Evaluator", "Objective",
           "ObjectiveError", "design_key", "evaluate", "load_space", "space_from_dict"]
