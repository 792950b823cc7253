"""The bad-input table in docs/bad-inputs.md: every row of tests/bad_inputs.py run as a real
`krakenlm` process, with its exit code, the whole of what it printed on stderr and its verdict.

    python benchmarks/bad_inputs_table.py [--out docs/bad-inputs.md]

Each row's verdict (bad_inputs.verdict) is "one line" when the process did exactly what the row
promises: one `error:` line and exit 2, or, for a plausible input, success with one `warning:`
line. The others are a traceback, "silent" (the wrong exit code, or no `error:`/`warning:` line
where one was due), "multi-line" or "other message" (the promised kind of line, not the
expected words). The summary line "N tried / one line / tracebacks / silent" heads the page
and is printed at the end; the exit code is 1 unless every row is one line. The test suite
checks the same rows in process (tests/test_cli_bad_inputs.py); this shows what a user sees.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from bad_inputs import CASES, NEW_USER_CASES, VERDICTS, filled, filled_env, fixture_paths, verdict  # noqa: E402

from krakenlm.fileio import write_text_atomically  # noqa: E402

KRAKENLM = str(Path(sys.executable).with_name("krakenlm"))
TIMEOUT_S = 600
SECTIONS = (("Rows of the earlier rounds", CASES),
            ("New-user rows (issue 24): every command, tried as a hostile new user would",
             NEW_USER_CASES))


def run_row(bad, paths: dict[str, str], env: dict[str, str], root: str) -> dict:
    """One row as a real process: its exit code, stderr on one line (the temporary directory
    shown as TMP), verdict and seconds."""
    started = time.perf_counter()
    try:
        done = subprocess.run([KRAKENLM, *filled(bad, paths)], capture_output=True, text=True,
                              env={**env, **filled_env(bad, paths)}, cwd=paths["tmp"],
                              timeout=TIMEOUT_S, errors="replace", check=False)
        code, stderr = done.returncode, done.stderr
        found = verdict(bad, code, stderr)
    except subprocess.TimeoutExpired:
        code, stderr, found = "-", f"(no answer in {TIMEOUT_S} s; stopped)", "silent"
    lines = [line for line in stderr.splitlines() if line.strip()]
    return {"bad": bad, "code": code, "message": " / ".join(lines).replace(root, "TMP"),
            "verdict": found, "seconds": time.perf_counter() - started}


def summary(rows: list[dict]) -> str:
    """N tried / one line / tracebacks / silent, and the other verdicts where there are any."""
    counts = Counter(row["verdict"] for row in rows)
    text = (f"{len(rows)} tried / {counts['one line']} one line / {counts['traceback']} "
            f"tracebacks / {counts['silent']} silent")
    others = [f"{counts[v]} {v}" for v in VERDICTS[3:] if counts[v]]
    return text + (f" ({', '.join(others)})" if others else "")


def table(rows: list[dict]) -> list[str]:
    text = ["| command (`krakenlm ...`) | exit | stderr | verdict | s |",
            "|---|---:|---|:-:|---:|"]
    for row in rows:
        cell = row["message"].replace("|", "\\|")
        shown = row["bad"].shown.replace("|", "\\|")
        mark = row["verdict"] if row["verdict"] == "one line" else f"**{row['verdict']}**"
        text.append(f"| `{shown}` | {row['code']} | {cell} | {mark} | {row['seconds']:.1f} |")
    return text


def page(sections: list[tuple[str, list[dict]]]) -> str:
    everything = [row for _, rows in sections for row in rows]
    about = ("Every row is a real `krakenlm` process (placeholders in braces are fixtures: "
             "`{gpt}` a gpt-tiny checkpoint, `{file}` a regular file, `{readonly}` a directory "
             "nobody may create, ...; see tests/bad_inputs.py; TMP is their temporary "
             "directory; `NAME=value` before a command is an environment variable). Generated "
             "by `python benchmarks/bad_inputs_table.py`; the same rows are asserted in process "
             "by tests/test_cli_bad_inputs.py. A row is \"one line\" when the process did what "
             "it promises: one `error:` line and exit code 2, or for a plausible input (the rows "
             "with exit 0) its work with one `warning:` line. Otherwise it is a traceback, "
             "**silent** (wrong exit code, or no `error:`/`warning:` line where one was due), "
             "**multi-line** or **other message**.")
    text = ["# Bad input: what a user sees", "", f"**{summary(everything)}**", "", about, ""]
    for title, rows in sections:
        text += [f"## {title}", "", summary(rows) + ".", "", *table(rows), ""]
    return "\n".join(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "bad-inputs.md"))
    args = parser.parse_args()
    done: list[tuple[str, list[dict]]] = []
    total = sum(len(rows) for _, rows in SECTIONS)
    with tempfile.TemporaryDirectory() as root:
        paths = fixture_paths(Path(root))
        env = dict(os.environ, KRAKENLM_CACHE=str(Path(root) / "cache"), COLUMNS="200")
        i = 0
        for title, cases in SECTIONS:
            rows = []
            for bad in cases:
                i += 1
                row = run_row(bad, paths, env, root)
                rows.append(row)
                print(f"[{i}/{total}] {row['verdict']:13s} exit {row['code']} "
                      f"{row['seconds']:5.1f} s  krakenlm {bad.shown}", file=sys.stderr)
            done.append((title, rows))
    write_text_atomically(args.out, page(done) + "\n")
    line = summary([row for _, rows in done for row in rows])
    print(f"wrote {args.out}: {line}", file=sys.stderr)
    print(line)
    sys.exit(0 if line.split(" / ")[1] == f"{total} one line" else 1)


if __name__ == "__main__":
    main()
