#!/usr/bin/env python3
"""Record every start-up gate of a stack's server closure, judged against the versions the stack composes.

A gate is a place where the code compares a version or a capability with what is installed or present:
SGLang's assert_pkg_version and check_pkg_version_at_least, its comparisons on torch_release and cuDNN,
FlashInfer's, the kernel package's, Triton's, tvm-ffi's, transformers', torch's own
(python/src/sglang_eagle3/source/startup_gates.py says exactly what is recognised). Every wheel of the
server closure is read, resolved from the stack's uv.lock as the ELF audit resolves it, and each gate is
evaluated with the values the stack composes: the lock's versions with nix/pins.json's swaps (torch
2.9.1+cu130, cuDNN 9.16.0.29), Python, CUDA 13.0, cudaPackages' NCCL. Gates that read the GPU (compute
capability, device properties) are judged for the tuned host (SM120) and again by `sglang-eagle3 probe` on
the host it runs on.

Each stack's startup-gates.json is the data (generated; keyed by file, function and comparison, so a new
release's new gates show up as new keys; lines are information). Its startup-gate-policy.json says, for
every gate that raises and does not pass for the stack (fails, or cannot be evaluated, or reads the GPU and
fails on the tuned host), why the server never reaches it or why it does not matter. tests/test_startup_gates.py
proves the data is what the wheels hold and every such gate has a reason.

    python nix/scripts/audit-startup-gates.py [--stack VERSION] [--cache DIR] [--check]

Without --stack, every stack of nix/pins.json; --check compares instead of writing and exits 1 on a
difference, a failing gate or one not accounted for.

Needs: the sglang_eagle3 package (the test environment); network access to PyPI for a wheel not in the cache.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import hashlib
import importlib.util
import json
import re
import sys
import urllib.error
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "src"))

from sglang_eagle3 import files  # noqa: E402 - atomic cache writes
from sglang_eagle3.source import startup_gates  # noqa: E402 - the repository's package, found above
from sglang_eagle3.source.constants import name_resolution_code  # noqa: E402 - the repository's package, found above

PINS = REPO / "nix" / "pins.json"
DATA, POLICY = "startup-gates.json", "startup-gate-policy.json"
# The tuned host's GPU: RTX PRO 6000 Blackwell Server Edition, compute capability 12.0 (docs/gpu-host.md).
TUNED_HOST = startup_gates.Device(major=12, minor=0, name="NVIDIA RTX PRO 6000 Blackwell Server Edition")
# Verdicts of a gate that raises which need a reason in the policy ("armed": its comparison goes the raising
# way and the test's other terms decide). Gates that read the GPU are the host's: probe judges them there.
NEEDS_REASON = {"fail", "unevaluated", "armed"}
SCANNER = Path(startup_gates.__file__)


def lookups_audit():
    spec = importlib.util.spec_from_file_location(
        "audit_lookups", REPO / "nix" / "scripts" / "audit-runtime-lookups.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stack_versions() -> list[str]:
    return [v for v in json.loads(PINS.read_text())["stacks"] if not v.startswith("_")]


def data_dir(stack: str) -> Path:
    return REPO / json.loads(PINS.read_text())["stacks"][stack]["data"]


def metadata_audit():
    return load("audit-metadata")


def load(name: str):
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), REPO / "nix" / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def composed(stack: str, closure: dict[str, dict], modules: dict[str, str]) -> startup_gates.Values:
    """The versions the Nix build composes for this stack: the lock's, with nix/pins.json's swaps, and the CUDA
    distributions the closure answers with cudaPackages members' versions (audit-metadata.py's "nix" view)."""
    environments = metadata_audit().Stack(stack)
    for name, installed in environments.pinned_names.items():  # torch 2.9.1+cu130; cuDNN's CUDA 13 build
        for module in [m for m, d in modules.items() if d == name]:
            modules[module] = installed
    return values_of(environments.nix, environments, modules)


def reference(stack: str, modules: dict[str, str]) -> startup_gates.Values:
    """The environment SGLang was tested in (metadata-policy.json "reference": the CUDA 13 image where its
    versions are known, else a pip install of the lock), judged with the same host and Python."""
    environments = metadata_audit().Stack(stack)
    return values_of(environments.reference(), environments, dict(modules))


def values_of(packages: dict[str, str], environments, modules: dict[str, str]) -> startup_gates.Values:
    """Values for one environment's distributions: cuDNN and NCCL read from the distributions that carry them."""
    pins = json.loads(PINS.read_text())
    cudnn = next(v for n, v in sorted(packages.items()) if n.startswith("nvidia-cudnn-cu"))
    major, minor, patch = (int(p) for p in cudnn.split(".")[:3])
    nccl = next(v for n, v in sorted(packages.items()) if n.startswith("nvidia-nccl-cu"))
    return startup_gates.Values(
        python=environments.closure_policy["python"],
        packages=dict(packages),
        modules=modules,
        cuda=pins["stack"]["cuda"],
        cudnn=major * 10000 + minor * 100 + patch,  # torch's encoding (torch/backends/cudnn/__init__.py)
        nccl=tuple(int(p) for p in nccl.split(".")[:3]),
        device=TUNED_HOST,
    )


