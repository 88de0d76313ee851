"""Pieces shared by the command groups (commands/); their shared options are in options.py."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import click

from . import errors
from .errors import BadInput, Eagle3Error, shown, shown_path
from .exit_status import ExitStatus
from .serving import credentials, settings

TRACEBACK_ENV = "SGLANG_EAGLE3_TRACEBACK"
# ctx.meta keys (meta is shared by every context of one invocation): --json was given, so a failure is also a JSON
# object on stdout (options.json_output sets it); a command printed its own JSON failure already (models).
JSON_ERRORS = "sglang_eagle3.json"
JSON_PRINTED = "sglang_eagle3.json_printed"
_ARGV = "sglang_eagle3.argv"  # the command line as given: a usage error may stop click before --json is read


class TopLevelGroup(click.Group):
    """The `sglang-eagle3` group: the one place where a failure becomes a message and an exit status.

    Commands raise an Eagle3Error (BadInput, CheckFailed, Interrupted, ModelsError, ...)
    carrying its ExitStatus; this prints it and exits with that status, as httpie's main
    does. Below that, as a net: a file that cannot be read or written is bad input, Ctrl-C
    is an interruption, and anything else is a bug: one line and ExitStatus.UNEXPECTED,
    apart from 1 (a check said no). SGLANG_EAGLE3_TRACEBACK=1 shows the traceback instead.
    With --json every failure is also one JSON object on stdout, click's usage errors included.
    """

    def invoke(self, ctx: click.Context):
        # SIGTERM: one line and ExitStatus.TERMINATED, as Ctrl-C gets one and INTERRUPTED; the handler it replaced
        # is put back at the end (a program that runs the commands in-process, such as click's test runner).
        previous = errors.on_sigterm()
        try:
            return self._invoke(ctx)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_ARGV] = list(args)
        return super().parse_args(ctx, args)

    def _invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.ClickException as err:  # click's usage errors (exit 2): click prints them on stderr
            if _json_asked(ctx):
                known = err.exit_code in {int(status) for status in ExitStatus}
                self._print_json(ExitStatus(err.exit_code).name.lower() if known else "error", err.format_message())
            raise
        except (click.exceptions.Exit, click.Abort):
            raise  # the commands' verdicts (their exit status)
        except Eagle3Error as err:
            self._fail(ctx, err)
        except errors.Terminated:
            self._fail(ctx, errors.Interrupted("terminated by SIGTERM", ExitStatus.TERMINATED))
        except KeyboardInterrupt:
            self._fail(ctx, errors.Interrupted("interrupted by Ctrl-C (SIGINT)"))
        except Exception as err:
            if os.environ.get(TRACEBACK_ENV):
                raise
            if isinstance(err, (OSError, UnicodeError)):
                self._fail(ctx, BadInput(_describe_os_error(err)))
            unexpected = f"unexpected {type(err).__name__}: {err} ({TRACEBACK_ENV}=1 shows where)"
            self._fail(ctx, Eagle3Error(unexpected, ExitStatus.UNEXPECTED))

    @staticmethod
    def _fail(ctx: click.Context, err: Eagle3Error):
        """The error on stderr and its status; with --json, also as JSON on stdout, the same for every command."""
        if ctx.meta.get(JSON_ERRORS) and not ctx.meta.get(JSON_PRINTED):
            TopLevelGroup._print_json(getattr(err, "kind", None) or err.status.name.lower(), str(err))
        ctx.exit(errors.report(err))

    @staticmethod
    def _print_json(kind: str, message: str) -> None:
        click.echo(json.dumps({"ok": False, "error": {"kind": kind, "message": message}}, indent=2))


def _json_asked(ctx: click.Context) -> bool:
    """Whether the failing command was given --json: read already (its callback ran), or on the command line when
    the error stopped click before it read the option (a bad option, a missing value)."""
    if ctx.meta.get(JSON_ERRORS):
        return True
    argv = ctx.meta.get(_ARGV, [])
    command = ctx.command  # the command the words name (the groups take no option with a value)
    for word in argv:
        if not isinstance(command, click.Group) or word not in command.commands:
            break
        command = command.commands[word]
    takes_json = any("--json" in p.opts for p in command.params)
    return takes_json and "--json" in argv[: argv.index("--") if "--" in argv else len(argv)]


def _describe_os_error(err: OSError | UnicodeError) -> str:
    if isinstance(err, UnicodeError):
        return f"a file is not UTF-8 text ({err}); give a text file"
    where = f"{shown_path(err.filename)}: " if err.filename else ""
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
            self.fail(f"{shown(value)} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{shown(value)} is not a finite number", param, ctx)
        if number < self.minimum or (number == self.minimum and not self.inclusive):
            bound = ">=" if self.inclusive else ">"
            self.fail(f"{shown(value)} must be {bound} {self.minimum:g}", param, ctx)
        return number


def writable_file(path: Path) -> Path:
    """``path`` if a results file can be written there; else BadInput. Nothing is created: a command that fails
    before it writes leaves no empty directory behind (the writers create the directory when they write)."""
    if path.is_dir():
        raise BadInput(f"{path} is a directory; give a file name for the results")
    try:
        existing = next(d for d in (path.parent, *path.parent.parents) if d.exists() or d.is_symlink())
    except StopIteration:  # a relative path with no existing part: the working directory
        existing = Path(".")
    if not existing.is_dir():
        raise BadInput(f"cannot create the directory {path.parent} for {path}: {existing} is not a directory")
    if not os.access(path if path.exists() else existing, os.W_OK | (0 if path.exists() else os.X_OK)):
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
