"""The one base of every failure a command reports, and the one place that reports it.

A command either prints its report and exits with the verdict's status (OK or CHECK_FAILED), or raises an
``Eagle3Error``: a message that says what is wrong and what to do, and the ``ExitStatus`` it means, which the
``sglang-eagle3`` group and the entry points that are not click commands report and exit with. Anything else that
escapes a command is a bug: ``ExitStatus.UNEXPECTED``.
"""

from __future__ import annotations

import contextlib
import enum
import os
import reprlib
import signal
import sys

from .exit_status import ExitStatus
from .redaction import hide, hide_values

_SHOWN = reprlib.Repr()
_SHOWN.maxstring = 80  # a 100,000-character value is shown as its first and last characters


def shown(value: object) -> str:
    """A user's value as a message quotes it: in quotes, control characters escaped (``\\x1b``, ``\\n``), at most
    80 characters (longer ones keep their start and end around ``...``), and anything in it that looks secret
    hidden first (redaction.py). Every message that echoes what a user typed or a file held goes through here."""
    return _SHOWN.repr(hide_values(value))


def printable(text: str) -> str:
    """``text`` with its control characters escaped (``\\x1b``), the rest as it is: a line a terminal shows as
    written, for output that is not a message (the dry run's command line)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shortened(text: str) -> str:
    """``text`` as output that is not a message shows it (the dry run's command line and environment): escaped as
    ``printable`` does, shortened as ``shown`` does, no quotes added."""
    text = printable(hide(text))
    if len(text) <= _SHOWN.maxstring:
        return text
    start = (_SHOWN.maxstring - 3) // 2
    return f"{text[:start]}...{text[len(text) - (_SHOWN.maxstring - 3 - start) :]}"


def shown_path(path: object) -> str:
    """A path as a message names it: as it is (no quotes) when printable and at most 200 characters, else as ``shown``
    quotes it; what looks secret in it hidden either way."""
    text = hide(str(path))
    return text if len(text) <= 200 and text.isprintable() else shown(text)


class Eagle3Error(Exception):
    """A failure with a message saying what is wrong and what to do; ``status`` is the exit status it means (a class
    attribute; an instance may override it, with an ``ExitStatus`` only, never a bare number)."""

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
    """SIGTERM, raised in the main thread while a command runs: a BaseException like KeyboardInterrupt, so a command's
    code for Ctrl-C (keeping what was written) runs for it too, and no ``except Exception`` swallows it."""


# -- signals: what SIGINT and SIGTERM do in each phase of a command -------------------------------------------------


class Phase(enum.Enum):
    """Where a command is, for a signal that arrives (the handler ``answer_signals`` installs reads it)."""

    STARTING = "starting"  # nothing done yet: one line, then the program ends by the signal itself (128 + n)
    RUNNING = "running"  # KeyboardInterrupt or Terminated: the command keeps what it wrote and reports 130 or 143
    SETTLED = "settled"  # its work is done and its outcome decided: the signal changes nothing


_phase = Phase.RUNNING
_answering = False  # answer_signals installed the handler (the top-level group runs a command)
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
signalled: Interrupted | None = None  # what the signal _on_signal last raised in a running command makes of it


def _on_signal(signum, _frame):
    global signalled
    if _phase is Phase.SETTLED:
        return
    what = "terminated by SIGTERM" if signum == signal.SIGTERM else "interrupted by Ctrl-C (SIGINT)"
    if _phase is Phase.STARTING:
        os.write(2, f"Error: {what} while starting; nothing was done\n".encode())
        signal.signal(signum, signal.SIG_DFL)  # as the program would have ended without this handler
        os.kill(os.getpid(), signum)
        return
    signalled = Interrupted(what, ExitStatus.TERMINATED if signum == signal.SIGTERM else ExitStatus.INTERRUPTED)
    raise Terminated(what) if signum == signal.SIGTERM else KeyboardInterrupt


def answer_signals(phase: Phase = Phase.RUNNING) -> dict:
    """From now on SIGINT and SIGTERM do what ``phase`` (and later ``set_phase``, ``settle``) says; returns the
    handlers replaced, for ``restore_signals``. A command that handles a signal itself (serve, models fetch) installs
    its own handler over this one while it runs. Elsewhere than the main thread: nothing, and {}."""
    global _phase, _answering, signalled
    _phase, signalled = phase, None
    try:
        previous = {s: signal.signal(s, _on_signal) for s in _SIGNALS}
    except ValueError:
        return {}
    _answering = True
    return previous


def set_phase(phase: Phase) -> None:
    global _phase
    _phase = phase


def settle() -> None:
    """The command's work is done and its outcome decided (the tree patched, the settings read): a signal that comes
    from now on changes nothing, the command finishes its report and exits with its status. Takes the signals back
    from a handler the command installed for its work (only while a command runs: called from library code
    elsewhere, e.g. a test, it leaves the caller's handlers alone)."""
    set_phase(Phase.SETTLED)
    if _answering:
        with contextlib.suppress(ValueError):
            for s in _SIGNALS:
                signal.signal(s, _on_signal)


def restore_signals(previous: dict) -> None:
    """The handlers ``answer_signals`` replaced, back (a program that runs commands in-process, e.g. click's test
    runner); a signal is then the caller's again."""
    global _answering
    set_phase(Phase.RUNNING)
    with contextlib.suppress(ValueError):
        for s, handler in previous.items():
            signal.signal(s, handler)
    _answering = False


def report(err: Eagle3Error, prog: str | None = None) -> ExitStatus:
    """Print ``err`` on stderr (``Error: message``, or ``PROG: message``; secrets hidden) and return its exit
    status."""
    print(f"{prog or 'Error'}: {hide(str(err))}", file=sys.stderr, flush=True)
    return err.status
