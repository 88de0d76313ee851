"""The layers EAGLE-3 captures, measured on a real tiny KimiK25 forward pass on CPU
(drivers/eagle3_capture_driver.py, in its own process: SGLang keeps global state)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

STAND_INS = Path(__file__).resolve().parents[1] / "stand_ins"
DRIVER = Path(__file__).with_name("drivers") / "eagle3_capture_driver.py"


def run_capture(tree: Path, num_layers: int, cases: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(STAND_INS), str(DRIVER.parent)])}
    request = json.dumps({"num_hidden_layers": num_layers, "cases": cases})
    result = subprocess.run(
        [sys.executable, str(DRIVER), request], capture_output=True, text=True, env=env, timeout=900
    )
    assert result.returncode == 0, f"driver failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])
