"""The exit statuses of every `sglang-eagle3` command, in one place (listed by `--help`)."""

from __future__ import annotations

import enum
import signal

_CHECK_FAILED = (
    "a check failed (not ready, preflight, patch conflict, the A/B gate, requests, a download, a server or the hub "
    "that does not answer, a program the host lacks)"
)


class ExitStatus(enum.IntEnum):
    """What a command's exit status means; the message on stderr says why."""

    def __new__(cls, code: int, meaning: str):
        status = int.__new__(cls, code)
        status._value_ = code
        status.meaning = meaning
        return status

    OK = 0, "done; ready; all applied; the gate passed; the server stopped on SIGTERM"
    CHECK_FAILED = 1, _CHECK_FAILED
    BAD_INPUT = 2, "bad input (option, setting, file, URL, SGLang tree); the message says what to fix"
    NOT_READY = 3, "serve: the server did not answer /health_generate within ready_timeout"
    SERVER_EXITED = 4, "serve: the server exited or was killed by itself; its log says why"
    # sysexits.h's EX_SOFTWARE: apart from 1, so a script can tell "the check said no" from "the tool broke";
    # not 2-4 (ours; 2 is also click's usage errors), not 126 and above (the shell's, 128+n for signal n).
    UNEXPECTED = 70, "unexpected error (a bug in this tool); SGLANG_EAGLE3_TRACEBACK=1 shows where"
    # 128 + the signal's number: what a shell reports for a process that signal ended, so a script sees the same
    # status whether the signal came before the commands were loaded (Python's default) or during one.
    INTERRUPTED = 130, "interrupted by Ctrl-C (SIGINT); what was written so far is kept"
    TERMINATED = 143, "terminated by SIGTERM (serve: 0, the server stopped); what was written so far is kept"
    # As a shell reports a program SIGPIPE ended (`seq 1 1000000 | head -1`); Python ignores SIGPIPE, so this says it.
    BROKEN_PIPE = 141, "the output's reader went away (a pipe into head): stopped quietly, as other programs do"


def for_signal(signum: int) -> ExitStatus:
    """The status of a command a signal stopped: TERMINATED for SIGTERM, else INTERRUPTED."""
    return ExitStatus.TERMINATED if signum == signal.SIGTERM else ExitStatus.INTERRUPTED


def help_text() -> str:
    """The table of exit statuses for `sglang-eagle3 --help`."""
    return "\n".join(f"{int(status):>3}  {status.meaning}" for status in ExitStatus)
