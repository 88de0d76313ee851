"""The secrets in SGLang's server arguments, and every place in SGLang's source they can leave by.

Read with ``ast`` (nothing is imported), from 0.5.9's ``ServerArgs`` dataclass and 0.5.23's namespaces
(srt/arg_groups/fields/*.py, ``A[type, help]``).

Secret fields: a rule over names and help text, not a list: a field that can hold text whose name has a word of
SECRET_WORDS, or whose help matches SECRET_HELP. The rule catches look-alikes too (``speculative_token_map``: a
path); each stack's data file says which are secrets and why the others are not.

Exits: where a *carrier* (the server-args object or a view of it: a name ending in ``server_args``, CARRIER_CALLS,
the config bags that hold a secret, ``self`` inside ``ServerArgs``, and names, parameters and returns it flows to
across the package) becomes text (f-string, repr, print, raised with), a log call's argument, a dict (asdict, vars,
resolved_dict(): info endpoints, gRPC), bytes (pickled, dumped, sent), argv (the command line echoed), or where a
secret field is read on its own (``field``). Handing it to the server's own child processes (``mp.Process(args=...)``)
is not an exit: a pipe, neither written nor served; the child's code is scanned where it is.

Each exit is keyed ``file::function::kind::code`` (stable across line moves; ``#2`` for a repeat). Each stack's
patches/sglang-<version>/secret-exits.json gives every key a disposition; ``patch check`` reports the keys it lacks."""

from __future__ import annotations

import ast
import contextlib
import fnmatch
import hashlib
import inspect
import json
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadInput
from ..files import loads_json, write_atomic
from ..progress_lines import working
from .constants import Constants, own_nodes
from .index import SourceIndex, SourceLayoutError
from .server_args import ServerArgsField, server_args_fields
from .tree import SGLangTree

DATA_FILE = "secret-exits.json"

# -- secret fields -------------------------------------------------------------------------------

SECRET_WORDS = frozenset({"key", "password", "passwd", "passphrase", "secret", "token", "credential", "credentials"})
SECRET_HELP = re.compile(r"\b(?:password|passphrase|secrets?|credentials?|private key|api key|key)\b", re.IGNORECASE)
TEXT_TYPES = frozenset({"str", "Any", "dict", "Dict", "object"})


def looks_secret(field: ServerArgsField) -> str | None:
    """Why the rule calls this field secret-looking, or None."""
    if not _takes_text(field.annotation):
        return None
    words = sorted(set(field.name.split("_")) & SECRET_WORDS)
    if words:
        return f"its name has the word {words[0]!r}"
    found = SECRET_HELP.search(field.help)
    return f"its help says {found.group(0)!r}" if found else None


def _takes_text(annotation: str) -> bool:
    """Whether a field of this annotation can hold text (Literal choices are fixed words, not secrets)."""
    try:
        tree = ast.parse(annotation, mode="eval")
    except SyntaxError:
        return True
    literal = {
        id(n) for sub in ast.walk(tree)
        if isinstance(sub, ast.Subscript) and ast.unparse(sub.value).endswith("Literal") for n in ast.walk(sub.slice)
    }  # fmt: skip
    return any(isinstance(n, ast.Name) and n.id in TEXT_TYPES and id(n) not in literal for n in ast.walk(tree))


class SecretAuditError(BadInput):
    """The tree does not have the layout this audit reads, or the data file is unusable."""


def _fields(root: Path) -> list[ServerArgsField]:
    """server_args_fields, its layout errors said as this audit's (patch check catches those)."""
    try:
        return server_args_fields(root)
    except SourceLayoutError as err:
        raise SecretAuditError(str(err)) from None


def secret_looking(fields: Iterable[ServerArgsField]) -> dict[str, str]:
    """Field name -> why the rule calls it secret-looking."""
    return {f.name: why for f in fields if (why := looks_secret(f))}


# -- exits ---------------------------------------------------------------------------------------

CARRIER_CALLS = frozenset(
    {"get_global_server_args", "get_server_args", "prepare_server_args", "ServerArgs", "from_cli_args",
     "resolving_view"}
)  # fmt: skip
COPIES = frozenset({"copy", "deepcopy", "replace"})
DICT_CALLS = frozenset({"asdict", "vars", "astuple", "to_builtins", "msgspec_to_builtins", "_plain"})
DICT_METHODS = frozenset({"resolved_dict", "public_dict", "resolved_server_args_dict"})
TEXT_CALLS = frozenset({"repr", "str", "format", "pformat", "pprint", "print"})
BYTES_CALLS = frozenset({"dump", "dumps", "encode", "save", "send_pyobj", "send_json", "write"})
LOG_CALLS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})
ARGV_ATTRS = frozenset({"launch_command", "_launch_command"})
SEED_TOKENS = ("server_args", "ServerArgs", "resolving_view", "sys.argv", "launch_command", "resolved_dict",
               "public_dict")  # fmt: skip


