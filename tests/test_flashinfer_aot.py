"""FlashInfer's attention modules built ahead of time (nix/flashinfer-aot.json, nix/scripts/flashinfer-aot.py,
nix/flashinfer-aot.nix).

- the module list is SGLang's: every source line it cites is in the real SGLang wheels of both stacks,
  and each stack's FlashInfer version is its lock's;
- the script, run against the real FlashInfer 0.6.3 (its own generators, no GPU), names the modules
  FlashInfer looks up at run time, leaves out a module whose generator makes no code for a GPU given,
  and refuses bad input with exit 2 before importing anything;
- its RUNPATH rewrite (the Nix build's) keeps nothing under the dropped prefix, the given entry first;
- the derivation calls the script with the toolkit and no compiler in its closure, and a stack with AOT
  capabilities links the result as FlashInfer's data/aot.
The build itself needs nvcc and ran on the lent H200 (docs/gpu-host.md (h)).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
from conftest import CACHE, REPO
from support.flake_eval import Workspace, needs_flake_eval
from support.flashinfer_site import flashinfer_site
from support.pinned_wheels import fetch_wheel, unpack
from support.scripts import load_script

SCRIPT = REPO / "nix" / "scripts" / "flashinfer-aot.py"
PLAN = json.loads((REPO / "nix" / "flashinfer-aot.json").read_text())
SYSTEM = "x86_64-linux"
SGLANG_PINS = {"0.5.9": "sglang", "0.5.23": "sglang-0.5.23"}
LOCKS = {"0.5.9": REPO / "python" / "uv.lock", "0.5.23": REPO / "nix" / "stacks" / "sglang-0.5.23" / "uv.lock"}


def run(*args, env=None, timeout=900):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=timeout
    )


@pytest.fixture(scope="module")
def sglang_trees(tmp_path_factory):
    return {s: unpack(fetch_wheel(pin, CACHE, "sglang"), tmp_path_factory.mktemp(s)) for s, pin in SGLANG_PINS.items()}


def test_every_module_is_what_sglang_asks_for(sglang_trees):
    for module in PLAN["modules"]:
        assert module["sglang"], module["name"]
        for stack, refs in module["sglang"].items():
            for ref in refs:
                file, line, text = ref.split(":", 2)
                actual = (sglang_trees[stack] / "sglang" / file).read_text().splitlines()[int(line) - 1]
                assert text.strip() in actual, f"{module['name']} {stack} {file}:{line} is now {actual.strip()!r}"


def test_each_stacks_flashinfer_is_its_locks():
    for stack, spec in PLAN["stacks"].items():
        lock = tomllib.loads(LOCKS[stack].read_text())
        (version,) = [p["version"] for p in lock["package"] if p["name"] == "flashinfer-python"]
        assert spec["flashinfer"] == version, stack


@pytest.mark.parametrize(
    "args, message",
    [
        (["--capabilities", "10.0"], "SM100's backends ship as FlashInfer cubins"),
        (["--capabilities", "12"], "is not a CUDA capability like 12.0"),
        (["--capabilities", "9.0a"], "is not a CUDA capability like 12.0"),
        (["--capabilities", " "], "--capabilities is empty"),
        (["--capabilities", "12.0", "--stack", "0.4.0"], "--stack 0.4.0: not in"),
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


def test_a_non_empty_output_directory_is_refused_and_kept(tmp_path):
    (tmp_path / "kept.txt").write_text("a user's file")
    result = run("--stack", "0.5.9", "--capabilities", "12.0", "--out", str(tmp_path))
    assert result.returncode == 2 and "not empty" in result.stderr
    assert (tmp_path / "kept.txt").read_text() == "a user's file"


def test_the_modules_are_flashinfers_names_for_sglangs_calls(tmp_path):
    """FlashInfer 0.6.3 itself names them (its generators; CUDA_VISIBLE_DEVICES empty, no GPU here)."""
    env = {**os.environ, "PYTHONPATH": str(flashinfer_site(CACHE)), "HOME": str(tmp_path)}
    result = run("--stack", "0.5.9", "--capabilities", "9.0 12.0", "--opt-in", "enable_flashinfer_allreduce_fusion",
                 "--list", env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.splitlines() if line.startswith("  ") and "skipped" not in line]
    common = "dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32"
    flags = "posenc_0_use_swa_False_use_logits_cap_False"
    prefill = f"batch_prefill_with_kv_cache_{common}_head_dim_qk_{{}}_head_dim_vo_128_{flags}_f16qk_False"
    assert names == [
        prefill.format(192),  # the target's ragged prefill, fa2 (SM120) and fa3 (SM90)
        prefill.format(192) + "_sm90",
        f"batch_mla_attention_{common}_head_dim_ckv_512_head_dim_kpe_64_profiler_False",
        f"batch_mla_attention_{common}_head_dim_ckv_512_head_dim_kpe_64_profiler_False_sm90",
        prefill.format(128),  # the draft's paged prefill, and ragged off SM90: one module
        prefill.format(128) + "_sm90",
        f"batch_decode_with_kv_cache_{common}_head_dim_qk_128_head_dim_vo_128_{flags}",
    ], result.stdout
    assert "GPUs visible: 0" in result.stdout
    # FlashInfer 0.6.3's all-reduce generator builds for SM 9/10 only: no sm_120 code, so not built.
    assert "skipped allreduce_fusion (no backend): its generator builds no code for 12.0" in result.stdout


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
        r"python /nix/store/\w{32}-flashinfer-aot\.py --plan /nix/store/\w{32}-flashinfer-aot\.json ", build
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
