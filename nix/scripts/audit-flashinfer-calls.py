#!/usr/bin/env python3
"""Record each FlashInfer module SGLang's EAGLE-3 path loads, per forward mode and GPU (flashinfer-calls.json).

For each stack, its own SGLang (the pinned wheel with the stack's patch series applied, as Nix builds it) and its own
FlashInfer trace the path (nix/scripts/flashinfer-trace.py): once per GPU of nix/flashinfer-trace.json and per draft
geometry (a draft whose decode runs on tensor cores, one whose decode does not), with the project's own server
settings. The data says, for each step (prefill, cached prefix, long cached prefix, target verify and its CUDA graph,
sampling, draft extend, draft decode and their CUDA graphs), which FlashInfer API SGLang called from which line, and
which module each call loaded; and, for each module, the FlashInfer generator and arguments that make it (what
nix/scripts/flashinfer-aot.py builds ahead of time) and the GPUs that need it. It also lists each FlashInfer name
the two attention backends import, and whether a traced step used it (a name no step uses needs a reason in
nix/stacks/<stack>/flashinfer-call-policy.json).

    python nix/scripts/audit-flashinfer-calls.py [--stack VERSION] [--cache DIR] [--check] [--markdown]

Without --stack, every stack of nix/pins.json; --check compares instead of writing and exits 1 on a difference, a
step that failed, a module no generator made, or an imported name neither used nor explained.
Needs: the test environment (torch, triton, SGLang's pure-Python dependencies), GNU patch, and PyPI for a wheel not
in the cache. Takes a few minutes (each trace builds SGLang's server pieces on the CPU).
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import urllib.error
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "src"))

from sglang_eagle3 import stacks  # noqa: E402 - the repository's package, found above
from sglang_eagle3.serving.launch_plan import sglang_args  # noqa: E402
from sglang_eagle3.serving.settings import ServerSettings  # noqa: E402
from sglang_eagle3.source.tree import SGLangTree, locate  # noqa: E402
from sglang_eagle3.trees import patchset, release  # noqa: E402

PINS = REPO / "nix" / "pins.json"
INPUTS = REPO / "nix" / "flashinfer-trace.json"
TRACE = Path(__file__).with_name("flashinfer-trace.py")
DATA, POLICY = "flashinfer-calls.json", "flashinfer-call-policy.json"
BACKENDS = ("srt/layers/attention/flashinfer_backend.py", "srt/layers/attention/flashinfer_mla_backend.py")


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stack_versions() -> list[str]:
    return list(stacks.versions())


def data_dir(stack: str) -> Path:
    return REPO / stacks.stacks()[stack].data


# -- the environment of a trace --------------------------------------------------------------------------------
def patched_tree(stack: str, cache: Path, work: Path) -> Path:
    """The stack's SGLang as Nix builds it: the pinned wheel, unpacked, with the stack's series applied."""
    tree = release.resolve(stack, cache)
    root = work / f"sglang-{stack}"
    shutil.copytree(tree.package, root / "sglang")
    for dist_info in tree.root.glob("sglang-*.dist-info"):
        shutil.copytree(dist_info, root / dist_info.name)
    patchset.apply(patchset.PatchSeries.load(version=stack), locate(root))
    return root


def libraries(stack: str, names: list[str], cache: Path) -> Path:
    """`names` from the stack's uv.lock, the wheels for this interpreter, unpacked into one directory (once)."""
    audit = load_script("audit-wheel-libraries")
    pins = json.loads(PINS.read_text())["stacks"][stack]
    lock = tomllib.loads((REPO / pins["workspace"] / "uv.lock").read_text())
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheels = []
    for name in names:
        package = next((p for p in lock["package"] if p["name"] == name), None)
        if package is None:
            raise SystemExit(f"{pins['workspace']}/uv.lock has no {name} (nix/flashinfer-trace.json libraries)")
        wheel = audit.best_wheel(package, tag)
        wheels.append(audit.download(wheel["url"], wheel["hash"].removeprefix("sha256:"), cache))
    target = cache / ("trace-" + "-".join(sorted(w.name.split("-")[0] + w.name.split("-")[1] for w in wheels)))
    if not (target / ".complete").is_file():
        staging = Path(tempfile.mkdtemp(prefix=".trace-", dir=cache))
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(staging)
        (staging / ".complete").touch()
        if not target.exists():
            staging.rename(target)
        else:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def settings_argv(inputs: dict) -> tuple[list[str], int]:
    """The project's server settings as SGLang's arguments, for one rank of its tensor parallelism."""
    settings = ServerSettings(model_path="{target}", speculative_draft_model_path="{draft}")
    argv = sglang_args(settings)
    tp = settings.tp_size
    argv[argv.index("--tp-size") + 1] = "1"
    return argv, tp


