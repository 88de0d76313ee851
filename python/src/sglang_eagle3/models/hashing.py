"""Streamed hashes of files: sha256 (what the lock pins) and git blob ids (what the hub lists).

hashlib runs OpenSSL's sha256 (SHA-NI where the CPU has it) and releases the GIL on
large buffers, so files hash in parallel threads. One reused 8 MiB buffer filled with
readinto keeps the per-call overhead negligible (benchmarks/models_verify_speed.py
compares this with sha256sum on the same files).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

BUFFER = 8 << 20


def _stream(path: Path, digests, on_bytes: Callable[[int], None] | None) -> None:
    buffer = bytearray(BUFFER)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        while n := f.readinto(buffer):
            chunk = view[:n]
            for d in digests:
                d.update(chunk)
            if on_bytes is not None:
                on_bytes(n)


def sha256_file(path: Path, on_bytes: Callable[[int], None] | None = None) -> str:
    """sha256 of a file, read once; on_bytes(n) is called after each n bytes (for progress)."""
    digest = hashlib.sha256()
    _stream(path, [digest], on_bytes)
    return digest.hexdigest()


def sha256_and_git_blob_id(path: Path) -> tuple[str, str]:
    """Both hashes in one read: the sha256 of the content and git's id of it as a blob."""
    sha256 = hashlib.sha256()
    blob = hashlib.sha1(b"blob %d\0" % path.stat().st_size, usedforsecurity=False)
    _stream(path, [sha256, blob], None)
    return sha256.hexdigest(), blob.hexdigest()
