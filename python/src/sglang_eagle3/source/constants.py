"""Following a name in SGLang's source to the constants it can hold: through a module's imports (dotted_name,
import_aliases, resolved_name) and its bindings (Constants: a loop over constants, a module-level constant, a
default argument, a simple assignment, a concatenation). The readers and the audits share it; the audits' scan
caches key on its code (name_resolution_code).
"""

from __future__ import annotations

import ast
import inspect
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator


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
