"""Read SGLang's Python source as syntax trees: the one parser and call resolver every reader of it uses.

The probe answers questions about an SGLang install ("which methods does the
EAGLE-3 path call on the target model?", "does this class provide them?") by
reading its source, so it needs no GPU, no torch import and no weights, and it
stays right when SGLang's code moves. The audits read it the same way: the
validation sites (validation_sites.py), the secret exits (secret_exits.py), the
start-up gates of any wheel and the run-time lookups (the sibling package
sglang_eagle3_audits). What they share lives here, once:

- parse_source (sglang_source's, which reads the tree's flags with it): a file parsed, with
  the error its caller names (and no warnings about the tree's own invalid escapes);
- own_nodes: the code of one scope, without the functions and classes nested in it;
- dotted_name, import_aliases, resolved_name: what a name means through a module's imports;
- SourceIndex: a tree's modules parsed once each, their functions and classes, and the
  function(s) a call calls: by its imports and classes where that can be told statically
  (``called``), or by the function's name alone where it is defined once in the tree
  (``defined_once``: the secret-exit scan, which must follow a call whatever its receiver);
- server_args_fields: every ServerArgs field with its help and flag, in both layouts.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..errors import BadInput
from .sglang_source import SGLangTree, parse_source


class SourceLayoutError(BadInput, ValueError):
    """The SGLang tree lacks a file, class or table this tool reads: not the layout of 0.5.9."""


def expect(value, what: str):
    """``value``, or SourceLayoutError naming what was looked for."""
    if value is None:
        raise SourceLayoutError(f"no {what}")
    return value


def own_nodes(nodes: Iterable[ast.AST], lambdas: bool = True) -> Iterator[ast.AST]:
    """Every node under ``nodes`` in source order that runs in their scope: the functions and classes defined there
    and their decorators, not their bodies; ``lambdas=False`` leaves out what a lambda runs only when called."""
    stack = list(reversed(list(nodes)))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            stack.extend(reversed(node.decorator_list))
        elif lambdas or not isinstance(node, ast.Lambda):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def dotted_name(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of attributes on a name; None for anything else (a call, a subscript)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def import_aliases(
    nodes: Iterable[ast.AST], package: str | None = None, star: Callable[[str], dict[str, str]] | None = None
) -> dict[str, str]:
    """Local name -> the dotted name it was imported as, for the imports among ``nodes`` (``ast.walk`` of a module,
    or own_nodes of one scope): ``{"sp": "subprocess", "CDLL": "ctypes.CDLL"}``. ``package``: the module's package,
    against which relative imports resolve; ``star``: the names ``from MODULE import *`` binds, where the reader
    knows them (else it binds none)."""
    names: dict[str, str] = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:  # import a.b binds a; import a.b as c binds c to a.b
                names[a.asname or a.name.partition(".")[0]] = a.name if a.asname else a.name.partition(".")[0]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level and package is not None:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            for a in node.names:
                if a.name != "*":
                    names[a.asname or a.name] = f"{module}.{a.name}"
                elif star is not None:
                    names.update(star(module))
    return names


def resolved_name(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The dotted name ``node`` refers to through a module's import aliases: ``sp.run`` -> ``subprocess.run``."""
    name = dotted_name(node)
    if name is None:
        return None
    head, _, rest = name.partition(".")
    head = aliases.get(head, head)
    return f"{head}.{rest}" if rest else head


def name_resolution_code() -> bytes:
    """The source of dotted_name, import_aliases, resolved_name and Constants: what the start-up gate and run-time
    lookup scans of the wheels (minutes each) depend on of this module, and so key their caches by; the rest of it
    may change without a re-scan."""
    return "".join(inspect.getsource(f) for f in (dotted_name, import_aliases, resolved_name, Constants)).encode()


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_MAX_VALUES = 64  # combinations of a concatenation, values of a loop: more than this is not a constant any more


