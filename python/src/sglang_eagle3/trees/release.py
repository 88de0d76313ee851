"""The SGLang tree a user names with ``--sglang``: a directory, a wheel file, or a release version.

A version is fetched from the package index with pip (``pip download --no-deps``) into this user's
cache, ``$XDG_CACHE_HOME/sglang-eagle3/sglang`` (``~/.cache/...`` by default). For a version
nix/pins.json pins, that is exactly the pinned wheel, whatever this Python and platform are, and
its sha256 is checked against the pin, as Nix checks it. A wheel is unpacked once into the same
cache, to be read: nothing is imported, installed or run from there. This is how the probe, patch
check and `serve --dry-run` read SGLang without installing it (torch and its CUDA libraries).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .. import files, stacks
from ..errors import BadInput, CheckFailed, shown
from ..progress_lines import progress
from ..source.tree import SGLangNotFound, SGLangTree, locate

VERSION = re.compile(r"\d+(\.\d+)+((a|b|rc|\.post|\.dev)\d+)*")
CACHE_VARIABLE = "XDG_CACHE_HOME"


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/sglang-eagle3/sglang`` (``~/.cache/...`` by default): wheels and their unpacked trees."""
    base = Path(os.environ.get(CACHE_VARIABLE) or Path.home() / ".cache")
    return base / "sglang-eagle3" / "sglang"


def resolve(given: str | Path | None, cache: Path | None = None) -> SGLangTree:
    """The SGLang tree ``given`` names: None for the one this Python imports, a directory (site-packages, the
    sglang package, a git checkout), a ``.whl`` file, or a release version (its pristine wheel, fetched)."""
    if given is None:
        return locate(None)
    cache = cache or cache_dir()
    text = str(given)
    if not text.strip():  # Path("") is the working directory: never read it for an empty value
        raise BadInput("--sglang is empty; give an SGLang directory, a wheel file or a release version (e.g. 0.5.9)")
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # ~unknown-user
        return locate(text)  # which says so
    if path.is_dir():
        return locate(path)
    if text.endswith(".whl"):
        if not path.is_file():
            raise BadInput(f"{text}: no such wheel file")
        return unpack(path, cache)
    if VERSION.fullmatch(text):
        return unpack(download(text, cache), cache)
    if path.exists() or "/" in text:
        return locate(path)  # a file, or a directory that is not there: locate() says which
    raise BadInput(
        f"{shown(text)} is neither a directory, a .whl file nor an SGLang version (e.g. 0.5.9); "
        "give an SGLang tree (a directory holding sglang/), a wheel, or a release version"
    )


def find(given: str | Path | None, cache: Path | None = None) -> tuple[SGLangTree | None, str | None]:
    """The tree preflight reads, resolved once: (the tree ``given`` names, None); with nothing named and none
    importable, (None, why and how to name one), a finding. A tree named that is not there stays bad input."""
    try:
        return resolve(given, cache), None
    except SGLangNotFound as err:
        if given is not None:
            raise
        return None, str(err)


def layout_problem(tree: SGLangTree, err: Exception) -> str:
    """What to say of a tree whose source is not laid out as a release this tool reads: which releases those are,
    and for a copy unpacked in the cache (``--sglang VERSION``, a wheel), how to clear it."""
    found = f"SGLang {tree.version or '(unknown version)'} at {tree.root}"
    said = f"{found} does not have the source layout of {stacks.listed()} ({err})"
    first, last = stacks.versions()[0], stacks.versions()[-1]
    if tree.release is not None and stacks.get(tree.version) is not None:
        return (
            f"{said}: this copy, unpacked in the cache from {tree.release}, is damaged. Remove it (rm -r "
            f"{tree.root}) and run again: it is unpacked anew from the wheel (sha256-checked for a pinned release)"
        )
    if tree.release is not None:
        return (
            f"{said}: {stacks.not_a_stack(tree.version)}; give --sglang one of them, e.g. --sglang {last}. The "
            f"cached copy ({tree.root}) may be removed"
        )
    return (
        f"{said}: {stacks.not_a_stack(tree.version)}. Install one of them (pip install sglang=={first}), or read a "
        f"release's pristine wheel with --sglang {first} (or {last})"
    )


# -- the pins ---------------------------------------------------------------------------------------

