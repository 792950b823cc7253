"""Every command's `--help` shows its help text as written: square brackets are text (install
hints such as 'krakenlm[cluster]', '[default: ...]' notes), never taken for markup and dropped."""

from __future__ import annotations

import re

import pytest

from krakenlm.cli import app, main


def _commands():
    """(argv path, click command) of every command and group, the root included."""
    import typer

    def walk(path, command):
        yield path, command
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(path + [name], sub)
    return list(walk([], typer.main.get_command(app)))


COMMANDS = _commands()


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)  # help is wrapped, at spaces and after hyphens


def test_the_walk_finds_the_commands_with_bracketed_help():
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"sim explore", "sim calibrate", "bench tp", "train"} <= names


@pytest.mark.parametrize("path, command", COMMANDS, ids=[" ".join(p) or "krakenlm"
                                                          for p, _ in COMMANDS])
def test_help_keeps_bracketed_text_and_defaults(path, command, capsys):
    with pytest.raises(SystemExit) as exc:
        main(path + ["--help"])
    assert exc.value.code == 0
    shown = _squeezed(capsys.readouterr().out)
    texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
    for text in texts:
        for bracketed in re.findall(r"\[[^\]]*\]", text):
            assert _squeezed(bracketed) in shown, (bracketed, path)
    for param in command.params:
        default = getattr(param, "default", None)
        if getattr(param, "show_default", True) is False or param.name == "help":
            continue
        if isinstance(default, (int, float, str)) and not isinstance(default, bool) \
                and default != "":
            assert _squeezed(f"[default: {default}") in shown or \
                _squeezed(f"default: {default}") in shown, (param.name, default, path)


def test_the_install_hints_survive():
    import io
    from contextlib import redirect_stdout

    for argv, hint in ((["sim", "explore", "--help"], "pip install 'krakenlm[cluster]'"),
                       (["sim", "calibrate", "--help"], "pip install 'krakenlm[calibrate]'"),
                       (["bench", "tp", "--help"], "[default: 2]")):
        out = io.StringIO()
        with redirect_stdout(out), pytest.raises(SystemExit):
            main(argv)
        assert _squeezed(hint) in _squeezed(out.getvalue()), argv
