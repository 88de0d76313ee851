"""One SGLang import serving many runs of SGLang's validation or parser, each in a fork (tests/support/forkserver.py).

Started with the environment of the runs it serves. Reads one job a line on stdin: {"argv": what follows the
interpreter (["-m", "sglang_eagle3.judging.sglang_validation_main"], or a driver script of tests/support/drivers),
"env": ..., "input": the run's stdin, "stdout": path, "stderr": path}. For each: the imports the run begins with, once,
in this process (the tree's server_args; for validation requests, as validate() does it: its argparse refusal in
place, then the request's modules and utils.common); then a fork with the job's environment, input and output in the
two files, running the module's main() or the script as `python` would. A fork starts from this process as it was
before any run, so no run sees another's GPU answers, recording or patches. Answers on the protocol pipe (this
process's original stdout): {"pid": N} at the fork, then {"returncode": N} when it ended.
"""

import argparse
import importlib
import io
import json
import os
import runpy
import sys
import traceback

from sglang_eagle3.judging import sglang_validation_main

MAIN = ["-m", "sglang_eagle3.judging.sglang_validation_main"]


def validation_requests(argv: list[str], data) -> list[dict]:
    """The validation requests of a run's input: one (sglang_validation_main), or one a case (the cases driver)."""
    if argv == MAIN:
        return [data]
    if isinstance(data, dict) and all(isinstance(c, dict) and "modules" in c for c in data.values()):
        return list(data.values())
    return []


def preload(argv: list[str], text: str) -> None:
    """What the run imports before it does anything of its own (it imports them again: no-ops then)."""
    try:
        requests = validation_requests(argv, json.loads(text))
    except ValueError:
        requests = []
    if requests:
        argparse.ArgumentParser.error = sglang_validation_main._refuse  # validate() sets it before its imports
    try:
        importlib.import_module("sglang.srt.server_args")
        for name in dict.fromkeys(m for r in requests for m in r.get("modules", [])):
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - validate skips these too
                pass
        if requests:
            importlib.import_module("sglang.srt.utils.common")
    except Exception:  # noqa: BLE001 - the fork meets the same failure and reports it
        pass


def child(job: dict) -> int:
    os.environ.clear()
    os.environ.update(job["env"])
    for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    sys.stdin = io.StringIO(job["input"])
    try:
        if job["argv"] == MAIN:
            sys.path[0] = os.getcwd()  # as `python -m` puts it
            sglang_validation_main.main()
        else:
            sys.argv = list(job["argv"])
            sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python script` puts it
            runpy.run_path(sys.argv[0], run_name="__main__")
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
        preload(job["argv"], job["input"])
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