class Constants:
    """The constant values a name can hold where it is read, in one module: what the audits follow a name through
    before they call an argument unresolved.

    Followed: a loop over constants (``for pkg in ("a", "b")``, also a tuple of tuples into ``for a, b in``), a
    module-level constant (``PKGS = (...)``, read in a function too), a default argument (``def f(pkg="a")``: the
    value the call gets when the caller passes none), a simple assignment (``name = "a"``, ``name = OTHER``), and
    what these combine into (``a + "b"``, an f-string, ``x if c else y``, ``list(X)``, ``X.keys()``). Flow-insensitive:
    every binding of the name in its scope counts, so a name bound twice has both values. Anything else that binds
    the name (a parameter without a default, an import, ``with ... as``, an augmented assignment, a call's result)
    leaves it unresolved: ``values`` answers None, and the audit lists the site. ``imported``: the values of a name the
    module imports with ``from ... import`` (by its local name), where the reader knows them (the start-up gate scan
    shares a wheel's module constants)."""

    def __init__(self, module: ast.Module, imported: Callable[[str], list | None] | None = None):
        self.module = module
        self.imported = imported or (lambda _name: None)
        self._bindings: dict[int, dict[str, list]] = {}
        self._enclosing: dict[int, ast.AST] | None = None

    def values(self, node: ast.AST, scope: ast.AST | None = None) -> list | None:
        """The values ``node`` (read in ``scope``: a function, or None/the module) can have; None: not constant."""
        return self._values(node, scope or self.module, frozenset())

    def iterated(self, node: ast.AST, scope: ast.AST | None = None) -> list | None:
        """The values a ``for`` over ``node`` gives its target, one by one."""
        return self._iterated(node, scope or self.module, frozenset())

    # -- values ------------------------------------------------------------------------------------

    def _values(self, node, scope, seen) -> list | None:
        if isinstance(node, ast.Constant):
            return [node.value]
        if isinstance(node, ast.Name):
            return self._name(node.id, scope, seen)
        if isinstance(node, ast.IfExp):
            return _joined(self._values(node.body, scope, seen), self._values(node.orelse, scope, seen))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return _combined([self._values(node.left, scope, seen), self._values(node.right, scope, seen)], _add)
        if isinstance(node, ast.JoinedStr):
            parts = [[p.value] if isinstance(p, ast.Constant) else self._formatted(p, scope, seen) for p in node.values]
            return _combined(parts, lambda a, b: f"{a}{b}")
        if isinstance(node, ast.Tuple | ast.List) and all(not isinstance(e, ast.Starred) for e in node.elts):
            parts = [self._values(e, scope, seen) for e in node.elts]
            return _combined([[()], *[None if p is None else [(v,) for v in p] for p in parts]], _add)
        return None

    def _formatted(self, part: ast.FormattedValue, scope, seen) -> list | None:
        if part.conversion != -1 or part.format_spec is not None:
            return None
        found = self._values(part.value, scope, seen)
        return None if found is None else [str(v) for v in found]

    def _iterated(self, node, scope, seen) -> list | None:
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            if any(isinstance(e, ast.Starred) for e in node.elts):
                return None
            return _joined(*[self._values(e, scope, seen) for e in node.elts]) if node.elts else []
        if isinstance(node, ast.Dict):
            return self._iterated(ast.List(elts=list(node.keys)), scope, seen) if None not in node.keys else None
        if isinstance(node, ast.Call) and not node.keywords:
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("list", "tuple", "sorted", "set", "reversed"):
                return self._iterated(node.args[0], scope, seen) if len(node.args) == 1 else None
            if isinstance(func, ast.Attribute) and func.attr == "keys" and not node.args:
                return self._iterated(func.value, scope, seen)
            return None
        if isinstance(node, ast.Name):
            found = []
            for kind, value, owner in self._bound(node.id, scope):
                key = (id(owner), node.id, "iter")
                if kind != "value" or key in seen:
                    return None
                items = self._iterated(value, owner, seen | {key})
                if items is None:
                    return None
                found += items
            return _unique(found) if found else None
        return None

    def _name(self, name: str, scope, seen) -> list | None:
        bound = self._bound(name, scope)
        if not bound:
            return None
        found = []
        for kind, value, owner in bound:
            key = (id(owner), name, id(value))
            if key in seen:
                continue  # x = x + 1 in a loop: the other bindings decide
            if kind == "value":
                items = self._values(value, owner, seen | {key})
            elif kind == "iterated":
                items = self._iterated(value, owner, seen | {key})
            elif kind == "unpacked":  # for a, b in ((..., ...), ...): the element at this position
                position, iterable = value
                rows = self._iterated(iterable, owner, seen | {key})
                if rows is None or not all(isinstance(r, tuple) and len(r) > position for r in rows):
                    return None
                items = [r[position] for r in rows]
            elif kind == "imported":
                items = self.imported(value)
            else:
                return None
            if items is None:
                return None
            found += items
        return _unique(found) if len(found) <= _MAX_VALUES else None

    # -- where a name is bound ----------------------------------------------------------------------

    def _bound(self, name: str, scope) -> list[tuple[str, object, ast.AST]]:
        """(kind, what, scope) of each binding of ``name`` seen from ``scope``: its own, else the enclosing
        functions', else the module's (a class body's names are not seen from its methods, as in Python)."""
        while scope is not None:
            found = self._scope_bindings(scope).get(name)
            if found:
                return [(kind, what, scope) for kind, what in found]
            if scope is self.module:
                return []
            scope = self._enclosing_scope(scope)
        return []

    def _enclosing_scope(self, scope) -> ast.AST:
        if self._enclosing is None:
            self._enclosing = {}
            todo: list[tuple[ast.AST, ast.AST]] = [(self.module, self.module)]
            while todo:
                node, owner = todo.pop()
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, _SCOPES):
                        self._enclosing[id(child)] = owner
                        todo.append((child, child))
                    else:
                        todo.append((child, owner))
        return self._enclosing.get(id(scope), self.module)

    def _scope_bindings(self, scope) -> dict[str, list]:
        if id(scope) in self._bindings:
            return self._bindings[id(scope)]
        found: dict[str, list] = defaultdict(list)
        if isinstance(scope, _SCOPES):
            _parameters(scope.args, found)
            body = [scope.body] if isinstance(scope, ast.Lambda) else scope.body
        else:
            body = scope.body
        for node in own_nodes(body if isinstance(body, list) else [body], lambdas=False):
            if isinstance(node, ast.Lambda) and node is not scope:
                continue
            _bind(node, found)
        self._bindings[id(scope)] = found
        return found


