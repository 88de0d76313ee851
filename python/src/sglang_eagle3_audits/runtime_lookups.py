"""Every program, library, fixed path and toolchain or cache variable a stack's server code looks up at run time,
and what provides it: runtime-lookups.json and its runtime-lookup-policy.json.

The ELF audit (wheel_libraries) sees what the dynamic linker loads. It cannot see what the code finds by itself
while it runs: a program on PATH, a library opened by name, a fixed path such as /sbin/ldconfig, a toolchain named
by an environment variable (lookups.py says exactly what counts). Every wheel of the stack's server closure
(closure.py, as the ELF audit resolves it) is read; a lookup's key is (package, kind, name), stable across versions;
its locations (file:line, or file:strings for a compiled module) are information only. The check: the data covers
the closure, and every lookup is provided by nix/runtime-env.json (its shared entries plus the stack's own,
"stacks") or is not needed, with a reason; a reason that holds only because the environment sets something names
that entry (its "relies"), and the entry must exist. tests/test_runtime_lookups.py runs the same checks.
"""

from __future__ import annotations

import fnmatch
import json
import re

from sglang_eagle3.errors import BadInput

from .base import Audit
from .closure import REPO, Closure, progress, read_json, relative
from .lookup_scan import SCANNER

ENV = REPO / "nix" / "runtime-env.json"
SECTIONS = ("programs", "libraries", "environment", "paths", "caches")


def reason(value, policy: dict) -> tuple[str, list[str]]:
    """(text, entries it relies on) of a notNeeded value or a rule's reason: a reason id, a text,
    or {"why": text, "relies": ["environment.CUDA_HOME", ...]}."""
    value = policy["reasons"].get(value, value) if isinstance(value, str) else value
    if isinstance(value, dict):
        return value["why"], list(value.get("relies", []))
    return value, []


def disposition(package: str, key: str, lookup: dict, policy: dict) -> tuple[str, str] | None:
    """("provided", "programs.nvidia-smi") or ("notNeeded", reason) for one lookup; None when it has none."""
    full = f"{package} {key}"
    if full in policy["provided"]:
        return "provided", policy["provided"][full]
    if full in policy["notNeeded"]:
        return "notNeeded", reason(policy["notNeeded"][full], policy)[0]
    rules = [next((r for r in policy["rules"] if fnmatch.fnmatch(loc.rsplit(":", 1)[0], r)), None)
             for loc in lookup["locations"]]  # fmt: skip
    if all(rules):  # every place it is made is code the server does not run
        return "notNeeded", "; ".join(sorted({reason(policy["rules"][r], policy)[0] for r in rules}))
    return None


def stack_env(env: dict, version: str) -> dict:
    """nix/runtime-env.json as one stack sees it: the shared sections plus its own additions
    (env["stacks"][version]), as nix/runtime-env.nix renders it for that stack's wrapper."""
    own = env.get("stacks", {}).get(version, {})
    merged = {section: dict(env[section]) for section in SECTIONS}
    for section, entries in own.items():
        if section not in SECTIONS:
            raise BadInput(f"nix/runtime-env.json stacks.{version}.{section}: not a section ({', '.join(SECTIONS)})")
        for name, value in entries.items():
            if name in env[section]:
                raise BadInput(
                    f"nix/runtime-env.json stacks.{version}.{section}.{name}: already defined for every stack; "
                    "define it once (remove one of the two)"
                )
            merged[section][name] = value
    return merged


