"""Where the real GPU measurements are: $KRAKENLM_MEASURED_DIR, else ../shared/data/measured
next to this checkout (the original artifact's files, never copied into this repository).
Tests that need them are skipped, with the path in the reason, when the folder is absent."""

import os
from pathlib import Path

MEASURED = Path(os.environ.get("KRAKENLM_MEASURED_DIR")
                or Path(__file__).resolve().parents[2] / "shared" / "data" / "measured")