def _parameters(arguments: ast.arguments, found: dict[str, list]) -> None:
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    for parameter, default in [*zip(positional, defaults, strict=True),
                               *zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)]:  # fmt: skip
        found[parameter.arg].append(("value", default) if default is not None else ("unknown", None))
    for rest in (arguments.vararg, arguments.kwarg):
        if rest is not None:
            found[rest.arg].append(("unknown", None))


def _bind(node: ast.AST, found: dict[str, list]) -> None:
    """The bindings one node makes, into ``found`` (name -> [(kind, what)])."""
    if isinstance(node, ast.Assign):
        for target in node.targets:
            _target(target, ("value", node.value), found)
    elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
        _target(node.target, ("value", node.value), found)
    elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
        _target(node.target, ("iterated", node.iter), found)
    elif isinstance(node, ast.AugAssign | ast.withitem | ast.ExceptHandler | ast.MatchAs | ast.MatchStar):
        target = getattr(node, "target", None) or getattr(node, "optional_vars", None)
        name = getattr(node, "name", None)
        if target is not None:
            _target(target, ("unknown", None), found)
        elif isinstance(name, str):
            found[name].append(("unknown", None))
    elif isinstance(node, ast.Import | ast.ImportFrom):
        for alias in node.names:
            if alias.name != "*":
                local = alias.asname or alias.name.partition(".")[0]
                found[local].append(("imported", local) if isinstance(node, ast.ImportFrom) else ("unknown", None))
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        found[node.name].append(("unknown", None))
    elif isinstance(node, ast.Global | ast.Nonlocal):
        for name in node.names:
            found[name].append(("unknown", None))


def _target(target: ast.AST, binding: tuple[str, object], found: dict[str, list]) -> None:
    if isinstance(target, ast.Name):
        found[target.id].append(binding)
    elif isinstance(target, ast.Tuple | ast.List):
        kind, value = binding
        for position, element in enumerate(target.elts):
            if isinstance(element, ast.Name) and kind == "iterated":
                found[element.id].append(("unpacked", (position, value)))
            elif isinstance(element, ast.Name) and kind == "value" and isinstance(value, ast.Tuple | ast.List) \
                    and len(value.elts) == len(target.elts) and not isinstance(element, ast.Starred):  # fmt: skip
                found[element.id].append(("value", value.elts[position]))
            else:
                _target(element, ("unknown", None), found)
    elif isinstance(target, ast.Starred):
        _target(target.value, ("unknown", None), found)


