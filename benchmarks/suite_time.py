#!/usr/bin/env python3
"""How long does the test suite take, cold and warm?

    python benchmarks/suite_time.py [--cold] [--warm] [-- PYTEST ARGS]

cold: a fresh clone of this checkout's HEAD in a temporary folder, `.ci/run` there (which
      creates the test environment, installs Nix and Prometheus where missing, and runs the
      README's test command), as CI does on a new clone. Goal: at most 10 minutes.
warm: `tests/run -q` in this checkout, its .venv already installed. Goal: at most 3 minutes.

Prints each wall time and pytest's closing line; with neither flag, both. Each phase's
output goes to a log file whose path is printed, so a failure can be read.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOALS = {"cold": 600, "warm": 180}


def timed(name: str, command: list[str], cwd: Path, log: Path) -> tuple[float, int, str]:
    print(f"{name}: {' '.join(command)} (in {cwd}; log {log})", flush=True)
    start = time.monotonic()
    with log.open("w") as out:
        code = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT).returncode
    seconds = time.monotonic() - start
    closing = [line for line in log.read_text().splitlines() if re.search(r"\d+ (passed|failed)", line)]
    return seconds, code, closing[-1].strip("= ") if closing else "(no pytest summary)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    phases = [p for p in ("cold", "warm") if getattr(args, p)] or ["cold", "warm"]
    work = Path(tempfile.mkdtemp(prefix="suite-time-"))
    rows = []
    for phase in phases:
        if phase == "cold":
            clone = work / "clone"
            subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
            result = timed("cold", ["bash", ".ci/run", *args.pytest_args], clone, work / "cold.log")
        else:
            result = timed("warm", ["tests/run", "-q", *args.pytest_args], REPO, work / "warm.log")
        rows.append((phase, *result))
    print()
    print(f"{'phase':<6} {'minutes':>8} {'goal':>6}  exit  pytest")
    for phase, seconds, code, closing in rows:
        print(f"{phase:<6} {seconds / 60:8.1f} {GOALS[phase] / 60:6.0f}  {code:>4}  {closing}")
    return max(code for _, _, code, _ in rows)


if __name__ == "__main__":
    sys.exit(main())
