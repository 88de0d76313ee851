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
