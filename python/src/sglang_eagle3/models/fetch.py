"""Make a directory hold exactly the files of a lock, downloading what is missing or wrong.

Each file is downloaded by huggingface_hub at the locked commit into its own staging directory under
D/.sglang-eagle3/staging/, hashed, and only on a match renamed into D (same file system, so the rename is atomic):
killed at any point, D never holds a partial or wrong file under a locked name, and the next run resumes the partial
downloads (huggingface_hub 0.x; 1.x starts them again). A file the hub serves differently from the lock is deleted
from staging, not put in place.

Files already in D are hashed once and recorded (D/.sglang-eagle3/state.json); later runs trust a record while the
file's size, modification time, change time and inode are unchanged (`--recheck` hashes everything again; `models
verify` always does). Files placed for an older lock and unchanged since are removed; anything else not in the lock
is left alone and reported.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import hashlib
import json
import os
import shutil
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from ..exit_status import ExitStatus
from ..files import place, write_atomic
from . import ModelsError, hashing, hub
from .lockfile import LockedFile, ModelLock
from .progress import Progress, human_bytes
from .verify import PATH_ERRORS, check_directory, check_size, default_jobs, extra_files, parallel_map

STATE_DIR = ".sglang-eagle3"


class Interrupted(BaseException):
    """SIGINT/SIGTERM during a fetch (raised by the CLI's signal handler in the main thread): a BaseException, like
    KeyboardInterrupt, so that no ``except Exception`` on the way swallows it."""


class FileStatus(enum.StrEnum):
    PRESENT = "present"  # already there with the locked size and sha256
    DOWNLOADED = "downloaded"  # fetched now and verified
    FAILED = "failed"
    NOT_STARTED = "not_started"  # the fetch stopped (error, signal) before this file


@dataclass
class Outcome:
    path: str
    size: int
    status: FileStatus
    error: ModelsError | None = None

    def to_dict(self) -> dict:
        out = {"path": self.path, "size": self.size, "status": self.status}
        if self.error is not None:
            out["error"] = self.error.to_dict()
        return out


@dataclass
class FetchResult:
    lock: ModelLock
    directory: Path
    outcomes: list[Outcome] = field(default_factory=list)
    downloaded_bytes: int = 0
    seconds: float = 0.0
    removed: list[str] = field(default_factory=list)  # ours, from an older lock
    extra: list[str] = field(default_factory=list)
    error: ModelsError | None = None  # what stopped the whole fetch, if anything

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status in (FileStatus.FAILED, FileStatus.NOT_STARTED)]

    @property
    def ok(self) -> bool:
        return self.error is None and not self.failed

    def to_dict(self) -> dict:
        count = lambda status: sum(o.status == status for o in self.outcomes)  # noqa: E731
        return {
            "ok": self.ok, "directory": str(self.directory), "repo": self.lock.repo, "commit": self.lock.commit,
            "files": len(self.lock.files), "present": count(FileStatus.PRESENT),
            "downloaded": count(FileStatus.DOWNLOADED),
            "failed": len(self.failed), "downloaded_bytes": self.downloaded_bytes,
            "seconds": round(self.seconds, 3), "removed": self.removed, "extra": self.extra,
            "error": self.error.to_dict() if self.error else None,
            "outcomes": [o.to_dict() for o in self.outcomes],
        }  # fmt: skip


class State:
    """Which files this tool verified and placed, keyed by what would change if they were touched."""

    def __init__(self, directory: Path, lock: ModelLock):
        self.path = directory / STATE_DIR / "state.json"
        self.directory = directory
        self.lock = lock
        self.files: dict[str, dict] = {}
        self._lock = threading.Lock()  # download threads record files concurrently
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError, AttributeError):
            self.files = dict(json.loads(self.path.read_text())["files"])  # unreadable: start afresh

    @staticmethod
    def _stamp(st: os.stat_result) -> dict:
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "inode": st.st_ino}

    def unchanged(self, path: str) -> bool:
        """The file is the one recorded: same size, times and inode as when it was verified."""
        record = self.files.get(path)
        try:
            st = (self.directory / path).stat()
        except OSError:
            return False
        return record is not None and {k: v for k, v in record.items() if k != "sha256"} == self._stamp(st)

    def trusted(self, f: LockedFile) -> bool:
        return self.files.get(f.path, {}).get("sha256") == f.sha256 and self.unchanged(f.path)

    def record(self, path: str, sha256: str) -> None:
        with self._lock:
            self.files[path] = {**self._stamp((self.directory / path).stat()), "sha256": sha256}
            self._save()

    def forget(self, path: str) -> None:
        with self._lock:
            if self.files.pop(path, None) is not None:
                self._save()

    def _save(self) -> None:
        write_atomic(self.path, json.dumps({"repo": self.lock.repo, "commit": self.lock.commit, "files": self.files}))


def staging_key(f: LockedFile) -> str:
    return hashlib.sha256(f"{f.path}\n{f.sha256}".encode()).hexdigest()[:24]


@contextlib.contextmanager
def exclusive(directory: Path):
    """One fetch per directory at a time (a second one would race the first for the same files)."""
    with open(directory / STATE_DIR / "fetch.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ModelsError("busy", f"another fetch into {directory} is running; wait for it to finish") from None
        yield


class Fetcher:
    def __init__(self, lock: ModelLock, directory: Path, token: str | None, jobs: int, interval: float):
        self.lock, self.directory, self.token = lock, directory, token
        self.jobs, self.interval = max(1, jobs), interval
        self.staging = directory / STATE_DIR / "staging"
        self.result = FetchResult(lock, directory)

    # -- what is already there ------------------------------------------------------------------

    def remove_stale(self, state: State) -> None:
        """Files this tool placed for an older lock, untouched since: removed (they would be extra)."""
        listed = {f.path for f in self.lock.files}
        for path in sorted(set(state.files) - listed):
            if state.unchanged(path):
                with contextlib.suppress(OSError):  # not removable: it stays, reported as extra
                    (self.directory / path).unlink()
                    self.result.removed.append(path)
            state.forget(path)  # changed since: not ours any more, reported as extra
        listed_keys = {staging_key(f) for f in self.lock.files}
        if self.staging.is_dir():
            for partial in self.staging.iterdir():
                if partial.name not in listed_keys:  # a partial download for an older lock
                    shutil.rmtree(partial, ignore_errors=True)

    def check_present(self, state: State, recheck: bool) -> list[LockedFile]:
        """Files to download: missing, or present but not matching the lock."""
        todo, to_hash = [], []
        for f in self.lock.files:
            if check_size(f, self.directory) is not None:
                todo.append(f)  # missing, or the wrong size: replaced once the right one is verified
            elif recheck or not state.trusted(f):
                to_hash.append(f)
            else:
                self.result.outcomes.append(Outcome(f.path, f.size, FileStatus.PRESENT))
        if to_hash:
            progress = Progress("check present files (sha256)", sum(f.size for f in to_hash), interval=self.interval)

            def digest(f: LockedFile) -> str | None:
                try:
                    return hashing.sha256_file(self.directory / f.path, progress.advance)
                except OSError:
                    return None  # unreadable: fetched again, and replaced

            try:
                for f, actual in zip(
                    to_hash, parallel_map(digest, to_hash, min(self.jobs, default_jobs())), strict=True
                ):
                    if actual == f.sha256:
                        state.record(f.path, f.sha256)
                        self.result.outcomes.append(Outcome(f.path, f.size, FileStatus.PRESENT))
                    else:
                        state.forget(f.path)
                        todo.append(f)
            finally:
                progress.close()
        return todo

    # -- downloading ----------------------------------------------------------------------------

    def download(self, f: LockedFile, state: State) -> None:
        """Download one file into its staging directory, verify it, and only then put it in place."""
        scratch = self.staging / staging_key(f)
        resumed = hub.partial_bytes(scratch) > 0
        staged, size, actual = self._fetch_one(f, scratch)
        if actual != f.sha256 and resumed:
            # What an earlier run left was damaged (the disk, a run of another tool): not the hub's doing. Fetched
            # again from its first byte before anything is blamed on the hub.
            shutil.rmtree(scratch, ignore_errors=True)
            staged, size, actual = self._fetch_one(f, scratch)
        if actual != f.sha256:
            shutil.rmtree(scratch, ignore_errors=True)  # never resume from content the lock rejects
            served = f"{size} bytes" if actual is None else f"sha256 {actual}"
            raise ModelsError(
                "mismatch",
                f"the hub served {served} at commit {self.lock.commit}, the lock pins "
                f"{f.size} bytes with sha256 {f.sha256}; nothing was put in place. The file was replaced "
                "upstream or corrupted on the way: if the new content is wanted, lock the model again",
            )
        target = self.directory / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        place(staged, target)
        state.record(f.path, f.sha256)
        shutil.rmtree(scratch, ignore_errors=True)

    def _fetch_one(self, f: LockedFile, scratch: Path) -> tuple[Path, int, str | None]:
        """One file downloaded into ``scratch`` (resuming what is there): its path, size and sha256 (None when the
        size is already wrong)."""
        try:
            staged = Path(hub.download_file(self.lock.repo, self.lock.commit, f.path, scratch, self.token))
        except Exception as err:
            lock = self.lock
            raise hub.translate(err, repo=lock.repo, revision=lock.commit, path=f.path, token=self.token) from None
        size = staged.stat().st_size
        return staged, size, hashing.sha256_file(staged) if size == f.size else None

    def download_all(self, todo: list[LockedFile], state: State) -> None:
        if self.lock.gated and self.token is None:
            raise hub.gated(self.lock.repo, None)
        partial = {staging_key(f): hub.resumable_bytes(self.staging / staging_key(f)) for f in todo}
        need = sum(f.size for f in todo) - sum(partial.values())
        free = shutil.disk_usage(self.directory).free
        if need > free:
            raise ModelsError(
                "disk_full",
                f"{self.directory} needs {human_bytes(need)} more for {len(todo)} file(s) but its file system has "
                f"{human_bytes(free)} free: free space (or choose another --dir), then run the same command again",
            )
        progress = Progress("download", sum(f.size for f in todo), sum(partial.values()), interval=self.interval)
        finished_bytes = 0
        running: dict[Future, LockedFile] = {}
        queue = sorted(todo, key=lambda f: -f.size)  # largest first: the long downloads start early
        pool = ThreadPoolExecutor(self.jobs)
        try:
            while queue or running:
                while queue and len(running) < self.jobs and self.result.error is None:
                    f = queue.pop(0)
                    running[pool.submit(self.download, f, state)] = f
                if not running:
                    break
                done, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in done:
                    f = running.pop(future)
                    finished_bytes += self._finished(f, future.exception(), partial[staging_key(f)])
                in_flight = sum(hub.partial_bytes(self.staging / staging_key(f)) for f in running.values())
                waiting = sum(partial[staging_key(f)] for f in queue)
                progress.set(finished_bytes + in_flight + waiting)
            self.result.outcomes += [Outcome(f.path, f.size, FileStatus.NOT_STARTED) for f in queue]
        finally:
            progress.close()
            pool.shutdown(wait=False, cancel_futures=True)

    def _finished(self, f: LockedFile, err: BaseException | None, resumed: int) -> int:
        """Records how one download ended; the bytes it finished."""
        if err is None:
            self.result.downloaded_bytes += f.size - resumed
            self.result.outcomes.append(Outcome(f.path, f.size, FileStatus.DOWNLOADED))
            return f.size
        error = hub.translate(err, repo=self.lock.repo, revision=self.lock.commit, path=f.path, token=self.token)
        self.result.outcomes.append(Outcome(f.path, f.size, FileStatus.FAILED, error))
        if error.kind in hub.FATAL and self.result.error is None:
            self.result.error = error  # start nothing more: every other file would fail the same way
        return 0


def fetch(
    lock: ModelLock,
    directory: Path,
    token: str | None,
    jobs: int = 8,
    recheck: bool = False,
    interval: float = 30.0,
) -> FetchResult:
    started = time.monotonic()
    check_directory(directory)
    try:
        (directory / STATE_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        shown = err.filename and Path(err.filename) not in (directory, directory / STATE_DIR)
        at = f" ({err.filename})" if shown else ""
        if err.errno in PATH_ERRORS:  # a file on the way, no permission, a read-only file system
            raise ModelsError("bad_input", f"cannot create {directory}{at}: {err.strerror}; give --dir a directory "
                              "this user can write", ExitStatus.BAD_INPUT) from None  # fmt: skip
        raise ModelsError("io_error", f"cannot create {directory}{at}: {err.strerror}") from None
    fetcher = Fetcher(lock, directory, token, jobs, interval)
    with exclusive(directory):
        state = State(directory, lock)
        fetcher.remove_stale(state)
        todo = fetcher.check_present(state, recheck)
        if todo:
            try:
                fetcher.download_all(todo, state)
            except ModelsError as err:
                fetcher.result.error = err
                fetcher.result.outcomes += [Outcome(f.path, f.size, FileStatus.NOT_STARTED, None) for f in todo]
        fetcher.result.extra = extra_files(lock, directory)
    fetcher.result.outcomes.sort(key=lambda o: o.path)
    fetcher.result.seconds = time.monotonic() - started
    return fetcher.result
