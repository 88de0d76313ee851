"""The ``sglang-eagle3`` command: the top-level group and its commands (each group in commands/). Its exit statuses
are listed in exit_status.py (and in --help)."""

from __future__ import annotations

import click

from . import __version__
from .cli_common import TopLevelGroup
from .exit_status import help_text

# The commands, in the order --help lists them (click's: by name). A command's module is imported only when it
# runs, or when --help lists them all (click's lazily loaded subcommands): `models lock` need not load pydantic and
# the settings model, nor `patch list` the benchmark's client. A program run is one command: most of its start.
COMMANDS = ("bench", "models", "patch", "probe", "serve", "settings")


def _command(name: str) -> click.Command | None:
    if name == "patch":
        from .commands.patch import patch_group as command
    elif name == "probe":
        from .commands.probe import probe_command as command
    elif name == "settings":
        from .commands.settings import settings_group as command
    elif name == "serve":
        from .commands.serve import serve_command as command
    elif name == "bench":
        from .commands.bench import bench_group as command
    elif name == "models":
        from .commands.models import models_group as command
    else:
        return None
    return command


class _Commands(TopLevelGroup):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return _command(cmd_name)


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="\b\nExit status:\n" + help_text(),
)
@click.version_option(__version__, prog_name="sglang-eagle3")
def main() -> None:
    """Serve Kimi-K2.5 with EAGLE-3 on SGLang 0.5.9 or 0.5.23: patch set, probe, launcher, benchmark."""


if __name__ == "__main__":  # python -m sglang_eagle3.cli: the program, as sglang-eagle3 is
    main(restore_signals=False)
