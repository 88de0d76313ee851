"""The one base of every failure a command reports, and the one place that reports it.

A command ends in one of two ways:

- it prints its report (a probe, a verification, the A/B gate) and exits with the
  verdict's status (``ExitStatus.OK`` or ``ExitStatus.CHECK_FAILED``); or
- it raises an ``Eagle3Error``: a message that says what is wrong and what to do, and the
  ``ExitStatus`` it means. ``report`` prints it; the ``sglang-eagle3`` group
  (cli_common.TopLevelGroup) and the entry points that are not click commands
  (``sglang-eagle3-router``, the server's ``sglang_main``) exit with its status.

Anything else that escapes a command is a bug: ``ExitStatus.UNEXPECTED``.
"""

from __future__ import annotations

import reprlib
import signal
import sys

from .exit_status import ExitStatus

_SHOWN = reprlib.Repr()
_SHOWN.maxstring = 80  # a 100,000-character value is shown as its first and last characters


def shown(value: object) -> str:
    """A user's value as a message quotes it: in quotes, control characters escaped (``\\x1b``, ``\\n``), at most
    80 characters (longer ones keep their start and end around ``...``). Every message that echoes what a user
    typed or a file held goes through here; a secret is never given to it."""
    return _SHOWN.repr(value)


def printable(text: str) -> str:
    """``text`` with its control characters escaped (``\\x1b``), the rest as it is: a line a terminal shows as
    written, for output that is not a message (the dry run's command line)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shortened(text: str) -> str:
    """``text`` as output that is not a message shows it (the dry run's command line and environment): control
    characters escaped as ``printable`` does, at most 80 characters as ``shown`` keeps them (a longer text keeps its
    start and end around ``...``), no quotes added."""
    text = printable(text)
    if len(text) <= _SHOWN.maxstring:
        return text
    start = (_SHOWN.maxstring - 3) // 2
    return f"{text[:start]}...{text[len(text) - (_SHOWN.maxstring - 3 - start) :]}"


def shown_path(path: object) -> str:
    """A path as a message names it: as it is when it is printable and at most 200 characters (no quotes, as
    messages name paths), else as ``shown`` quotes it: shortened, control characters escaped."""
    text = str(path)
    return text if len(text) <= 200 and text.isprintable() else shown(text)


class Eagle3Error(Exception):
    """A failure with a message saying what is wrong and what to do; ``status`` is the exit status it means.

    Subclasses set their status as a class attribute; an instance may override it
    (``ModelsError(kind, message, ExitStatus.BAD_INPUT)``). Only an ``ExitStatus`` is
    accepted, never a bare number.
    """

    status: ExitStatus = ExitStatus.CHECK_FAILED

    def __init__(self, message: str = "", status: ExitStatus | None = None):
        super().__init__(message)
        if status is not None:
            if not isinstance(status, ExitStatus):
                raise TypeError(f"status must be an ExitStatus, not {status!r}")
            self.status = status


class BadInput(Eagle3Error):
    """Wrong input (option, setting, file, URL, SGLang tree): the message says what to fix."""

    status = ExitStatus.BAD_INPUT


class CheckFailed(Eagle3Error):
    """A check failed (a patch conflicts, preflight, requests failed); the message says which and why."""

    status = ExitStatus.CHECK_FAILED


class Interrupted(Eagle3Error):
    """Stopped by a signal (Ctrl-C, or SIGTERM where a command handles it); the message says what was kept."""

    status = ExitStatus.INTERRUPTED


class Terminated(KeyboardInterrupt):  # noqa: N818 (a signal, as KeyboardInterrupt is)
    """SIGTERM, raised in the main thread by the handler ``on_sigterm`` installs: a BaseException like
    KeyboardInterrupt, so the code a command has for Ctrl-C (keeping what was written) runs for it too, and no
    ``except Exception`` swallows it. The top-level group reports it with ExitStatus.TERMINATED."""


def _raise_terminated(_signum, _frame):
    raise Terminated("terminated by SIGTERM")


def on_sigterm():
    """From now on SIGTERM raises Terminated in the main thread (a command that handles it itself, such as serve
    or models fetch, installs its own handler over this one); returns the handler it replaced, for the caller to
    put back. Elsewhere than the main thread: nothing, and None."""
    try:
        return signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:
        return None


def report(err: Eagle3Error, prog: str | None = None) -> ExitStatus:
    """Print ``err`` on stderr (``Error: message``, or ``PROG: message``) and return its exit status."""
    print(f"{prog or 'Error'}: {err}", file=sys.stderr, flush=True)
    return err.status
