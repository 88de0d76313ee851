"""`sglang-eagle3 models`: lock, fetch, verify. A failure is a ModelsError, reported by the top-level group
(exit_status.ExitStatus: a check or a download that failed is CHECK_FAILED; partial downloads are kept)."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from pathlib import Path

import click

from .. import errors, options
from ..cli_common import JSON_PRINTED, writable_file
from ..errors import BadInput
from ..exit_status import ExitStatus, for_signal
from ..models import ModelsError, fetch, hub, lockfile, verify
from ..models.progress import human_bytes


@click.group("models")
def models_group() -> None:
    """Pin model weights: lock a hub revision to a commit and per-file hashes, fetch exactly that, verify it."""
    hub.check_client()


def _finish(as_json: bool, payload: dict, error: ModelsError | None = None) -> None:
    """The JSON result (with --json); then the error, for the top-level group to report, or the verdict."""
    if as_json:
        click.echo(json.dumps({**payload, "ok": error is None and payload.get("ok", True),
                               "error": error.to_dict() if error else payload.get("error")}, indent=2))  # fmt: skip
        click.get_current_context().meta[JSON_PRINTED] = True  # the group prints no second JSON for the error
    if error is not None:
        raise error
    sys.exit(ExitStatus.OK if payload.get("ok", True) else ExitStatus.CHECK_FAILED)


def _token(token_file: Path | None) -> str | None:
    ignored = hub.ignored_token_variables()
    if ignored:
        click.echo(f"note: {', '.join(ignored)} in the environment is ignored (the environment leaks to other "
                   "processes); give the token with --token-file", err=True)  # fmt: skip
    return hub.read_token(token_file)


def _io_error(err: OSError, directory: Path) -> ModelsError:
    return ModelsError("io_error", f"{err.filename or directory}: {err.strerror or err}")


# -- lock ----------------------------------------------------------------------------------------


@models_group.command("lock")
@click.argument("specs", nargs=-1, required=True, metavar="REPO[@REVISION]...")
@click.option(
    "--output", "-o", required=True, type=options.NonEmptyPath(),
    help="The lock file for one model; for several (or a path ending in /), a directory that gets "
    "OWNER--NAME.lock.json for each.",
)  # fmt: skip
@options.token_file
@options.download_jobs
@options.json_output
def lock_command(specs, output: str, token_file, jobs, as_json) -> None:
    """Resolve each REPO[@REVISION] (default main) to its commit and write its lock.

    A lock lists every file at that commit with its size and sha256 (LFS files as the hub
    publishes them; small git files are downloaded, checked against their git blob id and
    hashed), for `models fetch` and `models verify` and for Nix (`lib.fetchModel`).
    """
    written: list[dict] = []
    try:
        token = _token(token_file)
        parsed = [hub.parse_spec(s) for s in specs]
        into_dir = len(parsed) > 1 or output.endswith("/") or Path(output).is_dir()
        targets = [Path(output) / lockfile.file_name(repo) if into_dir else Path(output)
                   for repo, _ in parsed]  # fmt: skip
        if len(set(targets)) < len(targets):
            raise ModelsError(
                "bad_input", "one lock per repository: the same repository is given twice", ExitStatus.BAD_INPUT
            )
        for target in targets:  # before the hub is asked: a lock that cannot be written is bad input, not news
            try:
                writable_file(target)
            except BadInput as err:
                raise ModelsError("bad_input", str(err), ExitStatus.BAD_INPUT) from None
        for (repo, revision), target in zip(parsed, targets, strict=True):
            with tempfile.TemporaryDirectory(prefix="sglang-eagle3-lock-") as work:
                lock = hub.resolve(repo, revision, token, Path(work), jobs)
            unchanged = _same_lock(target, lock)
            if not unchanged:
                lockfile.write(lock, target)  # a re-lock that finds nothing new leaves the file (and git) alone
            lfs = sum(f.lfs for f in lock.files)
            written.append({"repo": repo, "revision": revision, "commit": lock.commit, "files": len(lock.files),
                            "total_size": lock.total_size, "gated": lock.gated, "lock": str(target),
                            "changed": not unchanged})  # fmt: skip
            if not as_json:
                click.echo(f"locked {repo}@{revision} -> commit {lock.commit}: {len(lock.files)} files "
                           f"({lfs} LFS), {human_bytes(lock.total_size)}, in {target}"
                           f"{' (unchanged)' if unchanged else ''}")  # fmt: skip
    except ModelsError as err:
        _finish(as_json, {"locks": written}, err)
    except OSError as err:
        _finish(as_json, {"locks": written}, ModelsError("io_error", f"cannot write the lock: {err}"))
    _finish(as_json, {"locks": written})


def _same_lock(path: Path, lock: lockfile.ModelLock) -> bool:
    """The file at path already locks the same files at the same commit (only locked_at would change)."""
    try:
        old = lockfile.load(path)
    except ModelsError:
        return False
    return old.model_copy(update={"locked_at": lock.locked_at}) == lock


# -- fetch ---------------------------------------------------------------------------------------


def _interrupt(signum, _frame):
    raise fetch.Interrupted(signal.Signals(signum).name)


@models_group.command("fetch")
@options.lock
@options.model_dir
@options.token_file
@options.download_jobs
@click.option("--recheck", is_flag=True, help="Hash files already present even when fetch verified them before.")
@options.progress_interval
@options.json_output
def fetch_command(lock_file, directory, token_file, jobs, recheck, progress_interval, as_json) -> None:
    """Download exactly the locked files at the locked commit into DIR, each verified before it is put there.

    Resumable (run it again after an interruption), parallel, with progress. Files
    already there are hashed and kept when they match; files placed for an older lock
    are removed; other files are left alone and reported.
    """
    try:
        lock = lockfile.load(lock_file)
        token = _token(token_file)
    except ModelsError as err:
        _finish(as_json, {}, err)
    if not as_json:
        click.echo(f"fetch {lock.repo} at commit {lock.commit} into {directory} "
                   f"({len(lock.files)} files, {human_bytes(lock.total_size)})", err=True)  # fmt: skip
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    try:
        result = fetch.fetch(lock, directory, token, jobs=jobs, recheck=recheck, interval=progress_interval)
    except ModelsError as err:
        _finish(as_json, {"directory": str(directory), "repo": lock.repo, "commit": lock.commit}, err)
    except OSError as err:
        _finish(as_json, {"directory": str(directory)}, _io_error(err, directory))
    except fetch.Interrupted as stop:
        message = f"stopped by {stop}: no file was put in {directory} without being verified; {hub.run_again()}"
        error = ModelsError("interrupted", message, for_signal(signal.Signals[str(stop)]))
        if as_json:
            click.echo(json.dumps({"ok": False, "error": error.to_dict()}, indent=2))
        status = errors.report(error)  # the top-level group's report, but it cannot end the process:
        sys.stdout.flush()
        # a download thread blocked in a read cannot be cancelled, and a normal exit joins
        # every worker thread first (concurrent.futures does at interpreter exit), which can take
        # as long as the largest file's download. os._exit leaves them; the next run resumes (hub 0.x) or
        # removes (1.x) what they wrote.
        os._exit(status)
    if not as_json:
        for o in result.outcomes:
            if o.status is fetch.FileStatus.DOWNLOADED:
                click.echo(f"  downloaded  {o.path} ({human_bytes(o.size)})")
            elif o.status is fetch.FileStatus.FAILED:
                click.echo(f"  FAILED      {o.path}: {o.error}")
        if result.removed:
            click.echo(f"removed (placed for an older lock): {', '.join(result.removed)}")
        if result.extra:
            click.echo(f"extra files, not in the lock, left alone (`models verify` fails until they are removed): "
                       f"{', '.join(result.extra)}", err=True)  # fmt: skip
        counts = result.to_dict()
        summary = (f"{counts['downloaded']} downloaded ({human_bytes(result.downloaded_bytes)} in "
                   f"{result.seconds:.1f} s), {counts['present']} already present")  # fmt: skip
        if result.ok:
            click.echo(f"done: all {len(lock.files)} files match the lock; {summary}")
        else:
            not_started = sum(o.status is fetch.FileStatus.NOT_STARTED for o in result.outcomes)
            click.echo(f"incomplete: {summary}, {len(result.failed) - not_started} failed, "
                       f"{not_started} not started", err=True)  # fmt: skip
    _finish(as_json, result.to_dict(), result.error)


# -- verify --------------------------------------------------------------------------------------


@models_group.command("verify")
@options.lock
@options.model_dir
@click.option("--quick", is_flag=True, help="Sizes only (no hashing): seconds, for a start-up check.")
@options.hash_jobs
@options.progress_interval
@options.json_output
def verify_command(lock_file, directory, quick, jobs, progress_interval, as_json) -> None:
    """Check DIR against the lock: every file's size and sha256, and no file missing or extra.

    Each file that differs is named; exit 1 if any does.
    """
    try:
        lock = lockfile.load(lock_file)
        result = verify.verify(lock, directory, quick=quick, jobs=jobs, interval=progress_interval)
    except ModelsError as err:
        _finish(as_json, {"directory": str(directory)}, err)
    except OSError as err:
        _finish(as_json, {"directory": str(directory)}, _io_error(err, directory))
    if not as_json:
        label = {"missing": "MISSING", "size": "DIFFERS", "sha256": "DIFFERS", "unreadable": "UNREADABLE"}
        for p in result.problems:
            click.echo(f"  {label[p.kind]:<10} {p.path}: {p.detail}")
        for path in result.extra:
            click.echo(f"  {'EXTRA':<10} {path}: not in the lock (remove it: SGLang may load it)")
        what = "sizes" if quick else "sizes and sha256"
        if result.ok:
            hashed = "" if quick else f", {human_bytes(result.bytes_hashed)} hashed"
            click.echo(f"OK: {len(lock.files)} files of {lock.repo}@{lock.commit[:12]} in {directory} match the lock "
                       f"({what}{hashed}, {result.seconds:.2f} s)")  # fmt: skip
        else:
            differs = sum(p.kind != "missing" for p in result.problems)
            missing = sum(p.kind == "missing" for p in result.problems)
            click.echo(f"FAILED ({what}): {differs} differ, {missing} missing, {len(result.extra)} extra, "
                       f"of {len(lock.files)} files of {lock.repo}@{lock.commit[:12]} in {directory}",
                       err=True)  # fmt: skip
    _finish(as_json, result.to_dict())