@dataclass(frozen=True)
class Exit:
    key: str  # file::function::kind::code
    where: str  # file:line
    kind: str
    function: str
    code: str

    @property
    def file(self) -> str:
        return self.key.split("::", 1)[0]


def _last(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _last(node.func)
    return ""


def _callee(call: ast.Call) -> tuple[str, bool]:
    """The name a call resolves by, and whether it is a method call (``x.name()``) or a function call."""
    return _last(call.func), isinstance(call.func, ast.Attribute)


def _may_call(method_call: bool, name: str, method: bool) -> bool:
    """Whether a call (``x.name()`` when ``method_call``, else ``name()``) may reach a definition of ``name`` (a
    method when ``method``): ``name()`` calls functions only; ``x.name()`` calls methods, and functions through a
    module (``common.build_server_info()``), but ``logger.info()`` is never the package's function ``info``."""
    if not method_call:
        return not method
    return method or name not in LOG_CALLS


def _bound_names(targets: Iterable[ast.AST]) -> set[str]:
    """The names an assignment binds (``a``, ``a, b``), not the bases of ``a.x = ...`` or ``a[i] = ...``."""
    names: set[str] = set()
    for target in targets:
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            names |= _bound_names(target.elts)
        elif isinstance(target, ast.Starred):
            names |= _bound_names([target.value])
    return names


@dataclass
class _Function:
    file: str
    qual: str
    name: str | None  # None for a module or class body
    params: list[str]
    nodes: list[ast.AST]  # its own nodes, without nested functions and classes
    in_server_args: bool  # a method of ServerArgs: ``self`` is a carrier
    method: bool  # defined in a class: called as ``x.name()``, where a function is called as ``name()``
    carrier_params: set[str] = field(default_factory=set)
    node: ast.AST | None = None  # the def (None: a module or class body)
    flow: Constants | None = None  # its module's names followed to constants (Constants)
    calls: set[str] | None = None  # the names it calls, once asked for
    idents: set[str] | None = None  # every name and attribute it mentions, once asked for


def _functions(rel: str, module: ast.Module) -> Iterator[_Function]:
    flow = Constants(module)

    def visit(node, qual: str, server_args_class: bool, method: bool):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = [p.arg for p in (*a.posonlyargs, *a.args)] + [p.arg for p in a.kwonlyargs]
            yield _Function(rel, qual, node.name, params, list(own_nodes(node.body)), server_args_class, method,
                            node=node, flow=flow)  # fmt: skip
        else:
            yield _Function(rel, qual or "<module>", None, [], list(own_nodes(node.body)), False, False, flow=flow)
        for child in _direct_definitions(node):
            name = f"{qual}.{child.name}" if qual else child.name
            if isinstance(child, ast.ClassDef):
                yield from visit(child, name, child.name.endswith("ServerArgs"), False)
            else:
                yield from visit(child, name, server_args_class, isinstance(node, ast.ClassDef))

    yield from visit(module, "", False, False)


def _direct_definitions(node: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    """Functions and classes defined in ``node``'s own body (at any statement depth, not inside another def)."""
    stack = list(reversed(list(ast.iter_child_nodes(node))))
    while stack:
        child = stack.pop()
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield child
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(child))))


