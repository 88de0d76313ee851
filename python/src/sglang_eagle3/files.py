"""The files the tools are given and the ones they keep: read without crashing on any input, written atomically.

An input nested deeper than Python's recursion allows (``[[[[...]]]]``) is the parser's own error, never a
RecursionError (which no caller expects). What a cache or a lock keeps appears under its name only whole: written to
a temporary file in the same directory, fsynced, renamed over the name, the directory fsynced too; a command killed
at any point leaves the old file or the new one, never a part (one SIGKILL left is ``.NAME.*.partial``, never read).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import tomllib
from pathlib import Path

TOO_DEEP = "nested too deeply to read (more levels than Python's recursion allows); give a flat file"


def loads_json(text: str | bytes, **kwargs):
    """``json.loads``; an input nested too deeply is a json.JSONDecodeError (a ValueError) saying so."""
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        whole_input = 0  # the error's position: the input as a whole, not one place in it
        raise json.JSONDecodeError(TOO_DEEP, text if isinstance(text, str) else "", whole_input) from None


def loads_toml(text: str):
    """``tomllib.loads``; an input nested too deeply is a tomllib.TOMLDecodeError (a ValueError) saying so."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError(TOO_DEEP) from None


def fsync(path: Path, directory: bool = False) -> None:
    """``path``'s data (or a directory's entries) on the disk."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: Path, mode: str = "wb"):
    """A file object to write that appears at ``path`` only once the block has ended without an error (see the
    module docstring); the temporary file is removed if the block fails or a signal stops it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # as open() would have made it (mkstemp's are private)
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    fsync(path.parent, directory=True)


def _umask() -> int:
    """This process's umask, read without changing it (os.umask sets one to read it, a race with other threads)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def write_atomic(path: Path, data: str | bytes) -> None:
    """``data`` as the whole of ``path``, atomically (``atomic_file``)."""
    with atomic_file(path, "w" if isinstance(data, str) else "wb") as handle:
        handle.write(data)


def place(source: Path, target: Path) -> None:
    """A complete file (``source``, on ``target``'s file system) put at ``target`` atomically: fsynced, renamed,
    the directory fsynced."""
    fsync(source)
    os.replace(source, target)
    fsync(Path(target).parent, directory=True)
