#!/usr/bin/env python3
"""Run-time lookups of the stack, checked on a real GPU host, with the variables the Nix wrapper sets.

Each check runs in a child process whose environment is built from scratch (as `env -i` would):
only PATH, CC, CUDA_HOME, TRITON_LIBCUDA_PATH, FLASHINFER_CUDA_ARCH_LIST, a fresh cache
directory, HOME, PYTHONPATH (the packages under test) and LD_LIBRARY_PATH if the caller has one.

Sections (--sections, comma-separated):
  triton     a @triton.jit kernel compiled and launched with /sbin/ldconfig hidden
             (with TRITON_LIBCUDA_PATH, without it, and without a C compiler), cold and warm
  flashinfer FlashInfer's JIT builds the modules SGLang 0.5.9's FlashInfer backends use; one call each;
             cold then warm timings; what FLASHINFER_CUDA_ARCH_LIST unset resolves to
  layout     CUDA_HOME laid out like nixpkgs (lib/ only) with and without a `lib64 -> lib` symlink
  comm       TRT-LLM allreduce-fusion module: stock path for the GPU, stock path for 12.0a (built or
             refused as the installed FlashInfer's generator says: 0.6.3 takes SM 9/10, 0.7.2 also 12),
             the same sources forced to sm_120a (does nvcc compile them?), and, where the installed
             FlashInfer has it (0.7.x, SGLang 0.5.23's PCIe-IPC all-reduce), the PCIe-IPC module for
             the GPU and for 12.0a (--comm-steps picks among them)
  preflight  the project's GPU detection against the real nvidia-smi
  aot        FlashInfer's modules for SGLang's attention built ahead of time by
             nix/scripts/flashinfer-aot.py with no GPU visible, then the same kernels in fresh
             processes: first with JIT (a fresh cache: the first start today), then from the
             prebuilt modules with FLASHINFER_DISABLE_JIT=1 and no compiler, ninja or CUDA_HOME
             (a compile would fail); --aot-stack, --aot-kernels, --site-flashinfer pick them

--dry-run prints the plan (environments, children) and runs nothing; it needs no GPU.
Prints one `== section/name: ok|FAIL (seconds)` line per step and writes all of it as JSON (--json).
Exit status: 0 when every step gave the expected result (expected failures included), else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SECTIONS = ("triton", "flashinfer", "layout", "comm", "preflight", "aot")
LIBCUDA_DIRS = (
    "/run/opengl-driver/lib",
    "/usr/local/nvidia/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
)

TRITON_KERNEL = r"""
import time, torch, triton, triton.language as tl
t0 = time.perf_counter()
@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)
x = torch.arange(4096, device="cuda", dtype=torch.float32); y = 2 * x; out = torch.empty_like(x)
add[(4,)](x, y, out, 4096, BLOCK=1024)
torch.cuda.synchronize()
assert torch.equal(out, 3 * x), "wrong result"
took = time.perf_counter() - t0
print(f"triton {triton.__version__} torch {torch.__version__}: kernel launched, result right, {took:.1f} s")
"""

# One call of each FlashInfer kernel SGLang 0.5.9 reaches with --attention-backend flashinfer:
# the Llama-architecture EAGLE-3 draft goes through FlashInferAttnBackend (ragged + paged prefill,
# decode; fa2 on SM120, `auto` for ragged), the MLA target (Kimi-K2.5) through FlashInferMLAAttnBackend
# (ragged prefill qk 192 / vo 128, BatchMLAPagedAttention). Shapes: TP8 slices of Kimi-K2.5.
FLASHINFER_KERNELS = r"""
import json, sys, time, torch
t = time.perf_counter()
import flashinfer
print(json.dumps({"step": "import", "ok": True, "s": round(time.perf_counter() - t, 1),
                  "detail": f"flashinfer {flashinfer.__version__} torch {torch.__version__}"}), flush=True)
