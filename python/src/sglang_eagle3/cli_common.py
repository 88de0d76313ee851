"""Pieces shared by the command groups (`cli.py`, `bench/cli.py`); their shared options are in options.py."""

from __future__ import annotations

import math
import os
from pathlib import Path

import click

from . import errors
from .errors import BadInput, Eagle3Error
from .exit_status import ExitStatus
from .serving import credentials, settings

TRACEBACK_ENV = "SGLANG_EAGLE3_TRACEBACK"


class TopLevelGroup(click.Group):
    """The `sglang-eagle3` group: the one place where a failure becomes a message and an exit status.

    Commands raise an Eagle3Error (BadInput, CheckFailed, Interrupted, ModelsError, ...)
    carrying its ExitStatus; this prints it and exits with that status, as httpie's main
    does. Below that, as a net: a file that cannot be read or written is bad input, Ctrl-C
    is an interruption, and anything else is a bug: one line and ExitStatus.UNEXPECTED,
    apart from 1 (a check said no). SGLANG_EAGLE3_TRACEBACK=1 shows the traceback instead.
    """

    def invoke(self, ctx: click.Context):
        errors.on_sigterm()  # SIGTERM: one line and ExitStatus.TERMINATED, as Ctrl-C gets one and INTERRUPTED
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # click's usage errors (exit 2) and the commands' verdicts (their exit status)
        except Eagle3Error as err:
            ctx.exit(errors.report(err))
        except errors.Terminated:
            ctx.exit(errors.report(errors.Interrupted("terminated by SIGTERM", ExitStatus.TERMINATED)))
        except KeyboardInterrupt:
            ctx.exit(errors.report(errors.Interrupted("interrupted by Ctrl-C (SIGINT)")))
        except Exception as err:
            if os.environ.get(TRACEBACK_ENV):
                raise
            if isinstance(err, (OSError, UnicodeError)):
                ctx.exit(errors.report(BadInput(_describe_os_error(err))))
            unexpected = f"unexpected {type(err).__name__}: {err} ({TRACEBACK_ENV}=1 shows where)"
            ctx.exit(errors.report(Eagle3Error(unexpected, ExitStatus.UNEXPECTED)))


def _describe_os_error(err: OSError | UnicodeError) -> str:
    if isinstance(err, UnicodeError):
        return f"a file is not UTF-8 text ({err}); give a text file"
    where = f"{err.filename}: " if err.filename else ""
    return f"{where}{err.strerror or err}; check the path and its permissions"


class FiniteFloat(click.ParamType):
    """A finite number above ``minimum`` (click's FloatRange lets nan and inf through)."""

    name = "number"

    def __init__(self, minimum: float, inclusive: bool):
        self.minimum, self.inclusive = minimum, inclusive

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if number < self.minimum or (number == self.minimum and not self.inclusive):
            bound = ">=" if self.inclusive else ">"
            self.fail(f"{value!r} must be {bound} {self.minimum:g}", param, ctx)
        return number


def writable_file(path: Path) -> Path:
    """``path`` if a results file can be written there (its directory is created); else BadInput."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise BadInput(f"cannot create the directory {path.parent} for {path}: {err.strerror}") from None
    if path.is_dir():
        raise BadInput(f"{path} is a directory; give a file name for the results")
    if not os.access(path if path.exists() else path.parent, os.W_OK):
        raise BadInput(f"cannot write {path}: permission denied; choose another --output")
    return path


def load_settings(config, assignments, profile) -> settings.ServerSettings:
    return settings.load(config, list(assignments), profile=profile)  # SettingsError is BadInput


def check_key_files(loaded: settings.ServerSettings) -> None:
    """Every key file the settings name (or systemd hands over) is usable; else KeyFileError, bad input as a bad
    --api-key-file is in `bench run`: a file named that cannot be used is bad input (exit 2) in every command,
    reported before anything runs (never the key)."""
    for secret in credentials.SECRET_ARGS:
        path = credentials.key_file(secret, getattr(loaded, secret.setting), os.environ)
        if path is not None:
            credentials.read_key(path, secret.setting)
