"""The pinned stacks: nix/pins.json's "stacks", the one list of SGLang releases every command, generator and test reads.

A stack is an SGLang release the flake builds a whole serving environment on: the release's pinned wheel, a uv
workspace (its lock), a patch series (patches/sglang-<version>), a directory of data (nix/stacks/sglang-<version>).
Adding a stack is its data and one entry in nix/pins.json; nothing here names a version. Inside a built wheel the
file is the package's own copy (pyproject.toml force-includes it), and the stacks' data directories are not there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .errors import Eagle3Error
from .exit_status import ExitStatus

PACKAGE = Path(__file__).resolve().parent


def pins_file() -> Path | None:
    """nix/pins.json: the copy inside a built wheel (force-include), or the repository's."""
    return next((p for p in (PACKAGE / "pins.json", PACKAGE.parents[2] / "nix" / "pins.json") if p.is_file()), None)


@cache
def pins() -> dict:
    found = pins_file()
    if found is None:
        # A broken install, not bad input: say where the file belongs rather than fail on a missing key later.
        raise Eagle3Error(
            f"this sglang-eagle3 has no pins.json (looked for {PACKAGE / 'pins.json'} and "
            f"{PACKAGE.parents[2] / 'nix' / 'pins.json'}): install it from a wheel built from python/ (it carries a "
            "copy, pyproject.toml's force-include) or run it from a checkout, where nix/pins.json sits beside python/",
            ExitStatus.UNEXPECTED,
        )
    return json.loads(found.read_text())


@dataclass(frozen=True)
class Stack:
    version: str  # the SGLang release
    pin: dict  # its wheel's pin: file name, version, sha256
    workspace: str  # the uv workspace whose lock the stack is built from
    project: str  # the project of that workspace whose extras are the environments
    kernel: str  # the name of SGLang's CUDA kernel package in that lock
    data: str  # the stack's data directory, relative to the repository

    @property
    def is_default(self) -> bool:
        return self.version == default().version

    @property
    def suffix(self) -> str:
        """What the flake appends to an output for this stack (flake.nix `versioned`): "" for the default stack,
        else "-" and the version with its dots as underscores (a dot would split a Nix attribute path)."""
        return "" if self.is_default else "-" + self.version.replace(".", "_")

    @property
    def app(self) -> str:
        """The flake app that serves with this stack: serve-eagle3, serve-eagle3-0_5_23."""
        return "serve-eagle3" + self.suffix

    @property
    def series(self) -> str:
        return f"patches/sglang-{self.version}"


@cache
def stacks() -> dict[str, Stack]:
    """Every stack of nix/pins.json, in its order (the default first, then the others as listed)."""
    found = {}
    for version, entry in pins().get("stacks", {}).items():
        if version.startswith("_"):
            continue
        found[version] = Stack(version, pins()[entry["sglang"]], entry["workspace"], entry["project"],
                               entry["kernel"], entry["data"])  # fmt: skip
    return found


def versions() -> tuple[str, ...]:
    return tuple(stacks())


def default() -> Stack:
    return stacks()[pins()["stack"]["default"]]


def get(version: str | None) -> Stack | None:
    return stacks().get(version) if version else None


def cuda() -> tuple[int, ...]:
    """The CUDA every stack is built with (nix/pins.json stack.cuda), as (major, minor)."""
    return tuple(int(part) for part in pins()["stack"]["cuda"].split("."))


def listed() -> str:
    """The stacks' releases in words: "0.5.9 and 0.5.23"."""
    names = list(versions())
    return " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " and " + names[-1]


def not_a_stack(version: str | None) -> str:
    """The one wording for an SGLang release no stack is built on, wherever the tools meet one."""
    return (
        f"SGLang {version or '(unknown version)'} is not the release of a pinned stack (this tool is written for "
        f"SGLang {listed()}: nix/pins.json)"
    )