def _unique(values: list) -> list:
    seen, found = set(), []
    for value in values:
        key = (type(value), repr(value))
        if key not in seen:
            seen.add(key)
            found.append(value)
    return found


def _joined(*parts: list | None) -> list | None:
    if any(p is None for p in parts):
        return None
    found = _unique([v for p in parts for v in p])
    return found if len(found) <= _MAX_VALUES else None


def _add(a, b):
    return a + b


def _combined(parts: list[list | None], combine: Callable) -> list | None:
    """Every combination of one value of each part, joined left to right; None when a part is not constant."""
    if any(p is None for p in parts):
        return None
    found = parts[0]
    for part in parts[1:]:
        try:
            found = [combine(a, b) for a in found for b in part]
        except TypeError:
            return None
        if len(found) > _MAX_VALUES:
            return None
    return _unique(found)


def module_dotted(tree: SGLangTree, path: Path) -> str:
    """srt/utils/common.py of the tree -> ``sglang.srt.utils.common`` (a package's __init__.py -> the package)."""
    parts = list(path.relative_to(tree.root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@dataclass(frozen=True)
class Condition:
    """One `if` test on the path to a statement, and whether the path is its true branch."""

    test: ast.expr
    polarity: bool

    def text(self) -> str:
        source = ast.unparse(self.test)
        return source if self.polarity else f"not ({source})"


def statements_with_conditions(body: list[ast.stmt], path: tuple[Condition, ...] = ()):
    """Yield (statement, conditions) for every statement under ``body``, with the `if` tests above it."""
    for stmt in body:
        yield stmt, path
        if isinstance(stmt, ast.If):
            yield from statements_with_conditions(stmt.body, path + (Condition(stmt.test, True),))
            yield from statements_with_conditions(stmt.orelse, path + (Condition(stmt.test, False),))
            # "if X: return" guards the rest of the block with "not X".
            if not stmt.orelse and isinstance(stmt.body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break)):
                path = path + (Condition(stmt.test, False),)
            continue
        for _, value in ast.iter_fields(stmt):
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.ExceptHandler):
                        yield from statements_with_conditions(item.body, path)
                block = [item for item in value if isinstance(item, ast.stmt)]
                yield from statements_with_conditions(block, path)


def own_expressions(stmt: ast.stmt):
    """Every expression node of ``stmt`` itself, not of the statements nested in it."""
    for _, value in ast.iter_fields(stmt):
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, ast.expr):
                yield from ast.walk(item)
            elif isinstance(item, (ast.keyword, ast.withitem, ast.arguments, ast.comprehension)):
                yield from (n for n in ast.walk(item) if isinstance(n, ast.expr))


