#!/usr/bin/env python3
"""What the images cost to build and how much of them two builds share.

    .venv/bin/python benchmarks/image_layers.py            # both parts
    .venv/bin/python benchmarks/image_layers.py --locks    # the estimate from the locks only (seconds)

1. Measured, the stand-in images (nix/tests/image-stand-in.nix: the real image code around a small stack,
   built here against the nixpkgs stand-in; tests/test_image.py checks what the figures rest on): the build
   time of each stack's image (its patched SGLang wheel included), the build after a change to one patch,
   the bytes of layers shared between two patch revisions and between the two stacks' images.
2. Estimated, the real images, which cannot be built here: the wheels each stack's server environment is
   made of (its uv.lock, the closure uv2nix builds, less the pip CUDA wheels nixpkgs' CUDA 13 replaces), by
   their compressed size in the lock. Two stacks share a wheel's layer when they lock the same file (same
   sha256): pyproject.nix builds it into the same store path for the same Python. A patch change rebuilds
   SGLang's package, sglang-eagle3 (it carries the patches), the environment and the wrapper: the rest of the
   wheels' bytes stay. The CUDA 13 libraries (cudaPackages_13_0, the same for both stacks) and the CPython
   and glibc layers are not counted, so the shares are lower bounds.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from sglang_eagle3 import stacks  # noqa: E402
from sglang_eagle3_audits import closure as audit  # noqa: E402  (the audits' one reader of a stack's closure)


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def server_wheels(version: str | None) -> dict[str, tuple[str, int]]:
    """name -> (the locked wheel's sha256, its size) for a stack's server environment."""
    stack = audit.Closure(stacks.get(version) or stacks.default())
    closure, _ = audit.resolve_closure(stack.lock, stack.policy["root"]["package"], ["server"], stack.environment)
    wheels = {}
    for name, package in closure.items():
        if stack.dropped(name) or not package.get("wheels"):
            continue  # replaced by nixpkgs' CUDA 13, or the project itself (built from source)
        wheel = audit.best_wheel(package, "cp312")
        wheels[name] = (wheel["hash"], wheel["size"])
    return wheels


def estimate() -> None:
    a, b = server_wheels("0.5.9"), server_wheels("0.5.23")
    total_a, total_b = sum(s for _, s in a.values()), sum(s for _, s in b.values())
    same = {n for n in a if n in b and a[n][0] == b[n][0]}
    shared = sum(b[n][1] for n in same)
    print("Estimated from the locks (wheel bytes, compressed; CUDA 13, CPython and glibc not counted):")
    print(f"  0.5.9 server environment: {len(a)} wheels, {mib(total_a)}; 0.5.23: {len(b)} wheels, {mib(total_b)}")
    print(f"  shared by both stacks' images: {len(same)} wheels, {mib(shared)} ({shared / total_b:.0%} of 0.5.23's)")
    largest = sorted(((b[n][1], n) for n in b if n not in same), reverse=True)[:5]
    print("  0.5.23's largest own wheels: " + ", ".join(f"{n} {mib(s)}" for s, n in largest))
    for version, wheels, total in (("0.5.9", a, total_a), ("0.5.23", b, total_b)):
        touched = wheels["sglang"][1]
        print(
            f"  {version}: a patch change touches sglang ({mib(touched)}) and the small sglang-eagle3, environment "
            f"and wrapper paths; {mib(total - touched)} ({(total - touched) / total:.1%}) of the wheels stay"
        )


def measured() -> None:
    from support import flake_eval, pins
    from support.pinned_wheels import fetch_wheel

    why = flake_eval.unavailable()
    if why:
        print(f"stand-in images NOT built: {why}")
        return
    cache = Path.home() / ".cache" / "sglang-eagle3-tests"
    with tempfile.TemporaryDirectory() as tmp:
        ws = flake_eval.Workspace(Path(tmp) / "ws")
        for pin_name in ("sglang", "sglang-0.5.23"):
            pin = pins.pins()[pin_name]
            named = Path(tmp) / pin["wheel"]
            shutil.copy(fetch_wheel(pin_name, cache, package="sglang"), named)
            ws.nix("store", "add-file", str(named))
        # the test's own build and reading of an image
        test_image = importlib.import_module("test_image")
        print("Measured, the stand-in images (nix/tests/image-stand-in.nix, built here):")
        images = {}
        for version in ("0.5.9", "0.5.23"):
            start = time.monotonic()
            images[version] = test_image.build_stand_in(ws, version, Path(tmp) / version)
            print(
                f"  {version}: built and streamed in {time.monotonic() - start:.1f} s (a build already in the store "
                f"is reused), {len(images[version].layers)} layers, {mib(images[version].archive.stat().st_size)}"
            )
        patch = ws.flake / "patches" / "sglang-0.5.9" / test_image.series("0.5.9")[0]
        patch.write_text(f"Revised {time.time()} (benchmarks/image_layers.py).\n\n" + patch.read_text())
        start = time.monotonic()
        revised = test_image.build_stand_in(ws, "0.5.9", Path(tmp) / "revised")
        print(f"  0.5.9 after a patch change: rebuilt and streamed in {time.monotonic() - start:.1f} s")
        for label, x, y in (("two patch revisions", images["0.5.9"], revised),
                            ("the 0.5.9 and 0.5.23 images", images["0.5.9"], images["0.5.23"])):  # fmt: skip
            shared, total = test_image.shared_bytes(x, y)
            print(f"  {label}: {mib(shared)} of {mib(total)} shared (the stand-in's bulk is SGLang itself)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--locks", action="store_true", help="only the estimate from the locks")
    args = parser.parse_args()
    estimate()
    if not args.locks:
        measured()


if __name__ == "__main__":
    main()
