#!/usr/bin/env python3
"""Record what the server's Python code looks up at run time: nix/runtime-lookups.json.

The ELF audit (audit-wheel-libraries.py) sees what the dynamic linker loads. It cannot see
what Python code finds by itself while it runs: a program on PATH, a library opened by
name, a fixed path such as /sbin/ldconfig, a toolchain named by an environment variable.
This generator reads the Python sources of the real wheels of python/uv.lock (the packages
nix/runtime-lookup-policy.json names) with `ast` and lists every such lookup:

- program: the first argument of subprocess.run/Popen/call/check_call/check_output/
  getoutput/getstatusoutput, os.system, os.popen, os.exec*, os.spawn*, shutil.which: the
  program's name when it is a literal (first element of a list, first word of a string);
  otherwise "<dynamic> " and the expression's source text.
- library: the first argument of ctypes.CDLL/PyDLL, ctypes.cdll.LoadLibrary,
  ctypes.util.find_library, torch.ops.load_library; and dlopen("...") inside string
  literals (C source that Python code compiles).
- path: string literals (not docstrings) that are absolute paths under /sbin, /bin, /usr,
  /opt, /run, /dev, /etc, /lib, /lib64, or that name a lib64 directory. /proc, /sys and
  /tmp are left out: the kernel and every service provide them.
- env: environment variables read by a literal name (os.environ[...], os.environ.get,
  os.getenv, "X" in os.environ, and helpers named env_* or *_env_var, as Triton's knobs)
  when the name is in TOOLCHAIN_ENV, or when the name ends in PATH/HOME/ROOT/LIB/LIBS/BIN/
  ARCH_LIST and is read in the same function as a program or library lookup. SGLang's
  feature flags are not lookups and stay out.

A lookup's key is (package, kind, name), stable across versions; its locations (file:line)
are information only. Wheels are downloaded from the URLs in uv.lock (sha256 checked);
a wheel the Nix build swaps for another build is read through a proxy, named in the data.
tests/test_runtime_lookups.py proves every lookup is provided by nix/runtime-env.json (its
shared entries plus the stack's own, "stacks") or is not needed, with a reason.

    python nix/scripts/audit-runtime-lookups.py [--stack VERSION] [--cache DIR] [--check]

A stack (nix/pins.json "stacks") names its uv.lock and the directory of its policy and data
(0.5.9, the default: python/uv.lock and nix/; 0.5.23: nix/stacks/sglang-0.5.23/).

Needs: packaging (in the test environment); network access to PyPI.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import importlib.util
import json
import re
import sys
import tomllib
import urllib.error
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENV = REPO / "nix" / "runtime-env.json"
SECTIONS = ("programs", "libraries", "environment", "paths")

PROGRAM_CALLS = {
    "subprocess.run", "subprocess.Popen", "subprocess.call", "subprocess.check_call",
    "subprocess.check_output", "subprocess.getoutput", "subprocess.getstatusoutput",
    "os.system", "os.popen", "shutil.which",
}  # fmt: skip
PROGRAM_PREFIXES = ("os.exec", "os.spawn", "os.posix_spawn")
LIBRARY_CALLS = {
    "ctypes.CDLL", "ctypes.PyDLL", "ctypes.cdll.LoadLibrary", "ctypes.pydll.LoadLibrary",
    "ctypes.util.find_library", "torch.ops.load_library",
}  # fmt: skip
ENV_GETTERS = {"os.getenv", "os.environ.get", "os.environ.setdefault", "os.environ.pop"}
TOOLCHAIN_ENV = {
    "PATH", "LD_LIBRARY_PATH", "CC", "CXX", "NVCC", "CUDA_HOME", "CUDA_PATH", "CUDA_ROOT",
    "CUDA_LIB_PATH", "CUDACXX", "TORCH_CUDA_ARCH_LIST", "FLASHINFER_CUDA_ARCH_LIST",
    "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH", "TRITON_CUDACRT_PATH", "TRITON_CUDART_PATH",
    "TRITON_LIBDEVICE_PATH", "TRITON_CUPTI_LIB_PATH", "NCCL_LIBRARY", "SGLANG_NCCL_SO_PATH", "FLASHINFER_NVCC",
}  # fmt: skip
ENV_SUFFIX = re.compile(r"(^|_)(PATH|HOME|ROOT|LIB|LIBS|BIN|ARCH_LIST)$")
FIXED_PATH = re.compile(r"/(sbin|bin|usr|opt|run|dev|etc|lib|lib64)(/[\w.+@-]*)*/?|([\w.$(){}/-]*/)?lib64(/[\w.-]*)*")
DLOPEN = re.compile(r'dlopen\(\s*"([^"]+)"')


def dotted(node: ast.AST) -> str | None:
    """ctypes.util.find_library for that call's function; None for anything not a plain name chain."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> what it was imported as: {"sp": "subprocess", "CDLL": "ctypes.CDLL"}."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update({a.asname or a.name: a.name for a in node.names})
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                if a.name == "*":  # from ctypes import * (pynvml): the lookup functions by their bare names
                    known = PROGRAM_CALLS | LIBRARY_CALLS
                    names.update({n.rsplit(".", 1)[1]: n for n in known if n.rsplit(".", 1)[0] == node.module})
                else:
                    names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def literal_or_dynamic(node: ast.AST | None, first_word: bool) -> str:
    """The looked-up name: a literal's value (its first word for a command line), else the source text."""
    if isinstance(node, ast.List | ast.Tuple) and node.elts:
        node = node.elts[0]  # its first word too: ["hl-smi --query | grep Total"] with shell=True
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip():
        return node.value.split()[0] if first_word else node.value
    text = ast.unparse(node) if node is not None else "?"
    return "<dynamic> " + (text if len(text) <= 80 else text[:77] + "...")


