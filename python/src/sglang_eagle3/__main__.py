"""The `sglang-eagle3` program (and `python -m sglang_eagle3`): signals answered from its first instant.

Loading the commands takes a few hundred milliseconds (click, pydantic, the command modules). A
Ctrl-C in that time printed a KeyboardInterrupt traceback from whichever import it hit, and SIGTERM
ended the program without a word. Here both are answered before anything else is imported: one line
and 128 + the signal's number (ExitStatus.INTERRUPTED, 130; ExitStatus.TERMINATED, 143); nothing was
done yet. Once the commands are loaded, the top-level group answers them (cli_common.TopLevelGroup).
"""

from __future__ import annotations

import os
import signal

# Before the commands are loaded, exit_status is not imported either: 128 + signal, as ExitStatus says.
_EARLY = {signal.SIGINT: ("interrupted by Ctrl-C (SIGINT)", 130), signal.SIGTERM: ("terminated by SIGTERM", 143)}


def _stopped_while_starting(signum, _frame):
    what, status = _EARLY[signal.Signals(signum)]
    os.write(2, f"Error: {what} while starting; nothing was done\n".encode())
    os._exit(status)  # nothing to keep or clean up yet


def main() -> None:
    previous = {s: signal.signal(s, _stopped_while_starting) for s in _EARLY}
    from .cli import main as commands

    for s, handler in previous.items():
        signal.signal(s, handler)
    commands()


if __name__ == "__main__":
    main()
