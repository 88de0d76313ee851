"""The run-time environment: what SGLang, Triton, FlashInfer and PyTorch find at run time by
PATH, environment variables, ctypes and fixed paths, beyond the ELF libraries.

nix/runtime-env.json is its one definition; nix/runtime-env.nix renders it for the wrapper
(`nix run`, the NixOS units), the dev shell, the server unit's PATH and the GPU check. Here:

- the scripts the Nix build runs, for real: nix/scripts/host-driver.sh (the host's driver
  libraries on a distribution other than NixOS) and nix/scripts/driver-dir-patch.py nvml (NVML on
  NixOS), with a compiled stand-in for the NVIDIA driver's libnvidia-ml.so.1, the one thing
  that cannot load on a machine without the driver;
- every entry of the definition reaches every consumer, in the evaluated flake (stand-in
  nixpkgs, real locked inputs; see tests/flake_eval.py), for each stack: the shared entries
  plus the stack's own ("stacks"), merged in Nix as the run-time lookup audit merges them
  (sglang_eagle3_audits/runtime_lookups.py);
- the CUDA tree is built here (stand-in packages): lib64, cuda_crt, no static outputs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import CACHE, REPO
from sglang_eagle3_audits import runtime_lookups as audit
from support.flake_eval import Workspace, unavailable
from support.pinned_wheels import fetch_wheel
from support.scripts import load_script

SPEC = json.loads((REPO / "nix" / "runtime-env.json").read_text())
# Each stack's wrapper: the flake's package for it, and its view of the definition.
STACKS = {"0.5.9": "default", "0.5.23": "sglang-eagle3-0_5_23"}
HOST_DRIVER = REPO / "nix" / "scripts" / "host-driver.sh"
DRIVER_DIR_PATCH = REPO / "nix" / "scripts" / "driver-dir-patch.py"
LIBNUMA_PATCH = REPO / "nix" / "scripts" / "libnuma-path.py"
NO_DOWNLOAD_PATCH = REPO / "nix" / "scripts" / "flashinfer-no-download.py"
SYSTEM = "x86_64-linux"


# -- a stand-in for the driver's NVML: the real one needs the NVIDIA driver ------------------------


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory) -> Path:
    """A driver directory as a host has it: libcuda.so.1, libnvidia-ml.so.1 (a tiny real shared
    library answering nvmlInitWithFlags and nvmlShutdown, enough for pynvml.nvmlInit()) and an
    unrelated system library that must not be exposed."""
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler for the stand-in libnvidia-ml.so.1")
    root = tmp_path_factory.mktemp("driver")
    source = root / "nvml.c"
    source.write_text("int nvmlInitWithFlags(unsigned int flags) { return 0; }\nint nvmlShutdown(void) { return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(root / "libnvidia-ml.so.1"), str(source)], check=True)
    (root / "libcuda.so.1").write_bytes(b"")
    (root / "libcuda.so.580.126.09").write_bytes(b"")
    (root / "libstdc++.so.6").write_bytes(b"")
    return root


def source_host_driver(tmp_path: Path, **variables: str) -> dict[str, str]:
    """Source host-driver.sh as the wrapper does (bash -e) and return the resulting environment."""
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in variables.items())
    script = f"set -e; {assigns}; . {HOST_DRIVER}; env -0"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "LD_LIBRARY_PATH": "/keep"}
    out = subprocess.run(["bash", "-c", script], capture_output=True, env=env, check=True).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


def fake_ldconfig(tmp_path: Path, driver: Path) -> Path:
    program = tmp_path / "ldconfig"
    program.write_text(
        "#!/bin/sh\n"
        "echo '3 libs found in cache `/etc/ld.so.cache`'\n"
        "echo '\tlibcuda.so.1 (libc6) => /usr/lib32/libcuda.so.1'\n"
        f"echo '\tlibcuda.so.1 (libc6,x86-64) => {driver}/libcuda.so.1'\n"
        f"echo '\tlibstdc++.so.6 (libc6,x86-64) => {driver}/libstdc++.so.6'\n"
    )
    program.chmod(0o755)
    return program


# -- host-driver.sh ---------------------------------------------------------------------------------


def test_host_driver_links_only_the_driver_libraries_found_by_the_hosts_ldconfig(tmp_path, fake_driver):
    env = source_host_driver(
        tmp_path, driverLink=str(tmp_path / "no-such"), ldconfigs=str(fake_ldconfig(tmp_path, fake_driver))
    )
    first, rest = env["LD_LIBRARY_PATH"].split(":", 1)
    assert rest == "/keep", "the caller's LD_LIBRARY_PATH stays, after the driver's"
    assert first == str(tmp_path / "home" / ".cache" / "sglang-eagle3" / "host-driver")
    linked = {p.name: os.readlink(p) for p in Path(first).iterdir()}
    assert linked == {
        name: str(fake_driver / name) for name in ("libcuda.so.1", "libcuda.so.580.126.09", "libnvidia-ml.so.1")
    }, "the driver's libraries only, never the host's libstdc++"


def test_host_driver_falls_back_to_the_usual_directories_without_ldconfig(tmp_path, fake_driver):
    env = source_host_driver(
        tmp_path, driverLink=str(tmp_path / "no-such"), ldconfigs=str(tmp_path / "absent"),
        hostLibDirs=f"{tmp_path / 'empty'} {fake_driver}",
    )  # fmt: skip
    first = Path(env["LD_LIBRARY_PATH"].split(":")[0])
    assert os.readlink(first / "libnvidia-ml.so.1") == str(fake_driver / "libnvidia-ml.so.1")


def test_host_driver_changes_nothing_on_nixos_or_without_a_driver(tmp_path, fake_driver):
    nixos = tmp_path / "opengl-driver"
    (nixos / "lib").mkdir(parents=True)
    (nixos / "lib" / "libcuda.so.1").write_bytes(b"")
    env = source_host_driver(tmp_path, driverLink=str(nixos), ldconfigs=str(fake_ldconfig(tmp_path, fake_driver)))
    assert env["LD_LIBRARY_PATH"] == "/keep"
    env = source_host_driver(
        tmp_path, driverLink=str(tmp_path / "no-such"), ldconfigs=str(tmp_path / "absent"),
        hostLibDirs=str(tmp_path / "empty"),
    )  # fmt: skip
    assert env["LD_LIBRARY_PATH"] == "/keep", "no driver: no change, and the wrapper (bash -e) goes on"


def test_host_driver_uses_tmp_when_the_cache_cannot_be_made(tmp_path, fake_driver):
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a cache "directory" under a regular file cannot be created, even by root
    env = source_host_driver(
        tmp_path, driverLink=str(tmp_path / "no-such"), ldconfigs=str(fake_ldconfig(tmp_path, fake_driver)),
        TMPDIR=str(tmp_path / "tmp"), XDG_CACHE_HOME=str(blocker / "cache"),
    )  # fmt: skip
    first = Path(env["LD_LIBRARY_PATH"].split(":")[0])
    assert first == tmp_path / "tmp" / f"sglang-eagle3-host-driver-{os.getuid()}"
    assert (first / "libcuda.so.1").is_symlink()


def test_pynvml_finds_the_hosts_nvml_through_host_driver(tmp_path, fake_driver):
    """End to end on a distribution other than NixOS: the library pynvml opens by name is found."""
    env = source_host_driver(
        tmp_path, driverLink=str(tmp_path / "no-such"), ldconfigs=str(fake_ldconfig(tmp_path, fake_driver))
    )
    code = "import pynvml; pynvml.nvmlInit(); print('nvml ok')"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env})
    assert run.stdout.strip() == "nvml ok", run.stderr
    bare = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "LD_LIBRARY_PATH": ""}
    )
    assert "NVML Shared Library Not Found" in bare.stderr


# -- driver-dir-patch.py nvml -------------------------------------------------------------------------


def pynvml_source() -> str:
    import pynvml

    return Path(pynvml.__file__).read_text()


def test_patched_pynvml_falls_back_to_the_driver_directory(tmp_path, fake_driver):
    """On NixOS nothing is on the loader's path: the patched pynvml opens NVML from the driver link."""
    module = tmp_path / "site" / "pynvml.py"
    module.parent.mkdir()
    module.write_text(pynvml_source())
    code = "import pynvml; pynvml.nvmlInit(); print('nvml ok')"
    env = {**os.environ, "PYTHONPATH": str(module.parent), "LD_LIBRARY_PATH": ""}
    before = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert "NVML Shared Library Not Found" in before.stderr
    subprocess.run([sys.executable, str(DRIVER_DIR_PATCH), "nvml", str(module), str(fake_driver)], check=True)
    after = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert after.stdout.strip() == "nvml ok", after.stderr


