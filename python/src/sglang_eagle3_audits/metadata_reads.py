"""Every place a wheel's code asks what is installed: package metadata, or whether a module can be found.

The Nix closure drops or replaces distributions that pip installs (nix/stacks/*/wheel-closure.json), so such a
question can get another answer there than where the code was tested. This reads a wheel's Python sources with
``ast`` and lists each question with the distribution or module it names:

- ``version``, ``distribution``, ``metadata``, ``files``, ``requires`` of ``importlib.metadata`` (or the
  ``importlib_metadata`` backport; ``Distribution.from_name``), ``pkg_resources.get_distribution`` and
  ``pkg_resources.require`` (a requirement's name): a distribution, found or not (PackageNotFoundError);
- ``importlib.util.find_spec``, ``pkgutil.find_loader``: a module;
- ``distributions()``, ``packages_distributions()``: every distribution (the name ``*``).

The name is followed as constants.Constants follows it (a loop over constants, a module constant, a default
argument, a simple assignment), and a parameter of a module-level function through every call of that function in
the wheel (SGLang's ``check_pkg_version_at_least(pkg, ...)`` asks for each ``pkg`` its callers pass). What is not
resolved is a read with no values: the metadata audit (metadata.py) lists it as unresolved.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass, field

from packaging.requirements import InvalidRequirement, Requirement
from sglang_eagle3.source.constants import Constants, import_aliases, resolved_name

from .closure import Contents, Scanner

DISTRIBUTION_CALLS = {
    f"{module}.{name}": name
    for module in ("importlib.metadata", "importlib_metadata")
    for name in ("version", "distribution", "metadata", "files", "requires")
} | {
    "importlib.metadata.Distribution.from_name": "distribution",
    "importlib_metadata.Distribution.from_name": "distribution",
    "pkg_resources.get_distribution": "distribution",
    "pkg_resources.require": "require",
}
MODULE_CALLS = {"importlib.util.find_spec": "find_spec", "pkgutil.find_loader": "find_spec"}
# Questions about every installed distribution at once (deep_ep's find_pkg_root walks them for nvidia-<name>).
ALL_CALLS = {
    f"{module}.{name}": "distributions"
    for module in ("importlib.metadata", "importlib_metadata")
    for name in ("distributions", "packages_distributions")
}
EVERY = "*"  # the name such a read asks about: every distribution
TRIGGER = re.compile(r"importlib[._]metadata|import metadata|find_spec|find_loader|pkg_resources")
TESTS = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*\.py$|_test\.py$")
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@dataclass
class Read:
    """One question: where, what it calls, the argument as written, and the names it can ask about (None: not
    resolved; ``via``: how they were found)."""

    file: str
    line: int
    function: str
    kind: str  # version, distribution, metadata, files, requires, require, find_spec, distributions
    argument: str
    values: list | None
    via: str = ""
    _node: ast.AST = field(default=None, repr=False)

    @property
    def asks(self) -> str:
        return "module" if self.kind == "find_spec" else "distribution"


def module_name(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


class _Module:
    def __init__(self, path: str, text: str):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.tree = ast.parse(text, path)
        self.file, self.dotted = path, module_name(path)
        package = self.dotted if path.endswith("__init__.py") else self.dotted.rpartition(".")[0]
        self.aliases = import_aliases(ast.walk(self.tree), package)
        self.flow = Constants(self.tree)
        self.functions = {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}

    def walk(self):
        """(node, scope, qualified function name) of every node, in source order."""
        todo = [(self.tree, self.tree, "<module>")]
        while todo:
            node, scope, name = todo.pop()
            yield node, scope, name
            for child in reversed(list(ast.iter_child_nodes(node))):
                if isinstance(child, SCOPES):
                    inner = name if isinstance(child, ast.Lambda) else (
                        child.name if name == "<module>" else f"{name}.{child.name}")  # fmt: skip
                    todo.append((child, child, inner))
                elif isinstance(child, ast.ClassDef):
                    todo.append((child, scope, child.name if name == "<module>" else f"{name}.{child.name}"))
                else:
                    todo.append((child, scope, name))

    def target(self, call: ast.Call) -> str | None:
        """The dotted name a call calls: through the imports, or a function of this module by its bare name."""
        if isinstance(call.func, ast.Name) and call.func.id in self.functions and call.func.id not in self.aliases:
            return f"{self.dotted}.{call.func.id}"
        return resolved_name(call.func, self.aliases)


def _argument(call: ast.Call) -> ast.AST | None:
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    names = ("distribution_name", "name", "package", "requirements", "fullname")
    return next((k.value for k in call.keywords if k.arg in names), None)


def _names(kind: str, values: list) -> list | None:
    """The distributions or modules a read's argument values name (a requirement string: its name)."""
    found = []
    for value in values:
        if not isinstance(value, str):
            return None
        if kind == "require":
            try:
                value = Requirement(value).name
            except InvalidRequirement:
                return None
        found.append(value)
    return found


