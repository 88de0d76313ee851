"""The `sglang-eagle3` program (and `python -m sglang_eagle3`): signals answered from its first instant.

Loading the commands takes a few hundred milliseconds (click, pydantic, the command modules). A
Ctrl-C in that time printed a KeyboardInterrupt traceback from whichever import it hit, and SIGTERM
ended the program without a word. Here both are answered before anything else is imported: one line,
then the program ends by the signal itself (a shell shows 128 + its number, ExitStatus.INTERRUPTED, 130,
or ExitStatus.TERMINATED, 143; systemd counts it a clean stop); nothing was done yet. Once the commands
are loaded, the top-level group answers them (cli_common.TopLevelGroup).
"""

from __future__ import annotations

import os
import signal

_EARLY = {signal.SIGINT: "interrupted by Ctrl-C (SIGINT)", signal.SIGTERM: "terminated by SIGTERM"}


def _stopped_while_starting(signum, _frame):
    what = _EARLY[signal.Signals(signum)]
    os.write(2, f"Error: {what} while starting; nothing was done\n".encode())
    # Nothing to keep or clean up yet: end by the signal itself, as the program would have without this handler
    # (a shell shows 128 + the signal, the status above; systemd counts a SIGTERM'd unit as stopped cleanly).
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def main() -> None:
    previous = {s: signal.signal(s, _stopped_while_starting) for s in _EARLY}
    from .cli import main as commands

    for s, handler in previous.items():
        signal.signal(s, handler)
    commands()


if __name__ == "__main__":
    main()
