#!/usr/bin/env python3
"""Write the package metadata of pip's CUDA distributions that the Nix build replaces with cudaPackages members.

The stacks drop pip's nvidia-* wheels (nix/stacks/*/wheel-closure.json "dropped") and link the libraries of
cudaPackages_13_0 instead ("cudaRedist": member -> the distribution of the same library). The libraries are there;
without this, their distributions are not: importlib.metadata.version("nvidia-cublas") raises
PackageNotFoundError in the closure, where SGLang's environment answers 13.x (SGLang's
is_nvidia_cublas_version_ge_12_9, srt/utils/common.py). This writes, for each distribution, a dist-info
directory of its own into a site-packages directory (the derivation nix/python-overrides.nix adds to the
environment): METADATA with the distribution's name and the version of the library the closure carries (the
member's), INSTALLER, and a RECORD of these files alone, since the distribution's own files are not installed.

    cuda-dist-info.py SITE_PACKAGES '{"nvidia-cublas": {"version": "13.1.0.3", "member": "libcublas"}, ...}'

A member's version is the library's, written as nixpkgs writes it; NCCL's and NVSHMEM's source builds carry
their release tag's revision (nccl 2.28.7-1 is NCCL 2.28.7, the release PyPI's nvidia-nccl-cu13 2.28.7
packages), which is dropped. Any other version that is not dotted numbers is refused, as is a name that is not a
distribution name, or two names that normalise alike. Exit 2 with a message on bad input.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import sys
from pathlib import Path

NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")  # PEP 508's name
RELEASE = re.compile(r"^\d+(\.\d+)*$")
REVISION = re.compile(r"^(\d+(?:\.\d+)*)-\d+$")  # a source tag's package revision: 2.28.7-1


class BadInput(Exception):
    pass


def library_version(member: str, version: str) -> str:
    """The library's version as PEP 440 writes it, from the member's version as nixpkgs writes it."""
    text = str(version)
    revision = REVISION.match(text)
    if revision:
        text = revision.group(1)
    if not RELEASE.match(text):
        raise BadInput(f"cudaPackages_13_0.{member} has version {version!r}, not dotted numbers (or NUMBERS-REVISION):"
                       " say in nix/scripts/cuda-dist-info.py how it maps to the library's release")  # fmt: skip
    return text


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def record_line(path: Path, root: Path) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()
    return f"{path.relative_to(root).as_posix()},sha256={digest},{path.stat().st_size}"


def write(site_packages: Path, distributions: dict[str, dict]) -> list[Path]:
    """One dist-info directory per distribution under ``site_packages``; their paths."""
    seen: dict[str, str] = {}
    planned = []
    for name, entry in sorted(distributions.items()):
        if not NAME.match(name):
            raise BadInput(f"{name!r} is not a distribution name")
        if not isinstance(entry, dict) or not {"version", "member"} <= set(entry):
            raise BadInput(f"{name}: give {{'version': ..., 'member': ...}}, not {entry!r}")
        key = normalised(name)
        if key in seen:
            raise BadInput(f"{name} and {seen[key]} are one distribution name (both normalise to {key})")
        seen[key] = name
        planned.append((name, library_version(entry["member"], entry["version"]), entry["member"]))
    written = []
    for name, version, member in planned:
        directory = site_packages / f"{key_of(name)}-{version}.dist-info"
        if directory.exists():
            raise BadInput(f"{directory} exists already")
        directory.mkdir(parents=True)
        (directory / "METADATA").write_text(
            "Metadata-Version: 2.1\n"
            f"Name: {name}\n"
            f"Version: {version}\n"
            f"Summary: {name}'s library as the Nix build provides it: cudaPackages_13_0.{member}. Only this "
            "metadata is installed here; the library is linked from the Nix store.\n"
        )
        (directory / "INSTALLER").write_text("nix\n")
        record = directory / "RECORD"
        lines = [record_line(directory / f, site_packages) for f in ("METADATA", "INSTALLER")]
        record.write_text("\n".join([*lines, f"{record.relative_to(site_packages).as_posix()},,"]) + "\n")
        written.append(directory)
    return written


def key_of(name: str) -> str:
    """The dist-info directory's name part (the binary distribution format: runs of -_. become _)."""
    return re.sub(r"[-_.]+", "_", name)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: cuda-dist-info.py SITE_PACKAGES JSON (distribution -> {version, member})", file=sys.stderr)
        return 2
    try:
        distributions = json.loads(argv[1])
        if not isinstance(distributions, dict):
            raise BadInput("the JSON argument must be an object: distribution -> {version, member}")
        for path in write(Path(argv[0]), distributions):
            print(f"cuda-dist-info: {path.name}")
    except (BadInput, json.JSONDecodeError) as err:
        print(f"cuda-dist-info: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
