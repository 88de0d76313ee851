"""Find and judge the start-up gates in a wheel's source: places that compare versions or capabilities.

A gate compares something the stack or the host provides (a package's version, Python's, torch's CUDA, cuDNN,
NCCL, the GPU's compute capability) with a constant. Read with `ast`, each comparison is judged against values
the caller gives: the stack's composed versions (nix/scripts/audit-startup-gates.py) or this host's GPU
(probe). The comparison is evaluated for real, with the values put where the source reads them, so
`float(str(cudnn_version)[:3]) / 100 < 9.15` is computed as SGLang computes it.

What is recognised (after the module's imports are resolved):
- subjects: `sys.version_info`, `X.__version__`, `torch.version.cuda`, `importlib.metadata.version("d")`,
  `torch.backends.cudnn.version()`, `torch.cuda.nccl.version()`, and the host's
  `torch.cuda.get_device_capability()` / `get_device_properties().major|minor`;
- names assigned from a subject, in the same function or at module level, through any number of steps, and
  module-level names another module of the same wheel imports (SGLang's `torch_release`);
- what a comparison decides: `assert` (raises when false), an `if` whose branch raises or exits at its top
  level ("raise"), warns ("warn"), or only holds more code ("branch"); anything else ("value").
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import operator
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import packaging.version

from .constants import Constants, import_aliases, resolved_name

# Subjects, by the dotted name the source refers to after its imports are resolved. The value is the kind of
# quantity: the caller's Values supplies it. "host" kinds are the GPU's, not the stack's.
ATTRIBUTE_SUBJECTS = {
    "sys.version_info": "python",
    "torch.version.cuda": "cuda",
    "torch.version.__version__": "torch",
}
CALL_SUBJECTS = {
    "platform.python_version": "python-text",
    "importlib.metadata.version": "package",
    "importlib_metadata.version": "package",
    "torch.backends.cudnn.version": "cudnn",
    "torch._C._cudnn.getVersionInt": "cudnn",
    "torch.cuda.nccl.version": "nccl",
    "torch.cuda.get_device_capability": "capability",
    "torch.cuda.get_device_properties": "device",
}
HOST_KINDS = {"capability", "device"}
# What every stack fixes, read where a gate's other terms read it (not gates by themselves): the Nix build is
# x86_64-linux, and nixpkgs' CPython 3.12 is not a free-threaded build (Py_GIL_DISABLED is a 3.13 config var).
FIXED = {"sys.platform": "linux", "os.name": "posix"}
FIXED_CALLS = {"sysconfig.get_config_var": {"Py_GIL_DISABLED": None}, "platform.system": {}}
RAISES = {"sys.exit", "exit", "quit", "os._exit"}
WARNS = {"warnings.warn"}
WARN_METHODS = {"warning", "warn", "error", "critical", "warning_once"}
BUILTIN_NAMES = frozenset(dir(builtins))  # a gate reading one is unevaluated, not unresolved: it is no constant
SAFE_BUILTINS = {
    name: getattr(builtins, name)
    for name in ("int", "float", "str", "tuple", "list", "map", "len", "min", "max", "bool", "all", "any", "getattr")
}
COMPARE = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}  # fmt: skip


# Text every module that reads a subject contains: a module without it is not parsed (most of torch). A name
# shared from another module (torch_release) or a helper (assert_pkg_version) contains "version" too.
TRIGGER = re.compile(r"version|capability|get_device_properties")
CONSTANT_LINE = re.compile(r"""^([A-Za-z_]\w*) = (-?\d+|"[^"\\\n]*"|'[^'\\\n]*'|True|False|None)[ \t]*$""", re.M)
TESTS = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*\.py$|_test\.py$")


EVALUATED_IMPORTS = ("packaging.version", "torch.torch_version.TorchVersion")
PLAIN_NODES = (
    ast.Constant, ast.Name, ast.Attribute, ast.Subscript, ast.Slice, ast.Tuple, ast.List, ast.BinOp, ast.UnaryOp,
    ast.JoinedStr, ast.FormattedValue, ast.expr_context, ast.operator, ast.unaryop, ast.keyword,
)  # fmt: skip
STR_METHODS = {"split", "rsplit", "strip", "lstrip", "rstrip", "partition", "replace", "join", "lower", "format"}


class TorchVersion(str):
    """torch.__version__: a str that compares as a version with str and tuple (torch/torch_version.py)."""

    def _other(self, other):
        if isinstance(other, tuple):
            other = ".".join(map(str, other))
        return packaging.version.Version(str(other))

    def _mine(self):
        return packaging.version.Version(str(self))

    def __lt__(self, other):
        return self._mine() < self._other(other)

    def __le__(self, other):
        return self._mine() <= self._other(other)

    def __gt__(self, other):
        return self._mine() > self._other(other)

    def __ge__(self, other):
        return self._mine() >= self._other(other)

    def __eq__(self, other):
        return self._mine() == self._other(other)

    def __ne__(self, other):
        return not self == other

    __hash__ = str.__hash__


