"""One SGLang import serving many runs of sglang_validation_main, each in a fork (tests/support/forkserver.py).

Started with the environment of the runs it serves. Reads one job a line on stdin: {"env": ..., "input": the request
as JSON, "stdout": path, "stderr": path}. For each: the imports validate() begins with (the tree's server_args,
the request's modules, its utils.common, with validate's argparse refusal in place, as validate does it), once, in
this process; then a fork with the job's environment, its input on stdin and its output in the two files, running
sglang_validation_main.main() as `python -m` would. A fork starts from this process as it was before any run, so
no run sees another's GPU answers or recording. Answers on the protocol pipe (this process's original stdout):
{"pid": N} at the fork, then {"returncode": N} when it ended.
"""

import argparse
import importlib
import io
import json
import os
import sys
import traceback

from sglang_eagle3.judging import sglang_validation_main


def preload(request: dict) -> None:
    """What validate() imports before it answers the GPU facts (it imports them again: no-ops then)."""
    argparse.ArgumentParser.error = sglang_validation_main._refuse
    try:
        importlib.import_module("sglang.srt.server_args")
        for name in request.get("modules", []):
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - validate skips these too
                pass
        importlib.import_module("sglang.srt.utils.common")
    except Exception:  # noqa: BLE001 - the fork's validate() meets the same failure and reports it
        pass


def child(job: dict) -> int:
    os.environ.clear()
    os.environ.update(job["env"])
    for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    sys.stdin = io.StringIO(job["input"])
    try:
        sglang_validation_main.main()
        return 0
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback on stderr, exit 1
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def main() -> None:
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the imports print goes to the log, never into the protocol
    for line in sys.stdin:
        job = json.loads(line)
        preload(json.loads(job["input"]))
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os._exit(child(job))
        protocol.write(json.dumps({"pid": pid}) + "\n")
        protocol.flush()
        _, status = os.waitpid(pid, 0)
        protocol.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        protocol.flush()


if __name__ == "__main__":
    main()
