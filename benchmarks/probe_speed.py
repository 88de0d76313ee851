#!/usr/bin/env python3
"""How fast does `sglang-eagle3 probe` answer? Prints the median of N runs (bar: < 3 s).

Each run is a fresh process (`python -m sglang_eagle3.cli probe ...`), as a user
would run it, so interpreter start-up and imports are included.

    python benchmarks/probe_speed.py [--target DIR] [--runs 5]

Without --target it probes the pinned SGLang 0.5.9 wheel (downloaded once with pip,
sha256-checked, unpacked to a temporary directory), pristine and patched.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sglang_eagle3 import patchset, pins, sglang_source

BAR_SECONDS = 3.0


def time_probe(target: Path, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "sglang_eagle3.cli", "probe", "--target", str(target), "--json"],
            capture_output=True,
            check=False,  # "not ready" exits 1 and is a valid answer
        )
        times.append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=Path, help="SGLang tree to probe (default: the pinned 0.5.9 wheel)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        if args.target:
            targets = {"given": args.target}
        else:
            cache = Path.home() / ".cache" / "sglang-eagle3-tests"
            pristine = pins.unpack(pins.fetch_wheel("sglang", cache), Path(tmp) / "pristine")
            patched = pins.unpack(pins.fetch_wheel("sglang", cache), Path(tmp) / "patched")
            patchset.apply(patchset.PatchSeries.load(), sglang_source.locate(patched))
            targets = {"pristine 0.5.9": pristine, "patched 0.5.9": patched}
        worst = 0.0
        for label, target in targets.items():
            times = time_probe(target, args.runs)
            median = statistics.median(times)
            worst = max(worst, median)
            print(
                f"probe on {label}: median {median:.3f} s over {args.runs} runs "
                f"(min {min(times):.3f}, max {max(times):.3f}); bar {BAR_SECONDS:.1f} s"
            )
    print(f"verdict: {'PASS' if worst < BAR_SECONDS else 'FAIL'} (worst median {worst:.3f} s)")
    return 0 if worst < BAR_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