def first_argument(call: ast.Call, keyword: str) -> ast.AST | None:
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def env_name(node: ast.AST, resolve) -> str | None:
    """The variable's name when node reads the environment by a literal name."""
    key = None
    if isinstance(node, ast.Call):
        name = resolve(node.func) or ""
        last = name.rsplit(".", 1)[-1]
        if name in ENV_GETTERS or last.startswith("env_") or last.endswith("_env_var"):
            key = node.args[0] if node.args else None
    elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and resolve(node.value) == "os.environ":
        key = node.slice
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In | ast.NotIn):
        key = node.left if resolve(node.comparators[0]) == "os.environ" else None
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value
    return None


def call_lookup(call: ast.Call, resolve, assigned: dict[str, ast.AST]) -> tuple[str, str] | None:
    """(kind, name) of a program or library lookup made by this call; assigned: the scope's name = [...] lists."""
    name = resolve(call.func)
    if name in PROGRAM_CALLS or (name or "").startswith(PROGRAM_PREFIXES):
        argument = first_argument(call, "args" if name.startswith("subprocess") else "cmd")
        if name.startswith("os.spawn") and len(call.args) > 1:
            argument = call.args[1]  # spawn*(mode, path, ...)
        if isinstance(argument, ast.Name) and argument.id in assigned:
            argument = assigned[argument.id]  # command = ["ninja", ...]; subprocess.run(command)
        return "program", literal_or_dynamic(argument, first_word=True)  # a string is a command line
    if name in LIBRARY_CALLS:
        return "library", literal_or_dynamic(first_argument(call, "name"), False)
    return None


def lookups_in_module(source: str, filename: str) -> Iterator[tuple[str, str, int]]:
    """(kind, name, line) of every lookup in one module's source."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the wheels' invalid escape sequences are theirs to fix
        tree = ast.parse(source, filename)
    imported = aliases(tree)

    def resolve(node):
        name = dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        head = imported.get(head, head)
        return f"{head}.{rest}" if rest else head

    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))]
    for scope in scopes:
        found, env = [], []
        nodes = list(own_nodes(scope))
        assigned = {
            n.targets[0].id: n.value
            for n, _ in nodes
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.List)
        }
        for node, parent in nodes:
            if isinstance(node, ast.Call) and (lookup := call_lookup(node, resolve, assigned)):
                found.append((*lookup, node.lineno))
            if variable := env_name(node, resolve):
                env.append((variable, node.lineno))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and not isinstance(parent, ast.Expr):
                found += [("path", p, node.lineno) for p in fixed_paths(node.value)]
                found += [("library", m, node.lineno) for m in DLOPEN.findall(node.value)]
        looks_up = any(kind in ("program", "library") for kind, _, _ in found)
        yield from found
        yield from (("env", v, line) for v, line in env if v in TOOLCHAIN_ENV or (looks_up and ENV_SUFFIX.search(v)))


def own_nodes(scope: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(node, parent) for the nodes of a function or module, not those of the functions nested in it."""
    stack = [(child, scope) for child in ast.iter_child_nodes(scope)]
    while stack:
        node, parent = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue  # a scope of its own
        yield node, parent
        stack.extend((child, node) for child in ast.iter_child_nodes(node))


def fixed_paths(text: str) -> list[str]:
    """The fixed paths a string literal names, when the whole literal (or a word of a command) is a path."""
    if len(text) > 200 or "\n" in text:
        return []
    return [word for word in text.split() if FIXED_PATH.fullmatch(word)]


def python_sources(wheel: Path) -> Iterator[tuple[str, str]]:
    with zipfile.ZipFile(wheel) as archive:
        for name in sorted(archive.namelist()):
            if name.endswith(".py"):
                yield name, archive.read(name).decode("utf-8", errors="replace")


def scan(sources) -> dict[str, dict]:
    """{"kind name": {"kind", "name", "locations"}} over (path, source) pairs."""
    lookups: dict[str, dict] = {}
    for path, source in sources:
        try:
            found = list(lookups_in_module(source, path))
        except SyntaxError:
            continue  # templates shipped as .py (e.g. Jinja) are not Python the server runs
        for kind, name, line in found:
            entry = lookups.setdefault(f"{kind} {name}", {"kind": kind, "name": name, "locations": []})
            entry["locations"].append(f"{path}:{line}")
    return dict(sorted(lookups.items()))


