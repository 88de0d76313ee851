#!/usr/bin/env python3
"""Are the timing tests stable on a loaded machine? Runs them N times with busy loops competing.

Starts BUSY busy loops (each `sh -c 'while :; do :; done'` in its own session, as a
noisy neighbour would be), runs `pytest -m timing` N times in a row, and prints per run
whether it passed, how long it took, the worst decode-rate error of its cases
(the median over a case's requests of how far the measured rate lies outside what the
stand-in server sent; the bar is 1%), and the worst single request.

    python benchmarks/timing_stability.py [--runs 10] [--busy 2]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--busy", type=int, default=2, help="busy loops competing for the CPUs")
    args = parser.parse_args()

    # Stopped by SIGTERM or Ctrl-C, it still ends the busy loops and the test run (see finally).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    loops = [subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True) for _ in range(args.busy)]
    failures = 0
    try:
        print(f"{os.cpu_count()} CPUs, {args.busy} busy loops, load before: {os.getloadavg()[0]:.1f}")
        for run in range(1, args.runs + 1):
            start = time.monotonic()
            tests = subprocess.Popen(
                [sys.executable, "-m", "pytest", str(REPO / "tests" / "test_bench_accuracy.py"),
                 "-m", "timing", "-q", "-s", "-p", "no:cacheprovider"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, start_new_session=True,
            )  # fmt: skip
            try:
                stdout, _ = tests.communicate()
            finally:
                if tests.poll() is None:  # interrupted: end the test run (stand-ins it started may outlive it)
                    os.killpg(tests.pid, signal.SIGKILL)
            result = subprocess.CompletedProcess(tests.args, tests.returncode, stdout)
            errors = [float(e) for e in re.findall(r"median_error=([0-9.]+)", result.stdout)]
            worst = [float(e) for e in re.findall(r"worst_error=([0-9.]+)", result.stdout)]
            summary = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
            failures += result.returncode != 0
            print(
                f"run {run:>2}: {'PASS' if result.returncode == 0 else 'FAIL'}  {time.monotonic() - start:5.0f} s  "
                f"load {os.getloadavg()[0]:4.1f}  decode-rate error: worst case median "
                f"{max(errors, default=float('nan')):.3%}, worst request {max(worst, default=float('nan')):.3%}, "
                f"over {len(errors)} cases  ({summary})",
                flush=True,
            )
            if result.returncode != 0:
                print(result.stdout[-3000:])
    finally:
        for loop in loops:
            os.killpg(loop.pid, signal.SIGKILL)
            loop.wait()
    print(f"{args.runs - failures} of {args.runs} runs passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
