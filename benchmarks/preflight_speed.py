#!/usr/bin/env python3
"""How fast do `sglang-eagle3 probe` and `sglang-eagle3 serve --dry-run` answer?

Prints the median of N runs of each (bar: under 3 s for both). Each run is a fresh
process, as a user would run it, so interpreter start-up and imports are included.
The dry run uses the default settings, so it does the full preflight: probe, GPUs
(nvidia-smi, absent here), model ids, port, and renders the plan.

    python benchmarks/preflight_speed.py [--sglang DIR|VERSION] [--runs 5]

Without --sglang it probes the pinned SGLang 0.5.9 wheel (downloaded once with pip,
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from sglang_eagle3.source.tree import locate  # noqa: E402
from sglang_eagle3.trees import patchset  # noqa: E402
from support.pinned_wheels import fetch_wheel, unpack  # noqa: E402

BAR_SECONDS = 3.0


COMMANDS = {
    "probe": ["probe", "--json", "--sglang"],
    "serve --dry-run": ["serve", "--dry-run", "--json", "--sglang"],
}


def time_command(args: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        # "not ready" / "preflight failed" exit 1 and are valid answers, so no check=True.
        subprocess.run([sys.executable, "-m", "sglang_eagle3.cli", *args], capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sglang", help="SGLang to probe, as the CLI takes it (default: the pinned 0.5.9 wheel)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        if args.sglang:
            targets = {args.sglang: args.sglang}
        else:
            cache = Path.home() / ".cache" / "sglang-eagle3-tests"
            pristine = unpack(fetch_wheel("sglang", cache), Path(tmp) / "pristine")
            patched = unpack(fetch_wheel("sglang", cache), Path(tmp) / "patched")
            patchset.apply(patchset.PatchSeries.load(), locate(patched))
            targets = {"pristine 0.5.9": pristine, "patched 0.5.9": patched}
        worst = 0.0
        for command, prefix in COMMANDS.items():
            for label, target in targets.items():
                times = time_command([*prefix, str(target)], args.runs)
                median = statistics.median(times)
                worst = max(worst, median)
                print(
                    f"{command:<16} on {label}: median {median:.3f} s over {args.runs} runs "
                    f"(min {min(times):.3f}, max {max(times):.3f}); bar {BAR_SECONDS:.1f} s"
                )
    print(f"verdict: {'PASS' if worst < BAR_SECONDS else 'FAIL'} (worst median {worst:.3f} s)")
    return 0 if worst < BAR_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