class VersionInfo(tuple):
    """sys.version_info for a given Python (a tuple with major, minor, micro)."""

    def __new__(cls, text: str):
        parts = tuple(int(p) for p in text.split(".")[:3])
        return super().__new__(cls, (*parts, "final", 0))

    major = property(lambda self: self[0])
    minor = property(lambda self: self[1])
    micro = property(lambda self: self[2])


@dataclass
class Device:
    """What torch.cuda.get_device_properties() answers that gates read."""

    major: int
    minor: int
    name: str = ""
    total_memory: int = 0


@dataclass
class Values:
    """What a gate is judged against: the stack's composed versions, and a host's GPU (or none)."""

    python: str
    packages: dict[str, str]  # distribution name (normalised) -> version
    modules: dict[str, str]  # top-level import name -> distribution name
    cuda: str
    cudnn: int | None = None  # torch's encoding: 9.16.0 -> 91600
    nccl: tuple[int, ...] | None = None
    device: Device | None = None

    def subject(self, kind: str, argument: str | None = None):
        """The value the source reads for a subject; KeyError when it is not known here."""
        if kind == "python":
            return VersionInfo(self.python)
        if kind == "python-text":
            return self.python
        if kind == "cuda":
            return self.cuda
        if kind in ("torch", "module"):
            distribution = "torch" if kind == "torch" else self.modules[argument]
            version = self.packages[distribution]
            return TorchVersion(version) if distribution == "torch" else version
        if kind == "package":
            return self.packages[normalise(argument)]
        if kind == "cudnn" and self.cudnn is not None:
            return self.cudnn
        if kind == "nccl" and self.nccl is not None:
            return self.nccl
        if kind == "capability" and self.device is not None:
            return (self.device.major, self.device.minor)
        if kind == "device" and self.device is not None:
            return self.device
        raise KeyError(kind)


def normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


