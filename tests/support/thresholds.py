"""modules/monitoring/thresholds.nix evaluated with Nix: the threshold rule file for given settings."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

MONITORING = Path(__file__).resolve().parents[2] / "modules" / "monitoring"
NIX = shutil.which("nix-instantiate")


def render_thresholds(**settings) -> dict:
    """thresholds.nix's rule file for the defaults overridden by ``settings``."""
    override = " ".join(f"{k} = {json.dumps(v)};" for k, v in settings.items())
    expr = f"let t = import {MONITORING / 'thresholds.nix'}; in t.rules (t.defaults // {{ {override} }})"
    result = subprocess.run([NIX, "--eval", "--strict", "--json", "-E", expr], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
