"""Load a script of benchmarks/ as a module, for tests of its arithmetic."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark(name: str, module_name: str | None = None):
    """benchmarks/<name>.py as a module, registered in sys.modules under `module_name`
    (default: `name`) first, since dataclasses look their module up there."""
    spec = importlib.util.spec_from_file_location(module_name or name,
                                                  ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
