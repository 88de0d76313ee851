"""The ``sglang-eagle3`` command: the top-level group and its commands (each group in commands/). Its exit statuses
are listed in exit_status.py (and in --help)."""

from __future__ import annotations

import click

from . import __version__
from .cli_common import TopLevelGroup
from .commands.bench import bench_group
from .commands.models import models_group
from .commands.patch import patch_group
from .commands.probe import probe_command
from .commands.serve import serve_command
from .commands.settings import settings_group
from .exit_status import help_text


@click.group(
    cls=TopLevelGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="\b\nExit status:\n" + help_text(),
)
@click.version_option(__version__, prog_name="sglang-eagle3")
def main() -> None:
    """Serve Kimi-K2.5 with EAGLE-3 on SGLang 0.5.9 or 0.5.23: patch set, probe, launcher, benchmark."""


for command in (patch_group, probe_command, settings_group, serve_command, bench_group, models_group):
    main.add_command(command)


if __name__ == "__main__":  # python -m sglang_eagle3.cli: the program, as sglang-eagle3 is
    main(restore_signals=False)