@dataclass
class Gate:
    """One comparison of a subject with the source's constant, where it is and what it decides."""

    file: str
    line: int
    function: str
    comparison: str  # the comparison's source text
    kinds: list[str]  # the subjects it reads ("package:flashinfer-python", "cudnn", "capability", ...)
    effect: str  # raise | warn | branch | value
    bad_when: bool | None  # for raise/warn: the comparison's value that takes the raising branch
    _expression: ast.expr = field(repr=False, default=None)
    _bindings: dict = field(repr=False, default_factory=dict)
    _aliases: dict = field(repr=False, default_factory=dict)
    _constants: dict = field(repr=False, default_factory=dict)  # a helper's parameters, as its caller gives them
    # (guard, value it must have): the enclosing `if`s that must go this way for the comparison to run
    _guards: list = field(repr=False, default_factory=list)
    _defaults: dict = field(repr=False, default_factory=dict)  # a helper's parameters' constant defaults
    term: str = ""  # "necessary"/"sufficient": one term of the test whose value the raise needs, or suffices
    _siblings: list = field(repr=False, default_factory=list)  # a necessary term's others: (expr, bindings, want)
    handler: bool = False  # inside an `except` block: it runs only after something else failed
    helper: bool = False  # compares with its function's parameter: judged at each call (assert_pkg_version)

    def record(self) -> dict:
        """The gate as data (JSON): enough to judge it again without the source (probe does, on a host)."""
        used = {n.id for n in ast.walk(self._expression) if isinstance(n, ast.Name)}
        for expression, _, _ in self._guards:
            used |= {n.id for n in ast.walk(expression) if isinstance(n, ast.Name)}
        plain = (str, int, float, bool, type(None))
        return {
            "file": self.file, "line": self.line, "function": self.function, "comparison": self.comparison,
            "kinds": self.kinds, "effect": self.effect, "bad_when": self.bad_when, "term": self.term,
            "handler": self.handler, "helper": self.helper,
            "expression": ast.unparse(self._expression),
            "bindings": {name: list(subject) for name, subject in self._bindings.items()},
            "aliases": {k: v for k, v in self._aliases.items() if k in used and v.startswith(EVALUATED_IMPORTS)},
            "constants": {k: v for k, v in self._constants.items() if isinstance(v, plain)},
            "guards": [
                [ast.unparse(e), {n: list(s) for n, s in b.items()}, want] for e, b, want in self._guards
            ],
            "siblings": [
                None if t is None else [ast.unparse(t[0]), {n: list(s) for n, s in t[1].items()}, t[2]]
                for t in self._siblings
            ],
        }  # fmt: skip

    @classmethod
    def from_record(cls, record: dict) -> Gate:
        def parse(text):
            return ast.parse(text, mode="eval").body

        return cls(
            file=record["file"], line=record["line"], function=record["function"],
            comparison=record["comparison"], kinds=record["kinds"], effect=record["effect"],
            bad_when=record["bad_when"], term=record["term"], handler=record["handler"],
            helper=record["helper"],
            _expression=parse(record["expression"]),
            _bindings={n: tuple(s) for n, s in record["bindings"].items()}, _aliases=record["aliases"],
            _constants=record["constants"],
            _guards=[(parse(e), {n: tuple(s) for n, s in b.items()}, want) for e, b, want in record["guards"]],
            _siblings=[
                None if t is None else (parse(t[0]), {n: tuple(s) for n, s in t[1].items()}, t[2])
                for t in record["siblings"]
            ],
        )  # fmt: skip

    @property
    def host(self) -> bool:
        return any(k in HOST_KINDS for k in self.kinds)

    def key(self) -> str:
        return f"{self.file} {self.function} {self.comparison}"

    def evaluate(self, values: Values, expression=None, bindings=None):
        """The comparison's value for these values; raises LookupError/TypeError/... when it cannot be known."""
        namespace = {"__builtins__": SAFE_BUILTINS, **self._constants}
        for name, target in self._aliases.items():
            if target.startswith("packaging.version"):
                namespace[name] = resolve_object(target)
            elif target == "torch.torch_version.TorchVersion":  # torch's own, without importing torch
                namespace[name] = TorchVersion
        for name, (kind, argument) in (self._bindings if bindings is None else bindings).items():
            if kind == "package-argument":
                kind, argument = "package", self._constants[argument]
            namespace[name] = values.subject(kind, argument)
        code = compile(ast.Expression(expression or self._expression), self.file, "eval")
        return bool(eval(code, namespace))  # noqa: S307 - restricted builtins; names are the subjects' values

    def _value(self, values: Values, term) -> bool | None:
        if term is None:
            return None
        try:
            return self.evaluate(values, term[0], term[1])
        except Exception:  # noqa: BLE001 - not known here
            return None

    def missing(self, values: Values) -> str | None:
        """The distribution a subject reads that the stack does not install (the code cannot run), if any."""
        for kind, argument in self._bindings.values():
            if kind == "module" and argument not in values.modules:
                return argument
            if kind in ("package", "package-argument"):
                name = self._constants.get(argument) if kind == "package-argument" else argument
                if isinstance(name, str) and normalise(name) not in values.packages:
                    return name
        return None

    def verdict(self, values: Values) -> tuple[bool | None, str]:
        """(the comparison's value or None, the verdict): pass/fail for a gate that raises, warns/quiet for a
        warning, true/false for a branch or value; "unreached" when an enclosing comparison keeps it from
        running, "not installed" when it reads a package the stack lacks, "unevaluated" when a value it reads
        is not known here (a function's argument, a host's value without a host)."""
        if self.missing(values) is not None:
            return None, "not installed"
        if self.helper:
            return None, "helper"  # its calls with constant arguments are gates of their own, judged there
        if self.handler and self.effect == "raise":
            return None, "on error"  # the code before it failed already: this picks what is raised
        for expression, bindings, want in self._guards:
            try:
                if self.evaluate(values, expression, bindings) != want:
                    return None, "unreached"
            except Exception:  # noqa: BLE001 - a guard not known here does not decide
                continue
        try:
            outcome = self.evaluate(values)
        except Exception:  # noqa: BLE001 - any failure to compute means "not known here", said as such
            return None, "unevaluated"
        if self.effect in ("raise", "warn"):
            bad = outcome == self.bad_when
            if self.term == "necessary" and bad:  # the test's other terms decide
                others = [self._value(values, sibling) for sibling in self._siblings]
                if any(
                    value is not None and value != sibling[2]
                    for value, sibling in zip(others, self._siblings, strict=True)
                ):
                    bad = False  # another term keeps the raise from happening
                elif None in others:
                    return outcome, "armed"
            if self.effect == "raise":
                return outcome, "fail" if bad else "pass"
            return outcome, "warns" if bad else "quiet"
        return outcome, "true" if outcome else "false"


def resolve_object(dotted: str):
    module, _, rest = dotted.partition(".")
    value = __import__(module)
    for part in rest.split(".") if rest else ():
        value = getattr(value, part)
    return value


def _spans(node: ast.AST, lines: set[int]) -> bool:
    """Whether any of ``lines`` falls within ``node``."""
    return any(node.lineno <= line <= node.end_lineno for line in lines)


