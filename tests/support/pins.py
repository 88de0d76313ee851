"""The project's pins: nix/pins.json, shared with the Nix build (versions and sha256 of every artifact)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path


class PinError(Exception):
    pass


def pins_file() -> Path:
    return Path(__file__).resolve().parents[2] / "nix" / "pins.json"


@cache
def pins() -> dict:
    return json.loads(pins_file().read_text())


def stack_dir(version: str) -> Path:
    """The directory of a stack's data (its audits, their policies, wheel-closure.json): nix/pins.json's
    ``stacks.<version>.data``, the one definition Nix (python-overrides.nix) and the audit scripts read too."""
    return pins_file().parents[1] / pins()["stacks"][version]["data"]
