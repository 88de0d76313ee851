"""Pieces shared by the command groups (`cli.py`, `bench/cli.py`)."""

from __future__ import annotations

from pathlib import Path

import click

from . import preflight, settings


class BadInput(click.ClickException):
    """Wrong input: the message says what is wrong and how to fix it."""

    exit_code = 2


def settings_options(func):
    func = click.option(
        "--profile", type=click.Choice(settings.PROFILES), default="eagle3", show_default=True,
        help="eagle3: the tuned EAGLE-3 server; baseline: the same server without speculation.",
    )(func)  # fmt: skip
    func = click.option(
        "--set", "assignments", multiple=True, metavar="FIELD=VALUE",
        help="Override one setting (repeatable), e.g. --set tp_size=4. Values are JSON or text.",
    )(func)  # fmt: skip
    func = click.option(
        "--config", type=click.Path(dir_okay=False, path_type=Path), envvar="SGLANG_EAGLE3_CONFIG",
        help="Settings file (JSON or TOML). Also $SGLANG_EAGLE3_CONFIG.",
    )(func)  # fmt: skip
    return func


def load_settings(config, assignments, profile) -> settings.ServerSettings:
    try:
        return settings.load(config, list(assignments), profile=profile)
    except settings.SettingsError as err:
        raise BadInput(str(err)) from None


def print_checks(report: preflight.Preflight) -> None:
    for check in report.checks:
        click.echo(f"[{check.verdict.upper():>4}] {check.name}: {check.message}")
