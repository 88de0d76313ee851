"""The project's pins: nix/pins.json, shared with the Nix build (versions and sha256 of every artifact)."""

from __future__ import annotations

import json
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
