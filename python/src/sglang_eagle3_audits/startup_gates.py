"""Every start-up gate of a stack's server closure, judged against the versions the stack composes:
startup-gates.json and its startup-gate-policy.json.

A gate is a place where the code compares a version or a capability with what is installed or present (gates.py
says exactly what is recognised; gate_scan.py finds them). Every wheel of the server closure is read, and each gate
is evaluated with the values the stack composes: the lock's versions with nix/pins.json's swaps (torch
2.9.1+cu130, cuDNN 9.16.0.29), Python, CUDA 13.0, cudaPackages' NCCL; and again in the environment SGLang was
tested in (metadata-policy.json's "reference", environments.py). Gates that read the GPU are judged for the tuned
host (SM120). The data is keyed by file, function and comparison, so a new release's new gates show up as new keys;
the policy says, for every gate that raises and does not pass for the stack, why the server never reaches it or
why it does not matter, and for every gate judged otherwise where SGLang was tested, what that means for Kimi-K2.5
with EAGLE-3. tests/test_startup_gates.py checks the same.
"""

from __future__ import annotations

import fnmatch
import re

from sglang_eagle3 import stacks

from . import environments
from .base import Audit, Docs, unique
from .closure import Closure, progress, relative
from .gate_scan import SCANNER
from .gates import Device, Gate, Values

# The tuned host's GPU: RTX PRO 6000 Blackwell Server Edition, compute capability 12.0 (docs/gpu-host.md).
TUNED_HOST = Device(major=12, minor=0, name="NVIDIA RTX PRO 6000 Blackwell Server Edition")
# Verdicts of a gate that raises which need a reason in the policy ("armed": its comparison goes the raising
# way and the test's other terms decide). Gates that read the GPU are the host's: probe judges them there.
NEEDS_REASON = {"fail", "unevaluated", "armed"}
POLICY = "startup-gate-policy.json"


def values_of(packages: dict[str, str], closure: Closure, modules: dict[str, str]) -> Values:
    """Values for one environment's distributions: cuDNN and NCCL read from the distributions that carry them."""
    cudnn = next(v for n, v in sorted(packages.items()) if n.startswith("nvidia-cudnn-cu"))
    major, minor, patch = (int(p) for p in cudnn.split(".")[:3])
    nccl = next(v for n, v in sorted(packages.items()) if n.startswith("nvidia-nccl-cu"))
    return Values(
        python=closure.policy["python"],
        packages=dict(packages),
        modules=modules,
        cuda=stacks.pins()["stack"]["cuda"],
        cudnn=major * 10000 + minor * 100 + patch,  # torch's encoding (torch/backends/cudnn/__init__.py)
        nccl=tuple(int(p) for p in nccl.split(".")[:3]),
        device=TUNED_HOST,
    )


def judged(closure: Closure) -> tuple[dict[str, dict], Values, Values]:
    """(package -> its gates as records, unresolved and proxy; the composed values; the reference values)."""
    per_package, modules = {}, {}
    for name, wheel_of in closure.server.items():
        path = closure.server_wheels[name]
        found = closure.scanned(SCANNER, path)
        for top in found["modules"]:
            modules.setdefault(top, name)
        per_package[name] = {"wheel": path.name, "gates": found["gates"], "unresolved": found["unresolved"]}
        if wheel_of["proxy"]:
            per_package[name]["proxy"] = wheel_of["proxy"]
    views = environments.of(closure)
    elsewhere = values_of(views.reference(), closure, dict(modules))
    for name, installed in views.pinned_names.items():  # torch 2.9.1+cu130; cuDNN's CUDA 13 build
        for module in [m for m, d in modules.items() if d == name]:
            modules[module] = installed
    return per_package, values_of(views.nix, closure, modules), elsewhere


