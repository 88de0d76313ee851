#!/usr/bin/env python3
"""How long does the test suite take, cold and warm?

    python benchmarks/suite_time.py [--cold] [--warm] [--quick] [--slowest SECONDS] [-- PYTEST ARGS]
    python benchmarks/suite_time.py --report JUNIT.xml [--slowest SECONDS]

cold:  a fresh clone of this checkout's HEAD in a temporary folder, `.ci/run` there (which
       creates the test environment, installs Nix and Prometheus where missing, and runs the
       README's test command), as CI does on a new clone. Goal: at most 15 minutes.
warm:  `tests/run -q` in this checkout, its .venv already installed: the whole suite, as CI runs it.
quick: `tests/run -q --quick`: the edit loop's tier, every test but those tests/slow-tests.txt
       names. Goal: at most 3 minutes.

Prints each wall time and pytest's closing line; with no phase named, all three. Each phase's
output goes to a log file whose path is printed, so a failure can be read.

--slowest SECONDS: the cold or warm run (the warm one when both run) also writes pytest's JUnit
report, and the test functions whose parametrizations took SECONDS or more in all are printed as
tests/slow-tests.txt lines (the list is kept by hand: this shows what to move in or out of it),
then each test file's share of the workers' time (with `--dist loadfile` a file stays on one
worker: no run is shorter than its largest file).

--report JUNIT.xml: print those two tables from a report an earlier run wrote (pytest --junitxml), run nothing.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from xml.etree import ElementTree

REPO = Path(__file__).resolve().parents[1]
GOALS = {"cold": 900, "warm": None, "quick": 180}


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
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--slowest", type=float, metavar="SECONDS")
    parser.add_argument("--report", type=Path, metavar="JUNIT.xml")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    if args.report is not None:
        if not args.report.is_file():
            parser.error(f"--report {args.report}: no such file (write one with pytest --junitxml=FILE)")
        try:
            print_report(args.report, 3.0 if args.slowest is None else args.slowest)
        except ElementTree.ParseError as err:
            parser.error(f"--report {args.report}: not a JUnit XML report ({err})")
        return 0
    phases = [p for p in ("cold", "warm", "quick") if getattr(args, p)] or ["cold", "warm", "quick"]
    work = Path(tempfile.mkdtemp(prefix="suite-time-"))
    rows = []
    for phase in phases:
        if phase == "cold":
            clone = work / "clone"
            subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
            junit = [f"--junitxml={work / 'junit.xml'}"] if args.slowest is not None else []
            result = timed("cold", ["bash", ".ci/run", *junit, *args.pytest_args], clone, work / "cold.log")
        elif phase == "warm":
            junit = [f"--junitxml={work / 'junit.xml'}"] if args.slowest is not None else []
            result = timed("warm", ["tests/run", "-q", *junit, *args.pytest_args], REPO, work / "warm.log")
        else:
            result = timed("quick", ["tests/run", "-q", "--quick", *args.pytest_args], REPO, work / "quick.log")
        rows.append((phase, *result))
    print()
    print(f"{'phase':<6} {'minutes':>8} {'goal':>6}  exit  pytest")
    for phase, seconds, code, closing in rows:
        goal = f"{GOALS[phase] / 60:6.0f}" if GOALS[phase] else "     -"
        print(f"{phase:<6} {seconds / 60:8.1f} {goal}  {code:>4}  {closing}")
    if args.slowest is not None and (work / "junit.xml").exists():
        print_report(work / "junit.xml", args.slowest)
    return max(code for _, _, code, _ in rows)


def print_report(junit: Path, threshold: float) -> None:
    functions, files = slowest(junit, threshold), by_file(junit)  # both read the report before anything prints
    print(f"\ntest functions of {threshold:g} s or more (tests/slow-tests.txt lines):")
    for seconds, name in functions:
        print(f"{name:<100} # {seconds:.1f} s")
    total = sum(files.values()) or 1.0
    print(f"\ntest files by the workers' time they took ({total / 60:.1f} min in all):")
    for name, seconds in sorted(files.items(), key=lambda item: -item[1]):
        print(f"{name:<40} {seconds:8.1f} s {100 * seconds / total:5.1f} %")


def by_file(junit: Path) -> dict[str, float]:
    """Seconds each test file took, setup and teardown included (pytest's JUnit "time")."""
    totals: dict[str, float] = {}
    for name, seconds in cases(junit):
        module = name.split("::", 1)[0]
        totals[module] = totals.get(module, 0.0) + seconds
    return totals


def cases(junit: Path) -> list[tuple[str, float]]:
    """("test_x.py::test_y", seconds) of each test case of the report, parametrizations apart."""
    found = []
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        module = next((p for p in case.get("classname", "").split(".") if p.startswith("test_")), "?")
        found.append((f"{module}.py::{case.get('name', '')}", float(case.get("time") or 0)))
    return found


def slowest(junit: Path, threshold: float) -> list[tuple[float, str]]:
    """(seconds, "test_x.py::test_y") of each test function whose parametrizations took threshold or more."""
    totals: dict[str, float] = {}
    for name, seconds in cases(junit):
        function = name.split("[", 1)[0]
        totals[function] = totals.get(function, 0.0) + seconds
    return sorted(((t, n) for n, t in totals.items() if t >= threshold), reverse=True)


if __name__ == "__main__":
    sys.exit(main())
