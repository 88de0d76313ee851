"""Start the stand-in SGLang server (tests/stand_ins/fake_sglang) on loopback for benchmark tests."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

FAKE_SGLANG = Path(__file__).parent / "stand_ins" / "fake_sglang"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def fake_server(*args: str, **env: str):
    """Yields (base_url, true_rate); env keys are FAKE_SGLANG_* without the prefix, e.g. RATE="200"."""
    port = free_port()
    full_env = {**os.environ, "PYTHONPATH": str(FAKE_SGLANG), **{f"FAKE_SGLANG_{k}": str(v) for k, v in env.items()}}
    process = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--port", str(port), *args], env=full_env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health_generate", timeout=1):
                    break
            except (urllib.error.URLError, OSError):
                pass
            assert process.poll() is None and time.monotonic() < deadline, "fake server did not start"
            time.sleep(0.05)
        with urllib.request.urlopen(f"{url}/server_info", timeout=5) as response:
            yield url, json.load(response)["fake_true_rate"]
    finally:
        process.terminate()
        process.wait(10)
