"""FlashInfer's modules built ahead of time (nix/scripts/flashinfer-aot.py, nix/flashinfer-aot.nix) from each stack's
trace (nix/stacks/sglang-<stack>/flashinfer-calls.json, tests/test_flashinfer_calls.py) and nix/flashinfer-aot.json.

- every traced module is what FlashInfer's own generator makes for the recorded arguments (the script, run against
  each stack's real FlashInfer, its generators on the CPU, names per capability exactly the modules the trace says
  that GPU loads), and a capability the generator targets with a suffix (FlashInfer 0.7.2: compute_120f) counts;
- a module a capability needs and no generator builds code for fails the build unless nix/flashinfer-aot.json gives
  the reason; a capability given that gets no module fails it; bad input exits 2 before importing anything;
- the opt-in modules' SGLang lines are in the real SGLang wheels, and each stack's FlashInfer is its lock's;
- the RUNPATH rewrite (the Nix build's) keeps nothing under the dropped prefix, the given entry first;
- the derivation calls the script with the stack's trace, the toolkit and no compiler in its closure.
The build itself needs nvcc (docs/gpu-host.md (h)).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import types

import pytest
from conftest import CACHE, REPO
from support.flake_eval import Workspace, needs_flake_eval
from support.pinned_wheels import fetch_wheel, unpack
from support.scripts import load_script
from support.stack_libraries import FLASHINFER_LIBRARIES, stack_libraries, with_path

SCRIPT = REPO / "nix" / "scripts" / "flashinfer-aot.py"
PLAN = json.loads((REPO / "nix" / "flashinfer-aot.json").read_text())
SYSTEM = "x86_64-linux"
SGLANG_PINS = {"0.5.9": "sglang", "0.5.23": "sglang-0.5.23"}
LOCKS = {"0.5.9": REPO / "python" / "uv.lock", "0.5.23": REPO / "nix" / "stacks" / "sglang-0.5.23" / "uv.lock"}


def calls(stack: str) -> dict:
    return json.loads((REPO / "nix" / "stacks" / f"sglang-{stack}" / "flashinfer-calls.json").read_text())


def run(*args, env=None, timeout=900):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=timeout
    )


@pytest.fixture(scope="module")
def flashinfer_env(tmp_path_factory):
    """env(stack): the stack's own FlashInfer (and tvm-ffi) importable on this Python; no GPU.

    One HOME a stack, for this module's runs; the stack's torch-c-dlpack-ext beside its tvm-ffi, whose prebuilt
    torch DLPack addon tvm-ffi loads at import instead of compiling one (support/stack_libraries.py)."""
    homes = {}

    def env(stack: str) -> dict:
        site = stack_libraries(stack, FLASHINFER_LIBRARIES, CACHE)
        if stack not in homes:
            homes[stack] = tmp_path_factory.mktemp(f"home-{stack}")
        return with_path({**os.environ, "HOME": str(homes[stack])}, site)

    return env


def listed(stdout: str) -> dict[str, list[str]]:
    """flashinfer-aot.py --list's modules per capability."""
    found, current = {}, None
    for line in stdout.splitlines():
        if m := re.fullmatch(r"(\d+\.\d+): \d+ modules", line):
            current = found.setdefault(m.group(1), [])
        elif line.startswith("  ") and current is not None and not line.startswith("  left out"):
            current.append(line.strip())
    return found


@pytest.fixture(scope="module")
def sglang_trees(tmp_path_factory):
    return {s: unpack(fetch_wheel(pin, CACHE, "sglang"), tmp_path_factory.mktemp(s)) for s, pin in SGLANG_PINS.items()}


def test_every_opt_in_module_is_what_sglang_asks_for(sglang_trees):
    for module in PLAN["opt_in_modules"]:
        assert set(module["sglang"]) == set(module["stacks"]), module["opt_in"]
        for stack, refs in module["sglang"].items():
            for ref in refs:
                file, line, text = ref.split(":", 2)
                actual = (sglang_trees[stack] / "sglang" / file).read_text().splitlines()[int(line) - 1]
                assert text.strip() in actual, f"{module['opt_in']} {stack} {file}:{line} is now {actual.strip()!r}"


