"""Pinned wheels for the tests and benchmarks: fetched with pip, checked against nix/pins.json.

Nix fetches these artifacts with fetchurl and the same sha256, so the tests and the Nix
build start from byte-identical files.
"""

from __future__ import annotations

import fcntl
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

from support.pins import PinError, pins


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_wheel(name: str, cache_dir: Path, package: str | None = None) -> Path:
    """The pinned wheel of ``name`` in ``cache_dir``, downloaded with pip if missing; sha256 checked.

    ``package``: the distribution, when the pin's name is not it (``sglang-0.5.23`` pins ``sglang``).
    A wheel for one CPython (``cp311``) is fetched for its own tags, whatever this Python is.
    """
    return download_pinned(pins()[name], cache_dir, package or name)


def download_pinned(pin: dict, cache_dir: Path, package: str) -> Path:
    """``pin``'s wheel (its ``wheel`` file name, ``version``, ``sha256``; ``pinned_by``: where that
    comes from, for the message) in ``cache_dir``; see fetch_wheel."""
    wheel = cache_dir / pin["wheel"]
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Test workers (pytest-xdist) share the cache: one downloads, the others wait for it.
    with (cache_dir / ".download.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not wheel.is_file():
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                 *_tags(pin["wheel"]), "-d", str(cache_dir), f"{package}=={pin['version']}"],
                check=True,
            )  # fmt: skip
    actual = sha256_of(wheel)
    if actual != pin["sha256"]:
        raise PinError(f"{wheel} has sha256 {actual}, but {pin.get('pinned_by', 'nix/pins.json')} pins {pin['sha256']}")
    return wheel


def _tags(wheel: str) -> list[str]:
    """pip's --python-version/--abi/--platform for a wheel built for one CPython; none for a pure one."""
    python, abi, platform = wheel.removesuffix(".whl").split("-")[-3:]
    if not python.startswith("cp") or abi == "none":
        return []
    platforms = [flag for tag in platform.split(".") for flag in ("--platform", tag)]  # a compressed tag set
    return ["--implementation", "cp", "--python-version", python[2:], "--abi", abi, *platforms]


def unpack(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(dest)
    return dest