def gates_of(record: dict, values: Values, elsewhere: Values, where: str) -> dict[str, dict]:
    """One package's gates, judged: key -> where, what it reads, its effect, its verdict (and where it differs)."""
    found = {}
    for gate_record in record["gates"]:
        gate = Gate.from_record(gate_record)
        _, verdict = gate.verdict(values)
        key = unique(found, gate.key())
        found[key] = {"location": f"{gate.file}:{gate.line}", "reads": gate.kinds, "effect": gate.effect,
                      "verdict": verdict}  # fmt: skip
        there = gate.verdict(elsewhere)[1]
        if there != verdict:  # the environment SGLang was tested in decides otherwise: a reason says what follows
            found[key]["verdict_" + where] = there
        if gate.host:  # judged again on the host by probe: the comparison as data
            found[key]["host"] = gate_record
    return found


def problems(data: dict, policy: dict) -> list[str]:
    """Gates that fail for the stack, gates that raise and cannot be judged without a reason, gates whose verdict
    where SGLang was tested differs without a reason saying what that means for Kimi-K2.5 with EAGLE-3, and reasons
    for gates that are gone."""
    found, used, used_differs = [], set(), set()
    reasons, differs = policy.get("gates", {}), policy.get("differs", {})
    where = data["reference"]["environment"]

    def matching(patterns, name):  # exact keys (comparisons hold [ and ]); a key with * is an fnmatch pattern
        return [r for r in patterns if r == name or ("*" in r and fnmatch.fnmatchcase(name, r))]

    for package, entry in data["packages"].items():
        for key, gate in entry["gates"].items():
            name = f"{package}: {key}"
            if f"verdict_{where}" in gate:
                if matched := matching(differs, name):
                    used_differs.update(matched)
                else:
                    there = gate["verdict_" + where]
                    found.append(f"{name} ({gate['location']}): {gate['verdict']} in the Nix closure, {there} in the "
                                 f"{where}, and no reason in {POLICY} differs")  # fmt: skip
            if gate["effect"] != "raise" or gate["verdict"] not in NEEDS_REASON or gate.get("host"):
                continue
            if matched := matching(reasons, name):
                used.update(matched)
            else:
                found.append(
                    f"{name} ({gate['location']}): {gate['verdict']} for this stack, and no reason in {POLICY}"
                )
    found += [f"{POLICY} has a reason that matches no gate needing one: {name}" for name in sorted(set(reasons) - used)]
    found += [f"{POLICY} differs has a reason that matches no gate whose verdict differs: {name}"
              for name in sorted(set(differs) - used_differs)]  # fmt: skip
    for name, text in differs.items():
        if "Kimi-K2.5" not in text or not re.search(r"\.py:\d+", text):
            found.append(f"{POLICY} differs {name}: the reason must say what happens to Kimi-K2.5 with EAGLE-3 on "
                         "this stack, citing the lines (file.py:N)")  # fmt: skip
    return found


def table(stack: str, data: dict) -> str:
    """docs/nix.md's table for a stack: every gate that raises on what the stack composes (a package's
    version, torch's CUDA, cuDNN, NCCL; not Python's or the GPU's), with its verdict."""
    rows = []
    for package, entry in sorted(data["packages"].items()):
        for key, gate in sorted(entry["gates"].items(), key=lambda item: item[1]["location"]):
            reads = [r for r in gate["reads"] if r not in ("python", "python-text") and not gate.get("host")]
            if gate["effect"] != "raise" or not reads or gate["verdict"] in ("helper", "not installed", "on error"):
                continue
            comparison = key.split(" ", 2)[2].replace("|", "\\|")
            if len(comparison) > 90:
                comparison = comparison[:87] + "..."
            rows.append(f"| {package} {entry['version']} | `{gate['location']}` | `{comparison}` | {gate['verdict']} |")
    counts: dict[str, int] = {}
    for entry in data["packages"].values():
        for gate in entry["gates"].values():
            counts[gate["verdict"]] = counts.get(gate["verdict"], 0) + 1
    summary = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items(), key=lambda i: -i[1]))
    unresolved = sum(len(e.get("unresolved", [])) for e in data["packages"].values())
    where = data["reference"]["environment"]
    differ = sum(1 for e in data["packages"].values() for g in e["gates"].values() if f"verdict_{where}" in g)
    return "\n".join(
        [
            f"SGLang {stack}: {sum(counts.values())} gates in {len(data['packages'])} wheels ({summary}); {differ} "
            f"judged otherwise in the {where}; {unresolved} gates read a name not resolved to a constant.",
            "",
            "| package | where | comparison | verdict |",
            "|---|---|---|---|",
            *rows,
        ]
    )