pins = stacks.pins  # nix/pins.json (sglang_eagle3.stacks reads it, the wheel's own copy inside a wheel)


def release_pin(version: str) -> dict | None:
    """nix/pins.json's entry for SGLang ``version`` (its wheel file name and sha256), or None if it is not pinned."""
    return next((pin for pin in pins().values() if isinstance(pin, dict) and pin.get("version") == version
                 and str(pin.get("wheel", "")).startswith(f"sglang-{version}-")), None)  # fmt: skip


# -- fetching and unpacking -----------------------------------------------------------------------------


def download(version: str, cache: Path) -> Path:
    """The sglang ``version`` wheel in ``cache/wheels``, downloaded with pip if missing: for a pinned version exactly
    the pinned wheel, sha256 checked; else the wheel pip picks for this Python (a cached one checked to be whole)."""
    wheels = cache / "wheels"
    pin = release_pin(version)
    try:
        if pin is not None:
            return fetch_pinned(pin, wheels, "sglang")
        with download_lock(wheels):
            for found in sorted(wheels.glob(f"sglang-{version}-*.whl")):
                if _whole_archive(found):
                    return found
                progress(f"{found} is damaged (not a whole zip archive); fetching it again")
                found.unlink()
            progress(f"fetching the sglang {version} wheel into {wheels} (once; pip, from the package index) ...")
            return _fetch(f"sglang=={version}", wheels, [])
    except OSError as err:
        raise cache_error(cache, err) from None


def fetch_pinned(pin: dict, directory: Path, package: str) -> Path:
    """``pin``'s wheel (its ``wheel`` file name, ``version``, ``sha256``; ``pinned_by``: where the pin is, for the
    message) in ``directory``, downloaded with pip for the wheel's own tags if missing. A cached wheel whose sha256 is
    not the pinned one is damaged (a download cut short by an older version of this tool, the disk): it is said so
    and fetched again. Only when the index itself serves other bytes (twice, the second time past pip's cache) is
    it CheckFailed: the release was replaced. Runs that share ``directory`` wait for one another's download."""
    wheel = directory / pin["wheel"]
    if wheel.is_file() and sha256_of(wheel) == pin["sha256"]:
        return wheel
    with download_lock(directory):
        if wheel.is_file():  # another run may have fetched it meanwhile
            actual = sha256_of(wheel)
            if actual == pin["sha256"]:
                return wheel
            progress(f"{wheel} is damaged (sha256 {actual}, pinned {pin['sha256']}); fetching it again")
            wheel.unlink()
        progress(f"fetching {pin['wheel']} into {directory} (once; pip, from the package index) ...")
        return _fetch(f"{package}=={pin['version']}", directory, wheel_tags(pin["wheel"]), pin)


@contextlib.contextmanager
def download_lock(directory: Path):
    """One download into ``directory`` at a time (parallel runs, and the test workers, share the cache)."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".download.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


SCRATCH_PREFIX = ".fetch-"


def _fetch(requirement: str, directory: Path, tags: list[str], pin: dict | None = None) -> Path:
    """One wheel fetched with pip into a scratch directory beside ``directory``'s wheels, checked (``pin``'s
    sha256), then put in place atomically (files.place): a fetch stopped at any point leaves no part of a wheel under
    a wheel's name. The caller holds ``download_lock``: a scratch directory found now is a killed run's, removed."""
    for stale in directory.glob(f"{SCRATCH_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=directory))
    try:
        for attempt in ("", "--no-cache-dir"):  # the second time past pip's own cache, which could hold bad bytes
            _pip_download(requirement, scratch, [*tags, attempt] if attempt else tags)
            fetched = sorted(scratch.glob("*.whl"))
            if pin is not None:
                fetched = [w for w in fetched if w.name == pin["wheel"]]
            if not fetched:
                raise BadInput(f"pip fetched no {requirement} wheel into {directory}")
            actual = sha256_of(fetched[0])
            if pin is None or actual == pin["sha256"]:
                files.place(fetched[0], directory / fetched[0].name)
                return directory / fetched[0].name
            fetched[0].unlink()
        raise CheckFailed(
            f"the package index serves {pin['wheel']} with sha256 {actual}, but {pin.get('pinned_by', 'nix/pins.json')}"
            f" pins {pin['sha256']} (fetched twice, the second time past pip's cache): the release was replaced on "
            "the index, or something between alters it. Nothing was kept; review the new wheel before changing the pin"
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _whole_archive(wheel: Path) -> bool:
    """Whether ``wheel`` is a whole zip archive: its directory and every member's checksum read back."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            return archive.testzip() is None
    except (zipfile.BadZipFile, OSError, EOFError):
        return False