class _Flow:
    """What in one function is a carrier, a view or a secret, and which of its nodes are exits."""

    def __init__(self, scan: _Scan, f: _Function):
        self.scan, self.function = scan, f
        self.unresolved: list[tuple[ast.AST, str]] = []  # (node, the expression a field's name is not resolved from)
        self.tainted = set(f.carrier_params) | ({"self"} if f.in_server_args else set())
        self.views: set[str] = set()  # local names bound to a view (a dict of the server args)
        for _ in range(2):  # aliases of aliases, in any order
            for n in f.nodes:
                if isinstance(n, ast.Assign) and self.is_view(n.value):
                    self.views |= _bound_names(n.targets)
                if isinstance(n, ast.Assign) and self.holds(n.value):
                    self.tainted |= _bound_names(n.targets)
                elif isinstance(n, (ast.AnnAssign, ast.NamedExpr)) and n.value is not None and self.holds(n.value):
                    self.tainted |= _bound_names([n.target])
                elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)) and self.holds(n.iter):
                    self.tainted |= _bound_names([n.target])
                elif isinstance(n, ast.withitem) and n.optional_vars is not None and self.holds(n.context_expr):
                    self.tainted |= _bound_names([n.optional_vars])

    def carrier(self, e: ast.AST) -> bool:
        """The server-args object (or a config bag holding a secret)."""
        if isinstance(e, ast.Name):
            return e.id.endswith("server_args") or e.id in self.tainted
        if isinstance(e, ast.Attribute):
            return e.attr.endswith("server_args") or (e.attr in self.scan.sub_bags and self.carrier(e.value))
        if isinstance(e, ast.Call):
            name = _last(e.func)
            if (
                name in CARRIER_CALLS
                or name in self.scan.bag_getters
                or self.scan.returns(e, self.scan.returns_carrier)
            ):
                return True
            return name in COPIES and any(self.carrier(a) for a in e.args)
        return False

    def holds(self, e: ast.AST) -> bool:
        """A carrier, a container of one, or one of its fields read by a name only known at run time."""
        if self.carrier(e):
            return True
        if isinstance(e, (ast.List, ast.Tuple, ast.Set)):
            return any(self.holds(x) for x in e.elts)
        if isinstance(e, ast.Dict):
            return any(self.holds(v) for v in e.values)
        if isinstance(e, ast.Starred):
            return self.holds(e.value)
        if isinstance(e, ast.IfExp):
            return self.holds(e.body) or self.holds(e.orelse)
        if isinstance(e, ast.Call) and _last(e.func) in ("dict", "list", "tuple"):
            return any(self.holds(a) for a in e.args)
        if isinstance(e, ast.Call) and _last(e.func) == "getattr" and len(e.args) >= 2:
            return self.carrier(e.args[0]) and not isinstance(e.args[1], ast.Constant)  # any field, by name
        return False

    def is_view(self, e: ast.AST) -> bool:
        """A dict (or text) of the server args: made here, returned by a view-returning function, or a
        first argument passed through a call (``redact(view)``, ``json.dumps(view)``)."""
        if isinstance(e, ast.Call):
            name = _last(e.func)
            if name in DICT_METHODS or self.scan.returns(e, self.scan.returns_view):
                return True
            if name in DICT_CALLS and any(self.holds(a) for a in e.args):
                return True
            return bool(e.args) and self.is_view(e.args[0])
        if isinstance(e, ast.Attribute) and e.attr == "__dict__":
            return self.carrier(e.value)
        if isinstance(e, (ast.List, ast.Tuple, ast.Set)):
            return any(self.is_view(x) for x in e.elts)
        if isinstance(e, ast.Dict):
            return any(self.is_view(v) for v in e.values)  # ``**view`` entries among them
        if isinstance(e, (ast.Starred, ast.Await)):
            return self.is_view(e.value)
        if isinstance(e, ast.IfExp):
            return self.is_view(e.body) or self.is_view(e.orelse)
        return isinstance(e, ast.Name) and e.id in self.views

    def names(self, e: ast.AST, node: ast.AST) -> list:
        """The field names an expression can be: a literal, or a name followed to constants (a loop over constants,
        a module constant, a default argument, a simple assignment); one not resolved is listed in ``unresolved``."""
        if isinstance(e, ast.Constant):
            return [e.value]
        found = self.function.flow.values(e, self.function.node) if self.function.flow is not None else None
        if found is None:
            self.unresolved.append((node, ast.unparse(e)))
            return []
        return found

    def secret_read(self, e: ast.AST) -> bool:
        """``carrier.api_key``, ``getattr(carrier, "api_key")`` (the name followed): one secret field read on its
        own."""
        if isinstance(e, ast.Attribute) and isinstance(e.ctx, ast.Load):
            return e.attr in self.scan.secrets and self.carrier(e.value)
        if isinstance(e, ast.Call) and _last(e.func) == "getattr" and len(e.args) >= 2 and self.carrier(e.args[0]):
            return any(n in self.scan.secrets for n in self.names(e.args[1], e))
        return False

    def exit_kind(self, n: ast.AST) -> str | None:
        """The kind of exit ``n`` is (see the module docstring), or None."""
        if isinstance(n, ast.Call):
            return self._call_kind(n)
        if isinstance(n, ast.FormattedValue):
            return "text" if self.holds(n.value) else None
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) and isinstance(n.left, (ast.Constant, ast.JoinedStr)):
            return "text" if self.holds(n.right) else None
        if isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call):
            return "text" if any(self.holds(a) for a in n.exc.args) else None
        if isinstance(n, ast.Attribute):
            if n.attr == "__dict__" and self.carrier(n.value):
                return "dict"
            if n.attr in ARGV_ATTRS or (n.attr == "argv" and isinstance(n.value, ast.Name) and n.value.id == "sys"):
                return "argv"
            return "field" if self.secret_read(n) else None
        return None

    def _call_kind(self, n: ast.Call) -> str | None:
        name = _last(n.func)
        args = [*n.args, *(k.value for k in n.keywords)]
        receiver = n.func.value if isinstance(n.func, ast.Attribute) else None
        if name in DICT_METHODS or self.scan.returns(n, self.scan.returns_view):
            return "dict"
        if name in DICT_CALLS and any(self.holds(a) for a in n.args):
            return "dict"
        if name in TEXT_CALLS and any(self.holds(a) for a in args):
            return "text"
        if name in ("__repr__", "__str__") and receiver is not None and self.carrier(receiver):
            return "text"
        if name in BYTES_CALLS and any(self.holds(a) for a in args):
            return "bytes"
        if name in LOG_CALLS and receiver is not None and not self.carrier(receiver):
            return "log" if any(self.holds(a) for a in args) else None
        if name in ("setattr", "__setattr__") and n.args:
            if any(isinstance(a, ast.Constant) and a.value in ARGV_ATTRS for a in n.args):
                return "argv"
            # (object, name) pairs: setattr(obj, name, v), Class.__setattr__(obj, name, v), obj.__setattr__(name, v)
            pairs = [(n.args[0], n.args[1])] if len(n.args) > 1 and (name == "setattr" or len(n.args) > 2) else []
            if name == "__setattr__" and len(n.args) == 2 and receiver is not None:
                pairs.append((receiver, n.args[0]))
            for target, attribute in pairs:  # a carrier's field set by a name: followed, or listed
                if not isinstance(attribute, ast.Constant) and self.carrier(target):
                    if any(a in ARGV_ATTRS for a in self.names(attribute, n)):
                        return "argv"
        return "field" if self.secret_read(n) else None


