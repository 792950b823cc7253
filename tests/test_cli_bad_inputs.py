"""Every row of the bad-input table (tests/bad_inputs.py) is one line: an `error:` line and
exit 2, or for a plausible input a `warning:` line and success."""

from __future__ import annotations

import errno

import pytest
import torch
from bad_inputs import CASES, NEW_USER_CASES, filled, filled_env, fixture_paths, verdict

from krakenlm.cli import main

ROWS = [pytest.param(c, id=c.id, marks=pytest.mark.xfail(strict=True, reason=c.known))
        if c.known else pytest.param(c, id=c.id) for c in CASES + NEW_USER_CASES]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return fixture_paths(tmp_path_factory.mktemp("bad-inputs"))


@pytest.mark.parametrize("bad", ROWS)
def test_bad_input_is_one_line(bad, paths, capsys, monkeypatch):
    monkeypatch.chdir(paths["tmp"])  # anything a command writes by default lands here
    for name, value in filled_env(bad, paths).items():
        monkeypatch.setenv(name, value)
    threads = torch.get_num_threads()  # `train --threads N` sets the process's thread count
    try:
        with pytest.raises(SystemExit) as exc:
            main(filled(bad, paths))
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert verdict(bad, exc.value.code, err) == "one line", err


@pytest.mark.parametrize("code, advice", [(errno.ENOSPC, "free some space"),
                                          (errno.EROFS, "read-only"),
                                          (errno.EACCES, "permissions"),
                                          (errno.EEXIST, "in the way of a directory")])
def test_filesystem_errors_anywhere_are_one_line(code, advice, capsys, monkeypatch):
    """A full or read-only disk is the user's to fix, whichever command hits it."""
    from krakenlm.cli import models as models_cli

    def broken(*args, **kwargs):
        raise OSError(code, "simulated", "/somewhere/out.json")

    monkeypatch.setattr(models_cli, "stdout_console", broken)
    with pytest.raises(SystemExit) as exc:
        main(["models"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert err.startswith("error: simulated (/somewhere/out.json): ") and advice in err


def test_ctrl_c_exits_130_with_one_line(capsys, monkeypatch):
    from krakenlm.cli import models as models_cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(models_cli, "stdout_console", interrupted)
    with pytest.raises(SystemExit) as exc:
        main(["models"])
    assert exc.value.code == 130
    assert capsys.readouterr().err.strip() == "interrupted (Ctrl-C)"


def test_help_and_success_exit_0(capsys):
    for argv in (["--help"], ["sim", "run", "--help"], ["models"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0
