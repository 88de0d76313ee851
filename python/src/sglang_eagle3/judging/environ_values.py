"""What an SGLang tree makes of a variable's text, by running the tree's own ``parse`` of that variable's class.

Each variable of srt/environ.py's ``Envs`` is an ``EnvField`` subclass (``EnvBool``, ``EnvInt``, ...). Its
``get()`` parses the text with the class's ``parse()`` and, where that raises ``ValueError``, warns and uses the
declared default: a value the settings give that ``parse()`` refuses is silently not the one the server runs with.
The ``parse`` methods are small and use only the standard library, so they are compiled from the tree's source
and run here (environ.py itself is not imported: importing it runs its module set-up), not restated.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..source.tree import SGLangTree, parse_source

ENVIRON = "srt/environ.py"


@dataclass(frozen=True)
class Reading:
    """The tree's reading of one variable's text."""

    kind: str  # the variable's class in Envs: "EnvBool"
    value: object  # what parse() made of the text; None when it refused it
    error: str | None  # parse()'s ValueError, when it refused the text
    parse_at: str  # srt/environ.py:LINE of the parse() that ran
    default: str  # the declared default, as the source writes it (ast.unparse)
    fallback_at: str | None  # srt/environ.py:LINE where get() warns and uses the default instead


@dataclass(frozen=True)
class _Declared:
    kind: str
    default: str
    parse: Callable[[object, str], object] | None  # None: no parse() that can run here (reads files, unknown)
    line: int


def read(tree: SGLangTree, variable: str, text: str) -> Reading | None:
    """How ``tree`` reads ``text`` for ``variable``; None where it does not say (not a variable of Envs, or a class
    whose parse cannot run here). Any exception but ValueError (which get() turns into the default) is not judged."""
    path = tree.srt / "environ.py"
    declared, fallback = _declarations(str(path), path.stat().st_mtime_ns)
    found = declared.get(variable)
    if found is None or found.parse is None:
        return None
    at = f"{ENVIRON}:{found.line}"
    falls = f"{ENVIRON}:{fallback}" if fallback else None
    try:
        value = found.parse(None, text)
    except ValueError as err:
        return Reading(found.kind, None, str(err), at, found.default, falls)
    except Exception:  # noqa: BLE001 - a parse that needs more than its text: not judged here
        return None
    return Reading(found.kind, value, None, at, found.default, falls)


@functools.cache
def _declarations(path: str, _stamp: int) -> tuple[dict[str, _Declared], int | None]:
    """Every variable of Envs with its class's runnable parse(), and the line of EnvField.get()'s fallback."""
    module = parse_source(Path(path))
    classes = {node.name: node for node in module.body if isinstance(node, ast.ClassDef)}
    namespace = _standard_imports(module)
    parses: dict[str, tuple[Callable | None, int] | None] = {}

    def parse_of(name: str, seen: frozenset[str] = frozenset()) -> tuple[Callable | None, int] | None:
        if name in seen or name not in classes:
            return None
        if name not in parses:
            own = next((f for f in classes[name].body if isinstance(f, ast.FunctionDef) and f.name == "parse"), None)
            if own is not None:
                parses[name] = (_compiled(own, path, namespace), own.lineno)
            else:
                bases = [b.id for b in classes[name].bases if isinstance(b, ast.Name)]
                parses[name] = next((p for b in bases if (p := parse_of(b, seen | {name})) is not None), None)
        return parses[name]

    envs = classes.get("Envs")
    declared = {}
    for node in envs.body if envs is not None else []:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
            kind = node.value.func.id
            found = parse_of(kind)
            default = ast.unparse(node.value.args[0]) if node.value.args else ""  # as written, near enough
            for target in (t for t in node.targets if isinstance(t, ast.Name)):
                parse, line = found if found else (None, node.lineno)
                declared[target.id] = _Declared(kind, default or "None", parse, line)
    return declared, _fallback_line(classes.get("EnvField"))


def _standard_imports(module: ast.Module) -> dict:
    """The standard-library modules environ.py imports at its top (``import json``), as parse() sees them."""
    namespace = {}
    for node in module.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in sys.stdlib_module_names:
                    namespace[alias.asname or alias.name] = importlib.import_module(alias.name)
    return namespace


def _compiled(function: ast.FunctionDef, path: str, namespace: dict) -> Callable | None:
    """The tree's parse() as a function, its annotations dropped (they name typing imports); None for one that
    opens files (EnvJSON takes a path on the server host) or names what is not in the namespace."""
    if any(isinstance(n, ast.Name) and n.id == "open" for n in ast.walk(function)):
        return None
    plain = copy.deepcopy(function)
    plain.decorator_list, plain.returns = [], None
    for argument in plain.args.args + plain.args.kwonlyargs:
        argument.annotation = None
    scope = dict(namespace)
    try:
        exec(compile(ast.fix_missing_locations(ast.Module([plain], [])), path, "exec"), scope)  # noqa: S102
    except Exception:  # noqa: BLE001 - a parse this reading cannot define: not judged
        return None
    return scope[function.name]


def _fallback_line(field: ast.ClassDef | None) -> int | None:
    """The line of EnvField.get()'s ``except ValueError`` (it warns and returns the default)."""
    get = next((f for f in field.body if isinstance(f, ast.FunctionDef) and f.name == "get"), None) if field else None
    handlers = [n for n in ast.walk(get) if isinstance(n, ast.ExceptHandler)] if get else []
    return next((h.lineno for h in handlers if isinstance(h.type, ast.Name) and h.type.id == "ValueError"), None)
