"""Pieces shared by the command groups (commands/); their shared options are in options.py."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from . import errors, redaction
from .errors import BadInput, Eagle3Error, shown, shown_path
from .exit_status import ExitStatus

if TYPE_CHECKING:
    from .serving.settings import ServerSettings

TRACEBACK_ENV = "SGLANG_EAGLE3_TRACEBACK"
# ctx.meta keys (meta is shared by every context of one invocation): --json was given, so a failure is also a JSON
# object on stdout (options.json_output sets it); a command printed its own JSON failure already (models).
JSON_ERRORS = "sglang_eagle3.json"
JSON_PRINTED = "sglang_eagle3.json_printed"
_ARGV = "sglang_eagle3.argv"  # the command line as given: a usage error may stop click before --json is read


class TopLevelGroup(click.Group):
    """The `sglang-eagle3` group: the one place where a failure becomes a message and an exit status (an
    Eagle3Error's, as httpie's main does). Below that, as a net: a file that cannot be read or written, or an input
    nested too deeply to read, is bad input, Ctrl-C an interruption, a reader of the output that went away (``| head``)
    ends the command quietly, and anything else is a bug: one line and ExitStatus.UNEXPECTED (SGLANG_EAGLE3_TRACEBACK=1
    shows the traceback). With --json every failure is also one JSON object on stdout, click's usage errors included.

    Signals (errors.Phase): while the command line is read, one line and the signal's own end; while the command
    runs, KeyboardInterrupt or Terminated, reported with 130 or 143; once its work is done, a signal changes nothing.
    """

    def main(self, *args, restore_signals: bool = True, **kwargs):
        """``restore_signals``: False for the program (__main__), which ends with the command, so a signal after the
        command's work is never the default's; True for a caller that goes on (click's test runner)."""
        previous = errors.answer_signals(errors.Phase.RUNNING if restore_signals else errors.Phase.STARTING)
        try:
            with redaction.hiding_output():
                return super().main(*args, **kwargs)
        except SystemExit as done:
            if not restore_signals:
                _end_program(done.code)
            raise
        finally:
            errors.settle()
            if restore_signals:
                errors.restore_signals(previous)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_ARGV] = list(args)
        try:
            return super().parse_args(ctx, args)
        except BrokenPipeError:  # --help | head
            _stop_quietly()

    def invoke(self, ctx: click.Context):
        errors.set_phase(errors.Phase.RUNNING)
        try:
            return self._invoke(ctx)
        finally:
            errors.settle()

    def _invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.ClickException as err:  # click's usage errors (exit 2): click prints them on stderr
            errors.settle()
            if _json_asked(ctx):
                known = err.exit_code in {int(status) for status in ExitStatus}
                self._print_json(ExitStatus(err.exit_code).name.lower() if known else "error", err.format_message())
            raise
        except (click.exceptions.Exit, click.Abort, SystemExit):
            errors.settle()
            raise  # the commands' verdicts (their exit status)
        except BrokenPipeError:
            _stop_quietly()
        except Eagle3Error as err:
            self._fail(ctx, err)
        except errors.Terminated:
            self._fail(ctx, errors.Interrupted("terminated by SIGTERM", ExitStatus.TERMINATED))
        except KeyboardInterrupt:
            self._fail(ctx, errors.Interrupted("interrupted by Ctrl-C (SIGINT)"))
        except Exception as err:
            if errors.signalled:  # the signal's exception, made a library's own (pydantic-core: a SchemaError)
                self._fail(ctx, errors.signalled)
            if traceback_wanted():
                raise
            if isinstance(err, (OSError, UnicodeError)):
                self._fail(ctx, BadInput(_describe_os_error(err)))
            if isinstance(err, RecursionError):
                self._fail(ctx, BadInput(f"an input is nested too deeply to read ({err}); give a flat file or value"))
            unexpected = f"unexpected {type(err).__name__}: {err} ({TRACEBACK_ENV}=1 shows where)"
            self._fail(ctx, Eagle3Error(unexpected, ExitStatus.UNEXPECTED))

    @staticmethod
    def _fail(ctx: click.Context, err: Eagle3Error):
        """The error on stderr and its status; with --json, also as JSON on stdout, the same for every command."""
        errors.settle()  # the outcome is decided: a signal now does not turn it into another
        if ctx.meta.get(JSON_ERRORS) and not ctx.meta.get(JSON_PRINTED):
            TopLevelGroup._print_json(getattr(err, "kind", None) or err.status.name.lower(), str(err))
        ctx.exit(errors.report(err))

    @staticmethod
    def _print_json(kind: str, message: str) -> None:
        click.echo(json.dumps({"ok": False, "error": {"kind": kind, "message": message}}, indent=2))


def _end_program(code) -> None:
    """End the program now, with ``code``: its output flushed, without the interpreter's teardown. A command that
    read a whole SGLang tree holds millions of objects, whose teardown took seconds, during which a Ctrl-C killed a
    finished command or made an interrupted one wait. Worker threads (models fetch's downloads) are left as they are."""
    status = code if isinstance(code, int) else ExitStatus.OK if code is None else ExitStatus.CHECK_FAILED
    if not isinstance(code, int) and code is not None:
        print(code, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


def traceback_wanted() -> bool:
    """SGLANG_EAGLE3_TRACEBACK=1 (or true, yes, on): show an unexpected error's traceback; 0, empty or unset: not."""
    return os.environ.get(TRACEBACK_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _stop_quietly():
    """The reader of the output went away (``sglang-eagle3 patch list | head -1``): nothing more to say to anyone.
    What is left in stdout's buffer goes to /dev/null, so the interpreter's last flush does not complain, and the
    status is the one a shell reports for a program SIGPIPE ended (Python ignores SIGPIPE, so this says it)."""
    errors.settle()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        with contextlib.suppress(OSError, ValueError):  # a stream without a file (click's test runner): nothing to do
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(ExitStatus.BROKEN_PIPE)


def _json_asked(ctx: click.Context) -> bool:
    """Whether the failing command was given --json: read already (its callback ran), or on the command line when
    the error stopped click before it read the option (a bad option, a missing value)."""
    if ctx.meta.get(JSON_ERRORS):
        return True
    argv = ctx.meta.get(_ARGV, [])
    command = ctx.command  # the command the words name (the groups take no option with a value)
    for word in argv:
        found = command.get_command(ctx, word) if isinstance(command, click.Group) else None
        if found is None:
            break
        command = found
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


def load_settings(config, assignments, profile) -> ServerSettings:
    from .serving import settings  # here: pydantic and the settings model load only for a command that reads them

    return settings.load(config, list(assignments), profile=profile)  # SettingsError is BadInput