def wheel_audit():
    """The ELF audit's uv.lock reader and downloader, shared so both audits read the same wheels."""
    spec = importlib.util.spec_from_file_location("audit_wheels", REPO / "nix" / "scripts" / "audit-wheel-libraries.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inventory(policy: dict, cache: Path, stack: str | None = None) -> dict:
    audit = wheel_audit()
    lock_file = audit.stack_files(stack)["lock"]
    lock = tomllib.loads(lock_file.read_text())
    by_name = {p["name"]: p for p in lock["package"] if p["name"] in policy["packages"]}
    packages = {}
    for name, settings in sorted(policy["packages"].items()):
        package = by_name[name]
        wheel = audit.best_wheel(package, "cp312")
        path = audit.download(wheel["url"], wheel["hash"].removeprefix("sha256:"), cache)
        record = {"version": package["version"], "wheel": path.name, "lookups": scan(python_sources(path))}
        if settings.get("proxy"):
            record["proxy"] = settings["proxy"]
        packages[name] = record
        print(f"  {name} {package['version']}: {len(record['lookups'])} lookups", file=sys.stderr)
    return {
        "_comment": " ".join(
            [
                "GENERATED by nix/scripts/audit-runtime-lookups.py from the wheels of",
                f"{lock_file.relative_to(REPO)} that {audit.stack_files(stack)['lookupPolicy'].relative_to(REPO)}",
                "names; do not edit. For each package: every program, library,",
                "fixed path and toolchain environment variable its Python code looks up at run time, keyed",
                "'kind name', with where (information only). The dispositions are in the policy file.",
            ]
        ),
        "packages": packages,
    }


def disposition(package: str, key: str, lookup: dict, policy: dict) -> tuple[str, str] | None:
    """("provided", "programs.nvidia-smi") or ("notNeeded", reason) for one lookup; None when it has none."""
    full = f"{package} {key}"
    if full in policy["provided"]:
        return "provided", policy["provided"][full]
    if full in policy["notNeeded"]:
        return "notNeeded", policy["reasons"].get(policy["notNeeded"][full], policy["notNeeded"][full])
    rules = [next((r for r in policy["rules"] if fnmatch.fnmatch(loc.rsplit(":", 1)[0], r)), None)
             for loc in lookup["locations"]]  # fmt: skip
    if all(rules):  # every place it is made is code the server does not run
        return "notNeeded", "; ".join(sorted({policy["reasons"][policy["rules"][r]] for r in rules}))
    return None


def stack_env(env: dict, stack: str | None = None) -> dict:
    """nix/runtime-env.json as one stack sees it: the shared sections plus its own additions
    (env["stacks"][version]), as nix/runtime-env.nix renders it for that stack's wrapper."""
    version = stack or json.loads(wheel_audit().PINS.read_text())["stack"]["default"]
    own = env.get("stacks", {}).get(version, {})
    merged = {section: dict(env[section]) for section in SECTIONS}
    for section, entries in own.items():
        if section not in SECTIONS:
            raise SystemExit(f"nix/runtime-env.json stacks.{version}.{section}: not a section ({', '.join(SECTIONS)})")
        for name, value in entries.items():
            if name in env[section]:
                raise SystemExit(
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
    used_reasons = set(policy["rules"].values()) | set(policy["notNeeded"].values())
    found += [f"reason {r} is not used" for r in policy["reasons"] if r not in used_reasons]
    texts = [policy["reasons"].get(v, v) for v in used_reasons]
    found += [f"reason too short to show why: {t!r}" for t in texts if len(t) <= 40]
    found += [f"rule {r}: unknown reason {v}" for r, v in policy["rules"].items() if v not in policy["reasons"]]
    found += [f"nix/runtime-env.json {e}: no why" for e in sorted(entries) if not entry(env, e).get("why")]
    return found


def entry(env: dict, dotted_name: str) -> dict:
    section, _, name = dotted_name.partition(".")
    return env[section][name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", help="A stack of nix/pins.json (default: the default stack).")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "sglang-eagle3-wheel-audit")
    parser.add_argument("--check", action="store_true", help="Exit 1 if the stack's runtime-lookups.json differs.")
    args = parser.parse_args()
    files = wheel_audit().stack_files(args.stack)
    output = files["lookups"]
    policy = json.loads(files["lookupPolicy"].read_text())
    data = inventory(policy, args.cache, args.stack)
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.check and output.read_text() != text:
        raise SystemExit(f"{output} is stale: run {Path(__file__).relative_to(REPO)}")
    if not args.check:
        output.write_text(text)
        print(f"wrote {output.relative_to(REPO)}", file=sys.stderr)
    found = problems(data, policy, stack_env(json.loads(ENV.read_text()), args.stack))
    if found:
        raise SystemExit("not accounted for:\n  " + "\n  ".join(found))
    print(f"{output.relative_to(REPO)}: every lookup is provided or not needed")


if __name__ == "__main__":
    try:
        main()
    except (OSError, urllib.error.URLError) as err:
        raise SystemExit(f"audit-runtime-lookups: {err} (this generator needs network access to PyPI)") from None