def test_each_stacks_flashinfer_is_its_locks():
    for stack in SGLANG_PINS:
        lock = tomllib.loads(LOCKS[stack].read_text())
        (version,) = [p["version"] for p in lock["package"] if p["name"] == "flashinfer-python"]
        assert calls(stack)["flashinfer"] == version, stack


@pytest.mark.parametrize(
    "args, message",
    [
        (["--capabilities", "10.0"], "10.0 was not traced"),
        (["--capabilities", "8.6"], "nix/flashinfer-trace.json traces 9.0, 12.0"),
        (["--capabilities", "12"], "is not a CUDA capability like 12.0"),
        (["--capabilities", "9.0a"], "is not a CUDA capability like 12.0"),
        (["--capabilities", " "], "--capabilities is empty"),
        (["--capabilities", "12.0", "--stack", "0.4.0"], "--calls"),
        (["--capabilities", "12.0", "--opt-in", "pcie_ipc_allreduce"], "not a module setting of stack 0.5.9"),
        (["--capabilities", "12.0", "--opt-in", "speed"], "--opt-in speed"),
        (["--capabilities", "12.0", "--out", None], "--out is required"),
    ],
)
def test_bad_input_exits_2_with_the_fix(args, message, tmp_path):
    if None in args:  # no --out at all
        argv = ["--stack", "0.5.9", "--capabilities", "12.0"]
    else:
        argv = ["--stack", "0.5.9", "--out", str(tmp_path / "out"), *args]
    result = run(*argv)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_trace_of_another_stack_is_refused(tmp_path):
    result = run("--stack", "0.5.9", "--capabilities", "12.0", "--list",
                 "--calls", str(REPO / "nix" / "stacks" / "sglang-0.5.23" / "flashinfer-calls.json"))  # fmt: skip
    assert result.returncode == 2 and "holds the trace of SGLang 0.5.23, not of stack 0.5.9" in result.stderr


def test_a_non_empty_output_directory_is_refused_and_kept(tmp_path):
    (tmp_path / "kept.txt").write_text("a user's file")
    result = run("--stack", "0.5.9", "--capabilities", "12.0", "--out", str(tmp_path))
    assert result.returncode == 2 and "not empty" in result.stderr
    assert (tmp_path / "kept.txt").read_text() == "a user's file"


@pytest.mark.parametrize("stack", ["0.5.9", "0.5.23"])
def test_the_modules_are_flashinfers_names_for_the_traced_calls(stack, flashinfer_env):
    """FlashInfer itself names them: its generators, with the arguments the trace recorded, on the CPU."""
    opt_in = ",".join(m["opt_in"] for m in PLAN["opt_in_modules"] if stack in m["stacks"])
    result = run("--stack", stack, "--capabilities", "9.0 12.0", "--opt-in", opt_in, "--list",
                 env=flashinfer_env(stack))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "GPUs visible: 0" in result.stdout
    per_gpu = listed(result.stdout)
    data = calls(stack)["modules"]
    for capability in ("9.0", "12.0"):
        traced = sorted(name for name, m in data.items() if capability in m["needed_on"])
        assert traced and sorted(n for n in per_gpu[capability] if n in data) == traced, capability
    # The opt-in all-reduce modules come on top where their generator builds code for every GPU given.
    if stack == "0.5.9":
        # FlashInfer 0.6.3's all-reduce generator builds for SM 9/10 only. One module serves every GPU (it is found
        # by name), so none is built: one with no SM120 code would be found on the SM120 host and fail there.
        assert all("trtllm_comm" not in names for names in per_gpu.values())
        assert "left out on 12.0: enable_flashinfer_allreduce_fusion" in result.stdout
    else:
        assert all({"trtllm_comm", "pcie_ipc_comm"} <= set(names) for names in per_gpu.values())