class StartupGates(Audit):
    name = "startup-gates"
    data = "startup-gates.json"
    policy = POLICY
    policy_shape = {"gates": (dict, str), "differs": (dict, str)}
    inputs = ("each stack's uv.lock and wheel-closure.json", "nix/pins.json", "every wheel of each server closure",
              "each stack's metadata-policy.json (where SGLang was tested)",
              "each stack's startup-gate-policy.json")  # fmt: skip
    docs = Docs("docs/nix.md", "startup-gates")
    scanners = (SCANNER,)

    def scan(self, closure: Closure) -> dict:
        per_package, values, elsewhere = judged(closure)
        where = environments.of(closure).policy["reference"]
        packages = {}
        for name, record in per_package.items():
            found = gates_of(record, values, elsewhere, where)
            unresolved = [{"location": f"{u['file']}:{u['line']}", "function": u["function"],
                           "comparison": u["comparison"], "names": u["names"]}
                          for u in record["unresolved"]]  # fmt: skip
            if found or unresolved:
                entry = {
                    "version": values.packages.get(name, closure.server[name]["package"]["version"]),
                    "gates": found,
                }
                if unresolved:
                    entry["unresolved"] = unresolved
                if "proxy" in record:
                    entry["proxy"] = record["proxy"]
                packages[name] = entry
        progress(f"{sum(len(e['gates']) for e in packages.values())} gates in {len(packages)} wheels")
        return {
            "_comment": " ".join(
                [
                    "GENERATED by python -m sglang_eagle3_audits --only startup-gates",
                    "from every wheel of the server closure of",
                    f"{relative(closure.lock_file)} (resolved as {relative(closure.policy_file)} says);",
                    "do not edit. Each gate: where it is, what it reads, what it decides (raise, warn, branch, value)",
                    "and its verdict for the versions below (composed); verdict_<environment> where the environment",
                    "SGLang was tested in (reference: its distributions that differ, null where absent) decides",
                    "otherwise; unresolved: the gates that read a name the reader cannot resolve to a constant.",
                    f"The reasons are in {relative(closure.data / POLICY)}.",
                ]
            ),
            "reference": {
                "environment": where,
                "cudnn": elsewhere.cudnn,
                "nccl": ".".join(map(str, elsewhere.nccl)),
                "packages": {
                    n: elsewhere.packages.get(n)
                    for n in sorted(set(elsewhere.packages) | set(values.packages))
                    if values.packages.get(n) != elsewhere.packages.get(n)
                },  # fmt: skip
            },
            "composed": {
                "python": values.python,
                "cuda": values.cuda,
                "cudnn": values.cudnn,
                "nccl": ".".join(map(str, values.nccl)),
                "host": {"compute_capability": f"{TUNED_HOST.major}.{TUNED_HOST.minor}", "name": TUNED_HOST.name},
                "packages": dict(sorted(values.packages.items())),
                "modules": dict(sorted(values.modules.items())),
            },
            "packages": packages,
        }

    def problems(self, data: dict, closure: Closure) -> list[str]:
        return problems(data, self.policy_of(closure))

    def markdown(self, results: dict[Closure, dict]) -> str:
        return "\n\n".join(table(closure.version, data) for closure, data in results.items())


AUDIT = StartupGates()