class ModuleGates:
    """The gates of one module. `exported` maps module-level names assigned from a subject to their
    expression (for other modules of the wheel: `shared`); `helpers` maps each module-level function that
    compares a subject with one of its own parameters (SGLang's assert_pkg_version) to that gate, so that a
    call with constant arguments is judged as a gate where it is called."""

    def __init__(self, source: str, file: str, module: str):
        self.tree = ast.parse(source)
        self.text, self.file, self.module = source, file, module
        package = module.rpartition(".")[0] if not file.endswith("__init__.py") else module
        self.aliases = import_aliases(ast.walk(self.tree), package)
        self.shared: dict = {}
        self.helpers: dict[str, tuple[Gate, list[str]]] = {}
        self.helpers_here: set[str] = set()  # names of this module's helpers (known after the first pass)
        self._subject_lines: set[int] | None = None
        self._aliases_seen: dict[str, str] = {}
        self._names: list[tuple[str, int]] = []
        self.module_assigned = assignments(self.tree.body)
        self.flow = Constants(self.tree, imported=self._imported_constant)
        self.unresolved: list[dict] = []
        self.constants = {
            ("constant", f"{module}.{name}"): expr.value
            for name, expr in self.module_assigned.items()
            if isinstance(expr, ast.Constant)
        }
        self.exported = {
            f"{module}.{name}": (expr, self.aliases)
            for name, expr in self.module_assigned.items()
            if self._subjects(expr, {}, set())
        }

    def resolve(self, node: ast.AST) -> str | None:
        return resolved_name(node, self.aliases)

    def _imported_constant(self, local: str) -> list | None:
        """A name imported from another module of the wheel that assigns it a literal (for Constants)."""
        key = ("constant", self.aliases.get(local))
        return [self.shared[key]] if key in self.shared else None

    def subject_of(self, node: ast.AST) -> tuple[str, str | None] | None:
        """(kind, argument) when the node itself reads a subject."""
        if isinstance(node, ast.Call):
            target = self.resolve(node.func)
            if target in CALL_SUBJECTS:
                kind = CALL_SUBJECTS[target]
                if kind != "package":
                    return (kind, None)
                if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                    return ("package", node.args[0].value)
                if node.args and isinstance(node.args[0], ast.Name):  # a helper's parameter: its callers name it
                    return ("package-argument", node.args[0].id)
                if node.args:  # version(spec.name): not a constant; the gate lists it as unresolved
                    return ("package-argument", ast.unparse(node.args[0]))
            return None
        if isinstance(node, (ast.Attribute, ast.Name)):  # a Name: `from ..version import __version__ as v`
            target = self.resolve(node)
            if target in ATTRIBUTE_SUBJECTS:
                return (ATTRIBUTE_SUBJECTS[target], None)
            if target and target.endswith(".__version__"):
                top = target.partition(".")[0]
                return ("torch", None) if top == "torch" else ("module", top)
        return None

    def _subjects(self, node: ast.AST, local: dict[str, ast.expr], seen: set[str]) -> bool:
        """Whether the expression reads a subject, following names."""
        for child in walk_outer(node):
            if self.subject_of(child) is not None:
                return True
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load) and child.id not in seen:
                expr = local.get(child.id, self.module_assigned.get(child.id))
                if expr is not None and self.plain(expr) and self._subjects(expr, local, seen | {child.id}):
                    return True
                if self.aliases.get(child.id) in self.shared:
                    return True
        return False

    def plain(self, expr: ast.expr) -> bool:
        """Whether an assigned value is computed from what it reads alone (constants, names, subjects,
        arithmetic, indexing, str methods, int/float/str/tuple, packaging.version): a name is followed only
        then, so a tensor's shape computed next to a capability check is not taken for a version."""
        for node in walk_outer(expr):
            if isinstance(node, ast.Call):
                if self.subject_of(node) is not None:
                    continue
                target = self.resolve(node.func) or ""
                method = isinstance(node.func, ast.Attribute) and node.func.attr in STR_METHODS
                if not (target in SAFE_BUILTINS or target.startswith(EVALUATED_IMPORTS) or method):
                    return False
            elif not isinstance(node, PLAIN_NODES):
                return False
        return True

    def substituted(self, node: ast.expr, local: dict[str, ast.expr]) -> tuple[ast.expr, dict[str, tuple], dict]:
        """A copy of the expression with every subject a placeholder name and every name followed; with the
        placeholders' subjects and the imports of every module the expression was taken from."""
        bindings: dict[str, tuple] = {}
        aliases = dict(self.aliases)
        module = self

        class Substitute(ast.NodeTransformer):
            def __init__(self, seen: frozenset = frozenset(), reader=None):
                self.seen, self.reader = seen, reader or module

            def visit(self, child):
                fixed = self.reader.resolve(child) if isinstance(child, (ast.Attribute, ast.Call)) else None
                if isinstance(child, ast.Call):
                    fixed = self.reader.resolve(child.func)
                    argument = child.args[0] if len(child.args) == 1 else None
                    if fixed in FIXED_CALLS and isinstance(argument, ast.Constant):
                        value = FIXED_CALLS[fixed].get(argument.value)
                        return ast.copy_location(ast.Constant(value=value), child)
                elif fixed in FIXED:
                    return ast.copy_location(ast.Constant(value=FIXED[fixed]), child)
                subject = self.reader.subject_of(child)
                if subject is not None:
                    name = f"_s{len(bindings)}"
                    bindings[name] = subject
                    return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), child)
                if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load) and child.id not in self.seen:
                    if self.reader is module:
                        expr = local.get(child.id, module.module_assigned.get(child.id))
                        if expr is not None and module.plain(expr):  # a subject, or required = parse("3.2")
                            return Substitute(self.seen | {child.id}).visit(copy(expr))
                    target = self.reader.aliases.get(child.id)
                    if target in module.shared:
                        expr, other = module.shared[target]
                        aliases.update({k: v for k, v in other.items() if k not in aliases})
                        return Substitute(self.seen | {child.id}, _Reader(other)).visit(copy(expr))
                return super().visit(child)

        return Substitute().visit(copy(node)), bindings, aliases

    def hot_lines(self) -> set[int]:
        """Lines that read a subject, a name assigned from one, or call a helper: only the functions holding
        one are read closely."""
        if self._subject_lines is None:  # one walk, kept: the second pass only adds names
            self._subject_lines, self._names = set(), []
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Name):
                    self._names.append((node.id, node.lineno))
                if isinstance(node, (ast.Attribute, ast.Call, ast.Name)) and self.subject_of(node) is not None:
                    self._subject_lines.add(node.lineno)
        shared = {n for n, t in self.aliases.items() if t in self.shared or ("helper", t) in self.shared}
        names = shared | {name.rpartition(".")[2] for name in self.exported} | set(self.helpers_here)
        return self._subject_lines | {line for name, line in self._names if name in names}

    def gates(self) -> Iterator[Gate]:
        hot = self.hot_lines()
        if not hot:
            return
        self.unresolved = []
        for scope_name, scope, parameters in scopes(self.tree):
            if scope_name != "<module>" and not _spans(scope, hot):
                continue
            body = scope.body if scope_name != "<module>" else [s for s in scope.body if not isinstance(s, FUNCTIONS)]
            local = assignments(body) if scope_name != "<module>" else {}
            parents = parent_map(body)
            helper_parameters = parameters if scope_name != "<module>" and scope_name.count(".") == 0 else []
            for statement, test, effect, bad_when in decisions(body, self.resolve):
                if not _spans(statement, hot) and not local:
                    continue
                for node in candidates(test, self.helper_of):
                    helper = self.helper_of(node) if isinstance(node, ast.Call) else None
                    if helper is None and not self._subjects(node, local, set()):
                        continue
                    base = self._gate(node, helper, local, scope_name)
                    if base is None:
                        continue
                    for gate in self._followed(base, node, helper, scope, parameters, helper_parameters):
                        self._place(gate, node, helper, (statement, test, effect, bad_when), local, parents)
                        if helper is None and helper_parameters:
                            self._register_helper(gate, scope, scope_name, parameters)
                        yield gate

    def _followed(
        self, gate: Gate, node, helper, scope, parameters: list[str], helper_parameters: list[str]
    ) -> list[Gate]:
        """The gate once per value of each name it reads that the source binds to constants (a loop over constants,
        a module constant, a default argument, a simple assignment: constants.Constants), its comparison then
        naming the values (``check_pkg_version_at_least(pkg, '12.9') [pkg='nvidia-cublas']``). A name it still
        cannot resolve is listed in ``unresolved`` (the gate stays, unevaluated); so is a parameter of the function it
        is in, whose value each call decides (its default too), unless that function is module-level: a helper,
        judged at each call with its arguments and defaults."""
        flow = scope if scope is not self.tree else None
        if helper is not None:
            inner, helper_parameters = helper
            pairs = [*zip(helper_parameters, node.args, strict=False),
                     *((k.arg, k.value) for k in node.keywords if k.arg in helper_parameters)]  # fmt: skip
            wanted = {n.id for n in ast.walk(inner._expression) if isinstance(n, ast.Name)}
            wanted |= {a for k, a in inner._bindings.values() if k == "package-argument"}
            names = {}
            for parameter, argument in pairs:
                if parameter in wanted and self.constant(argument) is NOT_CONSTANT:
                    names[parameter] = argument
                    gate._constants.pop(parameter, None)  # a default the argument overrides
        else:
            free = {n.id for n in ast.walk(gate._expression) if isinstance(n, ast.Name)}
            free |= {a for k, a in gate._bindings.values() if k == "package-argument"}
            skip = {*gate._bindings, *gate._constants, *gate._aliases, *helper_parameters, *BUILTIN_NAMES}
            names = {n: ast.Name(id=n, ctx=ast.Load()) for n in sorted(free - skip)}
        if not names:
            return [gate]
        found, missing = {}, []
        for name, argument in names.items():
            read = name if helper is None else argument.id if isinstance(argument, ast.Name) else None
            values = None if read in parameters else self.flow.values(argument, flow)
            if values is None:
                missing.append(f"{name}={ast.unparse(argument)}" if helper is not None else name)
            else:
                found[name] = values
        if missing:
            self.unresolved.append({"file": self.file, "line": node.lineno, "function": gate.function,
                                    "comparison": gate.comparison, "names": missing})  # fmt: skip
        if not found or missing and helper is None:
            return [gate]
        combinations = [{}]
        for name, values in found.items():
            combinations = [{**c, name: v} for c in combinations for v in values]
        if len(combinations) > 64:
            names = [f"{n}: more than 64 values" for n in found]
            self.unresolved.append({"file": self.file, "line": node.lineno, "function": gate.function,
                                    "comparison": gate.comparison, "names": names})  # fmt: skip
            return [gate]
        gates = []
        for combination in combinations:
            followed = copy_gate(gate)
            followed._constants = {**gate._constants, **combination}
            followed.comparison = gate.comparison + " [" + ", ".join(f"{n}={v!r}" for n, v in combination.items()) + "]"
            followed.kinds = gate_kinds(followed._bindings, followed._constants)
            gates.append(followed)
        return gates

    def _place(self, gate: Gate, node, helper, decision: tuple, local, parents) -> None:
        """The gate's part in its decision (statement, test, effect, bad_when): the whole test (or `not` it), or one
        term of a top-level and/or, whose value is then necessary for the raise (`if a and b: raise`) or
        sufficient; its effect and bad value, the guards around it, and whether it sits in an exception handler."""
        statement, test, effect, bad_when = decision
        self._aliases_seen = {}
        term, inner = role(test, node)
        this_bad = None if bad_when is None or term is None else bad_when != negated(inner, node)
        if term in ("and", "or") and bad_when is not None:
            necessary = (term == "and") == bad_when
            gate.term = "necessary" if necessary else "sufficient"
            if necessary:  # the other terms must have the raising value too
                gate._siblings = self._terms(test, inner, bad_when, local)
        if helper is not None and node is test and isinstance(statement, ast.Expr):
            gate.effect, gate.bad_when = helper[0].effect, helper[0].bad_when  # the helper raises itself
        else:
            gate.effect = effect if this_bad is not None or effect == "value" else "branch"
            gate.bad_when = this_bad
        gate._guards = self._guards(statement, parents, local)
        gate._aliases = {**self._aliases_seen, **gate._aliases}  # the imports guards and terms read
        gate.handler = in_handler(statement, parents)

    def _register_helper(self, gate: Gate, scope, scope_name: str, parameters: list[str]) -> None:
        """A module-level function whose gate compares a subject with its own parameters (SGLang's
        assert_pkg_version) is a helper: a call of it with constant arguments is judged where it is called."""
        free = {n.id for n in ast.walk(gate._expression) if isinstance(n, ast.Name)}
        argument = {a for k, a in gate._bindings.values() if k == "package-argument"}
        if (free | argument) & set(parameters):
            gate._defaults, gate.helper = defaults(scope), True
            self.helpers[f"{self.module}.{scope_name}"] = (gate, parameters)
            self.helpers_here.add(scope_name)

    def constant(self, node: ast.expr):
        """A constant's value: a literal, or a name assigned a literal at module level here or in another
        module of the wheel (deep_ep's EXPECTED_CUDA_MAJOR); NOT_CONSTANT otherwise."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            here = self.module_assigned.get(node.id)
            if isinstance(here, ast.Constant):
                return here.value
            target = self.aliases.get(node.id)
            if ("constant", target) in self.shared:
                return self.shared[("constant", target)]
        return NOT_CONSTANT

    def helper_of(self, node: ast.Call) -> tuple[Gate, list[str]] | None:
        """The helper a call calls: imported, or defined in this module (called by its bare name)."""
        target = self.resolve(node.func)
        if isinstance(node.func, ast.Name) and node.func.id in self.helpers_here and node.func.id not in self.aliases:
            target = f"{self.module}.{node.func.id}"
        return self.helpers.get(target) or self.shared.get(("helper", target))

    def _gate(self, node, helper, local, scope_name) -> Gate | None:
        if helper is None:
            expression, bindings, aliases = self.substituted(node, local)
            if not bindings:
                return None
            constants = {}
        else:
            inner, parameters = helper
            constants = dict(inner._defaults)
            pairs = [
                *zip(parameters, node.args, strict=False),
                *((k.arg, k.value) for k in node.keywords if k.arg in parameters),
            ]
            for parameter, argument in pairs:
                value = self.constant(argument)
                if value is not NOT_CONSTANT:
                    constants[parameter] = value
            expression, bindings, aliases = inner._expression, inner._bindings, inner._aliases
        kinds = gate_kinds(bindings, constants)
        return Gate(
            file=self.file, line=node.lineno, function=scope_name, comparison=ast.unparse(node), kinds=kinds,
            effect="", bad_when=None, _expression=expression, _bindings=bindings, _aliases=aliases,
            _constants=constants,
        )  # fmt: skip

    def _terms(self, test: ast.BoolOp, this: ast.expr, want: bool, local) -> list:
        """The test's other terms as (expression, bindings, the value the raise needs); a term that reads no
        subject is kept as None: it cannot be judged here."""
        terms = []
        for term in test.values:
            if term is this:
                continue
            expression, bindings, aliases = self.substituted(term, local)  # one it cannot judge fails to evaluate
            terms.append((expression, bindings, want))
            self._aliases_seen.update(aliases)
        return terms

    def _guards(self, statement, parents, local) -> list:
        """The enclosing comparisons that must hold (or not) for this statement to run: (expression,
        bindings, value it must have) for each enclosing `if` whose test, or one of whose `and` terms, reads a
        subject."""
        guards = []
        child, parent = statement, parents.get(id(statement))
        while parent is not None:
            if isinstance(parent, ast.If) and child is not parent.test:
                in_body = any(child is s for s in parent.body)
                terms = (
                    parent.test.values
                    if isinstance(parent.test, ast.BoolOp) and isinstance(parent.test.op, ast.And) and in_body
                    else [parent.test]
                )
                for term in terms:
                    want, inner = in_body, term
                    if isinstance(term, ast.UnaryOp) and isinstance(term.op, ast.Not):
                        want, inner = not want, term.operand
                    if isinstance(inner, ast.Compare) and self._subjects(inner, local, set()):
                        expression, bindings, aliases = self.substituted(inner, local)
                        guards.append((expression, bindings, want))
                        self._aliases_seen.update(aliases)
            child, parent = parent, parents.get(id(parent))
        return guards


def gate_kinds(bindings: dict, constants: dict) -> list[str]:
    """The subjects a gate reads, as data: "package:flashinfer-python", "module:triton", "cudnn", ...; a package
    named by a name not resolved to a constant, by that name ("package:pkg": a helper's parameter)."""
    kinds = set()
    for kind, argument in bindings.values():
        if kind == "package-argument":
            argument = constants.get(argument, argument)
            kind = "package"
            if not isinstance(argument, str):
                kinds.add(f"package:{argument!r}")
                continue
        kinds.add(f"package:{normalise(argument)}" if kind == "package" else f"module:{argument}" if kind == "module"
                  else kind)  # fmt: skip
    return sorted(kinds)


def copy_gate(gate: Gate) -> Gate:
    return dataclasses.replace(gate, _constants=dict(gate._constants))


class _Reader(ModuleGates):
    """Subject recognition under another module's imports (a name that module exported)."""

    def __init__(self, aliases: dict[str, str]):  # noqa: D107 - no tree: only subject_of and resolve are used
        self.aliases = aliases


def in_handler(statement: ast.AST, parents: dict[int, ast.AST]) -> bool:
    parent = parents.get(id(statement))
    while parent is not None:
        if isinstance(parent, ast.ExceptHandler):
            return True
        parent = parents.get(id(parent))
    return False


def parent_map(body: list[ast.stmt]) -> dict[int, ast.AST]:
    parents = {}
    for statement in body:
        for node in walk_outer(statement):
            for child in ast.iter_child_nodes(node):
                parents[id(child)] = node
    return parents


def candidates(test: ast.expr, helper_of: Callable) -> Iterator[ast.AST]:
    """The comparisons in a test, and the calls of gate helpers in it."""
    for node in walk_outer(test):
        if isinstance(node, ast.Compare) and all(type(op) in COMPARE for op in node.ops):
            yield node
        elif isinstance(node, ast.Call) and helper_of(node) is not None:
            yield node


def copy(node: ast.AST) -> ast.AST:
    return ast.parse(ast.unparse(node), mode="eval").body


def walk_outer(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk, not entering nested functions or lambdas."""
    todo = [node]
    while todo:
        current = todo.pop()
        yield current
        for child in ast.iter_child_nodes(current):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                todo.append(child)


def assignments(body: list[ast.stmt]) -> dict[str, ast.expr]:
    """name -> the expression assigned to it in these statements (nested blocks included, nested functions
    not). With several assignments, the last one that reads more than a constant wins."""
    found: dict[str, ast.expr] = {}
    for statement in body:
        for node in walk_outer(statement):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name, value = node.targets[0].id, node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                name, value = node.target.id, node.value
            else:
                continue
            if not isinstance(value, ast.Constant) or name not in found:
                found[name] = value
    return found


FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
NOT_CONSTANT = object()


def defaults(function: ast.FunctionDef) -> dict:
    """A function's parameters with constant defaults: name -> value."""
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    pairs = list(zip(positional[len(positional) - len(arguments.defaults) :], arguments.defaults, strict=True))
    pairs += [(a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True) if d is not None]
    return {a.arg: d.value for a, d in pairs if isinstance(d, ast.Constant)}


def scopes(tree: ast.Module) -> Iterator[tuple[str, ast.AST, list[str]]]:
    """(qualified name, node, parameters) for the module and every function in it (functions are statements:
    only statements are walked)."""
    yield "<module>", tree, []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, FUNCTIONS):
                name = f"{prefix}{child.name}"
                arguments = child.args
                yield name, child, [a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]]
                yield from visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.stmt):
                yield from visit(child, prefix)

    yield from visit(tree, "")


