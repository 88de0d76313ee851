"""A model directory against its lock: every file's size and sha256, missing and extra files.

Extra files count as failures: SGLang loads every `*.safetensors` it finds in the
directory, so a stray shard changes what is served as surely as a changed one.
"""

from __future__ import annotations

import errno
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..exit_status import ExitStatus
from . import ModelsError, hashing
from .lockfile import RESERVED_DIRS, LockedFile, ModelLock
from .progress import Progress


@dataclass
class Problem:
    path: str
    kind: str  # missing | size | sha256 | unreadable
    detail: str


@dataclass
class VerifyResult:
    lock: ModelLock
    directory: Path
    quick: bool
    checked: int = 0
    bytes_hashed: int = 0
    seconds: float = 0.0
    problems: list[Problem] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.extra

    def to_dict(self) -> dict:
        return {
            "ok": self.ok, "mode": "quick" if self.quick else "full", "directory": str(self.directory),
            "repo": self.lock.repo, "commit": self.lock.commit, "files": len(self.lock.files),
            "checked": self.checked, "bytes_hashed": self.bytes_hashed, "seconds": round(self.seconds, 3),
            "problems": [vars(p) for p in self.problems], "extra": self.extra,
        }  # fmt: skip


def default_jobs() -> int:
    return min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def parallel_map(fn, items: list, jobs: int) -> list:
    """fn over items in threads, in order. On an exception (Ctrl-C included) the items not yet
    started are dropped instead of waited for, so stopping a long hash run is quick."""
    pool = ThreadPoolExecutor(max(1, jobs))
    try:
        return list(pool.map(fn, items))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def extra_files(lock: ModelLock, directory: Path) -> list[str]:
    """Files under directory that the lock does not list (the tools' own directories aside)."""
    listed = {f.path for f in lock.files}
    extra = []
    for root, dirs, files in os.walk(directory):
        rel_root = os.path.relpath(root, directory)
        rel_root = "" if rel_root == "." else rel_root.replace(os.sep, "/") + "/"
        dirs[:] = [d for d in dirs if not any(f"{rel_root}{d}/".startswith(r + "/") for r in RESERVED_DIRS)]
        extra += [rel_root + name for name in files if rel_root + name not in listed]
    return sorted(extra)


def check_size(f: LockedFile, directory: Path) -> Problem | None:
    target = directory / f.path
    try:
        st = target.stat()
    except FileNotFoundError:
        return Problem(f.path, "missing", "not in the directory")
    except OSError as err:
        return Problem(f.path, "unreadable", err.strerror or str(err))
    if not target.is_file():
        return Problem(f.path, "unreadable", "not a regular file")
    if st.st_size != f.size:
        return Problem(f.path, "size", f"{st.st_size} bytes, the lock says {f.size}")
    return None


# Why a model directory cannot be made: the path given is at fault (bad input), not the disk or the download.
PATH_ERRORS = {errno.ENOTDIR, errno.EEXIST, errno.ENOENT, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENAMETOOLONG,
               errno.ELOOP}  # fmt: skip


def check_directory(directory: Path) -> None:
    """--dir names a directory, or a place to make one: a file there is bad input."""
    if directory.exists() and not directory.is_dir():
        raise ModelsError(
            "bad_input", f"{directory} is a file, not a directory; --dir names the model directory (its files go "
            "inside it)", ExitStatus.BAD_INPUT,
        )  # fmt: skip


def verify(
    lock: ModelLock, directory: Path, quick: bool = False, jobs: int | None = None, interval: float = 30.0
) -> VerifyResult:
    check_directory(directory)
    if not directory.is_dir():
        raise ModelsError(
            "missing", f"{directory} does not exist or is not a directory; fetch it: "
            f"sglang-eagle3 models fetch --lock LOCK --dir {directory}",
        )  # fmt: skip
    started = time.monotonic()
    result = VerifyResult(lock, directory, quick)
    to_hash = []
    for f in lock.files:
        problem = check_size(f, directory)
        if problem:
            result.problems.append(problem)
        else:
            to_hash.append(f)
    result.checked = len(lock.files)
    result.extra = extra_files(lock, directory)
    if not quick and to_hash:
        progress = Progress("verify (sha256)", sum(f.size for f in to_hash), interval=interval)

        def check_hash(f: LockedFile) -> Problem | None:
            try:
                actual = hashing.sha256_file(directory / f.path, progress.advance)
            except OSError as err:
                return Problem(f.path, "unreadable", err.strerror or str(err))
            return None if actual == f.sha256 else Problem(f.path, "sha256", f"{actual}, the lock says {f.sha256}")

        # Largest first, so the last files to finish are small ones and every thread stays busy.
        ordered = sorted(to_hash, key=lambda f: -f.size)
        try:
            result.problems += [p for p in parallel_map(check_hash, ordered, jobs or default_jobs()) if p is not None]
        finally:
            progress.close()
        result.bytes_hashed = progress.completed
    result.problems.sort(key=lambda p: p.path)
    result.seconds = time.monotonic() - started
    return result
