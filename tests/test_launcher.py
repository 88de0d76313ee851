"""The launcher against real processes: readiness, timeout, signals, systemd notifications.

The server child is the stand-in SGLang server in tests/stand_ins/fake_sglang (SGLang
needs GPUs): a real process, started as `python -m sglang.launch_server`, with a real
HTTP server on loopback.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sglang_eagle3.exit_status import ExitStatus
from sglang_eagle3.serving import launcher
from sglang_eagle3.serving.launch_plan import LaunchPlan
from support.bench_fixtures import FAKE_SGLANG, free_port


def fake_plan(port: int, **behaviour) -> LaunchPlan:
    env = {"PYTHONPATH": str(FAKE_SGLANG), **{f"FAKE_SGLANG_{k}": str(v) for k, v in behaviour.items()}}
    return LaunchPlan([sys.executable, "-m", "sglang.launch_server", "--port", str(port)], env)


@pytest.fixture
def notify_socket(tmp_path, monkeypatch):
    """A real datagram socket standing where systemd's NOTIFY_SOCKET would be."""
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(10)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    yield sock
    sock.close()


def received(sock) -> list[str]:
    messages = []
    sock.setblocking(False)
    try:
        while True:
            messages.append(sock.recv(4096).decode())
    except BlockingIOError:
        pass
    return messages


def test_waits_for_health_then_notifies_ready(notify_socket, tmp_path):
    port = free_port()
    log = tmp_path / "signals"
    process_plan = fake_plan(port, READY_AFTER=1.0, EXIT_AFTER=3.0, SIGNAL_LOG=log)
    start = time.monotonic()
    outcome = launcher.serve(
        process_plan, f"http://127.0.0.1:{port}/health_generate", 30, 10, log=lambda m: None, interval=0.1
    )
    # The fake server becomes healthy after 1 s and then crashes with code 7 at 3 s.
    assert outcome.status is ExitStatus.SERVER_EXITED and "server exited with 7" in outcome.message
    assert time.monotonic() - start >= 1.0
    messages = received(notify_socket)
    ready = [m for m in messages if m.startswith("READY=1")]
    assert len(ready) == 1
    assert messages.index(ready[0]) > 0  # loading STATUS came first


def test_never_ready_times_out_stops_the_child_and_exits_cleanly(notify_socket, tmp_path):
    port = free_port()
    log = tmp_path / "signals"
    outcome = launcher.serve(
        fake_plan(port, NEVER_READY=1, SIGNAL_LOG=log),
        f"http://127.0.0.1:{port}/health_generate",
        1.5,
        10,
        log=lambda m: None,
        interval=0.1,
    )
    assert outcome.status is ExitStatus.NOT_READY and "not ready after 2s" in outcome.message
    assert log.read_text().split() == ["SIGTERM"]  # the child was asked to stop, gracefully
    messages = received(notify_socket)
    assert "STOPPING=1" in messages and not any(m.startswith("READY=1") for m in messages)
    with socket.socket() as s:  # and it is gone: nothing listens on the port any more
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_child_that_dies_during_load_is_reported(tmp_path):
    port = free_port()
    outcome = launcher.serve(
        fake_plan(port, NEVER_READY=1, EXIT_AFTER=0.5),
        f"http://127.0.0.1:{port}/health_generate",
        30,
        10,
        log=lambda m: None,
        interval=0.1,
    )
    assert outcome.status is ExitStatus.SERVER_EXITED and "exited with 7 before it was ready" in outcome.message


def test_running_reports_how_the_server_ended_and_stops_it(tmp_path):
    """The block form (the sweep's points, bench ab's sides): NotReady with the exit status, or after the timeout
    with the server stopped; its output goes where it is told."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/health_generate"
    with (tmp_path / "server.log").open("ab") as sink, pytest.raises(launcher.NotReady) as exited:
        with launcher.running(fake_plan(port, NEVER_READY=1, EXIT_AFTER=0.5), url, 30, 10, interval=0.1, output=sink):
            raise AssertionError("the block ran, though the server never became ready")
    assert exited.value.status is ExitStatus.SERVER_EXITED and exited.value.returncode == 7
    assert "server exited with 7 before it was ready" in str(exited.value)

    with pytest.raises(launcher.NotReady) as timed_out:
        with launcher.running(fake_plan(port, NEVER_READY=1), url, 2, 10, interval=0.1):
            raise AssertionError("the block ran, though the server never became ready")
    assert timed_out.value.status is ExitStatus.NOT_READY and timed_out.value.returncode is None
    assert "not ready after 2s" in str(timed_out.value)
    with socket.socket() as free:  # it was stopped: its port is free again
        free.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        free.bind(("127.0.0.1", port))


def test_server_processes_are_started_awaited_and_stopped_in_one_place():
    """serve, the sweep and bench ab all go through launcher.start/wait_ready/stop: no second copy of them."""
    package = Path(launcher.__file__).parents[1]
    copies = [
        f"{path.relative_to(package)}: {needle}"
        for path in package.rglob("*.py")
        if path != Path(launcher.__file__)
        for needle in ("Popen(", "start_new_session", "killpg(", "def wait_ready")
        if needle in path.read_text()
    ]
    assert copies == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_are_forwarded_to_the_server(tmp_path, sig):
    """The launcher runs as its own process (as under systemd); we signal it, the child must get it."""
    port = free_port()
    log = tmp_path / "signals"
    script = textwrap.dedent(
        f"""
        import sys
        from sglang_eagle3.serving import launcher
        from sglang_eagle3.serving.launch_plan import LaunchPlan
        plan = LaunchPlan([sys.executable, "-m", "sglang.launch_server", "--port", "{port}"],
                          {{"PYTHONPATH": {str(FAKE_SGLANG)!r}, "FAKE_SGLANG_SIGNAL_LOG": {str(log)!r}}})
        outcome = launcher.serve(plan, "http://127.0.0.1:{port}/health_generate", 60, 10, interval=0.1)
        print("OUTCOME", int(outcome.status), outcome.message, flush=True)
        sys.exit(outcome.status)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while True:  # wait until the fake server answers, i.e. the launcher reached "ready"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            assert time.monotonic() < deadline, "fake server never came up"
            time.sleep(0.1)
    time.sleep(0.5)
    os.kill(proc.pid, sig)
    out, _ = proc.communicate(timeout=60)
    # systemd stops services with SIGTERM: a clean stop. Ctrl-C is an interruption.
    expected = ExitStatus.OK if sig == signal.SIGTERM else ExitStatus.INTERRUPTED
    assert proc.returncode == expected, out
    assert f"OUTCOME {int(expected)} stopped by {signal.Signals(sig).name}" in out
    assert log.read_text().split() == [signal.Signals(sig).name]


def test_sd_notify_without_systemd_is_a_no_op(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert launcher.sd_notify("READY=1") is False


def test_sd_notify_abstract_socket():
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = f"sglang-eagle3-test-{os.getpid()}"
    sock.bind("\0" + name)
    sock.settimeout(5)
    try:
        assert launcher.sd_notify("READY=1", {"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(100) == b"READY=1"
    finally:
        sock.close()
