"""Start SGLang, wait until it is ready, tell systemd, stop it gracefully.

The launcher stays SGLang's parent: it forwards SIGINT/SIGTERM to the server's process
group, polls /health_generate (which answers 200 only once a token can be generated),
and, when systemd started it with NOTIFY_SOCKET (Type=notify), sends READY=1 once the
server is healthy and STOPPING=1 on shutdown.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from .exit_status import ExitStatus
from .launch_plan import LaunchPlan

STOP_GRACE_SECONDS = 60  # SGLang drains and frees GPU memory; then SIGKILL


def sd_notify(message: str, environ: dict[str, str] | None = None) -> bool:
    """Send one sd_notify(3) datagram; False when not run by systemd."""
    address = (environ if environ is not None else os.environ).get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # abstract namespace socket
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(message.encode())
    return True


@dataclass
class ServeOutcome:
    status: ExitStatus
    message: str


class Readiness(enum.Enum):
    """How waiting for /health_generate ended."""

    READY = "ready"
    EXITED = "exited"  # the server process ended first
    TIMED_OUT = "timed out"


def wait_ready(
    url: str,
    process: subprocess.Popen,
    timeout: float,
    interval: float = 2.0,
    progress=None,
    headers: dict | None = None,
) -> Readiness:
    """Poll url until it answers 200, the process ends, or the timeout passes."""
    start = time.monotonic()
    request = urllib.request.Request(url, headers=headers or {})
    while True:
        if process.poll() is not None:
            return Readiness.EXITED
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                if response.status == 200:
                    return Readiness.READY
        except (urllib.error.URLError, OSError):
            pass  # not listening yet (connection refused), or 503 while loading
        elapsed = time.monotonic() - start
        if progress is not None:
            progress(elapsed)
        if elapsed >= timeout:
            return Readiness.TIMED_OUT
        time.sleep(min(interval, max(0.0, timeout - elapsed)))


def describe_exit(returncode: int) -> str:
    """A child's return code in words: 'exited with 7', 'was killed by SIGKILL'."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with {returncode}"


def stop(process: subprocess.Popen, sig: int = signal.SIGTERM, grace: float = STOP_GRACE_SECONDS) -> int:
    """Signal the server's process group, wait, then kill what is left."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode


def start(plan: LaunchPlan) -> subprocess.Popen:
    """Start the server in its own process group, so one signal reaches SGLang's children too."""
    return subprocess.Popen(plan.argv, env={**os.environ, **plan.env}, start_new_session=True)


class NotReady(Exception):
    pass


@contextlib.contextmanager
def running(plan: LaunchPlan, health_url: str, ready_timeout: float, interval: float = 2.0, progress=None):
    """The server, started and healthy, for the duration of the block; stopped afterwards."""
    process = start(plan)
    try:
        readiness = wait_ready(health_url, process, ready_timeout, interval=interval, progress=progress)
        if readiness is Readiness.EXITED:
            raise NotReady(f"server {describe_exit(process.returncode)} before /health_generate answered")
        if readiness is Readiness.TIMED_OUT:
            raise NotReady(f"server not ready after {ready_timeout:.0f}s")
        yield process
    finally:
        stop(process)


def stopped(signum: int, when: str = "") -> ServeOutcome:
    """SIGTERM is how systemd stops a service: success. Ctrl-C (SIGINT) is an interruption."""
    status = ExitStatus.INTERRUPTED if signum == signal.SIGINT else ExitStatus.OK
    return ServeOutcome(status, f"stopped by {signal.Signals(signum).name}" + (f" {when}" if when else ""))


def serve(plan: LaunchPlan, health_url: str, ready_timeout: float, log=print, interval: float = 2.0) -> ServeOutcome:
    """Run the server in the foreground until it exits or we are told to stop."""
    process = start(plan)
    stopping = {"signal": None}

    def forward(signum, _frame):
        stopping["signal"] = signum
        sd_notify("STOPPING=1")
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        last_note = [0.0]

        def progress(elapsed: float) -> None:
            if elapsed - last_note[0] >= 30 or last_note[0] == 0:
                last_note[0] = max(elapsed, 1e-9)
                log(f"waiting for {health_url}: {elapsed:.0f}s of {ready_timeout:.0f}s")
                sd_notify(f"STATUS=loading, {elapsed:.0f}s")

        readiness = wait_ready(health_url, process, ready_timeout, interval=interval, progress=progress)
        if stopping["signal"] is not None:
            stop(process)
            return stopped(stopping["signal"], "before the server was ready")
        if readiness is Readiness.TIMED_OUT:
            sd_notify("STOPPING=1")
            stop(process)
            return ServeOutcome(
                ExitStatus.NOT_READY, f"server not ready after {ready_timeout:.0f}s; stopped it (raise ready_timeout?)"
            )
        if readiness is Readiness.EXITED:
            return ServeOutcome(
                ExitStatus.SERVER_EXITED,
                f"server {describe_exit(process.returncode)} before it was ready; see its log above",
            )
        sd_notify("READY=1\nSTATUS=serving")
        log(f"ready: {health_url}")
        code = process.wait()
        if stopping["signal"] is not None:
            return stopped(stopping["signal"])
        return ServeOutcome(ExitStatus.SERVER_EXITED, f"server {describe_exit(code)}; see its log above")
    finally:
        if process.poll() is None:
            stop(process)
        for s, handler in previous.items():
            signal.signal(s, handler)
        sys.stdout.flush()
