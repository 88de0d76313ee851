"""Stopping `sglang-eagle3 serve`: SIGTERM/SIGINT during the load and after readiness.

The server is the stand-in (tests/stand_ins/fake_sglang; SGLang needs GPUs), told to log
SIGTERM/SIGINT and go on: a server that does not stop when asked. The launcher must forward
the signal, give it `stop_timeout` seconds (a setting, kept short here) and then kill its
process group, so the server is gone within the grace period (plus slack for a loaded
machine: only the upper side is bounded, and generously).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from sglang_eagle3.exit_status import ExitStatus
from support.bench_fixtures import FAKE_SGLANG, free_port
from support.gpus import fake_nvidia_smi
from support.processes import alive, descendants

GRACE = 2.0
SLACK = 5.0  # the bar: gone within grace + 5 s of the launcher's signal


def start_serve(tmp_path, patched_tree, port: int, grace: float = GRACE, **behaviour) -> subprocess.Popen:
    environment = {"PYTHONPATH": str(FAKE_SGLANG), **{f"FAKE_SGLANG_{k}": str(v) for k, v in behaviour.items()}}
    env = {**os.environ, "SGLANG_EAGLE3_NVIDIA_SMI": fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv")}
    return subprocess.Popen(
        [sys.executable, "-m", "sglang_eagle3.cli", "serve", "--sglang", str(patched_tree),
         "--set", f"port={port}", "--set", f"stop_timeout={grace}", "--set", "ready_timeout=600",
         "--set", f"environment={json.dumps(environment)}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health_generate", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def wait_for(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("phase", ["loading", "serving"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_server_that_ignores_the_signal_is_killed_after_the_grace_period(tmp_path, patched_tree, phase, sig):
    port, log = free_port(), tmp_path / "signals"
    behaviour = {"NEVER_READY": 1} if phase == "loading" else {}
    launcher = start_serve(tmp_path, patched_tree, port, IGNORE_STOP=1, SIGNAL_LOG=log, **behaviour)
    try:
        wait_for(lambda: listening(port), "the server to listen")  # loading: /health_generate answers 503
        (server,) = descendants(launcher.pid)
        if phase == "serving":
            wait_for(lambda: healthy(port), "/health_generate")
            time.sleep(2.5)  # the launcher polls every 2 s: let it see the server ready
        signalled = time.monotonic()
        launcher.send_signal(sig)
        wait_for(lambda: not alive(server), "the server to be gone", timeout=GRACE + SLACK + 30)
        gone = time.monotonic() - signalled
        out, err = launcher.communicate(timeout=30)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    print(f"STOP {phase} {signal.Signals(sig).name}: server gone {gone:.2f}s after the signal (grace {GRACE:g}s)")
    assert gone <= GRACE + SLACK, f"server gone {gone:.1f}s after {signal.Signals(sig).name}"
    assert log.read_text().split() == [signal.Signals(sig).name]  # it was asked first, and ignored it
    expected = ExitStatus.OK if sig == signal.SIGTERM else ExitStatus.INTERRUPTED
    assert launcher.returncode == expected, err
    assert f"did not exit within {GRACE:g}s and was killed" in err
    if phase == "loading":
        assert "before the server was ready" in err
    assert "Traceback" not in err


def test_a_second_signal_kills_at_once(tmp_path, patched_tree):
    port = free_port()
    launcher = start_serve(tmp_path, patched_tree, port, IGNORE_STOP=1, grace=60)
    try:
        wait_for(lambda: listening(port), "the server to listen")
        (server,) = descendants(launcher.pid)
        time.sleep(1.0)
        launcher.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        signalled = time.monotonic()
        launcher.send_signal(signal.SIGTERM)  # "I said stop": no 60 s wait
        wait_for(lambda: not alive(server), "the server to be gone", timeout=60)
        gone = time.monotonic() - signalled
        _, err = launcher.communicate(timeout=30)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert gone <= SLACK, f"server gone {gone:.1f}s after the second SIGTERM"
    assert launcher.returncode == ExitStatus.OK and "was killed" in err