from flashinfer.jit import env as jit_env
print(json.dumps({"step": "cache_dir", "ok": True, "s": 0, "detail": str(jit_env.FLASHINFER_JIT_DIR)}), flush=True)
dev, bf16 = "cuda", torch.bfloat16
ws = torch.zeros(128 << 20, dtype=torch.uint8, device=dev)
n = 16
qo = torch.tensor([0, n], dtype=torch.int32, device=dev)
idx = torch.arange(n, dtype=torch.int32, device=dev)
one = torch.tensor([1], dtype=torch.int32, device=dev)
r = lambda *s: torch.randn(*s, dtype=bf16, device=dev)

def ragged(backend, hqk, hvo, hq, hkv):
    w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend=backend)
    w.plan(qo, qo, hq, hkv, hqk, head_dim_vo=hvo, causal=True, q_data_type=bf16, kv_data_type=bf16)
    return w.run(r(n, hq, hqk), r(n, hkv, hqk), r(n, hkv, hvo))

def paged(backend):
    w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=backend)
    w.plan(qo, qo, idx, one, 8, 1, 128, 1, causal=True, q_data_type=bf16, kv_data_type=bf16)
    return w.run(r(n, 8, 128), (r(n, 1, 1, 128), r(n, 1, 1, 128)))

def decode(tensor_cores):
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tensor_cores, backend="fa2")
    indptr = torch.tensor([0, n], dtype=torch.int32, device=dev)
    w.plan(indptr, idx, one, 8, 1, 128, 1, q_data_type=bf16, kv_data_type=bf16)
    return w.run(r(1, 8, 128), (r(n, 1, 1, 128), r(n, 1, 1, 128)))

def mla(backend):
    w = flashinfer.mla.BatchMLAPagedAttentionWrapper(ws, backend=backend)
    w.plan(qo, qo, idx, torch.tensor([n], dtype=torch.int32, device=dev), 8, 512, 64, 1, True, 0.1, bf16, bf16)
    return w.run(r(n, 8, 512), r(n, 8, 64), r(n, 1, 512), r(n, 1, 64))

def sampling():
    probs = torch.softmax(torch.randn(4, 32000, device=dev), -1)
    return flashinfer.sampling.top_k_top_p_sampling_from_probs(probs, 50, 0.9)

def rmsnorm():
    return flashinfer.norm.rmsnorm(r(n, 7168), r(7168))

steps = {
    "draft_ragged_prefill_fa2": lambda: ragged("fa2", 128, 128, 8, 1),
    "draft_paged_prefill_fa2": lambda: paged("fa2"),
    "draft_decode_fa2": lambda: decode(False),
    "draft_decode_tensor_cores": lambda: decode(True),
    "mla_ragged_prefill_fa2": lambda: ragged("fa2", 192, 128, 8, 8),
    "mla_paged_fa2": lambda: mla("fa2"),
    "sampling_top_k_top_p": sampling,
    "rmsnorm": rmsnorm,
    "draft_ragged_prefill_auto": lambda: ragged("auto", 128, 128, 8, 1),
    "mla_paged_auto": lambda: mla("auto"),
    "mla_ragged_prefill_auto": lambda: ragged("auto", 192, 128, 8, 8),
}
for name in sys.argv[1].split(","):
    t = time.perf_counter()
    try:
        out = steps[name]()
        torch.cuda.synchronize()
        o = out[0] if isinstance(out, tuple) else out
        ok, detail = bool(torch.isfinite(o.float()).all()), f"out {tuple(o.shape)} {o.dtype}"
    except Exception as err:
        ok, detail = False, f"{type(err).__name__}: {str(err)[-1500:]}"
    print(json.dumps({"step": name, "ok": ok, "s": round(time.perf_counter() - t, 1), "detail": detail}), flush=True)
