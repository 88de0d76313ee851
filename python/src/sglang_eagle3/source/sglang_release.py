"""An SGLang tree to read from what a user names: a directory, a wheel file, or a release version.

A version is fetched from PyPI with pip (``pip download --no-deps --only-binary=:all:``) into
this user's cache; a wheel is unpacked once into the same cache. Nothing is imported or installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..errors import BadInput
from .sglang_source import SGLangTree, locate

VERSION = re.compile(r"\d+(\.\d+)+((a|b|rc|\.post|\.dev)\d+)*")


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/sglang-eagle3/sglang`` (``~/.cache/...`` by default): wheels and their unpacked trees."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "sglang-eagle3" / "sglang"


def resolve(against: str, cache: Path | None = None) -> SGLangTree:
    """The SGLang tree ``against`` names: a directory (as ``--target`` takes), a ``.whl`` file, or a version."""
    cache = cache or cache_dir()
    path = Path(against).expanduser()
    if path.is_dir():
        return locate(path)
    if against.endswith(".whl"):
        if not path.is_file():
            raise BadInput(f"{against}: no such wheel file")
        return unpack(path, cache)
    if VERSION.fullmatch(against):
        return unpack(download(against, cache), cache)
    raise BadInput(
        f"{against!r} is neither a directory, a .whl file nor an SGLang version (e.g. 0.5.9); "
        "give an SGLang tree (a directory holding sglang/), a wheel, or a release version"
    )


def download(version: str, cache: Path) -> Path:
    """The sglang ``version`` wheel in ``cache``, downloaded from the package index with pip if missing."""
    wheels = cache / "wheels"
    found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if found:
        return found[0]
    wheels.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
               "--disable-pip-version-check", "-d", str(wheels), f"sglang=={version}"]  # fmt: skip
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as err:
        raise BadInput(f"cannot run pip to fetch sglang=={version}: {err}") from None
    found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if result.returncode != 0 or not found:
        said = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()]
        why = said[-1].strip() if said else f"pip exited with status {result.returncode}"
        if "No module named pip" in result.stderr:
            why = f"{sys.executable} has no pip; download the wheel yourself and pass its path"
        raise BadInput(
            f"cannot fetch SGLang {version} from the package index: {why}. "
            "Is it a released version (pip index versions sglang)? Offline, pass a wheel file or a directory"
        )
    return found[0]


def unpack(wheel: Path, cache: Path) -> SGLangTree:
    """The wheel's contents under ``cache/trees/<wheel name>``, unpacked once (atomically)."""
    root = cache / "trees" / wheel.name.removesuffix(".whl")
    if not (root / "sglang").is_dir():
        root.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=root.parent))
        try:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(staging)
            if not (staging / "sglang" / "srt").is_dir():
                raise BadInput(f"{wheel} is not an SGLang wheel (no sglang/srt/ in it)")
            if not root.exists():  # another run may have unpacked it meanwhile
                staging.rename(root)
        except (zipfile.BadZipFile, OSError) as err:
            raise BadInput(f"cannot unpack {wheel}: {err}") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return locate(root)
