"""The bad-input table in docs/bad-inputs.md: every row of tests/bad_inputs.py run as its own
`krakenlm` process, with its exit code, the whole of what it printed on stderr and its verdict.

    python benchmarks/bad_inputs_table.py [--out docs/bad-inputs.md] [--exec]

Each row's verdict (bad_inputs.verdict) is "one line" when the process did exactly what the row
promises: one `error:` line and exit 2, or, for a plausible input, success with one `warning:`
line. The others are a traceback, "silent" (the wrong exit code, or no `error:`/`warning:` line
where one was due), "multi-line" or "other message" (the promised kind of line, not the
expected words). The summary line (rows tried / one-line errors / one-line warnings /
tracebacks / silent acceptances / multi-line) heads the page
and is printed at the end; the exit code is 1 unless every row is one line. The test suite
checks the same rows in process (tests/test_cli_bad_inputs.py); this shows what a user sees.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from bad_inputs import CASES, NEW_USER_CASES, filled, filled_env, fixture_paths, verdict  # noqa: E402

from krakenlm.fileio import write_text_atomically  # noqa: E402

KRAKENLM = str(Path(sys.executable).with_name("krakenlm"))
TIMEOUT_S = 600
SECTIONS = (("Rows of the earlier rounds", CASES),
            ("New-user rows (issue 24): every command, tried as a hostile new user would",
             NEW_USER_CASES))


def run_row(bad, paths: dict[str, str], env: dict[str, str], root: str, *,
            fork: bool = True) -> dict:
    """One row as its own process: its exit code, stderr on one line (the temporary directory
    shown as TMP), verdict and seconds."""
    started = time.perf_counter()
    argv, env = filled(bad, paths), {**env, **filled_env(bad, paths)}
    run = forked_krakenlm if fork else executed_krakenlm
    code, stderr = run(argv, env, paths["tmp"])
    found = "silent" if code == "-" else verdict(bad, code, stderr)
    lines = [line for line in stderr.splitlines() if line.strip()]
    return {"bad": bad, "code": code, "message": " / ".join(lines).replace(root, "TMP"),
            "verdict": found, "seconds": time.perf_counter() - started}


def executed_krakenlm(argv: list[str], env: dict[str, str], cwd: str) -> tuple[int | str, str]:
    """`krakenlm ARGV` as a fresh process: its exit code ("-" when stopped after TIMEOUT_S) and
    stderr."""
    try:
        done = subprocess.run([KRAKENLM, *argv], capture_output=True, text=True, env=env,
                              cwd=cwd, timeout=TIMEOUT_S, errors="replace", check=False)
    except subprocess.TimeoutExpired:
        return "-", f"(no answer in {TIMEOUT_S} s; stopped)"
    return done.returncode, done.stderr


def forked_krakenlm(argv: list[str], env: dict[str, str], cwd: str) -> tuple[int | str, str]:
    """`krakenlm ARGV` as a child forked from this process, which has imported torch and numpy
    once (preload): the child sets the row's environment and directory, imports krakenlm afresh
    and runs its console-script entry point, so its exit code and stderr are those of a fresh
    process, without paying torch's import (seconds on a loaded machine) for every row. An
    exception that escapes is printed as the interpreter would (a traceback, exit 1)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            os._exit(_entry_point(argv, env, cwd))
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return "-", f"(no answer in {TIMEOUT_S} s; stopped)"
            time.sleep(0.02)
        err.seek(0)
        return os.waitstatus_to_exitcode(status), err.read().decode("utf-8", "replace")


def _entry_point(argv: list[str], env: dict[str, str], cwd: str) -> int:
    """In a forked child: run `krakenlm.cli.main(argv)` as the console script would, and return
    the exit code Python would exit with. Parent's atexit handlers (its temporary directory)
    must not run here, hence os._exit by the caller."""
    import traceback

    try:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = ["krakenlm", *argv]
        for name in [n for n in sys.modules if n == "krakenlm" or n.startswith("krakenlm.")]:
            del sys.modules[name]  # imported afresh, under the row's environment
        from krakenlm.cli import main as krakenlm_main

        krakenlm_main(argv)
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001  (what the interpreter does with an uncaught one)
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def preload() -> None:
    """The imports every torch-using row would repeat, done once before forking. Only libraries
    that read no setting a row changes (krakenlm, transformers and huggingface_hub read
    KRAKENLM_*/HF_* variables, so every child imports those itself)."""
    import numpy  # noqa: F401
    import torch  # noqa: F401