@pytest.mark.parametrize("stack", ["0.5.9", "0.5.23"])
def test_tvm_ffi_loads_the_stacks_prebuilt_dlpack_addon_and_builds_none(stack, flashinfer_env, tmp_path):
    """tvm-ffi beside the tests' torch 2.9 takes the torch DLPack addon of the stack's torch-c-dlpack-ext (each stack
    pins it) and builds nothing into its cache; without it, it compiles one there (about 21 CPU-s). The trace's
    libraries (flashinfer-call-policy.json) take it too."""
    cache = tmp_path / "tvm-ffi"
    env = {**flashinfer_env(stack), "TVM_FFI_CACHE_DIR": str(cache)}
    probe = "import torch, tvm_ffi; print(hasattr(torch.Tensor, '__dlpack_c_exchange_api__'))"
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.split() == ["True"], result.stderr[-2000:]
    assert not cache.exists() or not any(cache.iterdir()), sorted(p.name for p in cache.iterdir())
    policy = json.loads((REPO / "nix" / "stacks" / f"sglang-{stack}" / "flashinfer-call-policy.json").read_text())
    assert {"apache-tvm-ffi", "torch-c-dlpack-ext"} <= set(policy["libraries"])


def test_sm120_counts_when_flashinfer_targets_it_as_compute_120f(flashinfer_env, tmp_path):
    """FlashInfer 0.7.2 with nvcc 12.9 or newer targets 12.0 as compute_120f: the module holds SM120 code. The
    workspace the script takes when given no --build-dir is gone when it ends (one a run was left in /tmp)."""
    result = run("--stack", "0.5.23", "--capabilities", "12.0", "--list",
                 env={**flashinfer_env("0.5.23"), "TMPDIR": str(tmp_path)})  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.iterdir()) == []
    assert len(listed(result.stdout)["12.0"]) == sum(
        "12.0" in m["needed_on"] for m in calls("0.5.23")["modules"].values()
    )


@pytest.mark.parametrize(
    "flags, capability, has",
    [
        (["-gencode=arch=compute_120f,code=sm_120f"], "12.0", True),
        (["-gencode=arch=compute_120a,code=sm_120a"], "12.0", True),
        (["-gencode=arch=compute_120,code=sm_120"], "12.0", True),
        (["-gencode=arch=compute_90a,code=sm_90a"], "12.0", False),
        (["-gencode=arch=compute_1200,code=sm_1200"], "12.0", False),  # not 12.0 under another suffix
        (["-gencode=arch=compute_90a,code=sm_90a"], "9.0", True),
    ],
)
def test_a_capability_is_held_under_any_suffix(flags, capability, has):
    aot = load_script(SCRIPT)
    spec = types.SimpleNamespace(extra_cuda_cflags=flags)
    assert aot.has_code_for(spec, capability, jit=None) is has


def test_a_module_left_out_without_a_reason_fails_the_build(tmp_path, flashinfer_env):
    """FlashInfer 0.6.3's all-reduce module has no SM120 build: with its reason removed, asking for it fails."""
    plan = {**PLAN, "skip_reasons": {}}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    result = run("--stack", "0.5.9", "--capabilities", "12.0", "--opt-in", "enable_flashinfer_allreduce_fusion",
                 "--plan", str(tmp_path / "plan.json"), "--list", env=flashinfer_env("0.5.9"))  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "enable_flashinfer_allreduce_fusion is needed on 12.0, but its generator builds no code for it" in (
        result.stderr
    )


def test_a_stale_trace_is_refused(tmp_path, flashinfer_env):
    """A module whose recorded arguments no longer make its name (FlashInfer changed, the trace did not)."""
    data = calls("0.5.9")
    name, module = next((n, m) for n, m in data["modules"].items() if "prefill" in n and "12.0" in m["needed_on"])
    data["modules"][name] = {**module, "args": [*module["args"][:5], 256, *module["args"][6:]]}
    (tmp_path / "calls.json").write_text(json.dumps(data))
    result = run("--stack", "0.5.9", "--capabilities", "12.0", "--calls", str(tmp_path / "calls.json"), "--list",
                 env=flashinfer_env("0.5.9"))  # fmt: skip
    assert result.returncode == 1 and "the trace is stale" in result.stderr, result.stderr