# Where each FlashInfer module came from: the prebuilt (data/aot) or the JIT cache (cached_ops).
maps = {line.split()[-1] for line in open("/proc/self/maps") if line.rstrip().endswith(".so")}
mods = sorted(m for m in maps if "/aot/" in m or "/cached_ops/" in m)
print(json.dumps({"step": "modules_loaded", "ok": bool(mods), "s": 0, "detail": mods}), flush=True)
"""

ARCH_PROBE = r"""
from flashinfer.compilation_context import CompilationContext
from flashinfer.jit import env as jit_env
c = CompilationContext()
flags = c.get_nvcc_flags_list()[0]
print("TARGET_CUDA_ARCHS", sorted(c.TARGET_CUDA_ARCHS), flags, "workspace", jit_env.FLASHINFER_WORKSPACE_DIR.name)
"""

COMM = r"""
import json, sys, time
from flashinfer.jit import env as jit_env
import flashinfer.jit.comm as comm
from flashinfer.jit.comm import gen_trtllm_comm_module
from flashinfer.jit.core import gen_jit_spec
mode = sys.argv[1]
t = time.perf_counter()
try:
    if mode == "majors":  # what the installed generators accept, read from their source
        import inspect, re
        src = inspect.getsource(gen_trtllm_comm_module)
        found = re.search(r"supported_major_versions=\[([0-9, ]+)\]", src)
        majors = [int(m) for m in found.group(1).split(",")] if found else None
        detail = {"trtllm": majors, "pcie_ipc": hasattr(comm, "gen_pcie_ipc_comm_module")}
        print(json.dumps({"step": mode, "ok": True, "s": 0.0, "detail": detail}), flush=True)
        sys.exit(0)
    if mode == "stock":
        spec = gen_trtllm_comm_module()
    elif mode == "pcie":
        spec = comm.gen_pcie_ipc_comm_module()
    else:  # the same sources and defines, with the arch the stock generator refuses
        names = ("trtllm_allreduce.cu", "trtllm_allreduce_fusion.cu", "trtllm_moe_allreduce_fusion.cu")
        src = [jit_env.FLASHINFER_CSRC_DIR / f for f in names]
        flags = [f"-gencode=arch=compute_{mode},code=sm_{mode}"]
        flags += ["-DFLASHINFER_ENABLE_FP8_E8M0", "-DFLASHINFER_ENABLE_FP4_E2M1"]
        spec = gen_jit_spec(f"trtllm_comm_sm{mode}", src, extra_cuda_cflags=flags)
    spec.build(verbose=False)
    ok, detail = True, f"built {spec.jit_library_path} ({spec.jit_library_path.stat().st_size} bytes)"
except Exception as err:
    ok, detail = False, f"{type(err).__name__}: {str(err)[-2500:]}"
print(json.dumps({"step": mode, "ok": ok, "s": round(time.perf_counter() - t, 1), "detail": detail}), flush=True)
"""

PREFLIGHT = r"""
from sglang_eagle3.host import gpus
from sglang_eagle3.judging import preflight
from sglang_eagle3.serving import settings
for g in gpus.query_gpus():
    print(f"gpu {g.index}: {g.name}, compute capability {g.compute_capability}, {g.memory}")