def model_configs(inputs: dict, tp: int) -> tuple[dict, dict[str, dict]]:
    """The target and each draft geometry, with the heads of one rank of `tp`."""

    def per_rank(attention: dict) -> dict:
        heads = {k: max(1, attention[k] // tp) for k in ("num_attention_heads", "num_key_value_heads")}
        return {**attention, **heads}

    target = inputs["target"]
    text = {**target["rest"], **per_rank(target["attention"])}
    wrapper = {**target["wrapper"], "text_config": text}
    drafts = {
        name: {**inputs["drafts"]["rest"], **per_rank(draft["attention"])}
        for name, draft in inputs["drafts"].items()
        if name != "rest"
    }
    return wrapper, drafts


def trace(stack: str, cache: Path) -> dict:
    """Every trace of the stack (GPU x draft), merged into the data."""
    inputs = json.loads(INPUTS.read_text())
    argv, tp = settings_argv(inputs)
    target, drafts = model_configs(inputs, tp)
    cuda = json.loads(PINS.read_text())["stack"]["cuda"]  # the CUDA every stack is built with
    with tempfile.TemporaryDirectory(prefix="flashinfer-calls-") as work:
        work = Path(work)
        tree = patched_tree(stack, cache, work)
        site = libraries(stack, inputs["libraries"][stack], cache)
        jobs = []
        for capability, gpu in inputs["gpus"].items():
            request = {
                "capability": [int(x) for x in capability.split(".")],
                "gpu": gpu,
                "cuda": cuda,
                "argv": argv,
                "target_config": target,
                "drafts": drafts,
                "kv_tokens": inputs["kv_tokens"],
                "environment": inputs["environment"],
            }
            path = work / f"request-{capability}.json"
            path.write_text(json.dumps(request))
            jobs.append((capability, path))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(site)]), "PYTHONDONTWRITEBYTECODE": "1"}
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
            traced = pool.map(lambda job: run_trace(job[1], env), jobs)
            runs = dict(zip([capability for capability, _ in jobs], traced, strict=True))
    data = merge(stack, argv, runs)
    data["traced_on"] = {capability: gpu["name"] for capability, gpu in inputs["gpus"].items()}
    return data