def scanned(wheel: Path, cache: Path) -> tuple[list[dict], list[str], list[dict]]:
    """(the gates of a wheel as records, its top-level modules, what the reader could not resolve), kept in the
    cache under the wheel's name and the scanner's hash: reading torch takes a minute."""
    digest = hashlib.sha256(SCANNER.read_bytes() + name_resolution_code() + Path(__file__).read_bytes())
    digest = digest.hexdigest()[:16]
    kept = cache / "startup-gates" / digest / f"{wheel.name}.json"
    if kept.is_file():
        with contextlib.suppress(ValueError, KeyError, TypeError):  # a damaged entry is scanned again and replaced
            record = files.loads_json(kept.read_text())
            return record["gates"], record["modules"], record["unresolved"]
    with zipfile.ZipFile(wheel) as archive:
        names = sorted(archive.namelist())
        sources = [(n, archive.read(n).decode("utf-8", errors="replace")) for n in names if n.endswith(".py")]
    modules = sorted(
        {n.split("/")[0].removesuffix(".py") for n in names if ".dist-info/" not in n and ".data/" not in n} - {""}
    )
    found, unresolved = startup_gates.wheel_scan(sources)
    gates = [gate.record() for gate in found]
    files.write_atomic(
        kept, json.dumps({"gates": gates, "modules": modules, "unresolved": unresolved})
    )  # whole, or not there
    return gates, modules, unresolved