verdict = preflight.preflight(settings.load(None, ["tp_size=1"], profile="eagle3"))
print("\n".join(f"preflight [{f.status}] {f.name}: {f.message}" for f in verdict.findings if f.name == "gpus"))
"""


def parse_args(argv=None) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, from {', '.join(SECTIONS)}")
    p.add_argument(
        "--cuda-home", default=env.get("CUDA_HOME") or "/usr/local/cuda", help="CUDA toolkit (nvcc, include, lib64)"
    )
    p.add_argument(
        "--libcuda-dir", default=env.get("TRITON_LIBCUDA_PATH"), help="directory of libcuda.so.1 (default: searched)"
    )
    p.add_argument(
        "--cc", default=env.get("CC") or shutil.which("cc") or shutil.which("gcc"), help="C compiler for Triton"
    )
    p.add_argument(
        "--arch-list",
        default=env.get("FLASHINFER_CUDA_ARCH_LIST"),
        help="FLASHINFER_CUDA_ARCH_LIST (default: from nvidia-smi)",
    )
    p.add_argument("--path", default=None, help="PATH for the children (default: dirs of cc, c++, ninja)")
    p.add_argument(
        "--site", default=env.get("PYTHONPATH", ""), help="PYTHONPATH for the children (flashinfer, tvm_ffi, ...)"
    )
    p.add_argument("--project-src", default=str(Path(__file__).resolve().parents[2] / "python" / "src"))
    p.add_argument(
        "--kernels",
        default="draft_ragged_prefill_fa2,draft_paged_prefill_fa2,draft_decode_fa2,"
        "draft_decode_tensor_cores,mla_ragged_prefill_fa2,mla_paged_fa2,sampling_top_k_top_p,rmsnorm",
    )
    p.add_argument("--comm-archs", default="120a", help="archs to force the TRT-LLM comm sources to, e.g. 120a")
    p.add_argument(
        "--comm-steps",
        default="stock_gpu,stock_12.0a,forced,pcie_gpu,pcie_12.0a",
        help="comm section steps, from stock_gpu, stock_12.0a, forced, pcie_gpu, pcie_12.0a",
    )
    p.add_argument("--aot-stack", default="0.5.9", help="aot section: the stack of nix/flashinfer-aot.json")
    p.add_argument(
        "--aot-kernels",
        default="mla_ragged_prefill_auto,mla_paged_auto,draft_ragged_prefill_auto,draft_paged_prefill_fa2,"
        "draft_decode_tensor_cores,draft_decode_fa2",
        help="aot section: the kernel calls timed (those SGLang's backends make)",
    )
    p.add_argument("--workdir", default=None, help="caches and CUDA_HOME copies (default: a new temp dir)")
    p.add_argument("--timeout", type=int, default=900, help="seconds per child")
    p.add_argument("--json", dest="json_out", default=None, help="write the results here")
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    args = p.parse_args(argv)
    args.sections = [s for s in args.sections.split(",") if s]
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        p.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    if args.path is None:
        tools = [
            args.cc,
            shutil.which("c++"),
            shutil.which("ninja"),
            shutil.which("ninja", path=str(Path(sys.executable).parent)),
        ]
        args.path = ":".join(dict.fromkeys(str(Path(t).parent) for t in tools if t))
    return args


def find_libcuda(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    for d in LIBCUDA_DIRS:
        if Path(d, "libcuda.so.1").exists():
            return d
    return None


def gpu_arch_list() -> str | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True, text=True)
    caps = sorted({line.strip() for line in out.stdout.splitlines() if line.strip()})
    return " ".join(caps) or None


class Runner:
    def __init__(self, args: argparse.Namespace, work: Path):
        self.args, self.work, self.results = args, work, []

    def env(self, **extra) -> dict[str, str]:
        e = {"PATH": self.args.path, "HOME": str(self.work / "home"), "PYTHONUNBUFFERED": "1"}
        if self.args.site:
            e["PYTHONPATH"] = self.args.site
        if os.environ.get("LD_LIBRARY_PATH"):
            e["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
        for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
            if k in os.environ:  # the lent machines' multicast guards travel with every child
                e[k] = os.environ[k]
        e.update({k: v for k, v in extra.items() if v is not None})
        return e

    def child(self, section, name, code, env, argv=(), expect_ok=True, expect_text=None, hide_ldconfig=False):
        script = self.work / f"{section}-{name}.py"  # a file: @triton.jit reads its source
        script.write_text(code)
        cmd = [sys.executable, str(script), *argv]
        if hide_ldconfig:  # a private mount namespace where the directory of ldconfig is an empty tmpfs
            ldir = str(Path("/sbin/ldconfig").resolve().parent)
            tools = [shutil.which(t) or t for t in ("unshare", "sh", "mount")]
            cmd = [tools[0], "-m", tools[1], "-c", f'{tools[2]} -t tmpfs none "$0" && exec "$@"', ldir, *cmd]
        shown = " ".join(f"{k}={v}" for k, v in sorted(env.items()))
        print(f"\n$ env -i {shown} {' '.join(cmd)}", flush=True)
        if self.args.dry_run:
            self.results.append({"section": section, "name": name, "env": env, "dry_run": True})
            return None
        t = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=self.args.timeout)
            rc, out = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as err:
            rc, out = 124, f"timed out after {self.args.timeout} s\n{err.stdout or ''}{err.stderr or ''}"
        seconds = round(time.perf_counter() - t, 1)
        passed = (rc == 0) == expect_ok and (expect_text is None or expect_text in out)
        tail = out.strip()[-3000:]
        print(
            f"== {section}/{name}: {'ok' if passed else 'FAIL'} (rc {rc}, {seconds} s, "
            f"expected {'success' if expect_ok else 'failure'})"
        )
        print("\n".join("   " + line for line in tail.splitlines()[-25:]), flush=True)
        self.results.append(
            {
                "section": section,
                "name": name,
                "passed": passed,
                "rc": rc,
                "seconds": seconds,
                "env": env,
                "output_tail": tail,
            }
        )
        return out

    def steps_from(self, section, out):
        """The JSON step lines a child printed, recorded as results of their own."""
        for line in (out or "").splitlines():
            if line.startswith("{"):
                step = json.loads(line)
                self.results.append(
                    {
                        "section": section,
                        "name": step["step"],
                        "passed": step["ok"],
                        "seconds": step["s"],
                        "detail": step["detail"],
                    }
                )


def run_triton(r: Runner, libcuda: str | None, cc: str | None):
    def fresh(tag):
        return str(r.work / f"triton-cache-{tag}")

    r.child(
        "triton",
        "no_TRITON_LIBCUDA_PATH_no_ldconfig",
        TRITON_KERNEL,
        r.env(CC=cc, TRITON_CACHE_DIR=fresh("a")),
        expect_ok=False,
        expect_text="ldconfig",
        hide_ldconfig=True,
    )
    r.child(
        "triton",
        "no_C_compiler",
        TRITON_KERNEL,
        r.env(PATH="/nonexistent", TRITON_LIBCUDA_PATH=libcuda, TRITON_CACHE_DIR=fresh("b")),
        expect_ok=False,
        expect_text="C compiler",
        hide_ldconfig=True,
    )
    env = r.env(CC=cc, TRITON_LIBCUDA_PATH=libcuda, TRITON_CACHE_DIR=fresh("c"))
    r.child("triton", "wrapper_env_cold", TRITON_KERNEL, env, hide_ldconfig=True)
    r.child("triton", "wrapper_env_warm", TRITON_KERNEL, env, hide_ldconfig=True)


def flashinfer_env(r: Runner, cuda_home: str, arch: str | None, cache: str, cc: str | None):
    return r.env(
        CUDA_HOME=cuda_home, FLASHINFER_CUDA_ARCH_LIST=arch, FLASHINFER_WORKSPACE_BASE=str(r.work / cache), CC=cc
    )


def run_flashinfer(r: Runner, arch: str | None, cc: str | None):
    r.child("flashinfer", "arch_list_unset", ARCH_PROBE, flashinfer_env(r, r.args.cuda_home, None, "fi-probe", cc))
    r.child("flashinfer", "arch_list_set", ARCH_PROBE, flashinfer_env(r, r.args.cuda_home, arch, "fi-probe", cc))
    env = flashinfer_env(r, r.args.cuda_home, arch, "fi-main", cc)
    for phase in ("cold", "warm"):
        out = r.child("flashinfer", f"kernels_{phase}", FLASHINFER_KERNELS, env, argv=(r.args.kernels,))
        r.steps_from(f"flashinfer_{phase}", out)


def nix_layout(real: Path, dest: Path, lib64_link: bool) -> Path:
    """A CUDA_HOME shaped like nixpkgs' joined toolkit: bin, include, nvvm; libraries under lib/ only."""
    if dest.exists():
        return dest
    dest.mkdir(parents=True)
    for d in ("bin", "include", "nvvm"):
        if (real / d).exists():
            (dest / d).symlink_to((real / d).resolve())
    (dest / "lib").mkdir()
    for f in (real / "lib64").resolve().iterdir():
        (dest / "lib" / f.name).symlink_to(f)
    if lib64_link:
        (dest / "lib64").symlink_to("lib")
    return dest