class _Scan:
    """The exit scan of one tree (see the module docstring)."""

    def __init__(self, root: Path, secrets: set[str]):
        self.package = root / "sglang"
        if not self.package.is_dir():
            raise SecretAuditError(f"{root} has no sglang/ package")
        self.secrets = secrets
        fields = _fields(root)
        namespaces = {f.namespace for f in fields if f.name in secrets and f.namespace}
        self.bag_getters = {f"get_{ns.split('.')[0]}" for ns in namespaces}
        self.sub_bags = {part for ns in namespaces for part in ns.split(".")[1:]}
        self.index = SourceIndex(SGLangTree(root, None), SecretAuditError)  # parses, and resolves calls by name
        self.texts = self.index.sources
        self.functions: list[_Function] = []
        self.by_name: dict[str, list[_Function]] = defaultdict(list)
        self.parsed: set[Path] = set()
        # (name, method) of the functions that return the server args (or a container of them), and of those
        # that return a dict of them (a call of one is an exit).
        self.returns_carrier: set[tuple[str, bool]] = set()
        self.returns_view: set[tuple[str, bool]] = set()
        # What a carrier, a view or an exit can start from, besides names ending in server_args.
        self.starts = {*CARRIER_CALLS, *self.bag_getters, *DICT_METHODS, *ARGV_ATTRS, "argv"}

    def _load(self, path: Path) -> None:
        if path in self.parsed:
            return
        self.parsed.add(path)
        rel = path.relative_to(self.package).as_posix()
        for function in _functions(rel, self.index.module(path)):
            self.functions.append(function)
            if function.name:
                self.by_name[function.name].append(function)

    # -- one function ------------------------------------------------------------------------

    def _relevant(self, f: _Function) -> bool:
        """Whether ``f`` mentions anything a carrier or a view starts from (most functions do not)."""
        if f.carrier_params or f.in_server_args:
            return True
        if f.idents is None:
            f.idents = {n.id if isinstance(n, ast.Name) else n.attr for n in f.nodes
                        if isinstance(n, (ast.Name, ast.Attribute))}  # fmt: skip
        return any(i.endswith("server_args") for i in f.idents) or not f.idents.isdisjoint(self.starts)

    def _analyse(
        self, f: _Function, listed: list | None = None
    ) -> tuple[list[tuple[str, ast.AST]], list[tuple[str, int | None, str | None]], str]:
        """``f``'s exits, the calls it passes a carrier to, and whether it returns a carrier or a view; ``listed``
        gets what a field's name was not resolved from, where ``f`` reads a carrier by a name."""
        if not self._relevant(f):
            return [], [], ""
        flow = _Flow(self, f)
        exits = [(kind, n) for n in f.nodes if (kind := flow.exit_kind(n))]
        if listed is not None:
            listed += [{"where": f"{f.file}:{node.lineno}", "function": f.qual, "expression": text}
                       for node, text in dict.fromkeys(flow.unresolved)]  # fmt: skip
        passes = []  # ((callee, method), position, keyword) given a carrier
        returns = ""
        for n in f.nodes:
            if isinstance(n, ast.Call):
                passes += [(_callee(n), i, None) for i, a in enumerate(n.args) if flow.holds(a)]
                passes += [(_callee(n), None, k.arg) for k in n.keywords if k.arg and flow.holds(k.value)]
            elif isinstance(n, ast.Return) and n.value is not None:
                returns = "carrier" if flow.holds(n.value) else "view" if flow.is_view(n.value) else returns
        return exits, passes, returns

    # -- the package ---------------------------------------------------------------------------

    def run(self) -> list[Exit]:
        """Spread carriers across calls until nothing changes, then list every function's exits."""
        tokens = [t.encode() for t in (*SEED_TOKENS, *self.bag_getters, *self.secrets)]
        for path, text in self.texts.items():
            if any(t in text for t in tokens):
                self._load(path)
        pending = list(self.functions)
        while pending:
            f = pending.pop()
            _, passes, returns = self._analyse(f)
            returned = self.returns_carrier if returns == "carrier" else self.returns_view if returns else None
            unique = f.name is not None and self.index.defined_once(f.name) is not None
            if returned is not None and unique and (f.name, f.method) not in returned:
                returned.add((f.name, f.method))
                self.starts.add(f.name)
                pending.extend(g for g in self.functions if f.name in self._calls(g))
            for (callee, method), position, keyword in passes:
                defined = self.index.defined_once(callee)
                if defined is None:
                    continue
                before = len(self.functions)
                self._load(defined)
                pending.extend(self.functions[before:])
                for g in self.by_name.get(callee, []):
                    if not _may_call(method, callee, g.method):
                        continue
                    offset = 1 if g.params[:1] in (["self"], ["cls"]) else 0
                    if keyword is not None:
                        param = keyword if keyword in g.params else None
                    else:
                        index = position + offset
                        param = g.params[index] if index < len(g.params) else None
                    if param and param not in g.carrier_params:
                        g.carrier_params.add(param)
                        pending.append(g)
        found: list[Exit] = []
        self.unresolved: list[dict] = []
        for f in self.functions:
            exits, _, _ = self._analyse(f, self.unresolved)
            seen: dict[str, int] = defaultdict(int)
            for kind, node in exits:
                code = " ".join(ast.unparse(node).split())
                code = code if len(code) <= 160 else code[:157] + "..."
                key = f"{f.file}::{f.qual}::{kind}::{code}"
                seen[key] += 1
                if seen[key] > 1:
                    key += f" #{seen[key]}"
                found.append(Exit(key, f"{f.file}:{node.lineno}", kind, f.qual, code))
        return sorted(found, key=lambda e: (e.file, int(e.where.rsplit(":", 1)[1]), e.key))

    @staticmethod
    def returns(call: ast.Call, table: set[tuple[str, bool]]) -> bool:
        """Whether ``call`` may call a function of ``table`` ((name, method) pairs)."""
        name, method_call = _callee(call)
        return any((name, method) in table and _may_call(method_call, name, method) for method in (True, False))

    @staticmethod
    def _calls(f: _Function) -> set[str]:
        if f.calls is None:
            f.calls = {_last(n.func) for n in f.nodes if isinstance(n, ast.Call)}
        return f.calls


