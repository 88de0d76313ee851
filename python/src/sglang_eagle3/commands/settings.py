"""`sglang-eagle3 settings`: the effective settings, their JSON Schema, the reference table."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .. import errors, options, redaction
from ..cli_common import load_settings
from ..errors import BadInput
from ..serving import settings


@click.group("settings")
def settings_group() -> None:
    """Show the server settings, their JSON Schema, or the reference table."""


@settings_group.command("show")
@options.server_settings
def settings_show(config, assignments, profile) -> None:
    """The effective settings as JSON (after file, environment, --set and profile); secrets masked."""
    shown = load_settings(config, assignments, profile).model_dump(mode="json")
    errors.settle()  # read: what is left is to print them, which a late signal does not undo
    shown["environment"] = redaction.masked_env(shown["environment"])
    click.echo(json.dumps(redaction.hide_values(shown), indent=2))


@settings_group.command("schema")
def settings_schema() -> None:
    """JSON Schema of the settings (the NixOS module and the docs are generated from it)."""
    errors.settle()
    click.echo(json.dumps(settings.json_schema(), indent=2))


@settings_group.command("reference")
@click.option(
    "--write", type=options.NonEmptyPath(exists=True, dir_okay=False, path_type=Path), help="Update this file's block."
)
def settings_reference(write: Path | None) -> None:
    """The settings reference as a Markdown table (docs/serve.md embeds it between markers)."""
    table = settings.reference_markdown()
    if write is None:
        click.echo(table)
        return
    start, end = "<!-- settings-reference:start -->", "<!-- settings-reference:end -->"
    if not write.is_file():  # a FIFO or device would block or never end
        raise BadInput(f"{write} is not a regular file")
    try:
        text = write.read_text()
    except UnicodeDecodeError:
        raise BadInput(f"{write} is not UTF-8 text") from None
    if start not in text or end not in text:
        raise BadInput(f"{write} has no {start} ... {end} block to update")
    before, rest = text.split(start, 1)
    try:
        write.write_text(f"{before}{start}\n{table}\n{end}{rest.split(end, 1)[1]}")
    except OSError as err:
        raise BadInput(f"cannot write {write}: {err.strerror}") from None
    click.echo(f"updated the settings reference in {write}")