def judge(r: Runner, expected: bool | None, note: str) -> None:
    """Judge the last step a child reported: expected True (must work), False (must fail), None (recorded only)."""
    if r.args.dry_run or not r.results or "detail" not in r.results[-1]:
        return
    last = r.results[-1]
    last["worked"], last["expected"] = last["passed"], note
    last["passed"] = True if expected is None else last["passed"] is expected


def run_layout(r: Runner, arch: str | None, cc: str | None):
    real = Path(r.args.cuda_home)
    for link in (True, False):
        name = "nix_lib_plus_lib64_symlink" if link else "nix_lib_only"
        home = str(r.work / name) if r.args.dry_run else str(nix_layout(real, r.work / name, link))
        out = r.child(
            "layout", name, FLASHINFER_KERNELS, flashinfer_env(r, home, arch, f"fi-{name}", cc), argv=("rmsnorm",)
        )
        r.steps_from(f"layout_{name}", out)
        judge(r, link, "builds and runs" if link else "link fails: no $CUDA_HOME/lib64")


COMM_STEPS = ("stock_gpu", "stock_12.0a", "forced", "pcie_gpu", "pcie_12.0a")


def run_comm(r: Runner, arch: str | None, cc: str | None):
    gpu_arch = (arch or "9.0").split()[0].rstrip("a") + "a"
    env = flashinfer_env(r, r.args.cuda_home, gpu_arch, "fi-comm-majors", cc)
    majors, pcie = None, None
    for line in (r.child("comm", "majors", COMM, env, argv=("majors",)) or "").splitlines():
        if line.startswith("{"):
            detail = json.loads(line)["detail"]
            majors, pcie = detail["trtllm"], detail["pcie_ipc"]
    sm120 = None if majors is None else 12 in majors
    runs = {
        "stock_gpu": ("stock_" + gpu_arch, gpu_arch, "stock", True, "the stock generator builds for the GPU here"),
        "stock_12.0a": ("stock_12.0a", "12.0a", "stock", sm120, f"the installed generator takes SM {majors}"),
        "pcie_gpu": ("pcie_" + gpu_arch, gpu_arch, "pcie", True, "the PCIe-IPC module builds for the GPU here"),
        "pcie_12.0a": ("pcie_12.0a", "12.0a", "pcie", True, "the PCIe-IPC module builds for SM120"),
    }
    steps = [s for s in r.args.comm_steps.split(",") if s]
    plan = [runs[s] for s in steps if s in runs and (pcie is not False or not s.startswith("pcie"))]
    if "forced" in steps:
        plan += [
            (f"forced_sm{a}", "12.0a", a, None, "recorded: does nvcc compile the sources?")
            for a in r.args.comm_archs.split(",")
            if a
        ]
    for name, arch_list, mode, expected, note in plan:
        out = r.child(
            "comm", name, COMM, flashinfer_env(r, r.args.cuda_home, arch_list, f"fi-comm-{name}", cc), argv=(mode,)
        )
        r.steps_from("comm_" + name, out)
        judge(r, expected, note)


