"""Every row of the bad-input table (tests/bad_inputs.py) is one `error:` line and exit 2."""

from __future__ import annotations

import errno

import pytest
from bad_inputs import CASES, filled, fixture_paths

from krakenlm.cli import main


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return fixture_paths(tmp_path_factory.mktemp("bad-inputs"))


@pytest.mark.parametrize("bad", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_error_line(bad, paths, capsys, monkeypatch):
    monkeypatch.chdir(paths["tmp"])  # anything a command writes by default lands here
    with pytest.raises(SystemExit) as exc:
        main(filled(bad, paths))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exc.value.code == bad.exit_code, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert bad.expect in lines[0], err


@pytest.mark.parametrize("code, advice", [(errno.ENOSPC, "free some space"),
                                          (errno.EROFS, "read-only"),
                                          (errno.EACCES, "permissions")])
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