def problems(data: dict, policy: dict, env: dict) -> list[str]:
    """Everything that keeps the inventory from being accounted for; empty when it is."""
    found = []
    entries = {f"{section}.{name}" for section in SECTIONS for name in env[section]}
    keys = {f"{p} {k}" for p, record in data["packages"].items() for k in record["lookups"]}
    used_rules = set()
    for package, record in data["packages"].items():
        for key, lookup in record["lookups"].items():
            answer = disposition(package, key, lookup, policy)
            if answer is None:
                found.append(f"{package} {key} ({lookup['locations'][0]}): no disposition")
            elif answer[0] == "provided" and answer[1] not in entries:
                found.append(f"{package} {key}: provided by {answer[1]}, which nix/runtime-env.json lacks")
            if f"{package} {key}" not in policy["provided"] and f"{package} {key}" not in policy["notNeeded"]:
                used_rules.update(r for loc in lookup["locations"] for r in policy["rules"]
                                  if fnmatch.fnmatch(loc.rsplit(":", 1)[0], r))  # fmt: skip
    both = set(policy["provided"]) & set(policy["notNeeded"])
    found += [f"{key}: both provided and notNeeded" for key in sorted(both)]
    stale = (set(policy["provided"]) | set(policy["notNeeded"])) - keys
    found += [f"{key}: disposition of a lookup the wheels no longer make" for key in sorted(stale)]
    found += [f"rule {rule} disposes of no lookup" for rule in policy["rules"] if rule not in used_rules]
    used = [*policy["rules"].values(), *policy["notNeeded"].values()]
    used_ids = {v for v in used if isinstance(v, str)}
    found += [f"reason {r} is not used" for r in policy["reasons"] if r not in used_ids]
    found += [f"rule {r}: unknown reason {v}" for r, v in policy["rules"].items() if v not in policy["reasons"]]
    for text, relies in {json.dumps(reason(v, policy)): reason(v, policy) for v in used}.values():
        found += [f"reason too short to show why: {text!r}"] if len(text) <= 40 else []
        found += [f"reason relies on {e}, which nix/runtime-env.json lacks: {text!r}" for e in relies
                  if e not in entries]  # fmt: skip
        found += [f"reason names {e} without relying on it (add \"relies\": [\"{e}\"]): {text!r}"
                  for e in sorted(entries - set(relies)) if names_entry(text, e)]  # fmt: skip
    found += [f"nix/runtime-env.json {e}: no why" for e in sorted(entries) if not entry(env, e).get("why")]
    return found


def coverage(data: dict, closure: dict[str, dict]) -> list[str]:
    """The wheels of the server closure (server_closure) the data does not scan, at the version the
    lock pins, and the packages it scans that the closure no longer has; empty when they agree."""
    found = [f"{name} {wheel['package']['version']}: a wheel of the server closure the data does not scan"
             for name, wheel in closure.items() if name not in data["packages"]]  # fmt: skip
    found += [f"{name}: scanned, but not in the server closure" for name in data["packages"] if name not in closure]
    for name, wheel in closure.items():
        scanned, pinned = data["packages"].get(name, {}).get("version"), wheel["package"]["version"]
        if scanned and scanned != pinned:
            found.append(f"{name}: scanned at {scanned}, the lock pins {pinned}")
    return found


def names_entry(text: str, dotted_name: str) -> bool:
    """Whether a reason's text names an entry of the environment ("sets CUDA_HOME", "on PATH beside
    nvcc", "/run/opengl-driver/lib"): a reason that holds because of an entry says so in "relies"."""
    name = dotted_name.partition(".")[2]
    return re.search(rf"(?<![\w.$/-]){re.escape(name)}(?![\w+-])", text) is not None


def entry(env: dict, dotted_name: str) -> dict:
    section, _, name = dotted_name.partition(".")
    return env[section][name]


class RuntimeLookups(Audit):
    name = "runtime-lookups"
    data = "runtime-lookups.json"
    policy = "runtime-lookup-policy.json"
    policy_shape = {"provided": (dict, str), "notNeeded": (dict, (str, dict)), "rules": (dict, str),
                    "reasons": (dict, (str, dict))}  # fmt: skip
    inputs = ("each stack's uv.lock", "each stack's wheel-closure.json",
              "every wheel of each server closure (downloaded, sha256 checked)")  # fmt: skip
    scanners = (SCANNER,)

    def scan(self, closure: Closure) -> dict:
        packages = {}
        for name, wheel_of in closure.server.items():
            path = closure.server_wheels[name]
            found = closure.scanned(SCANNER, path)
            record = {"version": wheel_of["package"]["version"], "wheel": path.name, "lookups": found["lookups"]}
            if found["unresolved"]:
                record["unresolved"] = found["unresolved"]
            if wheel_of["proxy"]:
                record["proxy"] = wheel_of["proxy"]
            packages[name] = record
        progress(f"{sum(len(r['lookups']) for r in packages.values())} lookups in {len(packages)} wheels")
        return {
            "_comment": " ".join(
                [
                    "GENERATED by python -m sglang_eagle3_audits --only runtime-lookups",
                    "from every wheel of the server closure of",
                    f"{relative(closure.lock_file)} (resolved as {relative(closure.policy_file)} says);",
                    "do not edit. For each package: every program, library, fixed path, toolchain and cache",
                    "environment variable its Python and Cython code looks up at run time, keyed 'kind name', with",
                    f"where (information only). The dispositions are in {relative(closure.data / self.policy)}.",
                ]
            ),
            "packages": packages,
        }

    def problems(self, data: dict, closure: Closure) -> list[str]:
        env = stack_env(read_json(ENV, "the run-time environment's definition"), closure.version)
        return coverage(data, closure.server) + problems(data, self.policy_of(closure), env)


AUDIT = RuntimeLookups()
