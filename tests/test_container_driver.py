"""The driver inside a container: the NVIDIA Container Toolkit mounts it at the host distribution's paths
(legacy mode and CDI) or, on NixOS hosts, at /run/opengl-driver; Nix's glibc never reads the ld cache the
toolkit writes. nix/scripts/host-driver.sh (the wrapper sources it) finds libcuda.so.1 and
libnvidia-ml.so.1 in each layout, and preflight's driver check says when the CUDA library is missing (the
compute capability not asked for) or too old for CUDA 13.

A stand-in driver (tests/support/driver_tree.py: real shared objects with the real sonames, a recorded
nvidia-smi) is laid out under a directory standing for the container's root; host-driver.sh's own default
directories are read from the script and looked up under it. tests/test_image.py runs the same layouts at
their real paths, inside the image's root file system.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from support import driver_tree
from support.own_resources import missing_path

HOST_DRIVER = REPO / "nix" / "scripts" / "host-driver.sh"
DEFAULT_DIRS = re.search(r"hostLibDirs:-([^}]*)\}", HOST_DRIVER.read_text()).group(1).split()
# What the container's environment gets from the image (nix/image.nix): the compute capability too.
CHECK = """
import json, sys
from pathlib import Path
from sglang_eagle3.host import driver
from sglang_eagle3.judging import preflight
driver.DRIVER_LINK = Path(sys.argv[1])
report = preflight.Preflight()
preflight.check_driver(report, None, dict(__import__("os").environ))
print(json.dumps(report.to_dict()["findings"]))
"""


@pytest.fixture(scope="module")
def drivers(tmp_path_factory) -> dict[int, Path]:
    """The stand-in driver libraries for CUDA 13.0 and for an older driver (CUDA 12.8)."""
    root = tmp_path_factory.mktemp("drivers")
    try:
        return {v: driver_tree.build_driver(root / str(v), v) for v in (13000, 12080)}
    except FileNotFoundError as err:
        pytest.skip(f"needs {err}")


def in_container(root: Path, tmp_path: Path, capabilities: str | None = "compute,utility") -> list[dict]:
    """Source host-driver.sh as the wrapper does, with its default directories under ``root``, then run
    preflight's driver check in that environment; its findings."""
    dirs = " ".join(str(root / d.lstrip("/")) for d in DEFAULT_DIRS)
    variables = {
        "driverLink": str(root / "run/opengl-driver"),
        "ldconfigs": str(tmp_path / "none"),
        "hostLibDirs": dirs,
    }
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in variables.items())
    check = f"{sys.executable} -c {shlex.quote(CHECK)} {root / 'run/opengl-driver'}"
    script = f"set -e; {assigns}; . {HOST_DRIVER}; exec {check}"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO / "python" / "src")}
    if capabilities is not None:
        env["NVIDIA_DRIVER_CAPABILITIES"] = capabilities
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.parametrize("mode", [m for m in driver_tree.MODES if m != "utility"])
def test_each_toolkit_layout_gives_the_server_a_cuda_13_driver(tmp_path, drivers, mode):
    driver_tree.lay_out(tmp_path / "root", mode, drivers[13000])
    (finding,) = in_container(tmp_path / "root", tmp_path)
    assert finding["status"] == "ok", finding
    assert finding["message"].startswith("runs CUDA up to 13.0, this stack needs 13.0")
    assert f"libcuda.so.{driver_tree.DRIVER_VERSION}" in finding["message"], "the stand-in was the library loaded"


def test_the_soname_links_are_made_where_no_ldconfig_ran(tmp_path, drivers):
    directory = driver_tree.lay_out(tmp_path / "root", "no-ldconfig", drivers[13000])
    assert not (directory / "libcuda.so.1").exists()
    dirs = " ".join(str(tmp_path / "root" / d.lstrip("/")) for d in DEFAULT_DIRS)
    nowhere = missing_path(tmp_path)  # no driver link and no ldconfig: paths of the test's own, never created
    assigns = f"driverLink={nowhere} ldconfigs={nowhere} hostLibDirs={shlex.quote(dirs)}"
    script = f"set -e; {assigns}; . {HOST_DRIVER}; echo $LD_LIBRARY_PATH"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                         env={"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home")}).stdout.strip()  # fmt: skip
    linked = Path(out.split(":")[0])
    for name in ("libcuda", "libnvidia-ml"):
        assert (linked / f"{name}.so.1").resolve() == (directory / f"{name}.so.{driver_tree.DRIVER_VERSION}").resolve()


def test_the_utility_capability_alone_is_refused_with_what_to_set(tmp_path, drivers):
    driver_tree.lay_out(tmp_path / "root", "utility", drivers[13000])
    for capabilities, shown in ((None, "it is unset here"), ("utility", "it is 'utility' here")):
        (finding,) = in_container(tmp_path / "root", tmp_path, capabilities)
        assert finding["status"] == "fail"
        assert "set NVIDIA_DRIVER_CAPABILITIES=compute,utility" in finding["message"] and shown in finding["message"]


def test_a_driver_older_than_cuda_13_is_refused(tmp_path, drivers):
    driver_tree.lay_out(tmp_path / "root", "cdi", drivers[12080])
    (finding,) = in_container(tmp_path / "root", tmp_path)
    assert finding["status"] == "fail"
    assert "runs CUDA up to 12.8" in finding["message"] and "needs a 580 or newer driver" in finding["message"]