def decisions(body: list[ast.stmt], resolve: Callable) -> Iterator[tuple[ast.AST, ast.expr, str, bool | None]]:
    """(statement, expression, effect, bad_when) for every expression in these statements that decides
    something, not entering nested functions."""
    for statement in body:
        for node in walk_outer(statement):
            if isinstance(node, ast.Assert):
                yield node, node.test, "raise", False
            elif isinstance(node, (ast.If, ast.While)):
                if ends(node.body, resolve, "raise") and node.orelse and ends(node.orelse, resolve, "raise"):
                    yield node, node.test, "branch", None  # raises either way: it picks the error, not whether
                elif ends(node.body, resolve, "raise"):
                    yield node, node.test, "raise", True
                elif node.orelse and ends(node.orelse, resolve, "raise"):
                    yield node, node.test, "raise", False
                elif ends(node.body, resolve, "warn"):
                    yield node, node.test, "warn", True
                elif node.orelse and ends(node.orelse, resolve, "warn"):
                    yield node, node.test, "warn", False
                else:
                    yield node, node.test, "branch", None
            elif isinstance(node, (ast.Return, ast.Assign, ast.AnnAssign, ast.Expr)) and node.value is not None:
                yield node, node.value, "value", None
            elif isinstance(node, ast.IfExp):
                yield node, node.test, "branch", None


