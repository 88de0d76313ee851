"""Pinned wheels for the tests and benchmarks: fetched with pip, checked against nix/pins.json.

Nix fetches these artifacts with fetchurl and the same sha256, so the tests and the Nix
build start from byte-identical files. The fetch is the package's own (`--sglang VERSION`
fetches a pinned SGLang wheel the same way): one copy of pip's tags, the sha256 check and
the lock that lets test workers share the cache.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from sglang_eagle3.trees.release import fetch_pinned, sha256_of

from support.pins import pins

__all__ = ["download_pinned", "fetch_wheel", "sha256_of", "unpack"]


def fetch_wheel(name: str, cache_dir: Path, package: str | None = None) -> Path:
    """The pinned wheel of ``name`` in ``cache_dir``, downloaded with pip if missing; sha256 checked.

    ``package``: the distribution, when the pin's name is not it (``sglang-0.5.23`` pins ``sglang``).
    A wheel for one CPython (``cp311``) is fetched for its own tags, whatever this Python is.
    """
    return fetch_pinned(pins()[name], cache_dir, package or name)


# A pin of another file (huggingface_hub's, from a stack's uv.lock: "pinned_by" says where), fetched the same way.
download_pinned = fetch_pinned


def unpack(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(dest)
    return dest
