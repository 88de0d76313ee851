#!/usr/bin/env python3
"""Build FlashInfer's modules for SGLang's attention backends ahead of time, with nvcc and no GPU.

    flashinfer-aot.py --stack 0.5.9 --capabilities "9.0 12.0" --out DIR [--opt-in SETTING,...]
                      [--plan nix/flashinfer-aot.json] [--build-dir DIR] [--jobs N] [--list]
                      [--runpath DIR] [--drop-runpath PREFIX]

The modules are those nix/flashinfer-aot.json lists for the stack (the MLA target's and the
Llama draft's attention; the all-reduce modules only for --opt-in settings). Each is made by
FlashInfer's own generator, so its name is the URI FlashInfer looks up at run time, and built
by FlashInfer's own parallel builder (build_jit_specs) for the capabilities given
(FLASHINFER_CUDA_ARCH_LIST), with CUDA_VISIBLE_DEVICES empty: nothing asks a GPU. DIR gets
FlashInfer's AOT layout, <name>/<name>.so, which FlashInfer loads instead of compiling when it
is the package's data/aot directory (0.6.3: JitSpec.is_aot; 0.7.2: get_aot_artifacts), and
manifest.json: the modules built, the ones skipped and why. --list names the modules and
builds nothing. --runpath/--drop-runpath rewrite each module's RUNPATH with patchelf (the Nix
build: libcudart from cuda_cudart, not from the joined toolkit; nothing of nvcc's tree kept).

Needs: the stack's FlashInfer (and torch, tvm-ffi) importable; for a build, CUDA_HOME (nvcc),
ninja and a C++ compiler, as FlashInfer's JIT does. nix/flashinfer-aot.nix runs it.
Exit status: 0 built (or listed), 1 a build failed, 2 bad input.
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

PLAN = Path(__file__).resolve().parents[1] / "flashinfer-aot.json"
KINDS = ("batch_prefill", "batch_mla", "batch_decode", "trtllm_comm", "pcie_ipc_comm")
# The attention kernels of these modules exist for FA2 (SM80 on) and FA3 (SM90); SM100's
# backends (cutlass, trtllm-gen) ship as cubins and are not planned here.
MAJORS = (8, 9, 12)


class BadInput(Exception):
    """A message for the user; exit status 2."""


def parse_capabilities(text: str) -> list[str]:
    caps = [c for c in text.replace(";", " ").replace(",", " ").split() if c]
    if not caps:
        raise BadInput('--capabilities is empty: give CUDA capabilities such as "12.0" or "9.0 12.0"')
    for cap in caps:
        major, _, minor = cap.partition(".")
        if not (major.isdigit() and minor.isdigit()):
            raise BadInput(f"--capabilities: {cap!r} is not a CUDA capability like 12.0 (major.minor, no letter)")
        if int(major) not in MAJORS:
            raise BadInput(
                f"--capabilities: {cap} is not built here: SGLang's FA2/FA3 attention paths are planned for "
                f"SM{', SM'.join(str(m) for m in MAJORS)}x (SM100's backends ship as FlashInfer cubins)"
            )
    return sorted(set(caps), key=lambda c: tuple(int(p) for p in c.split(".")))


def load_plan(path: Path, stack: str, opt_in: list[str]) -> tuple[dict, list[dict]]:
    try:
        plan = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise BadInput(f"--plan {path}: cannot read it ({err})") from err
    if stack not in plan["stacks"]:
        raise BadInput(f"--stack {stack}: not in {path} (stacks: {', '.join(plan['stacks'])})")
    known = {m["opt_in"] for m in plan["modules"] if "opt_in" in m and stack in m.get("stacks", [stack])}
    unknown = sorted(set(opt_in) - known)
    if unknown:
        raise BadInput(
            f"--opt-in {','.join(unknown)}: not a module setting of stack {stack} (known: {', '.join(sorted(known))})"
        )
    wanted = [
        m for m in plan["modules"]
        if stack in m.get("stacks", [stack]) and m.get("opt_in") in (None, *opt_in)
    ]  # fmt: skip
    return plan["stacks"][stack], wanted


def backends(module: dict, caps: list[str]) -> list[str]:
    """The concrete backends FlashInfer picks for `module` on these GPUs ('auto': fa3 on SM90, else fa2)."""
    if module.get("backend") != "auto":
        return [module.get("backend", "")]
    picked = {"fa3" if c.startswith("9.") else "fa2" for c in caps}
    return sorted(picked)


def specs_for(module: dict, caps: list[str], jit, torch) -> tuple[list[tuple[dict, str, object]], list[dict]]:
    """(JitSpecs to build, skipped entries) for one module of the plan."""
    bf16, i32 = torch.bfloat16, torch.int32
    built, skipped = [], []
    for backend in backends(module, caps):
        kind = module["kind"]
        try:
            if kind == "batch_prefill":
                spec = jit.gen_batch_prefill_module(
                    backend, bf16, bf16, bf16, i32, module["head_dim_qk"], module["head_dim_vo"], 0, False, False, False
                )
            elif kind == "batch_mla":
                spec = jit.gen_batch_mla_module(
                    backend, bf16, bf16, bf16, i32, module["head_dim_ckv"], module["head_dim_kpe"], False
                )
            elif kind == "batch_decode":
                spec = jit.gen_batch_decode_module(
                    bf16, bf16, bf16, i32, module["head_dim_qk"], module["head_dim_vo"], 0, False, False
                )
            elif kind == "trtllm_comm":
                from flashinfer.jit.comm import gen_trtllm_comm_module

                spec = gen_trtllm_comm_module()
            elif kind == "pcie_ipc_comm":
                from flashinfer.jit.comm import gen_pcie_ipc_comm_module

                spec = gen_pcie_ipc_comm_module()
            else:
                raise BadInput(f"unknown module kind {kind!r} in the plan (known: {', '.join(KINDS)})")
        except RuntimeError as err:  # FlashInfer's generator refuses these capabilities
            skipped.append({"module": module["name"], "backend": backend, "reason": str(err)})
            continue
        # fa3 is FlashInfer's SM90 backend; every other module runs on each GPU given.
        needed = [c for c in caps if backend != "fa3" or c.startswith("9.")]
        missing = [c for c in needed if not has_code_for(spec, c, jit)]
        if missing:
            # FlashInfer loads a prebuilt module by name alone: one lacking a GPU's code would
            # be found there and fail to launch, so it is left to the JIT (which says why).
            reason = f"its generator builds no code for {', '.join(missing)} (generators filter by SM major)"
            skipped.append({"module": module["name"], "backend": backend, "reason": reason})
            continue
        built.append((module, backend, spec))
    return built, skipped


def has_code_for(spec, capability: str, jit) -> bool:
    """Whether `spec` compiles device code for `capability`: its own -gencode flags, else the global list."""
    flags = [f for f in spec.extra_cuda_cflags or [] if f.startswith("-gencode=")]
    if not flags:
        flags = jit.core.current_compilation_context.get_nvcc_flags_list()
    arch = "compute_" + capability.replace(".", "")
    return any(f"arch={arch}," in f or f"arch={arch}a," in f for f in flags)


def set_runpath(library: Path, first: list[str], drop: list[str]) -> None:
    """RUNPATH = `first`, then the linker's entries not under a `drop` prefix. In a Nix build the
    modules are linked against the joined CUDA toolkit (CUDA_HOME), nvcc and all: the run-time
    closure must not keep it for the one library they load from it, libcudart."""
    old = subprocess.run(["patchelf", "--print-rpath", str(library)], capture_output=True, text=True, check=True)
    kept = [e for e in old.stdout.strip().split(":") if e and not any(e.startswith(p) for p in drop)]
    entries = list(dict.fromkeys(first + kept))
    subprocess.run(["patchelf", "--set-rpath", ":".join(entries), str(library)], check=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stack", required=True, help="a stack of the plan: 0.5.9 or 0.5.23")
    p.add_argument("--capabilities", required=True, help='CUDA capabilities, e.g. "12.0" or "9.0 12.0"')
    p.add_argument("--out", type=Path, help="the AOT directory to write (<name>/<name>.so, manifest.json)")
    p.add_argument("--opt-in", default="", help="settings whose modules to build too, comma-separated")
    p.add_argument("--plan", type=Path, default=PLAN)
    p.add_argument("--build-dir", type=Path, help="FlashInfer's workspace for the build (default: a temp dir)")
    p.add_argument("--jobs", type=int, help="parallel compile jobs (MAX_JOBS)")
    p.add_argument("--list", action="store_true", help="name the modules, build nothing")
    p.add_argument("--runpath", action="append", default=[], help="put DIR first in each module's RUNPATH (patchelf)")
    p.add_argument(
        "--drop-runpath",
        action="append",
        default=[],
        help="drop RUNPATH entries under this prefix (the build's toolkit)",
    )
    args = p.parse_args(argv)
    try:
        caps = parse_capabilities(args.capabilities)
        opt_in = [s for s in args.opt_in.split(",") if s]
        stack, modules = load_plan(args.plan, args.stack, opt_in)
        if not args.list and args.out is None:
            raise BadInput("--out is required unless --list is given")
        if args.out is not None and args.out.exists() and any(args.out.iterdir()):
            raise BadInput(f"--out {args.out}: not empty; give a new directory (nothing there is overwritten)")
    except BadInput as err:
        print(f"flashinfer-aot: {err}", file=sys.stderr)
        return 2

    # Before FlashInfer is imported: it reads both when its modules load.
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = " ".join(caps)
    build_dir = args.build_dir or Path(tempfile.mkdtemp(prefix="flashinfer-aot-"))
    os.environ["FLASHINFER_WORKSPACE_BASE"] = str(build_dir)
    if args.jobs:
        os.environ["MAX_JOBS"] = str(args.jobs)

    import flashinfer.jit as jit
    import torch
    from flashinfer.version import __version__ as version

    if version != stack["flashinfer"]:
        print(
            f"flashinfer-aot: FlashInfer {version} is installed; stack {args.stack} pins {stack['flashinfer']}",
            file=sys.stderr,
        )
        return 2
    print(f"FlashInfer {version}, capabilities {' '.join(caps)}, GPUs visible: {torch.cuda.device_count()}")

    specs, skipped, names = [], [], set()
    for module in modules:
        built, refused = specs_for(module, caps, jit, torch)
        # Two uses of one kernel (the draft's paged and, off SM90, ragged prefill) are one module.
        specs += [b for b in built if b[2].name not in names]
        names |= {b[2].name for b in built}
        skipped += refused
    for module, backend, spec in specs:
        print(f"  {spec.name}  ({module['name']}{', ' + backend if backend else ''})")
    for s in skipped:
        print(f"  skipped {s['module']} ({s['backend'] or 'no backend'}): {s['reason']}")
    if args.list:
        return 0

    t0 = time.perf_counter()
    try:
        jit.build_jit_specs([spec for _, _, spec in specs], verbose=True, skip_prebuilt=False)
    except Exception as err:  # FlashInfer raises RuntimeError with ninja's output
        print(f"flashinfer-aot: the build failed: {err}", file=sys.stderr)
        return 1
    seconds = round(time.perf_counter() - t0, 1)

    args.out.mkdir(parents=True, exist_ok=True)
    entries = []
    for module, backend, spec in specs:
        (args.out / spec.name).mkdir()
        target = args.out / spec.name / f"{spec.name}.so"
        shutil.copyfile(spec.jit_library_path, target)
        if args.runpath or args.drop_runpath:
            set_runpath(target, args.runpath, args.drop_runpath)
        entries.append(
            {"name": spec.name, "module": module["name"], "backend": backend, "bytes": target.stat().st_size}
        )
    manifest = {
        "flashinfer": version,
        "stack": args.stack,
        "capabilities": caps,
        "opt_in": opt_in,
        "build_seconds": seconds,
        "modules": entries,
        "skipped": skipped,
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"built {len(entries)} modules in {seconds} s into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