def inventory(stack: str, cache: Path) -> dict:
    lookups = lookups_audit()
    audit = lookups.wheel_audit()
    closure = lookups.server_closure(stack)
    per_package, modules = {}, {}
    for name, wheel_of in closure.items():
        package = wheel_of["package"]
        wheel = audit.best_wheel(package, "cp312")
        path = audit.download(wheel["url"], wheel["hash"].removeprefix("sha256:"), cache)
        gates, tops, unresolved = scanned(path, cache)
        for top in tops:
            modules.setdefault(top, name)
        per_package[name] = {"wheel": path.name, "gates": gates, "unresolved": unresolved}
        if wheel_of["proxy"]:
            per_package[name]["proxy"] = wheel_of["proxy"]
        if gates:
            print(f"  {name} {package['version']}: {len(gates)} gates", file=sys.stderr)
    elsewhere = reference(stack, modules)
    values = composed(stack, closure, modules)
    where = json.loads((data_dir(stack) / "metadata-policy.json").read_text())["reference"]
    packages = {}
    for name, record in per_package.items():
        judged = {}
        for gate_record in record["gates"]:
            gate = startup_gates.Gate.from_record(gate_record)
            outcome, verdict = gate.verdict(values)
            key = unique(judged, gate.key())
            judged[key] = {"location": f"{gate.file}:{gate.line}", "reads": gate.kinds, "effect": gate.effect}
            judged[key]["verdict"] = verdict
            there = gate.verdict(elsewhere)[1]
            if there != verdict:  # the environment SGLang was tested in decides otherwise: a reason says what follows
                judged[key]["verdict_" + where] = there
            if gate.host:  # judged again on the host by probe: the comparison as data
                judged[key]["host"] = gate_record
        unresolved = [{"location": f"{u['file']}:{u['line']}", "function": u["function"],
                       "comparison": u["comparison"], "names": u["names"]} for u in record["unresolved"]]  # fmt: skip
        if judged or unresolved:
            entry = {"version": values.packages.get(name, closure[name]["package"]["version"]), "gates": judged}
            if unresolved:
                entry["unresolved"] = unresolved
            if "proxy" in record:
                entry["proxy"] = record["proxy"]
            packages[name] = entry
    files = audit.stack_files(stack)
    return {
        "_comment": " ".join(
            [
                "GENERATED by nix/scripts/audit-startup-gates.py from every wheel of the server closure of",
                f"{files['lock'].relative_to(REPO)} (resolved as {files['policy'].relative_to(REPO)} says);",
                "do not edit. Each gate: where it is, what it reads, what it decides (raise, warn, branch, value)",
                "and its verdict for the versions below (composed); verdict_<environment> where the environment",
                "SGLang was tested in (reference: its distributions that differ, null where absent) decides",
                "otherwise; unresolved: the gates that read a name the reader cannot resolve to a constant.",
                f"The reasons are in {(data_dir(stack) / POLICY).relative_to(REPO)}.",
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


def unique(existing: dict, key: str) -> str:
    """The same comparison twice in one function keeps both: the second is `key #2`."""
    if key not in existing:
        return key
    n = 2
    while f"{key} #{n}" in existing:
        n += 1
    return f"{key} #{n}"


def problems(data: dict, policy: dict) -> list[str]:
    """Gates that fail for the stack, gates that raise and cannot be judged without a reason, gates whose verdict
    where SGLang was tested differs without a reason saying what that means for Kimi-K2.5 with EAGLE-3, and reasons
    for gates that are gone."""
    found, used, used_differs = [], set(), set()
    reasons, differs = policy.get("gates", {}), policy.get("differs", {})
    where = data["reference"]["environment"]
    for package, entry in data["packages"].items():
        for key, gate in entry["gates"].items():
            name = f"{package}: {key}"
            if f"verdict_{where}" in gate:
                matched = [r for r in differs if r == name or ("*" in r and fnmatch.fnmatchcase(name, r))]
                if matched:
                    used_differs.update(matched)
                else:
                    there = gate["verdict_" + where]
                    found.append(f"{name} ({gate['location']}): {gate['verdict']} in the Nix closure, {there} in the "
                                 f"{where}, and no reason in {POLICY} differs")  # fmt: skip
            if gate["effect"] != "raise" or gate["verdict"] not in NEEDS_REASON or gate.get("host"):
                continue
            # exact keys (comparisons hold [ and ]); a key with * is an fnmatch pattern
            matched = [r for r in reasons if r == name or ("*" in r and fnmatch.fnmatchcase(name, r))]
            if matched:
                used.update(matched)
                continue
            found.append(f"{name} ({gate['location']}): {gate['verdict']} for this stack, and no reason in {POLICY}")
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
    total = sum(counts.values())
    summary = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items(), key=lambda i: -i[1]))
    unresolved = sum(len(e.get("unresolved", [])) for e in data["packages"].values())
    where = data["reference"]["environment"]
    differ = sum(1 for e in data["packages"].values() for g in e["gates"].values() if f"verdict_{where}" in g)
    return "\n".join(
        [
            f"SGLang {stack}: {total} gates in {len(data['packages'])} wheels ({summary}); {differ} judged otherwise "
            f"in the {where}; {unresolved} gates read a name not resolved to a constant.",
            "",
            "| package | where | comparison | verdict |",
            "|---|---|---|---|",
            *rows,
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", help="A stack of nix/pins.json (default: every stack).")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "sglang-eagle3-wheel-audit")
    parser.add_argument(
        "--check", action="store_true", help="Exit 1 if the data differs or a gate is not accounted for."
    )
    parser.add_argument("--markdown", action="store_true", help="Print docs/nix.md's table of each stack's data.")
    args = parser.parse_args()
    if args.stack is not None and args.stack not in stack_versions():
        parser.error(f"no stack {args.stack!r} in nix/pins.json (stacks: {', '.join(stack_versions())})")
    failed = []
    if args.markdown:
        for stack in [args.stack] if args.stack else stack_versions():
            print(table(stack, json.loads((data_dir(stack) / DATA).read_text())) + "\n")
        return
    for stack in [args.stack] if args.stack else stack_versions():
        output, policy_file = data_dir(stack) / DATA, data_dir(stack) / POLICY
        print(f"stack {stack}:", file=sys.stderr)
        data = inventory(stack, args.cache)
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
        if not failed:
            count = sum(len(e["gates"]) for e in data["packages"].values())
            print(f"{output.relative_to(REPO)}: {count} gates; every gate that raises passes or has a reason")
    if failed:
        raise SystemExit("not accounted for:\n  " + "\n  ".join(failed))


if __name__ == "__main__":
    try:
        main()
    except (OSError, urllib.error.URLError) as err:
        raise SystemExit(f"audit-startup-gates: {err} (this generator needs network access to PyPI)") from None