def scan_exits(root: Path, secrets: Iterable[str]) -> list[Exit]:
    """Every exit of the SGLang tree at ``root`` (holding ``sglang/``), for the given secret field names."""
    return scan_report(root, secrets)[0]


def scan_report(root: Path, secrets: Iterable[str]) -> tuple[list[Exit], list[dict]]:
    """(every exit of the tree at ``root`` for the given secret field names, each read or set of a field by a name
    not resolved to constants). A scan of 0.5.23 takes most of a minute: the result is cached in $XDG_CACHE_HOME
    under a hash of every source file, the secret names and the modules that read them; when the cache cannot be
    used, the scan runs."""
    scan = _Scan(root, set(secrets))
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for reader in sorted({inspect.getsourcefile(r) for r in (SourceIndex, Constants, server_args_fields)}):
        digest.update(Path(reader).read_bytes())
    digest.update(json.dumps(sorted(scan.secrets)).encode())
    for path, text in scan.texts.items():
        digest.update(path.relative_to(scan.package).as_posix().encode() + b"\0" + text + b"\0")
    cached = _cache_dir() / f"{digest.hexdigest()}.json"
    try:
        kept = loads_json(cached.read_text())
        return [Exit(**e) for e in kept["exits"]], kept["unresolved"]
    except (OSError, ValueError, TypeError, KeyError):  # none, or damaged: scanned again and replaced
        pass
    with working(f"auditing where SGLang's server args can leave {root} (once per tree, about a minute; kept in "
                 f"{cached.parent})"):  # fmt: skip
        exits = scan.run()
    with contextlib.suppress(OSError):
        write_atomic(cached, json.dumps({"exits": [e.__dict__ for e in exits], "unresolved": scan.unresolved}))
    return exits, scan.unresolved


