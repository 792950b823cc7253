"""`main` builds only the invoked command (cli/_invoked.py): the same command as the full app
builds, and every command wherever the words stop naming one."""

from __future__ import annotations

import pytest
import typer

from krakenlm.cli import app
from krakenlm.cli._invoked import invoked_only


def _leaves(command, path=()):
    subs = getattr(command, "commands", None)
    if subs is None:
        yield list(path), command
        return
    for name, sub in subs.items():
        yield from _leaves(sub, path + (name,))


FULL = typer.main.get_command(app)
LEAVES = list(_leaves(FULL))


def _opts(command) -> list:
    return [(p.name, tuple(p.opts), p.required, p.default) for p in command.params]


def test_every_leaf_is_reached():
    assert ["sim", "run"] in [path for path, _ in LEAVES] and len(LEAVES) > 20


@pytest.mark.parametrize("path, full", LEAVES, ids=[" ".join(p) for p, _ in LEAVES])
def test_a_named_command_is_built_alone_and_unchanged(path, full):
    command = typer.main.get_command(invoked_only(app, path + ["--tp", "8"]))
    for word in path:
        assert list(command.commands) == [word]  # one command per level, nothing else built
        command = command.commands[word]
    assert command.help == full.help and _opts(command) == _opts(full)


@pytest.mark.parametrize("args", [[], ["--help"], ["nope"], ["sim", "--help", "run"]])
def test_an_option_or_an_unknown_word_keeps_every_command_of_its_level(args):
    pruned = typer.main.get_command(invoked_only(app, args))
    level, full = pruned, FULL
    if args[:1] == ["sim"]:
        level, full = pruned.commands["sim"], FULL.commands["sim"]
        assert list(pruned.commands) == ["sim"]
    assert list(level.commands) == list(full.commands)


def test_the_full_app_is_left_as_it_was():
    invoked_only(app, ["sim", "run"])
    assert list(typer.main.get_command(app).commands) == list(FULL.commands)
