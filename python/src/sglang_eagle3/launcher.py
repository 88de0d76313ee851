"""Start SGLang, wait until it is ready, tell systemd, stop it gracefully.

The launcher stays SGLang's parent: it forwards SIGINT/SIGTERM to the server's process
group, polls /health_generate (which answers 200 only once a token can be generated),
and, when systemd started it with NOTIFY_SOCKET (Type=notify), sends READY=1 once the
server is healthy and STOPPING=1 on shutdown.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from .render import LaunchPlan

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
class Outcome:
    code: int
    message: str


def wait_ready(
    url: str,
    process: subprocess.Popen,
    timeout: float,
    interval: float = 2.0,
    progress=None,
    headers: dict | None = None,
) -> str | None:
    """Poll url until 200. Returns None when ready, else why not ('timeout' or 'exited N')."""
    start = time.monotonic()
    request = urllib.request.Request(url, headers=headers or {})
    while True:
        code = process.poll()
        if code is not None:
            return f"exited {code}"
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                if response.status == 200:
                    return None
        except (urllib.error.URLError, OSError):
            pass  # not listening yet (connection refused), or 503 while loading
        elapsed = time.monotonic() - start
        if progress is not None:
            progress(elapsed)
        if elapsed >= timeout:
            return "timeout"
        time.sleep(min(interval, max(0.0, timeout - elapsed)))


def exit_code(returncode: int) -> int:
    """A child's return code as a shell would report it (killed by signal N -> 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


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
        why = wait_ready(health_url, process, ready_timeout, interval=interval, progress=progress)
        if why is not None:
            raise NotReady(f"server {why} before /health_generate answered (after at most {ready_timeout:.0f}s)")
        yield process
    finally:
        stop(process)


def serve(plan: LaunchPlan, health_url: str, ready_timeout: float, log=print, interval: float = 2.0) -> Outcome:
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

        why = wait_ready(health_url, process, ready_timeout, interval=interval, progress=progress)
        if stopping["signal"] is not None:
            stop(process)
            return Outcome(0, "stopped before the server was ready")
        if why == "timeout":
            sd_notify("STOPPING=1")
            stop(process)
            return Outcome(3, f"server not ready after {ready_timeout:.0f}s; stopped it (raise ready_timeout?)")
        if why is not None:
            return Outcome(process.returncode or 1, f"server {why} before it was ready; see its log above")
        sd_notify("READY=1\nSTATUS=serving")
        log(f"ready: {health_url}")
        code = process.wait()
        if stopping["signal"] is not None:
            return Outcome(0, "stopped")
        return Outcome(exit_code(code), f"server exited with {code}")
    finally:
        if process.poll() is None:
            stop(process)
        for s, handler in previous.items():
            signal.signal(s, handler)
        sys.stdout.flush()
