"""SGLang's own run (judging/sglang_validation.py) without importing SGLang and torch again for every run.

preflight hands each run to a new interpreter (`python -m sglang_eagle3.judging.sglang_validation_main`), which
spends about 7 s (0.5.9) or 10 s (0.5.23) importing the tree, torch and transformers before the validation itself
takes a fraction of a second. ForkServer.run stands in for subprocess.run inside sglang_validation only: the command
and environment sglang_validation.run built go to a server started with that very environment
(drivers/sglang_validation_forkserver.py), which imports what validate() imports first once, then forks a process
per run with the environment, input and output of that run, running the same main(). The rest is as before: the
request, the tree first on the import path, the outcome read from the last JSON line, the time limit. The drivers
that run SGLang's validation or parser on many cases in one process (SCRIPTS) are served the same way when a test
runs them through ForkServer.run: a fork runs the script as `python script` would.

A server serves one environment (all of it but PYTEST_CURRENT_TEST, which pytest changes per test): a run whose
environment differs, by a variable or an import path, gets a server of its own. Any other command goes to
subprocess.run. The servers live as long as the fixture that made them (one module's tests); nothing outlives a run.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

DRIVER = Path(__file__).resolve().parent / "drivers" / "sglang_validation_forkserver.py"
MAIN = "sglang_eagle3.judging.sglang_validation_main"
# The drivers that run SGLang's own validation or parser on many cases in one process.
SCRIPTS = {DRIVER.parent / "sglang_validation_cases_driver.py", DRIVER.parent / "sglang_parser_driver.py"}
PER_TEST = ("PYTEST_CURRENT_TEST",)


class ForkServer:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.servers: dict[tuple, subprocess.Popen] = {}
        self.pending: dict[int, bytes] = {}  # a server's answers read but not yet taken, by its pid
        self.runs = 0

    def module(self) -> types.SimpleNamespace:
        """What sglang_validation uses of the subprocess module, with run going here."""
        return types.SimpleNamespace(run=self.run, TimeoutExpired=subprocess.TimeoutExpired)

    def run(self, command, *, input=None, env=None, timeout=None, capture_output=False, text=False, **kwargs):
        served = list(command[1:]) == ["-m", MAIN] or (len(command) == 2 and Path(command[1]) in SCRIPTS)
        if command[0] != sys.executable or not served or kwargs or not (capture_output and text):
            return subprocess.run(command, input=input, env=env, timeout=timeout, capture_output=capture_output,
                                  text=text, **kwargs)  # fmt: skip
        env = dict(os.environ if env is None else env)
        server = self.server(env)
        self.runs += 1
        out, err = self.workdir / f"run-{self.runs}.out", self.workdir / f"run-{self.runs}.err"
        job = {"argv": [str(a) for a in command[1:]], "env": env, "input": input or "", "stdout": str(out),
               "stderr": str(err)}  # fmt: skip
        deadline = None if timeout is None else time.monotonic() + timeout  # the imports count, as in a process
        server.stdin.write((json.dumps(job) + "\n").encode())
        server.stdin.flush()
        try:
            pid = json.loads(self.answer(server, deadline))["pid"]
        except subprocess.TimeoutExpired:  # still importing: that server is of no further use
            server.kill()
            server.wait()
            raise subprocess.TimeoutExpired(command, timeout) from None
        try:
            returncode = json.loads(self.answer(server, deadline))["returncode"]
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
            self.answer(server, None)  # the server reaps it
            raise subprocess.TimeoutExpired(command, timeout) from None
        return subprocess.CompletedProcess(command, returncode, out.read_text(), err.read_text())

    def server(self, env: dict) -> subprocess.Popen:
        key = tuple(sorted((k, v) for k, v in env.items() if k not in PER_TEST))
        if key not in self.servers or self.servers[key].poll() is not None:
            log = self.workdir / f"server-{len(self.servers)}.log"
            command = [sys.executable, str(DRIVER)]
            with log.open("w") as stderr:
                self.servers[key] = subprocess.Popen(
                    command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, bufsize=0
                )
        return self.servers[key]

    def answer(self, server: subprocess.Popen, deadline: float | None) -> str:
        """The server's next answer line, by ``deadline`` (time.monotonic()) if one is given (read unbuffered:
        select sees only what no buffer holds yet)."""
        pending = self.pending.get(server.pid, b"")
        while b"\n" not in pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([server.stdout], [], [], left)
            if not ready:
                self.pending[server.pid] = pending
                raise subprocess.TimeoutExpired(server.args, left)
            chunk = os.read(server.stdout.fileno(), 4096)
            if not chunk:
                raise RuntimeError(f"the fork server ended (exit {server.wait()}); see {self.workdir}/server-*.log")
            pending += chunk
        line, _, self.pending[server.pid] = pending.partition(b"\n")
        return line.decode()

    def close(self) -> None:
        """Kill each server: it holds nothing to keep, and an interpreter with torch loaded takes seconds to exit."""
        for server in self.servers.values():
            server.kill()
            server.wait()
            server.stdin.close()
            server.stdout.close()
