"""The project's pins (nix/pins.json, shared with the Nix build) and fetching pinned wheels.

Nix fetches these artifacts with fetchurl and the same sha256; Python tools and tests
fetch them with pip from the configured package index and check the same sha256, so
both sides start from byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from functools import cache
from pathlib import Path


class PinError(Exception):
    pass


def pins_file() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "nix" / "pins.json", here.parents[2] / "nix" / "pins.json"):
        if candidate.is_file():
            return candidate
    raise PinError("cannot find nix/pins.json (neither in the installed package nor in a repo checkout)")


@cache
def pins() -> dict:
    return json.loads(pins_file().read_text())


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_wheel(name: str, cache_dir: Path) -> Path:
    """The pinned wheel of ``name`` in ``cache_dir``, downloaded with pip if missing; sha256 checked."""
    pin = pins()[name]
    wheel = cache_dir / pin["wheel"]
    if not wheel.is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
             "-d", str(cache_dir), f"{name}=={pin['version']}"],
            check=True,
        )  # fmt: skip
    actual = sha256_of(wheel)
    if actual != pin["sha256"]:
        raise PinError(f"{wheel} has sha256 {actual}, but nix/pins.json pins {pin['sha256']}")
    return wheel


def unpack(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(dest)
    return dest
