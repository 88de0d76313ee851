"""Start SGLang, wait until it is ready, tell systemd, stop it within the grace period.

The launcher stays SGLang's parent: it starts the server in its own process group, polls /health_generate (200
only once a token can be generated) and, under systemd's Type=notify, sends READY=1 once the server is healthy and
STOPPING=1 on shutdown. SIGTERM or SIGINT, while the model loads or after, is forwarded to the server's process
group at once; the server gets `stop_timeout` seconds to exit, then the group is killed. A second signal kills at
once.
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

from ..errors import Eagle3Error
from ..exit_status import ExitStatus
from .launch_plan import LaunchPlan


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


def signal_group(process: subprocess.Popen, sig: int) -> None:
    """Send sig to the server's process group (SGLang's scheduler and detokenizer are in it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def stop(process: subprocess.Popen, grace: float, sig: int | None = signal.SIGTERM) -> int:
    """Signal the server's group (sig None: it was signalled already), wait `grace` s, then SIGKILL the rest."""
    if process.poll() is None and sig is not None:
        signal_group(process, sig)
    try:
        process.wait(max(0.0, grace))
    except subprocess.TimeoutExpired:
        signal_group(process, signal.SIGKILL)
        process.wait()
    # The leader is gone; children that outlived it (or ignored the signal) go with it.
    signal_group(process, signal.SIGKILL)
    return process.returncode


def start(plan: LaunchPlan, output=None) -> subprocess.Popen:
    """Start the server in its own process group, so one signal reaches SGLang's children too.
    ``output``: a file for its stdout and stderr (default: ours)."""
    return subprocess.Popen(
        plan.argv, env={**os.environ, **plan.env}, start_new_session=True,
        stdout=output, stderr=None if output is None else subprocess.STDOUT,
    )  # fmt: skip


class NotReady(Eagle3Error):
    """The server did not answer /health_generate: it exited first (``returncode``), or ready_timeout passed."""

    status = ExitStatus.NOT_READY
    returncode: int | None = None


def not_ready(readiness: Readiness, process: subprocess.Popen, ready_timeout: float) -> NotReady | None:
    """How waiting for the server ended, as the failure it is; None when it is ready."""
    if readiness is Readiness.EXITED:
        failure = NotReady(f"server {describe_exit(process.returncode)} before it was ready", ExitStatus.SERVER_EXITED)
        failure.returncode = process.returncode
        return failure
    if readiness is Readiness.TIMED_OUT:
        return NotReady(f"server not ready after {ready_timeout:.0f}s")
    return None


@contextlib.contextmanager
def running(
    plan: LaunchPlan,
    health_url: str,
    ready_timeout: float,
    stop_timeout: float,
    interval: float = 2.0,
    progress=None,
    output=None,
):
    """The server, started and healthy, for the duration of the block; stopped afterwards (NotReady when it exits or
    ready_timeout passes first). The one way a server is started, awaited and stopped for a block: the sweep's points,
    bench ab's sides, the tests' stand-ins; `serve` runs it in the foreground below."""
    process = start(plan, output)
    try:
        readiness = wait_ready(health_url, process, ready_timeout, interval=interval, progress=progress)
        if (failure := not_ready(readiness, process, ready_timeout)) is not None:
            raise failure
        yield process
    finally:
        stop(process, stop_timeout)


def stopped(signum: int, when: str = "") -> ServeOutcome:
    """SIGTERM is how systemd stops a service: success. Ctrl-C (SIGINT) is an interruption."""
    status = ExitStatus.INTERRUPTED if signum == signal.SIGINT else ExitStatus.OK
    return ServeOutcome(status, f"stopped by {signal.Signals(signum).name}" + (f" {when}" if when else ""))


class _StopRequested(Exception):  # not an Eagle3Error: control flow inside serve(), it never escapes it
    """Raised by the signal handler to leave a blocking wait (like KeyboardInterrupt)."""


class _StopOnSignal:
    """SIGTERM/SIGINT handler for `serve`: forward to the server's group, remember when, leave the wait."""

    def __init__(self, process: subprocess.Popen, stop_timeout: float, log):
        self.process, self.stop_timeout, self.log = process, stop_timeout, log
        self.signum: int | None = None
        self.at = 0.0
        self.interruptible = False  # True only inside the waits below

    def __call__(self, signum, _frame):
        if self.signum is not None:  # a second signal: no more waiting
            signal_group(self.process, signal.SIGKILL)
        else:
            self.signum, self.at = signum, time.monotonic()
            signal_group(self.process, signum)
            sd_notify("STOPPING=1")
            self.log(f"{signal.Signals(signum).name}: stopping the server (killed after {self.stop_timeout:g}s)")
        if self.interruptible:
            self.interruptible = False
            raise _StopRequested

    @contextlib.contextmanager
    def wait(self):
        """A blocking wait that a stop request ends at once."""
        self.interruptible = True
        try:
            if self.signum is not None:  # arrived just before
                raise _StopRequested
            yield
        finally:
            self.interruptible = False

    def remaining(self) -> float:
        return self.stop_timeout - (time.monotonic() - self.at)


def serve(
    plan: LaunchPlan, health_url: str, ready_timeout: float, stop_timeout: float, log=print, interval: float = 2.0
) -> ServeOutcome:
    """Run the server in the foreground until it exits or we are told to stop."""
    process = start(plan)
    on_signal = _StopOnSignal(process, stop_timeout, log)
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        last_note = [0.0]

        def progress(elapsed: float) -> None:
            if elapsed - last_note[0] >= 30 or last_note[0] == 0:
                last_note[0] = max(elapsed, 1e-9)
                log(f"waiting for {health_url}: {elapsed:.0f}s of {ready_timeout:.0f}s")
                sd_notify(f"STATUS=loading, {elapsed:.0f}s")

        readiness = None
        try:
            with on_signal.wait():
                readiness = wait_ready(health_url, process, ready_timeout, interval=interval, progress=progress)
            if readiness is Readiness.READY:
                sd_notify("READY=1\nSTATUS=serving")
                log(f"ready: {health_url}")
                with on_signal.wait():
                    code = process.wait()
                return ServeOutcome(ExitStatus.SERVER_EXITED, f"server {describe_exit(code)}; see its log above")
        except _StopRequested:
            pass
        if on_signal.signum is not None:
            stop(process, on_signal.remaining(), sig=None)  # the handler signalled the group already
            outcome = stopped(on_signal.signum, "" if readiness is Readiness.READY else "before the server was ready")
            if process.returncode == -signal.SIGKILL:
                outcome.message += f"; it did not exit within {stop_timeout:g}s and was killed"
            return outcome
        failure = not_ready(readiness, process, ready_timeout)
        if readiness is Readiness.TIMED_OUT:
            sd_notify("STOPPING=1")
            stop(process, stop_timeout)
            return ServeOutcome(failure.status, f"{failure}; stopped it (raise ready_timeout?)")
        return ServeOutcome(failure.status, f"{failure}; see its log above")
    finally:
        if process.poll() is None:
            stop(process, stop_timeout)
        for s, handler in previous.items():
            signal.signal(s, handler)
        sys.stdout.flush()