def flashinfer_package(site: str) -> Path | None:
    """The flashinfer package directory on the children's PYTHONPATH."""
    for entry in site.split(":"):
        if entry and Path(entry, "flashinfer", "__init__.py").is_file():
            return Path(entry, "flashinfer")
    return None


def run_aot(r: Runner, arch: str | None, cc: str | None):
    caps = " ".join(
        sorted({a.rstrip("a") for a in (arch or "9.0").split()}, key=lambda c: [int(x) for x in c.split(".")])
    )
    kernels = (r.args.aot_kernels,)
    # The build: the derivation's script, nothing asking a GPU (CUDA_VISIBLE_DEVICES empty).
    aot = r.work / "aot"
    script = Path(__file__).resolve().parent / "flashinfer-aot.py"
    build = "import runpy, sys\nsys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"
    argv = (str(script), "--stack", r.args.aot_stack, "--capabilities", caps, "--out", str(aot),
            "--build-dir", str(r.work / "aot-build"), "--jobs", str(os.cpu_count()))  # fmt: skip
    env = flashinfer_env(r, r.args.cuda_home, None, "fi-aot-build", cc)
    env["CUDA_VISIBLE_DEVICES"] = ""
    r.child("aot", "build_no_gpu", build, env, argv=argv, expect_text="GPUs visible: 0")
    package = flashinfer_package(r.args.site)
    if not r.args.dry_run and (package is None or not (aot / "manifest.json").is_file()):
        print("== aot: no FlashInfer package on --site or no modules built; nothing to load")
    else:
        # Where FlashInfer looks first (flashinfer/data/aot), as the Nix build links it.
        link = None if r.args.dry_run else package / "data" / "aot"
        if link:
            link.symlink_to(aot)
        try:
            # After: the same calls from the prebuilt modules; a compile would fail (no JIT, nothing to compile with).
            env = r.env(FLASHINFER_CUDA_ARCH_LIST=arch, FLASHINFER_WORKSPACE_BASE=str(r.work / "fi-aot-run"),
                        FLASHINFER_DISABLE_JIT="1", CUDA_HOME="/nonexistent/cuda", PATH="/nonexistent")  # fmt: skip
            out = r.child("aot", "aot_first_start", FLASHINFER_KERNELS, env, argv=kernels)
            r.steps_from("aot_aot_first_start", out)
        finally:
            if link:
                link.unlink()
    # Before, run last (the prebuilt modules unlinked): the first start today, each module compiled by
    # FlashInfer's JIT into a fresh cache as SGLang asks for it.
    env = flashinfer_env(r, r.args.cuda_home, arch, "fi-jit", cc)
    out = r.child("aot", "jit_first_start", FLASHINFER_KERNELS, env, argv=kernels)
    r.steps_from("aot_jit_first_start", out)


