#!/usr/bin/env python3
"""Build FlashInfer's modules for SGLang's EAGLE-3 path ahead of time, with nvcc and no GPU.

    flashinfer-aot.py --stack 0.5.9 --capabilities "9.0 12.0" --out DIR [--opt-in SETTING,...]
                      [--calls FILE] [--plan nix/flashinfer-aot.json] [--build-dir DIR] [--jobs N] [--list]
                      [--runpath DIR] [--drop-runpath PREFIX]

The modules are those the stack's SGLang loads on the GPUs given, as the FlashInfer call audit traced them (python
-m sglang_eagle3_audits --only flashinfer-calls; nix/stacks/sglang-<stack>/flashinfer-calls.json, --calls): each
made by the FlashInfer generator, with the arguments the trace recorded, so its name is the one FlashInfer looks up
at run time; the all-reduce modules of nix/flashinfer-aot.json only for the --opt-in settings. FlashInfer's own
parallel builder (build_jit_specs) builds them for the capabilities given (FLASHINFER_CUDA_ARCH_LIST) with
CUDA_VISIBLE_DEVICES empty: nothing asks a GPU.
A module must hold code for every capability given that needs it (FlashInfer finds a prebuilt module by name
alone): one whose generator makes none is an error, unless nix/flashinfer-aot.json gives the reason. DIR gets
FlashInfer's AOT layout, <name>/<name>.so, which FlashInfer loads instead of compiling when it is the package's
data/aot directory (0.6.3: JitSpec.is_aot; 0.7.2: get_aot_artifacts), and manifest.json: what was built for
each capability, and what was left out and why. --list names the modules and builds nothing.
--runpath/--drop-runpath rewrite each module's RUNPATH with patchelf (the Nix build: libcudart from cuda_cudart,
nothing of nvcc's tree kept).

Needs: the stack's FlashInfer (and torch, tvm-ffi) importable; for a build, CUDA_HOME (nvcc), ninja and a C++
compiler, as FlashInfer's JIT does. nix/flashinfer-aot.nix runs it.
Exit status: 0 built (or listed), 1 a build failed or a capability got none of its modules, 2 bad input.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NIX = Path(__file__).resolve().parents[1]
PLAN = NIX / "flashinfer-aot.json"


class BadInput(Exception):
    """A message for the user; exit status 2."""


def parse_capabilities(text: str, traced: list[str]) -> list[str]:
    caps = [c for c in text.replace(";", " ").replace(",", " ").split() if c]
    if not caps:
        raise BadInput('--capabilities is empty: give CUDA capabilities such as "12.0" or "9.0 12.0"')
    for cap in caps:
        major, _, minor = cap.partition(".")
        if not (major.isdigit() and minor.isdigit()):
            raise BadInput(f"--capabilities: {cap!r} is not a CUDA capability like 12.0 (major.minor, no letter)")
        if cap not in traced:
            raise BadInput(
                f"--capabilities: {cap} was not traced: which modules SGLang loads depends on the GPU (fa2 or fa3), "
                f"and nix/flashinfer-trace.json traces {', '.join(traced)}. Add the GPU there and run "
                "python -m sglang_eagle3_audits --write --only flashinfer-calls"
            )
    return sorted(set(caps), key=lambda c: tuple(int(p) for p in c.split(".")))


def load_json(path: Path, option: str) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise BadInput(f"{option} {path}: cannot read it ({err})") from err


def load_modules(calls: dict, plan: dict, stack: str, caps: list[str], opt_in: list[str]) -> list[dict]:
    """The modules to build: each traced one some capability given needs, then the opt-in ones asked for."""
    if calls.get("sglang") != stack:
        raise BadInput(f"--calls holds the trace of SGLang {calls.get('sglang')}, not of stack {stack}")
    known = {m["opt_in"] for m in plan["opt_in_modules"] if stack in m["stacks"]}
    unknown = sorted(set(opt_in) - known)
    if unknown:
        raise BadInput(
            f"--opt-in {','.join(unknown)}: not a module setting of stack {stack} (known: {', '.join(sorted(known))})"
        )
    wanted = [
        {"name": name, "generator": m["generator"], "args": m["args"], "kwargs": m.get("kwargs", {}),
         "needs": [c for c in m["needed_on"] if c in caps], "why": ", ".join(m["steps"])}
        for name, m in calls["modules"].items() if any(c in caps for c in m["needed_on"])
    ]  # fmt: skip
    for m in plan["opt_in_modules"]:
        if stack in m["stacks"] and m["opt_in"] in opt_in:
            wanted.append(
                {
                    "name": None,
                    "generator": m["generator"],
                    "args": [],
                    "kwargs": {},
                    "needs": caps,
                    "why": m["why"],
                    "opt_in": m["opt_in"],
                }
            )
    return wanted


def value(arg, torch):
    """A generator argument as the trace recorded it: dtypes as {"dtype": name}."""
    if isinstance(arg, dict) and "dtype" in arg:
        return getattr(torch, arg["dtype"])
    if isinstance(arg, list):
        return [value(a, torch) for a in arg]
    return arg


def make_spec(module: dict, torch):
    path, _, function = module["generator"].partition(":")
    generator = getattr(importlib.import_module(path), function)
    args = [value(a, torch) for a in module["args"]]
    return generator(*args, **{k: value(v, torch) for k, v in module["kwargs"].items()})


def has_code_for(spec, capability: str, jit) -> bool:
    """Whether `spec` compiles device code for `capability` under any suffix (12.0 may be compute_120, 120a or
    120f): its own -gencode flags, else the global list."""
    flags = [f for f in spec.extra_cuda_cflags or [] if f.startswith("-gencode=")]
    if not flags:
        flags = jit.core.current_compilation_context.get_nvcc_flags_list()
    arch = re.compile(r"arch=compute_" + capability.replace(".", "") + r"[a-z]?,")
    return any(arch.search(f) for f in flags)


def specs_for(modules: list[dict], caps: list[str], plan: dict, stack: str, jit, torch):
    """(what to build, what is left out with its reason, what cannot be built and has no reason)."""
    built, left_out, errors, names = [], [], [], set()
    reasons = plan.get("skip_reasons", {}).get(stack, {})
    for module in modules:
        label = module["name"] or module["opt_in"]
        try:
            spec = make_spec(module, torch)
        except RuntimeError as err:  # FlashInfer's generator refuses every capability given
            spec, missing, detail = None, module["needs"], f"its generator builds no code for it ({err})"
        else:
            if module["name"] is not None and spec.name != module["name"]:
                errors.append(
                    f"{module['generator']} makes {spec.name} for the recorded arguments, not {module['name']}: "
                    "the trace is stale; run python -m sglang_eagle3_audits --write --only flashinfer-calls"
                )
                continue
            missing = [c for c in module["needs"] if not has_code_for(spec, c, jit)]
            detail = "its generator builds no code for it"
        for cap in missing:
            if reasons.get(label, {}).get(cap):
                left_out.append({"module": label, "capability": cap, "detail": detail, "reason": reasons[label][cap]})
            else:
                errors.append(f"{label} is needed on {cap}, but {detail}; nix/flashinfer-aot.json skip_reasons gives "
                              "no reason")  # fmt: skip
        if spec is not None and not missing and spec.name not in names:
            names.add(spec.name)
            built.append((module, spec))
    return built, left_out, errors


def set_runpath(library: Path, first: list[str], drop: list[str]) -> None:
    """RUNPATH = `first`, then the linker's entries not under a `drop` prefix. In a Nix build the
    modules are linked against the joined CUDA toolkit (CUDA_HOME), nvcc and all: the run-time
    closure must not keep it for the one library they load from it, libcudart."""
    old = subprocess.run(["patchelf", "--print-rpath", str(library)], capture_output=True, text=True, check=True)
    kept = [e for e in old.stdout.strip().split(":") if e and not any(e.startswith(p) for p in drop)]
    entries = list(dict.fromkeys(first + kept))
    subprocess.run(["patchelf", "--set-rpath", ":".join(entries), str(library)], check=True)


def per_capability(built, caps: list[str]) -> dict[str, list[str]]:
    return {cap: [spec.name for module, spec in built if cap in module["needs"]] for cap in caps}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stack", required=True, help="a stack of nix/pins.json: 0.5.9 or 0.5.23")
    p.add_argument("--capabilities", required=True, help='CUDA capabilities, e.g. "12.0" or "9.0 12.0"')
    p.add_argument("--out", type=Path, help="the AOT directory to write (<name>/<name>.so, manifest.json)")
    p.add_argument("--opt-in", default="", help="settings whose modules to build too, comma-separated")
    p.add_argument(
        "--calls", type=Path, help="the stack's trace (default nix/stacks/sglang-<stack>/flashinfer-calls.json)"
    )
    p.add_argument("--plan", type=Path, default=PLAN, help="the opt-in modules and reasons (nix/flashinfer-aot.json)")
    p.add_argument("--build-dir", type=Path, help="FlashInfer's workspace for the build (default: a temp dir)")
    p.add_argument("--jobs", type=int, help="parallel compile jobs (MAX_JOBS)")
    p.add_argument("--list", action="store_true", help="name the modules, build nothing")
    p.add_argument("--runpath", action="append", default=[], help="put DIR first in each module's RUNPATH (patchelf)")
    p.add_argument("--drop-runpath", action="append", default=[],
                   help="drop RUNPATH entries under this prefix (the build's toolkit)")  # fmt: skip
    args = p.parse_args(argv)
    try:
        calls = load_json(args.calls or NIX / "stacks" / f"sglang-{args.stack}" / "flashinfer-calls.json", "--calls")
        traced = sorted(calls.get("traced_on", {}), key=lambda c: tuple(int(p) for p in c.split(".")))
        caps = parse_capabilities(args.capabilities, traced)
        opt_in = [s for s in args.opt_in.split(",") if s]
        plan = load_json(args.plan, "--plan")
        modules = load_modules(calls, plan, args.stack, caps, opt_in)
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
    # The default workspace is this run's alone and goes when main returns.
    scratch = None if args.build_dir else tempfile.TemporaryDirectory(prefix="flashinfer-aot-")
    build_dir = args.build_dir or Path(scratch.name)
    os.environ["FLASHINFER_WORKSPACE_BASE"] = str(build_dir)
    if args.jobs:
        os.environ["MAX_JOBS"] = str(args.jobs)

    import flashinfer.jit as jit
    import torch
    from flashinfer.version import __version__ as version

    if version != calls["flashinfer"]:
        print(f"flashinfer-aot: FlashInfer {version} is installed; the trace of stack {args.stack} is of "
              f"FlashInfer {calls['flashinfer']}", file=sys.stderr)  # fmt: skip
        return 2
    print(f"FlashInfer {version}, capabilities {' '.join(caps)}, GPUs visible: {torch.cuda.device_count()}")
    built, left_out, errors = specs_for(modules, caps, plan, args.stack, jit, torch)
    for cap, names in per_capability(built, caps).items():
        print(f"{cap}: {len(names)} modules")
        for name in names:
            print(f"  {name}")
    for entry in left_out:
        print(f"  left out on {entry['capability']}: {entry['module']}: {entry['detail']} ({entry['reason']})")
    if errors:
        print("flashinfer-aot: " + "\n  ".join(["modules SGLang needs cannot be built:", *errors]), file=sys.stderr)
        return 1
    empty = [cap for cap, names in per_capability(built, caps).items() if not names]
    if empty:
        print(f"flashinfer-aot: nothing to build for {', '.join(empty)}", file=sys.stderr)
        return 1
    if args.list:
        return 0

    t0 = time.perf_counter()
    try:
        jit.build_jit_specs([spec for _, spec in built], verbose=True, skip_prebuilt=False)
    except Exception as err:  # FlashInfer raises RuntimeError with ninja's output
        print(f"flashinfer-aot: the build failed: {err}", file=sys.stderr)
        return 1
    seconds = round(time.perf_counter() - t0, 1)

    args.out.mkdir(parents=True, exist_ok=True)
    entries = []
    for module, spec in built:
        (args.out / spec.name).mkdir()
        target = args.out / spec.name / f"{spec.name}.so"
        shutil.copyfile(spec.jit_library_path, target)
        if args.runpath or args.drop_runpath:
            set_runpath(target, args.runpath, args.drop_runpath)
        entries.append(
            {"name": spec.name, "needed_on": module["needs"], "why": module["why"], "bytes": target.stat().st_size}
        )
    manifest = {
        "flashinfer": version,
        "stack": args.stack,
        "capabilities": caps,
        "opt_in": opt_in,
        "build_seconds": seconds,
        "built": per_capability(built, caps),
        "modules": entries,
        "left_out": left_out,
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    for cap, names in manifest["built"].items():
        print(f"built for {cap}: {len(names)} modules")
    print(f"built {len(entries)} modules in {seconds} s into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
