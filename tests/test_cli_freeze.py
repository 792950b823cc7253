"""`sim run` keeps what it imported out of the cycle collector's passes (`cli.imported_for_good`)
only when the process ends with it: the console script, not `main(argv)` called from Python."""

import gc
import sys

import pytest

from krakenlm.cli import main

SIM_RUN = ["sim", "run", "--system", "a100-80gb-x4", "--model", "llama3-8b", "--prompt", "128",
           "--gen", "2", "--json"]


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_the_console_script_freezes_the_imports_of_sim_run(unfrozen, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["krakenlm", *SIM_RUN])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 0 and gc.get_freeze_count() > 0
    assert '"ttft_s"' in capsys.readouterr().out


def test_main_called_from_python_freezes_nothing(unfrozen, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(SIM_RUN)
    assert exit_.value.code == 0 and gc.get_freeze_count() == 0
    assert '"ttft_s"' in capsys.readouterr().out