def wheel_reads(sources: list[tuple[str, str]]) -> list[Read]:
    """Every read in a wheel's Python sources (its own tests left out), names followed."""
    modules, texts = [], {}
    for path, text in sources:
        if TESTS.search(path) or not path.endswith(".py"):
            continue
        texts[path] = text
        if TRIGGER.search(text):
            try:
                modules.append(_Module(path, text))
            except (SyntaxError, ValueError, RecursionError):
                continue  # templates shipped as .py
    reads: list[Read] = []
    pending: dict[str, list[tuple[Read, int, str]]] = {}  # "module.function" -> reads of its parameter
    for module in modules:
        for node, scope, name in module.walk():
            if not isinstance(node, ast.Call):
                continue
            target = module.target(node)
            kind = DISTRIBUTION_CALLS.get(target) or MODULE_CALLS.get(target) or ALL_CALLS.get(target)
            if kind is None:
                continue
            if kind == "distributions":
                reads.append(Read(module.file, node.lineno, name, kind, "", [EVERY], "every distribution", _node=node))
                continue
            argument = _argument(node)
            text = ast.unparse(argument) if argument is not None else ""
            read = Read(module.file, node.lineno, name, kind, text, None, _node=node)
            reads.append(read)
            if argument is None:
                continue
            values = module.flow.values(argument, scope if scope is not module.tree else None)
            if values is not None:
                read.values, read.via = _names(kind, values), "constants"
                continue
            parameter = _parameter_of(argument, scope, module)
            if parameter is not None:
                pending.setdefault(f"{module.dotted}.{scope.name}", []).append((read, *parameter))
    if pending:
        _follow_calls(pending, texts, modules)
    return reads


def _parameter_of(argument: ast.AST, scope, module: _Module) -> tuple[int, str] | None:
    """(position, name) when the argument is a parameter of the module-level function it is read in."""
    if not isinstance(argument, ast.Name) or not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    if module.functions.get(scope.name) is not scope:
        return None
    positional = [a.arg for a in [*scope.args.posonlyargs, *scope.args.args]]
    if argument.id in positional:
        return positional.index(argument.id), argument.id
    if argument.id in [a.arg for a in scope.args.kwonlyargs]:
        return -1, argument.id
    return None


