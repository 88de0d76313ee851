"""What a start-up gate is, and how it is judged: a comparison of something the stack or the host provides (a
package's version, Python's, torch's CUDA, cuDNN, NCCL, the GPU's compute capability) with a constant.

Each gate is judged against the values the caller gives: the stack's composed versions (startup_gates.py) or a
host's GPU. The comparison is evaluated for real, with the values put where the source reads them, so
`float(str(cudnn_version)[:3]) / 100 < 9.15` is computed as SGLang computes it. gate_scan.py finds the gates.

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
import operator
import re
from dataclasses import dataclass, field

import packaging.version

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