def _cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "sglang-eagle3" / "secret-exits"


# -- the data: a disposition for each field and exit ----------------------------------------------

DISPOSITIONS = ("closed_by", "shown_closed", "not_reachable")


@dataclass(frozen=True)
class SecretAudit:
    """A stack's secret-exits.json: which secret-looking fields are secrets, and each exit's disposition."""

    path: Path
    secret_fields: dict[str, str]  # name -> what it holds
    not_secret: dict[str, str]  # name -> why it is not a secret although the rule matches it
    rules: dict[str, str]  # file glob -> why no exit in those files is reachable
    exits: dict[str, dict]  # key -> {"where", one of DISPOSITIONS, "how"/"proof"...}
    patched_exits: dict[str, dict]  # exits the series adds (its own code), with theirs
    unresolved: list[dict] = field(default_factory=list)  # the pristine tree's reads of a field by a name not resolved

    @classmethod
    def load(cls, path: Path) -> SecretAudit:
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise SecretAuditError(f"cannot read the secret-exit audit {path}: {err}") from None
        return cls(path, data["secret_fields"], data["not_secret"], data["rules"], data["exits"],
                   data.get("patched_exits", {}), data.get("unresolved", []))  # fmt: skip

    @classmethod
    def for_series(cls, series_dir: Path) -> SecretAudit | None:
        path = series_dir / DATA_FILE
        return cls.load(path) if path.is_file() else None

    def rule_for(self, file: str) -> str | None:
        return next((g for g in self.rules if fnmatch.fnmatchcase(file, g)), None)

    def disposition(self, entry: dict) -> str:
        kinds = [d for d in DISPOSITIONS if d in entry]
        return kinds[0] if len(kinds) == 1 else ""


@dataclass
class TreeReport:
    """A tree's fields and exits set against an audit: what the audit does not account for."""

    secret_looking: dict[str, str]  # the rule's matches in this tree: name -> why
    secrets: list[str]  # those that are not known look-alikes
    exits: list[Exit]
    new_fields: list[str]  # secret-looking, and neither a known secret nor a known look-alike
    unknown: list[Exit]  # exits with no entry and no rule
    closed: dict[str, str]  # exit key -> the patch the audit says closes it
    unresolved: list[dict] = field(default_factory=list)  # a carrier's field read or set by a name not resolved


def audit_tree(root: Path, audit: SecretAudit) -> TreeReport:
    """Scan the tree at ``root`` and set it against ``audit``: new secret-looking fields, exits with no disposition."""
    looking = secret_looking(_fields(root))
    secrets = sorted(n for n in looking if n not in audit.not_secret)
    exits, unresolved = scan_report(root, secrets)
    known = {**audit.exits, **audit.patched_exits}
    unknown = [e for e in exits if e.key not in known and audit.rule_for(e.file) is None]
    closed = {e.key: known[e.key]["closed_by"] for e in exits if "closed_by" in known.get(e.key, {})}
    new_fields = sorted(n for n in looking if n not in audit.secret_fields and n not in audit.not_secret)
    return TreeReport(looking, secrets, exits, new_fields, unknown, closed, unresolved)
