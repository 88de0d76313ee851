"""The host's CUDA driver library: which libcuda.so.1 SGLang's processes will load, and the CUDA it runs.

Read by loading it (ctypes) and asking cuDriverGetVersion; SGLANG_EAGLE3_LIBCUDA names another library to
read instead (the tests' stand-in drivers).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

LIBCUDA_ENV = "SGLANG_EAGLE3_LIBCUDA"  # the driver library to judge instead of the one the loader finds (tests)
# The CUDA the stacks are built with is nix/pins.json's (stacks.cuda()). A driver reports the newest CUDA it runs
# with cuDriverGetVersion (13000 = 13.0); CUDA's minor version compatibility lets a 13.0 driver run any 13.x.
DRIVER_LINK = Path("/run/opengl-driver")  # NixOS's driver, also where its container toolkit (CDI) mounts it


def driver_cuda_version(library: str | None = None) -> tuple[str, int]:
    """(the libcuda.so.1 SGLang's processes will load, the CUDA version cuDriverGetVersion gives): the loader's search
    first (LD_LIBRARY_PATH: nix/scripts/host-driver.sh links the host's or the container's driver there), then
    NixOS's driver link, which CUDA libraries find through their RUNPATH. OSError: no driver library; RuntimeError:
    no answer."""
    names = [library] if library else ["libcuda.so.1", str(DRIVER_LINK / "lib" / "libcuda.so.1")]
    failures = []
    for name in names:
        try:
            driver = ctypes.CDLL(name)
        except OSError as err:
            failures.append(str(err))
            continue
        version = ctypes.c_int(0)
        status = driver.cuDriverGetVersion(ctypes.byref(version))
        if status != 0:
            raise RuntimeError(f"cuDriverGetVersion of {name} failed (CUresult {status})")
        return _mapped_file("libcuda.so") or name, version.value
    raise OSError("; ".join(failures))


def _mapped_file(stem: str) -> str | None:
    """The file of a loaded library whose name starts with ``stem`` (from /proc/self/maps), or None."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return None
    return next((line.split()[-1] for line in lines if Path(line.split()[-1]).name.startswith(stem)), None)
