"""Which object finds the NVIDIA driver, path by path (nix/driver-loaders.json), and the fixes that make each
find it on NixOS on its own.

- every line of the real wheels (every stack, sglang_eagle3_audits/driver_loaders.py) that names libcuda.so /
  libnvidia-ml.so, links -lcuda or asks cuda-pathfinder for the driver is covered by a path or excused
  with a reason; every evidence line is in the wheel; every mechanism a path relies on is in the Nix
  code; a new load in a wheel, a glob that covers nothing and a removed mechanism each fail;
- Triton's runtime/build.py as python-overrides.nix patches it (3.5.1 and 3.8.0, the real files) links a
  module whose RUNPATH starts with the driver's directory, built here with the real C compiler;
- FlashInfer 0.6.3's ninja writer under the wrapper's variables (nix/runtime-env.json) links with that
  rpath ahead of the toolkit's, and the link line, run here, gives that RUNPATH;
- each path's H200 children passed (docs/gpu-host-figures.json, nix/scripts/driver-namespace-check.py).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import CACHE, REPO
from sglang_eagle3 import stacks
from sglang_eagle3_audits import driver_loaders as audit
from sglang_eagle3_audits.closure import Closure
from support.stack_libraries import FLASHINFER_LIBRARIES, stack_libraries

DATA = json.loads((REPO / "nix" / "driver-loaders.json").read_text())
ENV = json.loads((REPO / "nix" / "runtime-env.json").read_text())
FIGURES = json.loads((REPO / "docs" / "gpu-host-figures.json").read_text())
DRIVER = "/run/opengl-driver/lib"


@pytest.fixture(scope="module")
def wheels():
    packages = [*DATA["scan"]["packages"], "torch"]
    return {v: audit.stack_wheels(Closure(s, CACHE), packages) for v, s in stacks.stacks().items()}


@pytest.fixture(scope="module")
def scans(wheels):
    spec = DATA["scan"]
    return {s: {p: audit.scan(w, spec["pattern"], spec["suffixes"]) for p, w in ws.items() if p != "torch"}
            for s, ws in wheels.items()}  # fmt: skip


def test_every_driver_load_of_the_wheels_is_accounted_for(scans, wheels):
    assert audit.problems(DATA, scans, wheels) == []


def test_the_scan_finds_the_loads_that_matter(scans):
    assert "triton/backends/nvidia/driver.c" in scans["0.5.9"]["triton"]
    assert "flashinfer/jit/cpp_ext.py" in scans["0.5.23"]["flashinfer-python"]
    assert "cuda/bindings/_internal/driver_linux.pyx" in scans["0.5.9"]["cuda-bindings"]
    assert "sglang/kernels/ops/communication/all_reduce.py" in scans["0.5.23"]["sglang"]
    assert "pynvml.py" in scans["0.5.9"]["nvidia-ml-py"]


def test_a_new_load_an_unused_glob_and_a_wrong_evidence_line_fail(scans, wheels):
    grown = copy.deepcopy(scans)
    grown["0.5.9"]["triton"]["triton/tools/new_loader.py"] = ['3: ctypes.CDLL("libcuda.so.1")']
    assert any("triton/tools/new_loader.py" in p and "no path covers" in p for p in audit.problems(DATA, grown, wheels))
    data = copy.deepcopy(DATA)
    data["not_loads"]["triton:triton/never/*"] = "a reason for nothing"
    assert any("covers no file" in p for p in audit.problems(data, scans, wheels))
    data = copy.deepcopy(DATA)
    data["paths"][0]["evidence"]["0.5.9"][0] = "triton:triton/backends/nvidia/driver.py:17: libraries = ['nvcuda']"
    assert any("the wheel has" in p for p in audit.problems(data, scans, wheels))
    data = copy.deepcopy(DATA)
    del data["paths"][0]["covers"]
    assert any(p.endswith("no covers") for p in audit.problems(data, scans, wheels))


def test_every_mechanism_is_in_the_nix_code_and_a_missing_one_fails(monkeypatch, tmp_path):
    assert audit.mechanism_problems(DATA) == []
    data = copy.deepcopy(DATA)
    data["paths"][0]["holds"].append("ld-library-path")
    assert "triton-launcher: holds by unknown ld-library-path" in audit.mechanism_problems(data)
    # python-overrides.nix without the Triton patch: the rpath mechanism is gone.
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "nix", repo / "nix")
    overrides = repo / "nix" / "python-overrides.nix"
    overrides.write_text(overrides.read_text().replace("driver-dir-patch.py} triton", "something-else.py} triton"))
    monkeypatch.setattr(audit, "REPO", repo)
    assert "mechanism triton-rpath: the Nix code no longer has it" in audit.mechanism_problems(DATA)


def test_the_figures_keys_say_what_they_measure_and_the_docs_name_real_ones():
    """A figure is named by what it measures (no finding, issue or session in the name: those change meaning
    as the project moves on), and every `gpu-host-figures.json` `KEY` the docs cite is one of its keys."""
    when = re.compile(r"finding\d|issue|session|rerun|this_|_then|latest", re.IGNORECASE)
    assert [k for k in FIGURES if when.search(k)] == []
    docs = (REPO / "docs" / "gpu-host.md").read_text()
    cited = re.findall(r"gpu-host-figures\.json`\s+`([^`]+)`", docs)
    assert cited and [k for k in cited if k not in FIGURES] == []


def test_each_paths_h200_children_passed():
    results = {r["name"]: r for r in FIGURES["driver_namespace"]["children"]}
    for path in DATA["paths"]:
        for child in path["h200"]:
            assert child in results, f"{path['id']}: {child} is not in docs/gpu-host-figures.json"
            assert results[child]["passed"], f"{path['id']}: {child} did not give its expected result"


# -- the fixes, run here ------------------------------------------------------------------------------------


def fake_libcuda(directory: Path) -> None:
    """A libcuda.so with libcuda.so.1 as its name, as the stub has (no driver here)."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-x", "c", "/dev/null", "-Wl,-soname,libcuda.so.1",
                    "-o", str(directory / "libcuda.so")], check=True)  # fmt: skip
    (directory / "libcuda.so.1").symlink_to("libcuda.so")


