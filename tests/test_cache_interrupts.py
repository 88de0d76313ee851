"""An interrupted command never poisons the cache: Ctrl-C at any moment of a first `--sglang VERSION`, and the next
run succeeds; a damaged entry is fetched again and named so; the index is blamed only when it serves other bytes.

Issue 46 found a Ctrl-C during the first wheel download leaving part of the wheel under its final name (3 of 31
timed runs); every later run then said the index served other bytes ("the release was replaced") until the file was
deleted by hand.

The package index is a stand-in on loopback (the real one cannot be reached from a test, nor made slow): a PEP 503
simple index that serves the real pinned SGLang 0.5.9 wheel, its sha256 in the link as PyPI gives it, in 64 KiB
chunks at a known pace, so that a signal lands at every stage of a first run: pip starting, the download half done,
the wheel being placed, its tree being unpacked. The CLI and pip are real; Ctrl-C goes to the whole process group, as
a terminal sends it.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sglang_eagle3.exit_status import ExitStatus
from support import pins

CHUNK = 64 * 1024
PACE_S = 0.02  # per chunk: the 5 MB wheel takes about 1.6 s, whatever the machine's load adds


class Index(threading.Thread):
    """The stand-in index: /simple/sglang/ lists one wheel, /files/<name> serves ``payload`` slowly."""

    def __init__(self, name: str, payload: bytes):
        super().__init__(daemon=True)
        self.name, self.payload, self.served = name, payload, 0
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_args):
                pass

            def do_GET(self):  # noqa: N802 (http.server's name)
                if self.path.rstrip("/") == "/simple/sglang":
                    digest = hashlib.sha256(index.payload).hexdigest()  # as PyPI links it: pip checks it too
                    body = f'<a href="/files/{name}#sha256={digest}">{name}</a>'.encode()
                    kind = "text/html"
                elif self.path == f"/files/{name}":
                    body, kind = index.payload, "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    for start in range(0, len(body), CHUNK):
                        self.wfile.write(body[start : start + CHUNK])
                        if kind != "text/html":
                            time.sleep(PACE_S)
                    index.served += 1 if kind != "text/html" else 0
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client was stopped: what this test is about

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"

    def run(self):
        self.server.serve_forever(poll_interval=0.05)


@pytest.fixture
def index(pristine_wheel):
    served = Index(pristine_wheel.name, pristine_wheel.read_bytes())
    served.start()
    yield served
    served.server.shutdown()


PIN = pins.pins()["sglang"]


def command_env(index: Index, cache: Path) -> dict[str, str]:
    scratch = cache / "tmp"  # the temporary directories of a pip killed mid-download stay here, not in /tmp
    scratch.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "XDG_CACHE_HOME": str(cache), "PIP_INDEX_URL": index.url, "PIP_CONFIG_FILE": os.devnull,
            "PIP_NO_CACHE_DIR": "1", "PIP_RETRIES": "0", "PIP_TIMEOUT": "20", "TMPDIR": str(scratch)}  # fmt: skip


# `patch apply` on a release version fetches and unpacks it, then refuses to patch the cache's copy: the shortest
# command that goes through the whole first run and ends on its own.
ARGV = [sys.executable, "-m", "sglang_eagle3", "patch", "apply", "--sglang", PIN["version"]]


def finishes(index: Index, cache: Path) -> subprocess.CompletedProcess:
    result = subprocess.run(ARGV, capture_output=True, text=True, env=command_env(index, cache), timeout=300)
    assert result.returncode == ExitStatus.BAD_INPUT and "is not an SGLang anything runs" in result.stderr, (
        result.stderr[-2000:]
    )
    return result


def cache_is_sound(cache: Path) -> None:
    """What a stopped run may leave: under the wheel's name only the whole wheel; under the tree's name only a whole
    tree; scratch and staging directories at most (a SIGKILL's), which the next run removes."""
    wheels, trees = cache / "sglang-eagle3" / "sglang" / "wheels", cache / "sglang-eagle3" / "sglang" / "trees"
    wheel = wheels / PIN["wheel"]
    if wheel.exists():
        assert hashlib.sha256(wheel.read_bytes()).hexdigest() == PIN["sha256"], "part of a wheel under its name"
    tree = trees / PIN["wheel"].removesuffix(".whl")
    if tree.exists():
        assert (tree / "sglang" / "srt" / "server_args.py").is_file(), "part of a tree under its name"
    named = [p.name for d in (wheels, trees) if d.is_dir() for p in d.iterdir()]
    assert all(n in (PIN["wheel"], tree.name, ".download.lock") or n.startswith((".fetch-", ".unpack-"))
               for n in named), named  # fmt: skip


def test_ctrl_c_at_any_moment_of_a_first_fetch_never_poisons_the_cache(tmp_path, index):
    """Ctrl-C at 12 moments from pip's start to the end of the unpacking; after each, the next run succeeds."""
    measured = tmp_path / "measured"
    started = time.monotonic()
    finishes(index, measured)
    whole_run = time.monotonic() - started  # download (paced) and unpacking, on this machine now
    stopped_midway = 0
    for step in range(12):
        cache = tmp_path / f"cache-{step}"
        proc = subprocess.Popen(ARGV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=command_env(index, cache), start_new_session=True)  # fmt: skip
        time.sleep(0.3 + step * whole_run / 12)
        os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: the CLI and its pip alike
        _, err = proc.communicate(timeout=120)
        assert "Traceback" not in err and "replaced" not in err, err[-2000:]
        assert proc.returncode in (ExitStatus.INTERRUPTED, -signal.SIGINT, ExitStatus.BAD_INPUT), err[-2000:]
        stopped_midway += proc.returncode != ExitStatus.BAD_INPUT
        cache_is_sound(cache)
        again = finishes(index, cache)
        assert "damaged" not in again.stderr and "replaced" not in again.stderr
        cache_is_sound(cache)
        assert not list((cache / "sglang-eagle3" / "sglang" / "wheels").glob(".fetch-*"))
    assert stopped_midway >= 6, "the signals came after the runs had ended: the pace did not leave them time"


def test_a_wheel_a_killed_run_left_cut_short_is_fetched_again(tmp_path, index):
    """What an older version of this tool left (part of a wheel under its final name): named as damaged and fetched
    again, never "the release was replaced"."""
    wheels = tmp_path / "sglang-eagle3" / "sglang" / "wheels"
    wheels.mkdir(parents=True)
    (wheels / PIN["wheel"]).write_bytes(index.payload[: len(index.payload) // 3])
    result = finishes(index, tmp_path)
    assert f"{wheels / PIN['wheel']} is damaged (sha256 " in result.stderr and "fetching it again" in result.stderr
    assert "replaced" not in result.stderr
    cache_is_sound(tmp_path)


def test_a_killed_fetch_leaves_nothing_the_next_run_trips_on(tmp_path, index):
    """SIGKILL, which nothing can clean up after: its scratch directory is removed by the next run, which succeeds."""
    proc = subprocess.Popen(ARGV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=command_env(index, tmp_path),
                            start_new_session=True)  # fmt: skip
    wheels = tmp_path / "sglang-eagle3" / "sglang" / "wheels"
    deadline = time.monotonic() + 60
    while not list(wheels.glob(".fetch-*/*")) and time.monotonic() < deadline:  # pip is writing into it
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert list(wheels.glob(".fetch-*")), "the kill came after the download: nothing left to clean up"
    cache_is_sound(tmp_path)
    finishes(index, tmp_path)
    assert not list(wheels.glob(".fetch-*"))


def test_the_release_is_said_replaced_only_when_the_index_serves_other_bytes(tmp_path, index):
    index.payload = index.payload[:-1] + bytes([index.payload[-1] ^ 1])  # one bit of the wheel, upstream
    result = subprocess.run(ARGV, capture_output=True, text=True, env=command_env(index, tmp_path), timeout=300)
    assert result.returncode == ExitStatus.CHECK_FAILED, result.stderr[-2000:]
    assert f"the package index serves {PIN['wheel']} with sha256 " in result.stderr
    assert "the release was replaced" in result.stderr and index.served == 2  # asked twice, past pip's cache
    wheels = tmp_path / "sglang-eagle3" / "sglang" / "wheels"
    assert sorted(p.name for p in wheels.iterdir()) == [".download.lock"]  # nothing kept