@dataclass
class ParsedModule:
    """One module of the tree with what calls are resolved against: its functions, classes and imports."""

    rel: str  # srt/server_args.py
    dotted: str  # sglang.srt.server_args
    tree: ast.Module
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)  # qualname -> def
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)  # module-level classes
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted sglang name (module level)

    def __post_init__(self):
        self._index(self.tree, "")
        self.imports = self.imports_in(self.tree)

    def _index(self, node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                self.functions[prefix + child.name] = child
                self._index(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                if not prefix:
                    self.classes[child.name] = child
                self._index(child, f"{prefix}{child.name}.")

    def imports_in(self, scope: ast.AST) -> dict[str, str]:
        """Local name -> dotted sglang name, for the imports in ``scope``'s own code (a function imports lazily)."""
        package = self.dotted if self.rel.endswith("__init__.py") else self.dotted.rpartition(".")[0]
        # The first import of a name wins: a fallback in ``except ImportError`` runs only when the first fails.
        nodes = reversed(list(own_nodes(ast.iter_child_nodes(scope), lambdas=False)))
        found = import_aliases(nodes, package)
        return {k: v for k, v in found.items() if v.startswith("sglang") and k != v}  # not a bare `import sglang.x`

    def class_of(self, qualname: str) -> str | None:
        """The module-level class a function is a method of (``ServerArgs`` of ``ServerArgs.check``), or None."""
        owner = qualname.split(".")[0]
        return owner if owner in self.classes else None


Target = tuple[ParsedModule, str]  # a function: its module and qualified name


class SourceIndex:
    """Parsed modules of one SGLang tree, parsed lazily and cached; and the calls between their functions."""

    def __init__(self, tree: SGLangTree, error: type[BadInput] = SourceLayoutError):
        self.tree = tree
        self.error = error  # what a file that cannot be parsed raises: the error the caller's callers catch
        self._modules: dict[Path, ast.Module] = {}
        self._parsed: dict[str, ParsedModule | None] = {}

    def module(self, path: Path) -> ast.Module:
        if path not in self._modules:
            self._modules[path] = parse_source(path, self.error, self.rel(path))
        return self._modules[path]

    def parsed(self, dotted: str) -> ParsedModule | None:
        """``sglang.srt.server_args`` -> its module with its functions indexed (None: not a module of this tree)."""
        if dotted not in self._parsed:
            path = self.module_path(dotted)
            self._parsed[dotted] = None if path is None else ParsedModule(self.rel(path), dotted, self.module(path))
        return self._parsed[dotted]

    def parsed_modules(self) -> list[ParsedModule]:
        """The modules parsed so far."""
        return [m for m in self._parsed.values() if m is not None]

    # -- calls -----------------------------------------------------------------------------------

    def called(self, module: ParsedModule, caller: str, call: ast.AST, local: dict[str, str]) -> list[Target]:
        """The function(s) a call (or a callable passed by name) in ``caller`` calls, where that can be told
        statically. ``local``: the imports inside the caller itself."""
        func = call.func if isinstance(call, ast.Call) else call
        imports = {**module.imports, **local}
        if isinstance(func, ast.Name):
            return self._called_name(module, caller, func.id, imports)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            return self._called_attribute(module, module.class_of(caller), func.value.id, func.attr, imports)
        return []

    def _called_name(self, module: ParsedModule, caller: str, name: str, imports: dict[str, str]) -> list[Target]:
        if f"{caller}.{name}" in module.functions:  # a function nested in the caller
            return [(module, f"{caller}.{name}")]
        if name in module.functions:
            return [(module, name)]
        if name in module.classes:
            return _listed(_constructor(module, name))
        return _listed(self._imported(imports.get(name)))

    def _called_attribute(self, module, cls, owner: str, attr: str, imports: dict[str, str]) -> list[Target]:
        if owner in ("self", "cls") and cls and f"{cls}.{attr}" in module.functions:
            return [(module, f"{cls}.{attr}")]
        if owner in module.classes and f"{owner}.{attr}" in module.functions:
            return [(module, f"{owner}.{attr}")]
        target = imports.get(owner)
        if target:
            found = self.parsed(target)
            if found is not None and attr in found.functions:  # import sglang.x.y as m; m.f()
                return [(found, attr)]
            owner_module = self.parsed(target.rsplit(".", 1)[0]) if "." in target else None
            cls_name = target.rsplit(".", 1)[-1]  # from sglang.x import Cls; Cls.method()
            if owner_module is not None and f"{cls_name}.{attr}" in owner_module.functions:
                return [(owner_module, f"{cls_name}.{attr}")]
        return self._method_of_known_class(module, imports, attr)

    def _method_of_known_class(self, module: ParsedModule, imports: dict[str, str], method: str) -> list[Target]:
        """``obj.method()`` on an object of a class this module imports or defines: each of those classes' method of
        that name (``algo.handle_server_args(...)``, algo a SpeculativeAlgorithm or its CustomSpecAlgo)."""
        candidates = {(module.rel, f"{c}.{method}"): module for c in module.classes if f"{c}.{method}" in
                      module.functions}  # fmt: skip
        for target in set(imports.values()):
            cls = target.rsplit(".", 1)[-1]
            if "." not in target or not cls[:1].isupper():  # classes only (CapWords): a module is parsed for each
                continue
            owner = self.parsed(target.rsplit(".", 1)[0])
            if owner is not None and cls in owner.classes and f"{cls}.{method}" in owner.functions:
                candidates[(owner.rel, f"{cls}.{method}")] = owner
        return [(owner, name) for (_, name), owner in sorted(candidates.items())]

    def _imported(self, target: str | None) -> Target | None:
        """The function (or class's constructor) an imported dotted name denotes, through re-exports."""
        if not target or "." not in target:
            return None
        owner, name = target.rsplit(".", 1)
        found = self.parsed(owner)
        if found is None:
            return None
        if name in found.functions:
            return found, name
        if name in found.classes:
            return _constructor(found, name)
        if name in found.imports and found.imports[name] != target:  # re-exported (from .x import f in __init__)
            return self._imported(found.imports[name])
        return None

    # -- calls by name alone ------------------------------------------------------------

    @cached_property
    def sources(self) -> dict[Path, bytes]:
        """Every module of the package, as bytes: what a text search, or a digest of the tree, reads."""
        return {p: p.read_bytes() for p in sorted(self.tree.package.rglob("*.py"))}

    @cached_property
    def _definitions(self) -> dict[str, list[Path]]:
        """Function name -> the file of each ``def`` of that name (a file twice when it defines it twice)."""
        found: dict[str, list[Path]] = defaultdict(list)
        for path, text in self.sources.items():
            for match in re.finditer(rb"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)", text, re.MULTILINE):
                found[match.group(1).decode()].append(path)
        return found

    def defined_once(self, name: str) -> Path | None:
        """The file of the one function (or method) named ``name`` in the tree; None where there are none or
        several, and for dunders. ``called`` needs the receiver's class; this needs the name only, so ``x.f(a)``
        resolves whatever ``x`` is, as long as one ``f`` exists: what an audit that must over-approximate uses."""
        paths = self._definitions.get(name, ())
        return paths[0] if len(paths) == 1 and not name.startswith("__") else None

    def module_path(self, dotted: str) -> Path | None:
        """``sglang.srt.models.llama`` -> its file in this tree (module or package)."""
        parts = dotted.split(".")
        if parts[0] != "sglang":
            return None
        base = self.tree.root.joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def rel(self, path: Path) -> str:
        try:
            return self.tree.relative(path)
        except ValueError:  # outside the package (e.g. flashinfer beside it)
            return str(path)

    # -- classes -------------------------------------------------------------------

    def find_class_in(self, path: Path, name: str) -> ast.ClassDef | None:
        for node in self.module(path).body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node
        return None

    def resolve_name(self, path: Path, name: str) -> tuple[Path, ast.ClassDef] | None:
        """Follow ``name`` as used in module ``path`` to the class it denotes, if it is SGLang's."""
        cls = self.find_class_in(path, name)
        if cls is not None:
            return path, cls
        for node in self.module(path).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        target = self.module_path(node.module)
                        if target is not None:
                            return self.resolve_name(target, alias.name)
        return None

    @cached_property
    def model_files(self) -> list[Path]:
        return sorted((self.tree.srt / "models").glob("*.py"))

    def find_model_class(self, name: str) -> tuple[Path, ast.ClassDef] | None:
        """The model class named ``name`` (an architecture string from config.json)."""
        needle = f"class {name}("
        found = []
        for path in self.model_files:
            if needle in path.read_text(errors="replace"):
                cls = self.find_class_in(path, name)
                if cls is not None:
                    found.append((path, cls))
        # Prefer the module that registers it in EntryClass.
        found.sort(key=lambda pc: "EntryClass" not in pc[0].read_text(errors="replace"))
        return found[0] if found else None

    def similar_model_classes(self, name: str) -> list[str]:
        """Model class names close to ``name``, for a did-you-mean hint."""
        names = {
            m
            for path in self.model_files
            for m in re.findall(r"^class (\w+)\(", path.read_text(errors="replace"), re.MULTILINE)
        }
        return difflib.get_close_matches(name, sorted(names), n=3)


def _listed(found: Target | None) -> list[Target]:
    return [found] if found else []


def _constructor(module: ParsedModule, cls: str) -> Target | None:
    """What calling a class runs of its own: its __post_init__ (a dataclass) or its __init__."""
    for method in ("__post_init__", "__init__"):
        if f"{cls}.{method}" in module.functions:
            return module, f"{cls}.{method}"
    return None


# -- ServerArgs' fields ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerArgsField:
    name: str
    where: str  # srt/server_args.py:404
    annotation: str
    help: str
    flag: str | None  # "--api-key" when SGLang's parser takes it, else None
    namespace: str | None = None  # 0.5.23: "serving", "exec.features"


def server_args_fields(root: Path) -> list[ServerArgsField]:
    """Every field of the tree's ServerArgs (``root`` holds ``sglang/``), with its help text and flag: 0.5.9's
    dataclass (srt/server_args.py), 0.5.23's namespaces (srt/arg_groups/fields/*.py)."""
    srt = root / "sglang" / "srt"
    if (srt / "arg_groups" / "fields").is_dir():
        return _namespace_fields(root, srt / "arg_groups" / "fields")
    if (srt / "server_args.py").is_file():
        return _dataclass_fields(root, srt / "server_args.py")
    raise SourceLayoutError(f"{srt} has neither server_args.py nor arg_groups/fields/: is this an SGLang tree?")


def server_args_field_names(tree: SGLangTree) -> frozenset[str]:
    """The names of ServerArgs' fields: what ``self.FIELD`` may name in its validation."""
    return frozenset(f.name for f in server_args_fields(tree.root))


def _text(node: ast.expr | None) -> str:
    if node is None:
        return ""
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)  # an f-string help: its source, which holds its words
    return value if isinstance(value, str) else ""


def _dataclass_fields(root: Path, path: Path) -> list[ServerArgsField]:
    """0.5.9: the dataclass's annotated fields; help and flag from ``add_cli_args``'s ``add_argument`` calls."""
    rel = path.relative_to(root / "sglang").as_posix()
    module = parse_source(path, SourceLayoutError, rel)
    cls = next((n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs"), None)
    if cls is None:
        raise SourceLayoutError(f"{path} defines no ServerArgs class")
    helps: dict[str, tuple[str, str]] = {}
    for call in ast.walk(cls):
        if isinstance(call, ast.Call) and ast.unparse(call.func).endswith("add_argument"):
            flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            keywords = {k.arg: k.value for k in call.keywords}
            dest = keywords.get("dest")
            name = dest.value if isinstance(dest, ast.Constant) else (flags[0][2:].replace("-", "_") if flags else "")
            if name and name not in helps:
                helps[name] = (_text(keywords.get("help")), flags[0] if flags else "")
    return [
        ServerArgsField(
            n.target.id, f"{rel}:{n.lineno}", ast.unparse(n.annotation), *helps.get(n.target.id, ("", None))
        )  # fmt: skip
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    ]


def _namespace_fields(root: Path, directory: Path) -> list[ServerArgsField]:
    """0.5.23: the ``A[type, help]`` / ``A[type, Arg(help=..., no_cli=...)]`` fields of classes with ``_NS_PATH``."""
    found = []
    for path in sorted(directory.glob("*.py")):
        rel = path.relative_to(root / "sglang").as_posix()
        for cls in (n for n in parse_source(path, SourceLayoutError, rel).body if isinstance(n, ast.ClassDef)):
            ns = next((ast.literal_eval(s.value) for s in cls.body if isinstance(s, ast.Assign)
                       and ast.unparse(s.targets[0]) == "_NS_PATH"), None)  # fmt: skip
            if ns is not None:
                found += [_namespace_field(stmt, rel, ns) for stmt in cls.body
                          if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)]  # fmt: skip
    if not found:
        raise SourceLayoutError(f"{directory} declares no namespace fields (classes with _NS_PATH)")
    return found


def _namespace_field(stmt: ast.AnnAssign, rel: str, namespace: str) -> ServerArgsField:
    """One ``name: A[type, "help" | Arg(help=..., no_cli=True, cli_name=...)]`` field of a namespace class."""
    annotation, help_node, flag = stmt.annotation, None, "--" + stmt.target.id.replace("_", "-")
    if isinstance(annotation, ast.Subscript) and isinstance(annotation.slice, ast.Tuple):
        annotation, help_node = annotation.slice.elts[0], annotation.slice.elts[1]
        if isinstance(help_node, ast.Call):
            keywords = {k.arg: k.value for k in help_node.keywords}
            help_node = keywords.get("help")
            if _text(keywords.get("cli_name")):
                flag = "--" + _text(keywords["cli_name"]).lstrip("-")
            if isinstance(keywords.get("no_cli"), ast.Constant) and keywords["no_cli"].value is True:
                flag = None
    return ServerArgsField(stmt.target.id, f"{rel}:{stmt.lineno}", ast.unparse(annotation), _text(help_node), flag,
                           namespace)  # fmt: skip