def _pip_download(requirement: str, directory: Path, tags: list[str]) -> None:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
               "--disable-pip-version-check", *tags, "-d", str(directory), requirement]  # fmt: skip
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as err:
        raise BadInput(f"cannot run pip to fetch {requirement}: {err}") from None
    if result.returncode != 0:
        said = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()]
        why = said[-1].strip() if said else f"pip exited with status {result.returncode}"
        if "No module named pip" in result.stderr:
            why = f"{sys.executable} has no pip; download the wheel yourself and pass its path"
        package, version = requirement.split("==")
        if re.search(r"NewConnectionError|Max retries exceeded|Network is unreachable|name resolution|ProxyError|"
                     r"timed out|Connection refused", result.stderr + result.stdout):  # fmt: skip
            raise CheckFailed(  # the index does not answer: a failed check, as an unreachable hub or server is
                f"cannot reach the package index to fetch {requirement}: {why}. Check the network (pip's index "
                "settings), or pass a wheel file or an SGLang directory instead of a version"
            )
        raise BadInput(
            f"cannot fetch {'SGLang' if package == 'sglang' else package} {version} from the package index: {why}. "
            f"Is it a released version (pip index versions {package})? Offline, pass a wheel file or a directory"
        )


def wheel_tags(wheel: str) -> list[str]:
    """pip's --implementation/--python-version/--abi/--platform for a wheel built for one CPython; none for a pure
    one, which pip fetches for any Python."""
    python, abi, platform = wheel.removesuffix(".whl").split("-")[-3:]
    if not python.startswith("cp") or abi == "none":
        return []
    platforms = [flag for tag in platform.split(".") for flag in ("--platform", tag)]  # a compressed tag set
    return ["--implementation", "cp", "--python-version", python[2:], "--abi", abi, *platforms]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unpack(wheel: Path, cache: Path) -> SGLangTree:
    """The wheel's contents under ``cache/trees/<wheel name>``, unpacked once: into a staging directory beside it,
    renamed into place whole (a run stopped at any point leaves no part of a tree under a tree's name; a staging
    directory a killed run left is removed by the next). Runs that share the cache wait for one another."""
    root = cache / "trees" / wheel.name.removesuffix(".whl")
    if not (root / "sglang").is_dir():
        try:
            with download_lock(root.parent):
                if not (root / "sglang").is_dir():
                    for stale in root.parent.glob(".unpack-*"):
                        shutil.rmtree(stale, ignore_errors=True)
                    _unpack(wheel, root)
        except OSError as err:
            raise cache_error(cache, err) from None
    return dataclasses.replace(locate(root), release=wheel.name)


def _unpack(wheel: Path, root: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=root.parent))
    try:
        progress(f"unpacking {wheel.name} into {root} to read its source (once) ...")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(staging)
        if not (staging / "sglang" / "srt").is_dir():
            raise BadInput(f"{wheel} is not an SGLang wheel (no sglang/srt/ in it)")
        if root.exists():  # no sglang/ in it: not what a rename leaves, so damaged by hand; replaced
            shutil.rmtree(root)
        staging.rename(root)
    except (zipfile.BadZipFile, EOFError) as err:
        raise BadInput(f"cannot unpack {wheel}: it is not a whole wheel ({err}); give the wheel again") from None
    except OSError as err:
        if err.filename and Path(err.filename).is_relative_to(root.parent):
            raise  # the cache cannot be written: cache_error says which and how to move it
        raise BadInput(f"cannot unpack {wheel}: {err}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def cache_error(cache: Path, err: OSError) -> BadInput:
    """A cache that cannot be written: which cache, why, and how to move it."""
    where = f" ({err.filename})" if err.filename and Path(err.filename) != cache else ""
    return BadInput(
        f"cannot write the SGLang wheel cache {cache}{where}: {err.strerror or err}; move it with "
        f"{CACHE_VARIABLE}=DIR (the cache is $XDG_CACHE_HOME/sglang-eagle3/sglang), or give a wheel file or an "
        "SGLang directory instead of a version"
    )
