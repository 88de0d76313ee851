"""What a model class provides, read from SGLang's source: the methods it defines, where a
method forwards to (``self.inner.method(...)``), the class of an attribute set in ``__init__``,
and whether a method is reachable through bases and forwarding (``lookup``)."""

from __future__ import annotations

import ast
from pathlib import Path

from .index import SourceIndex


def defines(cls: ast.ClassDef, method: str) -> ast.stmt | None:
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == method:
            return node
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == method for t in node.targets):
            return node
    return None


def forward_target(func: ast.stmt, method: str) -> str | None:
    """``self.inner.method(...)`` inside ``method``'s body -> "inner"."""
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    for node in ast.walk(func):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == method
            and isinstance(node.func.value, ast.Attribute)
            and isinstance(node.func.value.value, ast.Name)
            and node.func.value.value.id == "self"
        ):
            return node.func.value.attr
    return None


def attribute_class(index: SourceIndex, path: Path, cls: ast.ClassDef, attr: str):
    """The class of ``self.attr`` as assigned in ``__init__`` (``self.attr = Cls(...)``)."""
    init = defines(cls, "__init__")
    if init is None:
        return None
    for node in ast.walk(init):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Attribute) and t.attr == attr for t in node.targets)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
        ):
            return index.resolve_name(path, node.value.func.id)
    return None


def lookup(index: SourceIndex, path: Path, cls: ast.ClassDef, method: str, _depth: int = 0) -> tuple[bool, str]:
    """(provided, how) for ``cls.method``, following bases and forwarding to inner models."""
    if _depth > 12:
        return False, "class hierarchy too deep to follow"
    found = defines(cls, method)
    where = f"{index.rel(path)}:{found.lineno}" if found is not None else ""
    if found is not None:
        inner = forward_target(found, method)
        if inner is None:
            return True, f"defined in {cls.name} ({where})"
        inner_cls = attribute_class(index, path, cls, inner)
        if inner_cls is None:
            return True, f"forwarded to self.{inner} ({where}); its class is not known statically"
        ok, how = lookup(index, *inner_cls, method, _depth + 1)
        if ok:
            return True, f"forwarded to self.{inner} ({where}), a {inner_cls[1].name}: {how}"
        return False, f"forwarded to self.{inner} ({where}), but {inner_cls[1].name} has no {method}"
    for base in cls.bases:
        if isinstance(base, ast.Name):
            resolved = index.resolve_name(path, base.id)
            if resolved is not None:
                ok, how = lookup(index, *resolved, method, _depth + 1)
                if ok:
                    return True, how if how.startswith("inherited") else f"inherited: {how}"
    if defines(cls, "__getattr__") is not None:
        return True, f"{cls.name} defines __getattr__, which may provide it"
    return False, f"not defined in {cls.name} or its SGLang base classes"
