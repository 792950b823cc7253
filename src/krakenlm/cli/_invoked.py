"""Only the invoked command of the `krakenlm` app, for a faster start.

typer turns every registered command into a click command (reading its signature and type
hints) before it parses the command line: 28 commands, about a quarter of a cold
`krakenlm sim run`'s own start-up CPU. `invoked_only(app, args)` returns a copy of the app
that holds only the groups and the command that the leading words of `args` name
(`sim run ...` keeps the `sim` group with its `run` command), so typer builds just those. The
pruning stops at the first option (`--help`, `--tp`), at a word that names nothing (typer
then lists or suggests among every command, as before) and at a group holding an unnamed
sub-group; a name's command is the same object as in the full app, so its help, options and
errors do not change.
"""

from __future__ import annotations

import copy

import typer
from typer.main import get_command_name, solve_typer_info_defaults


def _name_of_command(info) -> str | None:
    if info.name:
        return info.name
    callback = getattr(info, "callback", None)
    return get_command_name(callback.__name__) if callback is not None else None


def invoked_only(app: typer.Typer, args: list[str]) -> typer.Typer:
    """A shallow copy of `app` keeping, level by level, only what the words of `args` name
    (`app` itself when it is not a typer app: a callable put in its place is called as is)."""
    if not isinstance(app, typer.Typer) or not args or args[0].startswith("-"):
        return app
    word, rest = args[0], args[1:]
    groups = {solve_typer_info_defaults(info).name: info for info in app.registered_groups}
    if not all(groups):  # an unnamed sub-group lends its commands to this level: keep all
        return app
    if word in groups:  # typer lets a group win over a command of the same name
        group = copy.copy(groups[word])
        group.typer_instance = invoked_only(group.typer_instance, rest)
        return _with(app, commands=[], groups=[group])
    for info in app.registered_commands:
        if _name_of_command(info) == word:
            return _with(app, commands=[info], groups=[])
    return app


def _with(app: typer.Typer, commands: list, groups: list) -> typer.Typer:
    pruned = copy.copy(app)
    pruned.registered_commands = commands
    pruned.registered_groups = groups
    return pruned