def ends(body: list[ast.stmt], resolve: Callable, what: str) -> bool:
    """Whether a top-level statement of the block raises/exits ("raise") or warns ("warn")."""
    for statement in body:
        if what == "raise" and isinstance(statement, ast.Raise):
            return True
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
            target = resolve(statement.value.func) or ""
            if what == "raise" and target in RAISES:
                return True
            if what == "warn" and (target in WARNS or target.rpartition(".")[2] in WARN_METHODS):
                return True
    return False


def role(test: ast.expr, node: ast.AST) -> tuple[str | None, ast.expr | None]:
    """("whole", node or `not node`) when the test is the node itself; ("and"/"or", the term) when it is one term
    of a top-level and/or; (None, None) when it sits deeper."""
    if negated(test, node) is not None:
        return "whole", test
    if isinstance(test, ast.BoolOp):
        for term in test.values:
            if negated(term, node) is not None:
                return ("and" if isinstance(test.op, ast.And) else "or"), term
    return None, None


def negated(test: ast.expr, compare: ast.Compare) -> bool | None:
    """For a test that is the comparison itself or `not` of it: whether it is negated; None otherwise."""
    if test is compare:
        return False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and test.operand is compare:
        return True
    return None


def module_name(path: str) -> str:
    """sglang/srt/utils/common.py -> sglang.srt.utils.common (sglang/srt/__init__.py -> sglang.srt)."""
    parts = path.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def wheel_gates(sources: list[tuple[str, str]]) -> list[Gate]:
    """Every gate of a wheel's Python sources, names shared between its modules followed."""
    return wheel_scan(sources)[0]


