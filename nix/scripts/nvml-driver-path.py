#!/usr/bin/env python3
"""Let nvidia-ml-py find NVML in the NixOS driver directory: pynvml.py DRIVER_LIB_DIR.

pynvml loads NVML with ctypes.CDLL("libnvidia-ml.so.1"), which searches only the loader's
default paths. On NixOS the driver's libraries live in /run/opengl-driver/lib, so the load
fails and SGLang quietly turns custom all-reduce off (is_full_nvlink catches the error).
As nixpkgs' python-modules/nvidia-ml-py does, fall back to DRIVER_LIB_DIR when the plain
load fails. Stops with an error when the wheel's code no longer has the expected line.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

LOAD = re.compile(r'^(?P<indent>[ \t]+)nvmlLib = CDLL\("libnvidia-ml\.so\.1"\)\n', re.MULTILINE)


def patch(source: str, driver_lib_dir: str) -> str:
    def fallback(match: re.Match) -> str:
        i = match["indent"]
        return (
            f"{i}try:\n"
            f'{i}    nvmlLib = CDLL("libnvidia-ml.so.1")\n'
            f"{i}except OSError:\n"
            f"{i}    # NixOS: the driver's libraries are in {driver_lib_dir}, off the loader's path\n"
            f'{i}    nvmlLib = CDLL("{driver_lib_dir}/libnvidia-ml.so.1")\n'
        )

    patched, count = LOAD.subn(fallback, source)
    if count != 1:
        raise SystemExit(f'nvml-driver-path: expected one CDLL("libnvidia-ml.so.1") line, found {count}')
    return patched


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: nvml-driver-path.py PYNVML_PY DRIVER_LIB_DIR", file=sys.stderr)
        return 2
    path = Path(argv[1])
    path.write_text(patch(path.read_text(), argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
