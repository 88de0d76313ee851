#!/usr/bin/env python3
"""Give Triton's compiled launcher a RUNPATH to the driver: triton-driver-rpath.py BUILD_PY DRIVER_LIB_DIR.

Triton compiles its launcher and cuda_utils modules at run time (runtime/build.py _build) with
`-lcuda` (3.5.1) or `-l:libcuda.so.1` (3.8) and `-L$TRITON_LIBCUDA_PATH`, and no rpath: the
module finds libcuda.so.1 only because something loaded it first, or, linked by nixpkgs'
ld-wrapper, through an rpath to the directory it linked against (the CUDA stubs). As nixpkgs'
triton does (patch 0001-_build-allow-extra-cc-flags, ccCmdExtraFlags
"-Wl,-rpath,${addDriverRunpath.driverLink}/lib"), the compiler command gets an rpath to
DRIVER_LIB_DIR ahead of every other: on NixOS the launcher then finds the driver on its own.
Written `-rpath=DIR` in one word, so nixpkgs' ld-wrapper keeps it even where it enforces purity
(a Nix build: the GPU check), which drops a `-rpath DIR` pair outside the store.
Stops with an error when the wheel's code no longer has the expected line.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CC_CMD = re.compile(
    r'^(?P<indent>[ \t]+)cc_cmd = \[cc, src, "-O3", "-shared", "-fPIC", "-Wno-psabi", "-o", so\]\n', re.MULTILINE
)


def patch(source: str, driver_lib_dir: str) -> str:
    def with_rpath(match: re.Match) -> str:
        i = match["indent"]
        return (
            match[0] + f"{i}# the driver's directory first (NixOS: {driver_lib_dir}; as nixpkgs' triton patch 0001)\n"
            f'{i}cc_cmd += ["-Wl,-rpath={driver_lib_dir}"]\n'
        )

    patched, count = CC_CMD.subn(with_rpath, source)
    if count != 1:
        raise SystemExit(
            f"triton-driver-rpath: expected one `cc_cmd = [cc, src, ...]` line in runtime/build.py, found {count}"
        )
    return patched


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: triton-driver-rpath.py BUILD_PY DRIVER_LIB_DIR", file=sys.stderr)
        return 2
    path = Path(argv[1])
    path.write_text(patch(path.read_text(), argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
