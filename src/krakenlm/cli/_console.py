"""The rich consoles of `krakenlm.console`, under the name cli/sim.py and cli/sim_design.py
import them by; the rest of the CLI imports `krakenlm.console` itself."""

from ..console import stderr_console, stdout_console, table

__all__ = ["stderr_console", "stdout_console", "table"]