def dynamic(library: Path) -> tuple[list[str], list[str]]:
    out = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^]]+)\]", out)
    runpath = re.search(r"\(RUNPATH\)\s+Library runpath: \[([^]]*)\]", out)
    return needed, runpath[1].split(":") if runpath else []


@pytest.mark.skipif(shutil.which("cc") is None or shutil.which("readelf") is None, reason="needs cc and readelf")
@pytest.mark.parametrize("version", ["3.5.1", "3.8.0"])
def test_triton_as_patched_links_its_modules_with_the_drivers_directory_first(version, tmp_path, monkeypatch):
    """runtime/build.py of the real wheel, patched as the Nix build patches it; its _build compiles a
    module here with the real C compiler. Its package imports (knobs, the cache) are replaced by the
    two settings _build reads: no custom build hook, no extra include directories."""
    (wheel,) = CACHE.glob(f"triton-{version}-cp312-*.whl")
    source = zipfile.ZipFile(wheel).read("triton/runtime/build.py").decode()
    patched = tmp_path / "build.py"
    patched.write_text(source)
    script = REPO / "nix" / "scripts" / "driver-dir-patch.py"
    subprocess.run([sys.executable, str(script), "triton", str(patched), DRIVER], check=True)
    code = re.sub(r"^from \.+\S* import .*$", "", patched.read_text(), flags=re.MULTILINE)
    knobs = type("knobs", (), {"build": type("build", (), {"impl": None, "backend_dirs": []})})
    namespace = {"__name__": "triton_build", "knobs": knobs}
    exec(compile(code, str(patched), "exec"), namespace)
    stubs = tmp_path / "stubs"
    fake_libcuda(stubs)
    src = tmp_path / "cuda_utils.c"
    src.write_text("int cuda_utils(void) { return 0; }\n")
    libraries = ["cuda"] if version == "3.5.1" else ["libcuda.so.1"]  # as each version's driver.py asks
    cc = tmp_path / "cc"  # nixpkgs' ld records every -l library; Debian's gcc links --as-needed
    cc.write_text(f'#!/bin/sh\nexec {shutil.which("cc")} -Wl,--no-as-needed "$@"\n')
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    so = namespace["_build"]("cuda_utils", str(src), str(tmp_path), [str(stubs)], [], libraries, [])
    needed, runpath = dynamic(Path(so))
    assert "libcuda.so.1" in needed and runpath[0] == DRIVER, (needed, runpath)


@pytest.mark.skipif(shutil.which("c++") is None or shutil.which("readelf") is None, reason="needs c++ and readelf")
def test_flashinfers_links_get_the_drivers_directory_ahead_of_the_toolkits(tmp_path):
    """FlashInfer 0.6.3's own ninja writer with the wrapper's FLASHINFER_EXTRA_LDFLAGS (the value
    nix/runtime-env.nix renders) and a CUDA_HOME laid out like nix/cuda.nix's; its link line runs here."""
    flags = "-Xlinker -rpath=/run/opengl-driver/lib"  # runtime-env.nix "driver:rpath"
    assert ENV["environment"]["FLASHINFER_EXTRA_LDFLAGS"]["value"] == "driver:rpath"
    home = tmp_path / "cuda"
    fake_libcuda(home / "lib" / "stubs")
    subprocess.run(["cc", "-shared", "-fPIC", "-x", "c", "/dev/null", "-Wl,-soname,libcudart.so.13",
                    "-o", str(home / "lib" / "libcudart.so")], check=True)  # fmt: skip
    (home / "lib64").symlink_to("lib")
    probe = (
        "import sys\nfrom pathlib import Path\nfrom flashinfer.jit.cpp_ext import generate_ninja_build_for_op\n"
        "print(generate_ninja_build_for_op('m', [Path(sys.argv[1])], None, None, None, None))\n"
    )
    site = stack_libraries("0.5.9", FLASHINFER_LIBRARIES, CACHE)
    env = {**os.environ, "PYTHONPATH": str(site), "CUDA_HOME": str(home), "HOME": str(tmp_path),
           "FLASHINFER_EXTRA_LDFLAGS": flags, "FLASHINFER_CUDA_ARCH_LIST": "12.0",
           "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "ws")}  # fmt: skip
    ninja = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "m.cpp")], env=env, capture_output=True,
                           text=True, timeout=900)  # fmt: skip
    assert ninja.returncode == 0, ninja.stderr
    written = re.search(r"^ldflags = (.*?)\n\n", ninja.stdout, re.MULTILINE | re.DOTALL)[1]  # ninja's "$" continues
    ldflags = written.replace("$\n", " ").replace("$cuda_home", str(home)).split()
    assert ldflags[-2:] == flags.split() and "-lcuda" in ldflags
    obj = tmp_path / "m.o"
    subprocess.run(["c++", "-fPIC", "-c", "-x", "c++", "/dev/null", "-o", str(obj)], check=True)
    # nixpkgs' ld records every -l library (no --as-needed; Debian's gcc has it on by default)
    subprocess.run(["c++", "-Wl,--no-as-needed", str(obj), *ldflags, "-o", str(tmp_path / "m.so")], check=True)
    needed, runpath = dynamic(tmp_path / "m.so")
    assert "libcuda.so.1" in needed and runpath == [DRIVER], (needed, runpath)
