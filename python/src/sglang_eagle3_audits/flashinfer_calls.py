"""Each FlashInfer module SGLang's EAGLE-3 path loads, per forward mode and GPU: flashinfer-calls.json.

For each stack, its own SGLang (the pinned wheel with the stack's patch series applied, as Nix builds it) and its own
FlashInfer trace the path (nix/scripts/flashinfer-trace.py, a program run in that foreign environment): once per GPU
of nix/flashinfer-trace.json and per draft geometry (a draft whose decode runs on tensor cores, one whose decode does
not), with the project's own server settings. The data says, for each step (prefill, cached prefix, long cached
prefix, target verify and its CUDA graph, sampling, draft extend, draft decode and their CUDA graphs), which
FlashInfer API SGLang called from which line, and which module each call loaded; and, for each module, the
FlashInfer generator and arguments that make it (what nix/scripts/flashinfer-aot.py builds ahead of time) and the
GPUs that need it. It also lists each FlashInfer name the two attention backends import, and whether a traced step
used it. The stack's flashinfer-call-policy.json names what the trace imports from the stack's lock beside the
test environment ("libraries"), and the reason for a name no step uses or a step that fails. Needs the test
environment (torch, triton, SGLang's pure-Python dependencies) and GNU patch; takes a few minutes.
"""

from __future__ import annotations

import ast
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from sglang_eagle3 import stacks
from sglang_eagle3.errors import CheckFailed
from sglang_eagle3.serving.launch_plan import sglang_args
from sglang_eagle3.serving.settings import ServerSettings
from sglang_eagle3.source.tree import SGLangTree, locate
from sglang_eagle3.trees import patchset

from .base import Audit, Docs
from .closure import REPO, Closure, progress, read_json

INPUTS = REPO / "nix" / "flashinfer-trace.json"
TRACE = REPO / "nix" / "scripts" / "flashinfer-trace.py"
POLICY = "flashinfer-call-policy.json"
BACKENDS = ("srt/layers/attention/flashinfer_backend.py", "srt/layers/attention/flashinfer_mla_backend.py")


def patched_tree(closure: Closure, work: Path) -> Path:
    """The stack's SGLang as Nix builds it: the pinned wheel, unpacked, with the stack's series applied."""
    tree = closure.sglang_tree()
    root = work / f"sglang-{closure.version}"
    shutil.copytree(tree.package, root / "sglang")
    for dist_info in tree.root.glob("sglang-*.dist-info"):
        shutil.copytree(dist_info, root / dist_info.name)
    patchset.apply(patchset.PatchSeries.load(version=closure.version), locate(root))
    return root


def libraries(closure: Closure, names: list[str]) -> Path:
    """`names` from the stack's uv.lock, the wheels for this interpreter, unpacked into one directory (once)."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheels = [closure.wheel(closure.locked(name), tag) for name in names]
    target = closure.cache / ("trace-" + "-".join(sorted(w.name.split("-")[0] + w.name.split("-")[1] for w in wheels)))
    if not (target / ".complete").is_file():
        staging = Path(tempfile.mkdtemp(prefix=".trace-", dir=closure.cache))
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


def trace(closure: Closure, names: list[str]) -> dict:
    """Every trace of the stack (GPU x draft), merged into the data; ``names``: what it imports from the lock."""
    inputs = read_json(INPUTS, "what the FlashInfer trace runs on")
    argv, tp = settings_argv(inputs)
    target, drafts = model_configs(inputs, tp)
    cuda = stacks.pins()["stack"]["cuda"]  # the CUDA every stack is built with
    with tempfile.TemporaryDirectory(prefix="flashinfer-calls-") as work:
        work = Path(work)
        tree = patched_tree(closure, work)
        site = libraries(closure, names)
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
    data = merge(closure.version, argv, runs)
    data["traced_on"] = {capability: gpu["name"] for capability, gpu in inputs["gpus"].items()}
    return data


def run_trace(request: Path, env: dict) -> dict:
    progress(f"tracing {request.stem.removeprefix('request-')}")
    result = subprocess.run(
        [sys.executable, str(TRACE), str(request)], capture_output=True, text=True, env=env, timeout=1800
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines or not lines[-1].startswith("{"):
        raise CheckFailed(f"the trace {request.name} failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
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
        "_comment": "Generated by python -m sglang_eagle3_audits --only flashinfer-calls (do not edit): the FlashInfer "
        "calls of this "
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


def table(stack: str, data: dict) -> list[str]:
    """docs/nix.md's table of a stack's modules (its flashinfer-modules block)."""
    out = [f"SGLang {stack} (FlashInfer {data['flashinfer']}):", "",
           "| module | GPUs | generator | steps that load it |", "|---|---|---|---|"]  # fmt: skip
    for name, module in data["modules"].items():
        generator = module["generator"].split(":")[1]
        out.append(f"| `{name}` | {', '.join(module['needed_on'])} | `{generator}` | {', '.join(module['steps'])} |")
    return [*out, ""]


class FlashInferCalls(Audit):
    name = "flashinfer-calls"
    data = "flashinfer-calls.json"
    policy = POLICY
    policy_shape = {"libraries": (list, None), "unused_imports": (dict, str), "failing_steps": (dict, str)}
    inputs = ("each stack's pinned SGLang wheel with its patch series",
              "each stack's uv.lock (its FlashInfer, and what the trace imports: flashinfer-call-policy.json)",
              "nix/flashinfer-trace.json", "the project's server settings", "nix/scripts/flashinfer-trace.py",
              "each stack's flashinfer-call-policy.json")  # fmt: skip
    docs = Docs("docs/nix.md", "flashinfer-modules")

    def scan(self, closure: Closure) -> dict:
        data = trace(closure, self.policy_of(closure)["libraries"])
        data["imports"] = {file: {name: used(name, data) for name in names}
                           for file, names in imported_names(closure.sglang_tree()).items()}  # fmt: skip
        progress(f"{len(data['steps'])} steps, {len(data['modules'])} modules")
        return data

    def problems(self, data: dict, closure: Closure) -> list[str]:
        return problems(data, self.policy_of(closure))

    def markdown(self, results: dict[Closure, dict]) -> str:
        return "\n".join(line for closure, data in results.items() for line in table(closure.version, data)).rstrip()


AUDIT = FlashInferCalls()