def run_preflight(r: Runner):
    site = ":".join(p for p in (r.args.project_src, r.args.site) if p)
    smi = shutil.which("nvidia-smi")
    path = r.args.path + (f":{Path(smi).parent}" if smi else "")
    r.child("preflight", "query_gpus", PREFLIGHT, r.env(PYTHONPATH=site, PATH=path), expect_text="compute capability")
    r.child(
        "preflight",
        "no_nvidia_smi_on_PATH",
        PREFLIGHT,
        r.env(PYTHONPATH=site, PATH="/nonexistent"),
        expect_ok=False,
        expect_text="FileNotFoundError",
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gpu-runtime-check-"))
    (work / "home").mkdir(parents=True, exist_ok=True)
    libcuda, cc = find_libcuda(args.libcuda_dir), args.cc
    arch = args.arch_list or (None if args.dry_run else gpu_arch_list())
    print(
        f"python {sys.executable}\ncuda_home {args.cuda_home}\nlibcuda_dir {libcuda}\ncc {cc}\n"
        f"FLASHINFER_CUDA_ARCH_LIST {arch}\nPATH {args.path}\nsite {args.site}\nworkdir {work}\n"
        f"sections {','.join(args.sections)}"
    )
    r = Runner(args, work)
    for section in args.sections:
        print(f"\n######## {section}", flush=True)
        if section == "triton":
            run_triton(r, libcuda, cc)
        elif section == "flashinfer":
            run_flashinfer(r, arch, cc)
        elif section == "layout":
            run_layout(r, arch, cc)
        elif section == "comm":
            run_comm(r, arch, cc)
        elif section == "preflight":
            run_preflight(r)
        elif section == "aot":
            run_aot(r, arch, cc)
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(r.results, indent=1))
    failed = [f"{x['section']}/{x['name']}" for x in r.results if x.get("passed") is False]
    print("\n######## summary")
    for x in r.results:
        if "passed" in x:
            print(f"{'ok  ' if x['passed'] else 'FAIL'} {x['section']}/{x['name']} {x.get('seconds', '')} s")
    print("dry run: nothing was run" if args.dry_run else f"{len(failed)} failed: {', '.join(failed) or '-'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
