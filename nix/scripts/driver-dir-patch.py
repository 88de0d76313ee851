#!/usr/bin/env python3
"""Let a wheel's code find the NVIDIA driver in NixOS's driver directory, as nixpkgs patches it:

    driver-dir-patch.py nvml PYNVML_PY DRIVER_LIB_DIR
    driver-dir-patch.py triton BUILD_PY DRIVER_LIB_DIR

nvml: pynvml loads NVML with ctypes.CDLL("libnvidia-ml.so.1"), which searches only the loader's
default paths. On NixOS the driver's libraries live in /run/opengl-driver/lib, so the load
fails and SGLang quietly turns custom all-reduce off (is_full_nvlink catches the error).
As nixpkgs' python-modules/nvidia-ml-py does, fall back to DRIVER_LIB_DIR when the plain
load fails.

triton: Triton compiles its launcher and cuda_utils modules at run time (runtime/build.py _build)
with `-lcuda` (3.5.1) or `-l:libcuda.so.1` (3.8) and `-L$TRITON_LIBCUDA_PATH`, and no rpath: the
module finds libcuda.so.1 only because something loaded it first, or, linked by nixpkgs'
ld-wrapper, through an rpath to the directory it linked against (the CUDA stubs). As nixpkgs'
triton does (patch 0001-_build-allow-extra-cc-flags, ccCmdExtraFlags
"-Wl,-rpath,${addDriverRunpath.driverLink}/lib"), the compiler command gets an rpath to
DRIVER_LIB_DIR ahead of every other: on NixOS the launcher then finds the driver on its own.
Written `-rpath=DIR` in one word, so nixpkgs' ld-wrapper keeps it even where it enforces purity
(a Nix build: the GPU check), which drops a `-rpath DIR` pair outside the store.

Either stops with an error when the wheel's code no longer has the expected line.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

NVML_LOAD = re.compile(r'^(?P<indent>[ \t]+)nvmlLib = CDLL\("libnvidia-ml\.so\.1"\)\n', re.MULTILINE)
TRITON_CC_CMD = re.compile(
    r'^(?P<indent>[ \t]+)cc_cmd = \[cc, src, "-O3", "-shared", "-fPIC", "-Wno-psabi", "-o", so\]\n', re.MULTILINE
)


def nvml_fallback(match: re.Match, driver_lib_dir: str) -> str:
    i = match["indent"]
    return (
        f"{i}try:\n"
        f'{i}    nvmlLib = CDLL("libnvidia-ml.so.1")\n'
        f"{i}except OSError:\n"
        f"{i}    # NixOS: the driver's libraries are in {driver_lib_dir}, off the loader's path\n"
        f'{i}    nvmlLib = CDLL("{driver_lib_dir}/libnvidia-ml.so.1")\n'
    )


def triton_rpath(match: re.Match, driver_lib_dir: str) -> str:
    i = match["indent"]
    return (
        match[0] + f"{i}# the driver's directory first (NixOS: {driver_lib_dir}; as nixpkgs' triton patch 0001)\n"
        f'{i}cc_cmd += ["-Wl,-rpath={driver_lib_dir}"]\n'
    )


# which -> (the one line patched, its replacement, what the error calls that line)
PATCHES = {
    "nvml": (NVML_LOAD, nvml_fallback, 'CDLL("libnvidia-ml.so.1") line'),
    "triton": (TRITON_CC_CMD, triton_rpath, "`cc_cmd = [cc, src, ...]` line in runtime/build.py"),
}
USAGE = "usage: driver-dir-patch.py {nvml PYNVML_PY | triton BUILD_PY} DRIVER_LIB_DIR"


def patch(which: str, source: str, driver_lib_dir: str) -> str:
    line, replacement, named = PATCHES[which]
    patched, count = line.subn(lambda match: replacement(match, driver_lib_dir), source)
    if count != 1:
        raise SystemExit(f"driver-dir-patch {which}: expected one {named}, found {count}")
    return patched


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] not in PATCHES:
        print(USAGE, file=sys.stderr)
        return 2
    path = Path(argv[2])
    path.write_text(patch(argv[1], path.read_text(), argv[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
