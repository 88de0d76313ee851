"""A stand-in NVIDIA driver laid out as the NVIDIA Container Toolkit lays it out in a container.

The driver cannot load without a GPU, so its two libraries are small real shared objects built here from
tests/stand_ins/nvidia_driver (with the real sonames), and nvidia-smi is a script printing a recorded
`--query-gpu` output (tests/data/nvidia-smi). What each mode mounts where (the same way nixpkgs tests its
toolkit module with a fake nvidia-ctk, nixos/tests/nvidia-container-toolkit.nix):

  legacy       nvidia-container-cli on a Debian/Ubuntu host: the versioned libraries at the host's library
               directory, the soname links its ldconfig step made (the image ships /sbin/ldconfig for it),
               nvidia-smi in /usr/bin
  legacy-rhel  the same on a RHEL host (/usr/lib64)
  no-ldconfig  legacy mode where the ldconfig step did not run: the versioned libraries only
  cdi          `nvidia-ctk cdi generate` on a Debian/Ubuntu host: the libraries at their host paths, the
               soname links of its create-symlinks hook, nvidia-smi in /usr/bin
  cdi-nixos    NixOS's hardware.nvidia-container-toolkit: /run/opengl-driver mounted whole, the driver's
               lib again at /usr/local/nvidia/lib64, nvidia-smi in /usr/bin (its generator disables the
               create-symlinks hook; /run/opengl-driver has the links already)
  utility      NVIDIA_DRIVER_CAPABILITIES unset: only the utility capability, nvidia-smi and NVML, no libcuda
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SOURCES = Path(__file__).resolve().parents[1] / "stand_ins" / "nvidia_driver"
RECORDINGS = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"
DRIVER_VERSION = "580.95.05"  # a CUDA 13.0 driver's version, in the versioned file names
MODES = ("legacy", "legacy-rhel", "no-ldconfig", "cdi", "cdi-nixos", "utility")


def build_driver(into: Path, cuda_version: int = 13000) -> Path:
    """The stand-in libraries, compiled: libcuda.so.<DRIVER_VERSION> and libnvidia-ml.so.<DRIVER_VERSION>."""
    compiler = shutil.which("cc")
    if compiler is None:
        raise FileNotFoundError("a C compiler (cc) for the stand-in NVIDIA driver libraries")
    into.mkdir(parents=True, exist_ok=True)
    for name, define in (("libcuda", f"-DSTAND_IN_CUDA_VERSION={cuda_version}"), ("libnvidia-ml", "")):
        out = into / f"{name}.so.{DRIVER_VERSION}"
        command = [compiler, "-shared", "-fPIC", f"-Wl,-soname,{name}.so.1", "-o", str(out), str(SOURCES / f"{name}.c")]
        subprocess.run([*command, *([define] if define else [])], check=True)
    return into


def nvidia_smi_script(recording: str = "8x-rtx-pro-6000.csv") -> str:
    """A self-contained nvidia-smi (it runs inside the container's root too): the recording, and topo -m's."""
    csv = (RECORDINGS / recording).read_text()
    topo_file = RECORDINGS / Path(recording).with_suffix(".topo").name
    topo = topo_file.read_text() if topo_file.is_file() else ""
    return (
        "#!/bin/sh\n# stand-in nvidia-smi: a recorded output (tests/data/nvidia-smi)\n"
        f"if [ \"$1\" = topo ]; then cat <<'TOPO'\n{topo}TOPO\nexit 0; fi\n"
        f"cat <<'CSV'\n{csv}CSV\n"
    )


def lay_out(root: Path, mode: str, driver: Path, recording: str = "8x-rtx-pro-6000.csv") -> Path:
    """Put the stand-in driver under ``root`` (a container's root, or a directory standing for one) as
    ``mode`` mounts it; returns the directory holding libcuda, or the NVML directory for `utility`."""
    if mode not in MODES:
        raise ValueError(f"unknown toolkit mode {mode!r}; one of {', '.join(MODES)}")
    lib = {"legacy-rhel": "usr/lib64", "cdi-nixos": "run/opengl-driver/lib"}.get(mode, "usr/lib/x86_64-linux-gnu")
    directory = root / lib
    directory.mkdir(parents=True, exist_ok=True)
    names = ["libnvidia-ml"] if mode == "utility" else ["libcuda", "libnvidia-ml"]
    for name in names:
        versioned = directory / f"{name}.so.{DRIVER_VERSION}"
        shutil.copy2(driver / versioned.name, versioned)
        if mode != "no-ldconfig":
            os.symlink(versioned.name, directory / f"{name}.so.1")
    if mode == "cdi-nixos":
        shutil.copytree(directory, root / "usr/local/nvidia/lib64", symlinks=True)
    smi = root / "usr" / "bin" / "nvidia-smi"
    smi.parent.mkdir(parents=True, exist_ok=True)
    smi.write_text(nvidia_smi_script(recording))
    smi.chmod(0o755)
    return directory