def run_trace(request: Path, env: dict) -> dict:
    print(f"  tracing {request.stem.removeprefix('request-')}", file=sys.stderr, flush=True)
    result = subprocess.run(
        [sys.executable, str(TRACE), str(request)], capture_output=True, text=True, env=env, timeout=1800
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines or not lines[-1].startswith("{"):
        raise SystemExit(f"the trace {request.name} failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    return json.loads(lines[-1])


# -- the data --------------------------------------------------------------------------------------------------
def merge(stack: str, argv: list[str], runs: dict[str, dict]) -> dict:
    """Each GPU's trace, merged: a call or an outcome lists the runs it happened in ("9.0" for a target step, which
    does not depend on the draft; "9.0/mha" for a draft step)."""
    first = next(iter(runs.values()))
    steps: dict[str, dict] = {}
    modules: dict[str, dict] = {}
    for capability, run in sorted(runs.items()):
        results = [(capability, run["steps"]["target"])]
        results += [(f"{capability}/{draft}", by_step) for draft, by_step in run["steps"]["drafts"].items()]
        for on, by_step in results:
            for name, result in by_step.items():
                entry = steps.setdefault(name, {"what": result["what"], "calls": {}, "outcomes": {}})
                outcome = {k: v for k, v in result.items() if k != "what"}
                entry["outcomes"].setdefault(json.dumps(outcome, sort_keys=True), []).append(on)
        for event in run["events"]:
            # A CUDA graph's replay is part of its step ("target.verify.cuda_graph_replay" -> ".cuda_graph").
            replay = event["step"].endswith("_replay")
            step = event["step"].removesuffix("_replay")
            on = f"{capability}/{event['draft']}" if event["draft"] else capability
            call = " | ".join(
                (
                    event["module"],
                    event["function"] or "(loaded)",
                    event["api"] or "(direct)",
                    event["site"] or "(no SGLang line)",
                )
            )
            entry = steps.setdefault(step, {"what": "", "calls": {}, "outcomes": {}})
            entry["calls"].setdefault(call, set()).add(on + (" replay" if replay else ""))
            spec = run["specs"].get(event["module"], {"generator": None})
            module = modules.setdefault(event["module"], {**spec, "needed_on": set(), "steps": set()})
            module["needed_on"].add(capability)
            module["steps"].add(step)
    return {
        "_comment": "Generated by nix/scripts/audit-flashinfer-calls.py (do not edit): the FlashInfer calls of this "
        "stack's SGLang (patched) on the EAGLE-3 path, traced on the CPU for each GPU of nix/flashinfer-trace.json "
        "(a target step once a GPU; a draft step a GPU and draft: mha decodes without tensor cores, gqa with). "
        "calls: 'module | function | FlashInfer API | SGLang line' -> the runs it happened in; '(loaded)' is "
        "FlashInfer loading the module, once a process. modules: what nix/scripts/flashinfer-aot.py builds.",
        "sglang": stack,
        "flashinfer": first["flashinfer"],
        "worker": first["worker"],
        "backends": first["backends"],
        "argv": argv,
        "steps": {
            name: {
                "what": entry["what"],
                "outcomes": {", ".join(sorted(ons)): json.loads(k) for k, ons in sorted(entry["outcomes"].items())},
                "calls": {call: sorted(ons) for call, ons in sorted(entry["calls"].items())},
            }
            for name, entry in steps.items()
        },
        "modules": {
            name: {**m, "needed_on": sorted(m["needed_on"], key=capability_key), "steps": sorted(m["steps"])}
            for name, m in sorted(modules.items())
        },
    }


def capability_key(capability: str) -> tuple[int, ...]:
    return tuple(int(x) for x in capability.split("."))


def imported_names(tree: SGLangTree) -> dict[str, list[str]]:
    """Each FlashInfer name the attention backends import (from flashinfer..., at any depth), by backend file."""
    found = {}
    for relative in BACKENDS:
        names = []
        for node in ast.walk(ast.parse((tree.package / relative).read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "flashinfer":
                names += [f"{node.module}.{alias.name}" for alias in node.names]
        found[relative] = sorted(set(names))
    return found


def used(name: str, data: dict) -> list[str]:
    """The steps whose calls went through `name` (a class: its methods; a function: itself)."""
    short = name.rsplit(".", 1)[1]
    return sorted(
        {
            step
            for step, entry in data["steps"].items()
            for call in entry["calls"]
            if (api := call.split(" | ")[2]) == short or api.startswith(short + ".") or api.endswith("." + short)
        }
    )


def problems(data: dict, policy: dict) -> list[str]:
    found = []
    for name, entry in data["steps"].items():
        for ons, outcome in entry["outcomes"].items():
            if not outcome["ok"] and name not in policy.get("failing_steps", {}):
                found.append(f"step {name} failed on {ons}: {outcome['error']} (no reason in {POLICY})")
    for name, module in data["modules"].items():
        if module.get("generator") is None:
            found.append(f"module {name}: no FlashInfer generator made it; it cannot be built ahead of time")
        if any(isinstance(a, dict) and "unresolved" in a for a in module.get("args", [])):
            found.append(f"module {name}: a generator argument the data cannot hold: {module['args']}")
    for file, names in data["imports"].items():
        for name, steps in names.items():
            if not steps and name not in policy.get("unused_imports", {}):
                found.append(
                    f"{file} imports {name}, which no traced step used: trace it or give the reason in "
                    f"{POLICY} unused_imports"
                )
    for name in policy.get("unused_imports", {}):
        if not any(name in names and not names[name] for names in data["imports"].values()):
            found.append(f"{POLICY} explains {name}, which the backends no longer import unused: remove it")
    return found


def markdown() -> str:
    """docs/nix.md's tables of each stack's modules (its flashinfer-modules block)."""
    out = []
    for stack in stack_versions():
        data = json.loads((data_dir(stack) / DATA).read_text())
        out += [f"SGLang {stack} (FlashInfer {data['flashinfer']}):", "",
                "| module | GPUs | generator | steps that load it |", "|---|---|---|---|"]  # fmt: skip
        for name, module in data["modules"].items():
            generator = module["generator"].split(":")[1]
            out.append(
                f"| `{name}` | {', '.join(module['needed_on'])} | `{generator}` | {', '.join(module['steps'])} |"
            )
        out.append("")
    return "\n".join(out).rstrip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", help="a stack of nix/pins.json (default: every stack)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "sglang-eagle3-wheel-audit")
    parser.add_argument("--check", action="store_true", help="exit 1 if the data differs or something is unexplained")
    parser.add_argument("--markdown", action="store_true", help="print docs/nix.md's tables of the data")
    args = parser.parse_args()
    if args.markdown:
        print(markdown())
        return
    if args.stack is not None and args.stack not in stack_versions():
        parser.error(f"no stack {args.stack!r} in nix/pins.json (stacks: {', '.join(stack_versions())})")
    failed = []
    for stack in [args.stack] if args.stack else stack_versions():
        print(f"stack {stack}:", file=sys.stderr)
        data = trace(stack, args.cache)
        data["imports"] = {
            file: {name: used(name, data) for name in names}
            for file, names in imported_names(release.resolve(stack, args.cache)).items()
        }
        output, policy_file = data_dir(stack) / DATA, data_dir(stack) / POLICY
        text = json.dumps(data, indent=1, sort_keys=True) + "\n"
        if args.check and (not output.is_file() or output.read_text() != text):
            failed.append(
                f"{output.relative_to(REPO)} is stale: run {Path(__file__).relative_to(REPO)} --stack {stack}"
            )
        elif not args.check:
            output.write_text(text)
            print(f"wrote {output.relative_to(REPO)}", file=sys.stderr)
        policy = json.loads(policy_file.read_text()) if policy_file.is_file() else {}
        failed += [f"{stack}: {p}" for p in problems(data, policy)]
        print(
            f"{output.relative_to(REPO)}: {len(data['steps'])} steps, {len(data['modules'])} modules", file=sys.stderr
        )
    if failed:
        raise SystemExit("not accounted for:\n  " + "\n  ".join(failed))


if __name__ == "__main__":
    try:
        main()
    except (OSError, urllib.error.URLError) as err:
        raise SystemExit(f"audit-flashinfer-calls: {err}") from None
