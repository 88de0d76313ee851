"""nix/scripts/gpu-runtime-check.py: its plan here (no GPU), its real run on a GPU host.

The script is what ran on the lent H200 (docs/gpu-host.md). Here its argument parsing, the
environments it builds for each child and the nixpkgs-shaped CUDA_HOME it lays out are checked;
the run itself needs a GPU and is skipped without `nvidia-smi`.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import pytest
from conftest import REPO
from support.scripts import load_script

SCRIPT = REPO / "nix" / "scripts" / "gpu-runtime-check.py"
SECTIONS = ("triton", "flashinfer", "layout", "comm", "preflight", "aot")


def dry_run(tmp_path, *extra):
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--workdir", str(tmp_path), "--cc", "/wrapper/bin/cc",
         "--cuda-home", "/cuda", "--libcuda-dir", "/driver/lib", "--arch-list", "9.0 12.0", *extra],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_unknown_section_is_refused(tmp_path):
    result = dry_run(tmp_path, "--sections", "triton,nccl")
    assert result.returncode == 2
    assert "unknown section(s): nccl" in result.stderr


def test_dry_run_prints_every_section_and_the_wrapper_variables(tmp_path):
    result = dry_run(tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for section in SECTIONS:
        assert f"######## {section}" in out
    assert "dry run: nothing was run" in out
    commands = [line for line in out.splitlines() if line.startswith("$ env -i ")]
    # triton: 4 children; flashinfer: 2 probes + cold + warm; layout: 2; comm: what the installed FlashInfer
    # takes + 5 builds (the PCIe-IPC ones planned too, as a dry run does not ask FlashInfer); preflight: 2;
    # aot: the build with no GPU, the first start from the prebuilt modules, the first start with JIT
    assert len(commands) == 4 + 4 + 2 + 6 + 2 + 3
    triton = [c for c in commands if "/triton-" in c]
    assert "TRITON_LIBCUDA_PATH=" not in triton[0]  # the failure it shows: ldconfig hidden, no variable
    assert all("unshare -m" in c and "/sbin/ldconfig" not in c for c in triton)
    assert "PATH=/nonexistent" in triton[1] and "CC=" not in triton[1]  # no compiler at all
    assert all("CC=/wrapper/bin/cc" in c and "TRITON_LIBCUDA_PATH=/driver/lib" in c for c in triton[2:])
    flashinfer = [c for c in commands if "/flashinfer-kernels" in c]
    assert all("CUDA_HOME=/cuda" in c and "FLASHINFER_CUDA_ARCH_LIST=9.0 12.0" in c for c in flashinfer)
    assert "FLASHINFER_CUDA_ARCH_LIST" not in next(c for c in commands if "arch_list_unset" in c)
    comm = [c for c in commands if "/comm-" in c]
    assert [c.rsplit(" ", 1)[1] for c in comm] == ["majors", "stock", "stock", "pcie", "pcie", "120a"]
    assert "FLASHINFER_CUDA_ARCH_LIST=9.0a" in comm[1] and "FLASHINFER_CUDA_ARCH_LIST=12.0a" in comm[2]
    assert "FLASHINFER_CUDA_ARCH_LIST=9.0a" in comm[3] and "FLASHINFER_CUDA_ARCH_LIST=12.0a" in comm[4]
    build, prebuilt, jit = [c for c in commands if "/aot-" in c]
    # the build sees no GPU and runs the derivation's script for the capabilities given
    assert "CUDA_VISIBLE_DEVICES= " in build and "flashinfer-aot.py --stack 0.5.9 --capabilities 9.0 12.0" in build
    # the prebuilt modules' first start: a compile would fail (JIT disabled, nothing to compile with)
    assert all(x in prebuilt for x in ("FLASHINFER_DISABLE_JIT=1", "CUDA_HOME=/nonexistent/cuda", "PATH=/nonexistent"))
    assert "CUDA_HOME=/cuda" in jit and "FLASHINFER_DISABLE_JIT" not in jit


def test_path_defaults_to_the_tools_directories():
    args = load_script(SCRIPT).parse_args(["--cc", "/cc-wrapper/bin/cc", "--sections", "triton"])
    assert args.path.split(":")[0] == "/cc-wrapper/bin"
    assert args.sections == ["triton"]


@pytest.mark.parametrize("link", [True, False])
def test_nix_layout_has_lib_and_only_optionally_lib64(tmp_path, link):
    real = tmp_path / "cuda"
    for d in ("bin", "include", "targets/lib/stubs"):
        (real / d).mkdir(parents=True)
    (real / "targets/lib/libcudart.so").write_text("")
    (real / "lib64").symlink_to("targets/lib")  # the layout of /usr/local/cuda on the H200
    home = load_script(SCRIPT).nix_layout(real, tmp_path / "nix", link)
    assert (home / "lib" / "libcudart.so").exists() and (home / "lib" / "stubs").is_dir()
    assert (home / "bin").resolve() == (real / "bin").resolve()
    assert (home / "lib64").is_symlink() is link
    if link:
        assert (home / "lib64" / "libcudart.so").exists()


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs a GPU host: nvidia-smi not found")
def test_runs_on_a_gpu_host(tmp_path):
    sections = "triton,preflight" + (",flashinfer" if importlib.util.find_spec("flashinfer") else "")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--sections", sections, "--workdir", str(tmp_path),
         "--kernels", "draft_paged_prefill_fa2,rmsnorm"],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    for section in sections.split(","):
        assert f"######## {section}" in result.stdout
    assert "kernel launched, result right" in result.stdout
    assert "FileNotFoundError" in result.stdout and "/sbin/ldconfig" in result.stdout
    assert "compute capability" in result.stdout
    assert "0 failed" in result.stdout
