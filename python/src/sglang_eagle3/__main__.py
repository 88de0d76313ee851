"""The `sglang-eagle3` program (and `python -m sglang_eagle3`): signals answered from its first instant.

Loading the commands takes a few hundred milliseconds; a Ctrl-C in that time printed a traceback from whichever
import it hit, and SIGTERM ended the program without a word. Here both are answered before anything else is
imported (with the interpreter's built-in ``_signal``: ``signal`` imports enum and functools): one line, then the
program ends by the signal itself (130 or 143 in a shell; systemd counts it a clean stop). Once the commands are
loaded, the top-level group answers them (cli_common.TopLevelGroup, errors.Phase).
"""

from __future__ import annotations

import _signal
import os
import sys

_EARLY = {_signal.SIGINT: "interrupted by Ctrl-C (SIGINT)", _signal.SIGTERM: "terminated by SIGTERM"}


def _stopped_while_starting(signum, _frame):
    os.write(2, f"Error: {_EARLY[signum]} while starting; nothing was done\n".encode())
    # Nothing to keep or clean up yet: end by the signal itself, as the program would have without this handler
    # (a shell shows 128 + the signal, the status above; systemd counts a SIGTERM'd unit as stopped cleanly).
    _signal.signal(signum, _signal.SIG_DFL)
    os.kill(os.getpid(), signum)


# At import, when this is the program (the console script imports this module, `python -m` runs it), not when a
# test or tool imports the package's modules: the program's first lines.
if __name__ == "__main__" or os.path.basename(sys.argv[0] if sys.argv else "").startswith("sglang-eagle3"):
    for _signum in _EARLY:
        _signal.signal(_signum, _stopped_while_starting)


def main() -> None:
    from .cli import main as commands

    commands(restore_signals=False)  # the process ends with the command: a late signal changes nothing


if __name__ == "__main__":
    main()
