"""Ports and paths a test owns, so that nothing else on the machine decides its outcome.

A test that needs "a server that is not there" or "a path that does not exist" takes one of these instead of a
fixed port (30000, 1, 9) or a fixed path (/nonexistent/...): another job on a busy machine may listen there, or
create that directory, and the test would measure that job instead.

- ``refused_port``: a loopback port bound by the test and never listened on. While the test holds it, nothing else
  can bind it and every connection is refused (Linux answers a SYN to a bound, non-listening socket with RST).
- ``missing_path``: a path under the test's own fresh directory that nothing created.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections for as long as the block runs (see the module docstring)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def missing_path(tmp_path: Path, name: str = "missing") -> Path:
    """A path that does not exist: under the test's own directory, never created."""
    path = tmp_path / "never-created" / name
    assert not path.exists()
    return path