def fixtures_in_child(root: Path) -> dict[str, str]:
    """fixture_paths(root), built in a forked child so that this process never imports krakenlm
    or transformers (the rows' children import them under their own environment)."""
    result = root / "fixture-paths.json"
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            result.write_text(json.dumps(fixture_paths(root)))
            code = 0
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("could not build the fixtures (see the traceback above)")
    return json.loads(result.read_text())


def summary(rows: list[dict]) -> str:
    """N tried / one-line errors / one-line warnings / tracebacks / silent acceptances /
    multi-line, and rows with another message where there are any."""
    counts = Counter(row["verdict"] for row in rows)
    good = Counter(row["bad"].kind for row in rows if row["verdict"] == "one line")
    text = (f"{len(rows)} tried / {good['error']} one-line errors / {good['warning']} one-line "
            f"warnings / {counts['traceback']} tracebacks / {counts['silent']} silent acceptances "
            f"/ {counts['multi-line']} multi-line")
    return text + (f" / {counts['other message']} other message" if counts["other message"]
                   else "")


def all_one_line(rows: list[dict]) -> bool:
    return all(row["verdict"] == "one line" for row in rows)


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
    about = ("Every row is its own `krakenlm` process, forked from one that has imported "
             "torch (`--exec` starts the executable afresh for every row instead: the same exit "
             "codes and messages, slower) (placeholders in braces are fixtures: "
             "`{gpt}` a gpt-tiny checkpoint, `{file}` a regular file, `{readonly}` a directory "
             "nobody may create, ...; see tests/bad_inputs.py; TMP is their temporary "
             "directory; `NAME=value` before a command is an environment variable). Generated "
             "by `python benchmarks/bad_inputs_table.py`; the same rows are asserted in process "
             "by tests/test_cli_bad_inputs.py. A row is \"one line\" when the process did what "
             "it promises: one `error:` line and exit code 2, or for a plausible input (the rows "
             "with exit 0) its work with one `warning:` line. Otherwise it is a traceback, "
             "**silent** (wrong exit code, or no `error:`/`warning:` line where one was due), "
             "**multi-line** or **other message**.")
    text = ["# Bad input: what a user sees", "", f"**{summary(everything)}**", "",
            f"{len(sections[0][1])} rows of the earlier rounds and {len(sections[1][1])} new-user "
            "rows (issue 24), each section with its own summary below.", "", about, ""]
    for title, rows in sections:
        text += [f"## {title}", "", summary(rows) + ".", "", *table(rows), ""]
    return "\n".join(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "bad-inputs.md"))
    parser.add_argument("--exec", dest="fork", action="store_false",
                        help="Start every row as a fresh `krakenlm` executable (the default "
                             "forks each row from a process with torch imported: same exit "
                             "code and stderr, several times faster on a loaded machine).")
    args = parser.parse_args()
    if args.fork:
        preload()
    done: list[tuple[str, list[dict]]] = []
    total = sum(len(rows) for _, rows in SECTIONS)
    with tempfile.TemporaryDirectory() as root:
        paths = fixtures_in_child(Path(root)) if args.fork else fixture_paths(Path(root))
        env = dict(os.environ, KRAKENLM_CACHE=str(Path(root) / "cache"), COLUMNS="200")
        i = 0
        for title, cases in SECTIONS:
            rows = []
            for bad in cases:
                i += 1
                row = run_row(bad, paths, env, root, fork=args.fork)
                rows.append(row)
                print(f"[{i}/{total}] {row['verdict']:13s} exit {row['code']} "
                      f"{row['seconds']:5.1f} s  krakenlm {bad.shown}", file=sys.stderr)
            done.append((title, rows))
    write_text_atomically(args.out, page(done) + "\n")
    everything = [row for _, rows in done for row in rows]
    line = summary(everything)
    print(f"wrote {args.out}: {line}", file=sys.stderr)
    print(line)
    sys.exit(0 if all_one_line(everything) else 1)


if __name__ == "__main__":
    main()