def wheel_scan(sources: list[tuple[str, str]]) -> tuple[list[Gate], list[dict]]:
    """(every gate of a wheel's Python sources, names shared between its modules followed; what the reader could
    not resolve: each gate reading a name that no constant binds, with its file, line and the names)."""
    modules = []
    shared: dict = {}
    for path, text in sources:
        if TESTS.search(path):
            continue  # a package's own tests: the server never imports them
        if not TRIGGER.search(text):  # no subject is read here: the cheap test keeps torch's 4,000 files quick
            for name, value in CONSTANT_LINE.findall(text):  # but its constants may be a helper's argument
                shared[("constant", f"{module_name(path)}.{name}")] = ast.literal_eval(value)
            continue
        try:
            with _quiet():
                module = ModuleGates(text, path, module_name(path))
        except (SyntaxError, ValueError, RecursionError):
            continue  # templates shipped as .py are not code the server runs
        modules.append(module)
        shared.update(module.exported)
        shared.update(module.constants)
    reexported(shared)
    # Two passes: the first finds the helpers (a function comparing a subject with its parameter), the second
    # judges their calls in every module.
    for module in modules:
        module.shared = shared
        try:
            list(module.gates())
        except RecursionError:
            continue
        shared.update({("helper", name): helper for name, helper in module.helpers.items()})
    reexported(shared)
    found, unresolved = [], []
    for module in modules:
        try:
            found.extend(module.gates())
        except RecursionError:
            unresolved.append({"file": module.file, "line": 0, "function": "<module>", "comparison": "",
                               "names": ["the module nests too deeply to read"]})  # fmt: skip
            continue
        unresolved.extend(module.unresolved)
    return found, unresolved


def reexported(shared: dict) -> None:
    """A package's __init__ re-exports its modules' names (`from .common import *` in sglang/srt/utils):
    make each name known under every enclosing package too."""
    for name, value in list(shared.items()):
        kind, dotted = name if isinstance(name, tuple) else (None, name)
        package, _, attribute = dotted.rpartition(".")
        while "." in package:
            package = package.rpartition(".")[0]
            shared.setdefault((kind, f"{package}.{attribute}") if kind else f"{package}.{attribute}", value)


class _quiet:
    """ast.parse warns on invalid escapes in old sources; those are not this reader's business."""

    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc):
        return self._catch.__exit__(*exc)


if __name__ == "__main__":  # a quick look at one file: python -m sglang_eagle3.source.startup_gates FILE
    for gate in ModuleGates(open(sys.argv[1]).read(), sys.argv[1], module_name(sys.argv[1])).gates():
        print(gate.line, gate.effect, gate.bad_when, gate.kinds, gate.comparison)
