"""The CLI's own definitions, walked: every command, every parameter that names a path, and values for the required
ones. The tests that give every option a kind of value (tests/test_fuzz_cli.py, tests/test_secret_channels.py) take
their commands from here, so a new command or option is covered without editing them."""

from __future__ import annotations

from pathlib import Path

import click
from sglang_eagle3.cli import main


def subcommands(group: click.Group) -> dict[str, click.Command]:
    """A group's commands by name, through click's own interface: the top-level group loads each command's module
    only when asked for it (sglang_eagle3/cli.py), so it has no ``commands`` dict to read."""
    ctx = click.Context(group)
    return {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}


def leaf_commands(group: click.Group = main, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], click.Command]:
    """Every command that runs (not a group), by its words: ("models", "lock") -> the command."""
    found = {}
    for name, command in sorted(subcommands(group).items()):
        if isinstance(command, click.Group):
            found.update(leaf_commands(command, (*prefix, name)))
        else:
            found[(*prefix, name)] = command
    return found


def takes(command: click.Command, name: str) -> bool:
    return any(p.name == name for p in command.params)


def is_path(param: click.Parameter) -> bool:
    """A parameter that names a file or directory: click's Path, or text whose metavar says it is one (--sglang)."""
    metavar = (getattr(param, "metavar", None) or "").upper()
    return isinstance(param.type, click.Path) or any(word in metavar for word in ("DIR", "FILE", "PATH", "WHEEL"))


def given(param: click.Parameter, value: str) -> list[str]:
    """``param`` given ``value`` on a command line: an argument's value (both, for an argument of two values), or
    the option's first name and the value."""
    if isinstance(param, click.Argument):
        return [value] * (param.nargs if param.nargs > 1 else 1)
    return [param.opts[0], value]


def required_args(command: click.Command, values: dict[str, list[str]], skip: set[str], scratch: Path) -> list[str]:
    """Values for the command's required parameters but ``skip``: ``values`` by parameter name where given (a URL
    nothing answers, a lock, results files, a program), else one of the parameter's type (a path under
    ``scratch`` nothing created, a choice, the lowest number, text)."""
    args: list[str] = []
    for param in command.params:
        if not param.required or param.name in skip:
            continue
        chosen = values.get(param.name)
        if chosen is None:
            kind = param.type
            if isinstance(kind, click.Path):
                chosen = [str(scratch / "never-created" / param.name)]
            elif isinstance(kind, click.Choice):
                chosen = [str(kind.choices[0])]
            elif isinstance(kind, click.types._NumberRangeBase):
                chosen = [str(kind.min if kind.min is not None else 1)]
            else:
                chosen = ["x"]
        args += chosen if isinstance(param, click.Argument) else [param.opts[0], chosen[0]]
    return args