def _follow_calls(pending: dict, texts: dict[str, str], parsed: list[_Module]) -> None:
    """A read of a helper's parameter: the values every call of the helper in the wheel passes (its default where a
    call passes none); unresolved when one call's argument is not constant, or the helper is named but not called."""
    by_file = {m.file: m for m in parsed}
    bare = {dotted.rpartition(".")[2] for dotted in pending}
    calls: dict[str, list] = {dotted: [] for dotted in pending}
    named_only: set[str] = set()
    for path, text in texts.items():
        if not any(name in text for name in bare):
            continue
        module = by_file.get(path)
        if module is None:
            try:
                module = by_file[path] = _Module(path, text)
            except (SyntaxError, ValueError, RecursionError):
                continue
        called = set()
        for node, scope, _ in module.walk():
            if isinstance(node, ast.Call):
                target = _helper(module.target(node), calls)
                if target is not None:
                    calls[target].append((module, node, scope))
                    called.add(id(node.func))
        for node, _, _ in module.walk():
            if isinstance(node, ast.Name | ast.Attribute) and id(node) not in called and isinstance(
                    getattr(node, "ctx", None), ast.Load):  # fmt: skip
                target = resolved_name(node, module.aliases)
                if isinstance(node, ast.Name) and node.id in module.functions and node.id not in module.aliases:
                    target = f"{module.dotted}.{node.id}"
                target = _helper(target, calls)
                if target is not None:
                    named_only.add(target)  # passed around, or wrapped: its calls are not all here
    for dotted, waiting in pending.items():
        for read, position, parameter in waiting:
            if dotted in named_only or not calls[dotted]:
                read.via = f"the parameter {parameter} of {dotted.rpartition('.')[2]}: " + (
                    "the function is passed on, not only called"
                    if dotted in named_only
                    else "never called in the wheel"
                )
                continue
            values: list = []
            for module, call, scope in calls[dotted]:
                passed = _passed(call, position, parameter)
                if passed is None:
                    default = _default(by_file[read.file].functions[dotted.rpartition(".")[2]], parameter)
                    passed = default
                found = (
                    None if passed is None else module.flow.values(passed, scope if scope is not module.tree else None)
                )
                found = None if found is None else _names(read.kind, found)
                if found is None:
                    values = None
                    read.via = f"the parameter {parameter} of {dotted.rpartition('.')[2]}: not constant at " \
                               f"{module.file}:{call.lineno}"  # fmt: skip
                    break
                values += [v for v in found if v not in values]
            if values is not None:
                read.values = values
                read.via = f"the calls of {dotted.rpartition('.')[2]} ({len(calls[dotted])})"


def _helper(target: str | None, helpers: dict) -> str | None:
    """The helper a dotted name denotes: itself, or re-exported by a package above its module (SGLang imports
    ``sglang.srt.utils.assert_pkg_version``, defined in sglang/srt/utils/common.py)."""
    if target is None or target in helpers:
        return target
    package, _, name = target.rpartition(".")
    return next((h for h in helpers if h.rpartition(".")[2] == name and h.startswith(package + ".")), None)


def _passed(call: ast.Call, position: int, parameter: str) -> ast.AST | None:
    for keyword in call.keywords:
        if keyword.arg == parameter:
            return keyword.value
    if 0 <= position < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
        return call.args[position]
    return None


def _default(function: ast.FunctionDef, parameter: str) -> ast.AST | None:
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(arguments.defaults):]], arguments.defaults,
                        strict=True))  # fmt: skip
    defaults.update({a.arg: d for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True) if d})
    return defaults.get(parameter)


def provided_modules(names: list[str]) -> list[str]:
    """The importable modules and packages a wheel's files make (a/b/c.py, a/b/__init__.py, a/b/c.*.so: a, a.b,
    a.b.c), its metadata directories left out."""
    found = set()
    for name in names:
        parts = name.split("/")
        if parts[0].endswith((".dist-info", ".data")) or len(parts) == 0:
            continue
        last = parts[-1]
        if last.endswith(".py"):
            parts[-1] = last.removesuffix(".py")
        elif last.endswith(".so") and "." in last.removesuffix(".so"):
            parts[-1] = last.split(".")[0]
        else:
            parts = parts[:-1]  # a data file: its directories are (namespace) packages
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
        for i in range(1, len(parts) + 1):
            if all(p.isidentifier() for p in parts[:i]):
                found.add(".".join(parts[:i]))
    return sorted(found)


def _scan_wheel(contents: Contents) -> dict:
    """A wheel's reads as records, and the modules it provides."""
    sources = [(n, contents.text(n)) for n in contents.names if n.endswith(".py")]
    reads = [{"file": r.file, "line": r.line, "function": r.function, "kind": r.kind, "argument": r.argument,
              "values": r.values, "via": r.via} for r in wheel_reads(sources)]  # fmt: skip
    return {"reads": reads, "modules": provided_modules(contents.names)}


SCANNER = Scanner("metadata-reads", (__name__,), _scan_wheel)