@pytest.mark.skipif(shutil.which("patchelf") is None or shutil.which("cc") is None, reason="needs patchelf and cc")
def test_runpath_drops_the_toolkit_and_puts_the_given_directory_first(tmp_path):
    aot = load_script(SCRIPT)
    lib = tmp_path / "m.so"
    rpath = "-Wl,-rpath,/nix/store/toolkit/lib64:/nix/store/toolkit/lib64/stubs:/nix/store/gcc-lib/lib"
    subprocess.run(["cc", "-shared", "-fPIC", "-x", "c", "/dev/null", "-o", str(lib), rpath], check=True)
    aot.set_runpath(lib, ["/nix/store/cudart-lib/lib"], ["/nix/store/toolkit"])
    out = subprocess.run(["patchelf", "--print-rpath", str(lib)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "/nix/store/cudart-lib/lib:/nix/store/gcc-lib/lib"


# -- the derivation and the stack ---------------------------------------------------------------------------

flake = needs_flake_eval()


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return Workspace(tmp_path_factory.mktemp("flake"))


@flake
@pytest.mark.parametrize("output, stack", [("flashinfer-aot", "0.5.9"), ("flashinfer-aot-0_5_23", "0.5.23")])
def test_the_derivation_runs_the_script_with_nvcc_and_keeps_no_toolchain(ws, output, stack):
    drv = json.loads(ws.nix("derivation", "show", f"{ws.ref}#packages.{SYSTEM}.{output}").stdout)
    ((_, info),) = drv.items()
    env = info["env"]
    build = env["buildPhase"]
    assert re.search(
        r"python /nix/store/\w{32}-flashinfer-aot\.py --plan /nix/store/\w{32}-flashinfer-aot\.json "
        r"--calls /nix/store/\w{32}-flashinfer-calls\.json ",
        build,
    )
    assert f"--stack {stack} " in build
    assert "--capabilities 12.0" in build and "--out $out" in build
    toolkit = ws.eval(f"packages.{SYSTEM}.cuda-toolkit.outPath")
    assert env["CUDA_HOME"] == toolkit and f"--drop-runpath {toolkit}" in build
    assert toolkit in env["disallowedReferences"] and "gcc-wrapper" in env["disallowedReferences"]
    assert env["hardeningDisable"] == "bindnow"  # FlashInfer's modules bind lazily (nixpkgs' jit-cache too)
    inputs = ws.eval(f"packages.{SYSTEM}.{output}.nativeBuildInputs", apply="map (d: d.name)")
    assert "flashinfer-aot-build-env" in inputs and any("driver-runpath" in i for i in inputs), inputs


@flake
def test_a_stack_with_aot_capabilities_links_them_as_flashinfers_data_aot(ws):
    stack = '(flake.lib.mkStack { aotCapabilities = [ "9.0" ]; })'
    aot = ws.eval_expr(f"{stack}.aot.outPath")
    assert ws.eval_expr(f"{stack}.aot.capabilities") == ["9.0"]
    post = ws.eval_expr(f"{stack}.serverSet.flashinfer-python.postInstall")
    assert f"ln -s {aot} $out/lib/python3.12/site-packages/flashinfer/data/aot" in post
    # The server environment is made of that FlashInfer; the default stack's keeps the locked one.
    deps = ws.eval_expr(f"{stack}.serverEnv.NIX_PYPROJECT_DEPS").split(":")
    assert ws.eval_expr(f"{stack}.serverSet.flashinfer-python.outPath") in deps
    assert ws.eval(f"packages.{SYSTEM}.default.passthru.aot") is None
    default = ws.eval(f"packages.{SYSTEM}.default.passthru.serverEnv.NIX_PYPROJECT_DEPS").split(":")
    assert ws.eval(f"packages.{SYSTEM}.default.passthru.pythonSet.flashinfer-python.outPath") in default