def test_nvml_patch_refuses_a_pynvml_without_the_expected_load(tmp_path):
    module = tmp_path / "pynvml.py"
    module.write_text(pynvml_source().replace('CDLL("libnvidia-ml.so.1")', "CDLL(find_nvml())"))
    run = subprocess.run(
        [sys.executable, str(DRIVER_DIR_PATCH), "nvml", str(module), "/run/opengl-driver/lib"],
        capture_output=True,
        text=True,
    )
    assert run.returncode != 0 and 'nvml: expected one CDLL("libnvidia-ml.so.1") line, found 0' in run.stderr


@pytest.mark.parametrize("args", [[], ["cuda", "x.py", "/run/opengl-driver/lib"], ["nvml", "x.py"]])
def test_driver_dir_patch_names_its_patches_when_called_wrong(tmp_path, args):
    """One script, two patches: which one is its first argument; anything else gets the usage line, exit 2."""
    run = subprocess.run([sys.executable, str(DRIVER_DIR_PATCH), *args], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 2 and "usage: driver-dir-patch.py {nvml PYNVML_PY | triton BUILD_PY}" in run.stderr
    assert not (tmp_path / "x.py").exists()


def test_triton_patch_refuses_a_build_py_without_the_expected_line(tmp_path):
    build = tmp_path / "build.py"
    build.write_text("def _build():\n    cc_cmd = [cc, src]\n")
    run = subprocess.run([sys.executable, str(DRIVER_DIR_PATCH), "triton", str(build), "/run/opengl-driver/lib"],
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode != 0 and "triton: expected one `cc_cmd = [cc, src, ...]` line" in run.stderr
    assert build.read_text() == "def _build():\n    cc_cmd = [cc, src]\n"


# -- libnuma-path.py ----------------------------------------------------------------------------------

HOST_LIBNUMA = Path("/usr/lib/x86_64-linux-gnu/libnuma.so.1")
# ctypes as a NixOS host's loader answers it: no libnuma by soname on the default paths (a file by its path loads).
NIXOS_CTYPES = """
import ctypes as _real


class ctypes:
    c_int = _real.c_int

    @staticmethod
    def CDLL(name):
        if "/" not in name:
            raise OSError(f"{name}: cannot open shared object file: No such file or directory")
        return _real.CDLL(name)
"""


def get_libnuma(utils: Path, libnuma_dir: Path | None = None):
    """The tree's own get_libnuma, run with a NixOS host's loader: the library it opens, or None."""
    import ast
    import logging

    (holder,) = [p for p in utils.glob("*.py") if "def get_libnuma" in p.read_text()]
    tree = ast.parse(holder.read_text())
    (function,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_libnuma"]
    namespace = {"logger": logging.getLogger("test")}
    exec(NIXOS_CTYPES, namespace)
    exec(compile(ast.Module([function], []), str(holder), "exec"), namespace)
    return namespace["get_libnuma"]()


def test_patched_get_libnuma_finds_nixpkgs_libnuma_where_the_loader_has_none(tree, tmp_path):
    """Each tree's get_libnuma (0.5.9 srt/utils/common.py, 0.5.23 srt/utils/numa_utils.py), run as on NixOS:
    None before (the NUMA binding is dropped), the library in the given directory after."""
    if not HOST_LIBNUMA.is_file():
        pytest.skip(f"needs a real libnuma to load ({HOST_LIBNUMA}; Debian's libnuma1)")
    package = tmp_path / "sglang"
    shutil.copytree(tree.srt / "utils", package / "srt" / "utils")
    assert get_libnuma(package / "srt" / "utils") is None
    numactl_lib = tmp_path / "numactl" / "lib"  # nixpkgs' numactl has libnuma.so.1 in its lib/
    numactl_lib.mkdir(parents=True)
    (numactl_lib / "libnuma.so.1").symlink_to(HOST_LIBNUMA)
    done = subprocess.run([sys.executable, str(LIBNUMA_PATCH), str(package), str(numactl_lib)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    holder = "common.py" if tree.version == "0.5.9" else "numa_utils.py"
    assert done.stdout.strip() == f"libnuma-path: srt/utils/{holder} falls back to {numactl_lib}/libnuma.so.1"
    libnuma = get_libnuma(package / "srt" / "utils")
    assert libnuma is not None and libnuma._name == f"{numactl_lib}/libnuma.so.1"
    assert isinstance(libnuma.numa_available(), int)  # the real library answers


def test_libnuma_patch_refuses_a_tree_without_the_loop(tmp_path):
    utils = tmp_path / "sglang" / "srt" / "utils"
    utils.mkdir(parents=True)
    (utils / "numa_utils.py").write_text("def get_libnuma():\n    return None\n")
    run = subprocess.run([sys.executable, str(LIBNUMA_PATCH), str(tmp_path / "sglang"), "/nix/store/x-numactl/lib"],
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 1 and "expected one `for libnuma_so in" in run.stderr, run.stderr
    usage = subprocess.run([sys.executable, str(LIBNUMA_PATCH)], capture_output=True, text=True)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: libnuma-path.py")


# -- flashinfer-no-download.py -------------------------------------------------------------------------

FLASHINFER_WHEELS = {"0.6.3": ("flashinfer-python", None), "0.7.2": ("flashinfer-python-0.7.2", "flashinfer-python")}
# cubin_loader.py's two imports from the rest of FlashInfer, whose jit/core.py needs torch and tvm-ffi at import:
# its logger, and the cubin directory env.py resolves (FLASHINFER_CUBIN_DIR first where flashinfer-cubin is
# absent, as here). The loader itself is the wheel's file.
CORE_STAND_IN = "import logging\nlogger = logging.getLogger('flashinfer')\n"
ENV_STAND_IN = "import os, pathlib\nFLASHINFER_CUBIN_DIR = pathlib.Path(os.environ['FLASHINFER_CUBIN_DIR'])\n"


def cubin_loader_site(version: str, root: Path) -> Path:
    """The wheel's jit/cubin_loader.py, patched as the Nix build patches it, in an importable flashinfer.jit."""
    pin, package = FLASHINFER_WHEELS[version]
    jit = root / "site" / "flashinfer" / "jit"
    jit.mkdir(parents=True)
    with zipfile.ZipFile(fetch_wheel(pin, CACHE, package)) as wheel:
        (jit / "cubin_loader.py").write_bytes(wheel.read("flashinfer/jit/cubin_loader.py"))
    (jit.parent / "__init__.py").write_text("")
    (jit / "__init__.py").write_text("")
    (jit / "core.py").write_text(CORE_STAND_IN)
    (jit / "env.py").write_text(ENV_STAND_IN)
    done = subprocess.run([sys.executable, str(NO_DOWNLOAD_PATCH), str(jit / "cubin_loader.py")],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    upstream = "already refuses" if version == "0.7.2" else "backported from FlashInfer 0.7.2"
    assert upstream in done.stdout, done.stdout
    return jit.parents[1]


@pytest.mark.parametrize("version", sorted(FLASHINFER_WHEELS))
def test_a_missing_cubin_with_the_network_off_is_an_error_naming_it(version, tmp_path):
    """Each stack's FlashInfer, asked for a cubin its cubin directory lacks, with nothing at the repository's
    address and FLASHINFER_NO_DOWNLOAD=1 (the stacks' environment): a RuntimeError naming the file and where it
    looked, before any download is tried."""
    site = cubin_loader_site(version, tmp_path)
    cubins = tmp_path / "cubins"
    cubins.mkdir()
    name = "trtllm-gen/fmha/missing_kernel.cubin"
    code = f"from flashinfer.jit.cubin_loader import get_cubin; get_cubin({name!r}, '0' * 64)"
    env = {**os.environ, "PYTHONPATH": str(site), "FLASHINFER_CUBIN_DIR": str(cubins),
           "FLASHINFER_CUBINS_REPOSITORY": "http://127.0.0.1:9/", "FLASHINFER_NO_DOWNLOAD": "1"}  # fmt: skip
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode != 0
    assert f"RuntimeError: Artifact not found locally: {name} (looked at {cubins / name})" in run.stderr, run.stderr
    assert "FLASHINFER_NO_DOWNLOAD is set" in run.stderr and "Fetching" not in run.stderr
    assert not (cubins / name).exists() and not list(cubins.rglob("*.lock")), "nothing was downloaded or locked"


def test_the_no_download_patch_refuses_a_loader_it_does_not_know(tmp_path):
    loader = tmp_path / "cubin_loader.py"
    loader.write_text("import os\n\ndef get_cubin(file_name, sha256):\n    return b''\n")
    run = subprocess.run([sys.executable, str(NO_DOWNLOAD_PATCH), str(loader)], capture_output=True, text=True)
    assert run.returncode == 1 and "expected one download step" in run.stderr, run.stderr


@pytest.mark.parametrize("version", sorted(STACKS))
def test_flashinfer_is_patched_in_the_build_and_the_stack_turns_downloads_off(ws, version):
    post = ws.eval(f"packages.{SYSTEM}.{STACKS[version]}.passthru.pythonSet.flashinfer-python.postInstall")
    assert re.search(
        r"/nix/store/\w{32}-flashinfer-no-download\.py "
        r"\$out/lib/python3\.12/site-packages/flashinfer/jit/cubin_loader\.py",
        post,
    ), post
    _, defaults, _ = wrapper_args(ws, STACKS[version])
    assert defaults["FLASHINFER_NO_DOWNLOAD"] == "1"


# -- every entry of the definition reaches every consumer (the evaluated flake) ---------------------

reason = unavailable()


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    if reason:
        pytest.skip(reason)
    return Workspace(tmp_path_factory.mktemp("flake"))


def wrapper_args(ws: Workspace, package: str = "default") -> tuple[list[str], dict[str, str], str]:
    """(PATH entries, --set-default values, --run command) of the sglang-eagle3 wrapper."""
    command = ws.eval(f"packages.{SYSTEM}.{package}.buildCommand")
    (line,) = [line for line in command.splitlines() if line.startswith("wrapProgram $out/bin/sglang-eagle3")]
    prefix = re.search(r"--prefix PATH : (\S+)", line)[1].split(":")
    defaults = {k: v.strip("'") for k, v in re.findall(r"--set-default (\S+) ('[^']*'|\S+)", line)}
    run = re.search(r"--run '([^']+)'", line)[1]
    return prefix, defaults, run


def built(ws: Workspace, paths: list[str]) -> None:
    """Build the store paths' derivations here (stand-in packages wrap this host's programs)."""
    drvs = [ws.nix("path-info", "--derivation", p, check=False).stdout.strip() for p in paths]
    ws.nix("build", "--no-link", "--option", "sandbox", "false", *[f"{d}^*" for d in drvs if d])


@pytest.mark.parametrize("version", sorted(STACKS))
def test_wrapper_puts_every_program_on_path_and_sets_every_variable(ws, version):
    spec = audit.stack_env(SPEC, version)
    path, defaults, run = wrapper_args(ws, STACKS[version])
    built(ws, [p.removesuffix("/bin") for p in path])
    for program, entry in spec["programs"].items():
        found = [d for d in path if (Path(d) / program).exists()]
        if entry["from"] == "driver":
            assert not found, f"{program} comes from the host's driver, not the store"
        else:
            assert found, f"{program} ({entry['from']}) is on no PATH entry of the wrapper: {path}"
    chosen = {k for k, e in spec["environment"].items() if not e["value"].startswith("capabilities:")}
    assert chosen <= set(defaults), f"missing from the wrapper: {chosen - set(defaults)}"
    toolkit = ws.eval(f"packages.{SYSTEM}.cuda-toolkit.outPath")
    assert defaults["CUDA_HOME"] == toolkit
    # The toolkit's stub directory: -lcuda links against the stub, libcuda.so.1 there is the driver's.
    assert defaults["TRITON_LIBCUDA_PATH"] == f"{toolkit}/lib/stubs"
    # FlashInfer's JIT links each module with an rpath to the driver's directory first.
    assert defaults["FLASHINFER_EXTRA_LDFLAGS"] == "-Xlinker -rpath=/run/opengl-driver/lib"
    assert defaults["CC"] in {f"{d}/cc" for d in path} and defaults["CXX"] in {f"{d}/c++" for d in path}
    assert re.fullmatch(r"\. /nix/store/\w{32}-host-driver\.sh", run), run
    assert Path(run[2:]).read_text() == HOST_DRIVER.read_text(), "the wrapper sources the tested script"


def runtime_env_nix(ws: Workspace, tmp_path: Path, spec: dict, version: str, attribute: str):
    """nix/runtime-env.nix evaluated over a given definition (a copy beside it), for one stack."""
    shutil.copy(REPO / "nix" / "runtime-env.nix", tmp_path / "runtime-env.nix")
    (tmp_path / "runtime-env.json").write_text(json.dumps(spec))
    expr = (
        f'let flake = builtins.getFlake "{ws.ref}"; in (import {tmp_path}/runtime-env.nix {{ '
        "pkgs = { }; cuda = { }; inherit (flake.inputs.nixpkgs) lib; cudaCapabilities = [ ]; "
        f'version = "{version}"; }}).{attribute}'
    )
    return ws.nix("eval", "--json", "--impure", "--expr", expr, check=False)


def test_each_stack_renders_its_own_view_of_the_definition(ws, tmp_path):
    """Nix merges a stack's additions as the audit does; another stack's stay out of its view."""
    for version, package in STACKS.items():
        rendered = ws.eval(f"packages.{SYSTEM}.{package}.passthru.runtime.spec")
        assert rendered == audit.stack_env(SPEC, version), version
    spec = json.loads(json.dumps(SPEC))
    spec["stacks"]["0.5.23"] = {
        "programs": {"frobnicate": {"from": "nixpkgs:hello", "why": "an addition of one stack"}}
    }
    for version in STACKS:
        evaluated = runtime_env_nix(ws, tmp_path, spec, version, "spec.programs")
        assert evaluated.returncode == 0, evaluated.stderr
        assert set(json.loads(evaluated.stdout)) == set(audit.stack_env(spec, version)["programs"]), version
        assert ("frobnicate" in json.loads(evaluated.stdout)) == (version == "0.5.23")


def test_a_second_definition_fails_the_evaluation(ws, tmp_path):
    """runtime-env.nix refuses a stack addition that redefines a shared entry (one definition)."""
    spec = json.loads(json.dumps(SPEC))
    spec["stacks"]["0.5.23"] = {"programs": {"ninja": {"from": "nixpkgs:ninja", "why": "a second definition"}}}
    failed = runtime_env_nix(ws, tmp_path, spec, "0.5.23", "spec.programs")
    assert failed.returncode != 0
    assert "nix/runtime-env.json stacks.0.5.23.programs: ninja already defined for every stack" in failed.stderr
    ok = runtime_env_nix(ws, tmp_path, SPEC, "0.5.23", "spec.programs")
    assert set(json.loads(ok.stdout)) == set(audit.stack_env(SPEC, "0.5.23")["programs"])


def test_dev_shell_has_the_same_programs_and_variables(ws):
    shell = f"devShells.{SYSTEM}.default"
    # mkDerivation takes a package's `dev` output for nativeBuildInputs (lib.chooseDevOutputs), which propagates
    # the output holding its programs: compare the packages by their `out`.
    inputs = set(ws.eval(f"{shell}.nativeBuildInputs", apply="map (d: (d.out or d).outPath)"))
    path, defaults, run = wrapper_args(ws)
    assert {p.removesuffix("/bin") for p in path} <= inputs
    for name, value in defaults.items():
        if name != "SGLANG_EAGLE3_PATCHES":  # the shell uses the working tree's patches
            assert ws.eval(f"{shell}.{name}") == value, name
    assert run in ws.eval(f"{shell}.shellHook")


HOST = """
  inputs.nixpkgs.lib.nixosSystem { modules = [ flake.nixosModules.default "${flake}/modules/examples/8-gpu-host.nix" {
    nixpkgs.hostPlatform = "x86_64-linux"; fileSystems."/" = { device = "/dev/sda1"; fsType = "ext4"; };
    boot.loader.grub.device = "nodev"; system.stateVersion = "25.11"; } ]; }
"""


def test_server_unit_and_gpu_check_get_the_hosts_nvidia_smi(ws):
    """A NixOS unit's PATH is coreutils, findutils, grep, sed and systemd; SGLang runs nvidia-smi.
    The unit finds it in the system profile, where NixOS's nvidia module puts the driver's bin
    output; the GPU check takes the driver package itself as a build input."""
    driver_bin = ws.eval_expr(f"({HOST}).config.hardware.nvidia.package.bin.outPath")
    version = ws.eval_expr(f"({HOST}).config.hardware.nvidia.package.version")
    assert driver_bin.endswith(f"-nvidia-x11-bin-{version}")
    system_packages = ws.eval_expr(f"map (p: p.outPath) ({HOST}).config.environment.systemPackages")
    assert driver_bin in system_packages
    unit_path = ws.eval_expr(f"({HOST}).config.systemd.services.sglang-eagle3.environment.PATH")
    assert "/run/current-system/sw/bin" in unit_path.split(":")
    built(ws, [driver_bin])
    driver_programs = [p for p, e in SPEC["programs"].items() if e["from"] == "driver"]
    assert driver_programs and all((Path(driver_bin) / "bin" / p).exists() for p in driver_programs)
    gpu_check = f"({HOST}).config.services.sglang-eagle3.gpuChecks.package"
    assert driver_bin in ws.eval_expr(f"map (d: d.outPath) {gpu_check}.nativeBuildInputs")
    assert "command -v nvidia-smi" in ws.eval_expr(f"{gpu_check}.buildCommand")


def test_the_package_options_description_picks_the_0_5_23_stack_and_its_environment(ws):
    """The assignment the `package` option's description gives, evaluated as written: the unit
    runs the 0.5.23 wrapper, whose PATH has the programs of the definition (numactl among them)."""
    description = ws.eval_expr(f"({HOST}).options.services.sglang-eagle3.package.description")
    (assignment,) = re.findall(r"`(services\.sglang-eagle3\.package = [^`]+;)`", description)
    host = HOST.replace(
        "nixpkgs.hostPlatform", assignment.replace("inputs.sglang-eagle3", "flake") + " nixpkgs.hostPlatform"
    )
    exec_start = ws.eval_expr(f"({host}).config.systemd.services.sglang-eagle3.serviceConfig.ExecStart")
    package = ws.eval(f"packages.{SYSTEM}.sglang-eagle3-0_5_23.outPath")
    assert exec_start.startswith(f"{package}/bin/sglang-eagle3 serve ")
    path, _, _ = wrapper_args(ws, STACKS["0.5.23"])
    built(ws, [p.removesuffix("/bin") for p in path])
    assert any((Path(d) / "numactl").exists() for d in path)


def test_the_units_caches_are_its_writable_state_and_cache_directories(ws):
    """Under ProtectHome and ProtectSystem=strict (modules/hardening.nix) only the unit's
    StateDirectory and CacheDirectory are writable: every cache location of the definition
    ("caches") is set in the server unit's environment, beneath one of the two."""
    unit = f"({HOST}).config.systemd.services.sglang-eagle3"
    environment = ws.eval_expr(f"{unit}.environment")
    service = ws.eval_expr(f"{unit}.serviceConfig")
    assert service["ProtectHome"] is True and service["ProtectSystem"] == "strict"
    writable = {"state": f"/var/lib/{service['StateDirectory']}", "cache": f"/var/cache/{service['CacheDirectory']}"}
    assert SPEC["caches"], "the definition names the cache locations"
    for name, entry in SPEC["caches"].items():
        base, _, below = entry["unit"].partition("/")
        assert environment[name] == writable[base] + (f"/{below}" if below else ""), name
    assert environment["HOME"] == service["WorkingDirectory"] == writable["state"]


def test_a_cache_location_the_module_does_not_know_fails_the_evaluation(ws, tmp_path):
    spec = json.loads(json.dumps(SPEC))
    spec["caches"]["TRITON_CACHE_DIR"]["unit"] = "/home/triton"
    module = tmp_path / "modules"
    shutil.copytree(REPO / "modules", module)
    (tmp_path / "nix").mkdir()
    (tmp_path / "nix" / "runtime-env.json").write_text(json.dumps(spec))
    shutil.copy(REPO / "nix" / "cache-environment.nix", tmp_path / "nix")  # places the caches for the module
    text = (module / "sglang-eagle3.nix").read_text()
    assert "lib.importJSON ../nix/runtime-env.json" in text
    wrapper = (  # the flake's module, over the copy: its package defaults are all it adds
        f"{{ imports = [ {module}/sglang-eagle3.nix ];"
        f" services.sglang-eagle3.package = flake.packages.{SYSTEM}.default;"
        f" services.sglang-router.package = flake.packages.{SYSTEM}.sglang-router; }}"
    )
    host = HOST.replace("flake.nixosModules.default", wrapper)
    unit = f"({host}).config.systemd.services.sglang-eagle3"
    prelude = f'let flake = builtins.getFlake "{ws.ref}"; inputs = flake.inputs; in '
    failed = ws.nix(
        "eval", "--json", "--impure", "--expr", f"{prelude}{unit}.environment.TRITON_CACHE_DIR", check=False
    )
    assert failed.returncode != 0
    assert "nix/runtime-env.json caches.TRITON_CACHE_DIR.unit: '/home/triton' is not state, cache or cache/<dir>" in (
        failed.stderr
    )


def test_the_module_refuses_a_host_without_the_nvidia_driver(ws):
    host = HOST.replace('"${flake}/modules/examples/8-gpu-host.nix"', "{ services.sglang-eagle3.enable = true; }")
    failed = ws.eval_expr(f"map (a: a.message) (builtins.filter (a: !a.assertion) ({host}).config.assertions)")
    assert any("needs NixOS's NVIDIA driver" in m and "services.xserver.videoDrivers" in m for m in failed), failed


def test_the_flakes_gpu_check_without_a_driver_says_how_to_get_one(ws):
    script = ws.eval(f"packages.{SYSTEM}.gpu-throughput-check.buildCommand")
    assert "services.sglang-eagle3.gpuChecks.package" in script and "nvidiaDriver" in script
    # its JIT builds link without -z now (FlashInfer's modules bind lazily)
    assert ws.eval(f"packages.{SYSTEM}.gpu-throughput-check.hardeningDisable") == ["bindnow"]


def test_cuda_tree_has_lib64_and_crt_and_no_static_outputs(ws):
    toolkit = f"packages.{SYSTEM}.cuda-toolkit"
    names = [p.split("-", 1)[1] for p in ws.eval(f"{toolkit}.paths")]
    assert any(n.startswith("cuda13.0-cuda_crt-") for n in names), names
    assert not [n for n in names if n.endswith("-static")], names
    out = Path(
        ws.nix(
            "build", "--no-link", "--print-out-paths", "--option", "sandbox", "false", f"{ws.ref}#{toolkit}"
        ).stdout.strip()
    )
    assert os.readlink(out / "lib64") == "lib"
    assert (out / "bin" / "nvcc").exists()
    # cuda_cudart's stubs output names its stub libcuda.so.1 too (lib/ and lib/stubs/); in the toolkit
    # that name is the driver's, so a module linked against the stub with an rpath here never loads it.
    for stubs in (out / "lib", out / "lib" / "stubs"):
        assert os.readlink(stubs / "libcuda.so.1") == "/run/opengl-driver/lib/libcuda.so.1"
        assert (stubs / "libcuda.so").resolve().name == "libcuda.so", "-lcuda still links the stub"


@pytest.mark.parametrize("version", sorted(STACKS))
def test_sglangs_libnuma_lookup_is_patched_in_the_build(ws, version):
    set_ = f"packages.{SYSTEM}.{STACKS[version]}.passthru.pythonSet"
    post = ws.eval(f"{set_}.sglang.postInstall")
    numactl = ws.eval_expr('"${flake.inputs.nixpkgs.legacyPackages.x86_64-linux.numactl}"')
    assert re.search(
        rf"/nix/store/\w{{32}}-libnuma-path\.py \$out/lib/python3\.12/site-packages/sglang {re.escape(numactl)}/lib",
        post,
    ), post


def test_nvml_is_patched_in_the_build(ws):
    post = ws.eval(f"packages.{SYSTEM}.default.passthru.pythonSet.nvidia-ml-py.postInstall")
    assert re.search(
        r"/nix/store/\w{32}-driver-dir-patch\.py nvml "
        r"\$out/lib/python3\.12/site-packages/pynvml\.py /run/opengl-driver/lib",
        post,
    ), post


# -- the closure by component -------------------------------------------------------------------------


def test_closure_report_is_built_here_and_adds_up(ws):
    """lib.closureSize built for real on a closure this machine can build (the CUDA tree of the
    stand-in); the server package's report is the same derivation over stack.package."""
    expr = f'let flake = builtins.getFlake "{ws.ref}"; in flake.lib.closureSize flake.packages.{SYSTEM}.cuda-toolkit'
    out = Path(ws.nix("build", "--impure", "--no-link", "--print-out-paths", "--option", "sandbox", "false",
                      "--expr", expr).stdout.strip())  # fmt: skip
    data = json.loads((out / "closure-size.json").read_text())
    toolkit = ws.eval(f"packages.{SYSTEM}.cuda-toolkit.outPath")
    closure = ws.nix("path-info", "--recursive", "--json", toolkit).stdout
    info = json.loads(closure)
    sizes = {p["path"] if isinstance(info, list) else p: (p if isinstance(info, list) else info[p])["narSize"]
             for p in info}  # fmt: skip
    assert data["total_bytes"] == sum(sizes.values()) and data["paths"] == len(sizes)
    assert sum(c["bytes"] for c in data["components"].values()) == data["total_bytes"]
    assert {"cuda: cuda_nvcc", "cuda-toolkit"} <= set(data["components"]), data["components"]
    text = (out / "closure-size.txt").read_text()
    assert text.startswith("closure: ") and "cuda: cuda_nvcc" in text
    assert (
        ws.eval(f"packages.{SYSTEM}.closure-size.name") == f"{ws.eval(f'packages.{SYSTEM}.default.name')}-closure-size"
    )


def test_closure_components_group_outputs_and_versions():
    report = load_script("nix/scripts/closure-report.py")
    h = "/nix/store/" + "a" * 32 + "-"
    names = {
        "cuda13.0-libcublas-13.1.0.3-lib": "cuda: libcublas",
        "cuda13.0-libcublas-13.1.0.3": "cuda: libcublas",
        "cuda13.0-cuda_cudart-13.0.96-stubs": "cuda: cuda_cudart",
        "python3.12-torch-2.9.1+cu130": "python: torch",
        "python3.12-nvidia-ml-py-13.615.71": "python: nvidia-ml-py",
        "glibc-2.40-66-bin": "glibc",
        "sglang-eagle3-env": "sglang-eagle3-env",
    }
    assert {n: report.component(h + n) for n in names} == names
    registration = f"{h}x-1\nsha256:0\n100\n\n1\n{h}y-2\n{h}y-2\nsha256:0\n20\n\n0"
    data = report.report(report.read_registration(registration))
    assert data == {
        "total_bytes": 120,
        "paths": 2,
        "components": {"x": {"bytes": 100, "paths": 1}, "y": {"bytes": 20, "paths": 1}},
    }


def test_gpu_host_doc_shows_the_definition():
    """docs/gpu-host.md's table is generated from nix/runtime-env.json."""
    doc = (REPO / "docs" / "gpu-host.md").read_text()
    script = REPO / "nix" / "scripts" / "runtime-env-doc.py"
    table = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True).stdout.strip()
    assert f"<!-- runtime-env:start -->\n{table}\n<!-- runtime-env:end -->" in doc, (
        f"regenerate: {script} --write docs/gpu-host.md"
    )
    sections = ("programs", "environment", "libraries", "paths", "caches")
    assert all(f"`{name}`" in table for section in sections for name in SPEC[section])
    for version, own in SPEC["stacks"].items():  # each stack's own entries, marked as its own
        assert all(f"| {version} only | " in table and f"`{name}`" in table for s in own for name in own[s])
