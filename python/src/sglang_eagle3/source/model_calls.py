"""Calls made on a model object, read from SGLang's source, through the helpers it is handed to.

SGLang 0.5.9 calls the target's EAGLE-3 methods in place; later releases hand the model to helpers that make the
call. So a call is found where it is made: inside a helper, the parameters are replaced by the caller's arguments
(and local names by what they were set to), so the receiver and the guards read as the entry function's expressions.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .index import Condition, SourceIndex, own_expressions, statements_with_conditions

MAX_DEPTH = 4  # helpers within helpers; 0.5.23 needs two
MODEL_ATTRIBUTE = "model"  # the model object is reached as <runner>.model in every receiver the probe reads


@dataclass(frozen=True)
class ModelCall:
    method: str
    path: Path  # the file where the call is made
    line: int
    function: str  # the function that makes it (qualified)
    conditions: tuple[Condition, ...]  # guards from the entry function down, in the entry's terms
    via: tuple[str, ...] = ()  # "file:line in function" of each helper call on the way, entry first


def functions(module: ast.Module):
    """(qualified name, function) for module-level functions and methods."""
    for node in module.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{node.name}.{item.name}", item


def substitute(expr: ast.AST, names: dict[str, ast.expr]):
    """``expr`` with each Name in ``names`` replaced; unchanged parts are shared, nothing is modified in place."""
    if not names:
        return expr
    if isinstance(expr, ast.Name):
        return names.get(expr.id, expr)
    fields, changed = {}, False
    for name, value in ast.iter_fields(expr):
        if isinstance(value, list):
            new = [substitute(v, names) if isinstance(v, ast.AST) else v for v in value]
            changed = changed or any(a is not b for a, b in zip(new, value, strict=True))
        elif isinstance(value, ast.AST):
            new = substitute(value, names)
            changed = changed or new is not value
        else:
            new = value
        fields[name] = new
    return ast.copy_location(type(expr)(**fields), expr) if changed else expr


@dataclass
class _Facts:
    """What one walk over a function finds."""

    stores: dict[str, int]  # name -> how often it is assigned
    raise_guards: set[int]  # tests of ``if ...: raise``: a hasattr there makes the method required, not optional
    handling: set[int]  # statements in ``except`` blocks: run when a call failed, not on the path that must work
    attributes: set[str]  # attribute names it reads (a function without the model's cannot reach it alone)


def _facts(func: ast.FunctionDef) -> _Facts:
    facts = _Facts({}, set(), set(), set())
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            facts.stores[node.id] = facts.stores.get(node.id, 0) + 1
        elif isinstance(node, ast.Attribute):
            facts.attributes.add(node.attr)
        elif isinstance(node, ast.If) and node.body and isinstance(node.body[-1], ast.Raise):
            facts.raise_guards.add(id(node.test))
        elif isinstance(node, ast.ExceptHandler):
            facts.handling.update(id(stmt) for stmt in ast.walk(node) if isinstance(stmt, ast.stmt))
    return facts


def _local_names(func: ast.FunctionDef, stores: dict[str, int], names: dict[str, ast.expr]) -> dict[str, ast.expr]:
    """``names`` plus each local assigned once (``runner = self.target_worker.model_runner``), in its terms."""
    local = {name: expr for name, expr in names.items() if name not in stores}  # a reassigned parameter is unknown
    for stmt, _ in statements_with_conditions(func.body):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            if stores.get(name) == 1:
                local[name] = substitute(stmt.value, local)
    return local


def is_optional(conds: tuple[Condition, ...], receiver: str, method: str) -> bool:
    """A call guarded by ``hasattr(receiver, "method")`` is not a requirement."""
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr")
               and len(node.args) >= 2 and ast.unparse(node.args[0]) == receiver
               and isinstance(node.args[1], ast.Constant) and node.args[1].value == method
               for cond in conds for node in ast.walk(cond.test))  # fmt: skip


def _callee(index: SourceIndex, path: Path, func_node: ast.expr, cls: str | None):
    """The SGLang function a call reaches: a function of this module, one it imports, or ``self.m``."""
    module = index.module(path)
    if isinstance(func_node, ast.Attribute) and isinstance(func_node.value, ast.Name) and func_node.value.id == "self":
        found = _defined(module, f"{cls}.{func_node.attr}") if cls is not None else None
        return (path, f"{cls}.{func_node.attr}", found, True) if found else None
    if not isinstance(func_node, ast.Name):
        return None
    if found := _defined(module, func_node.id):
        return path, func_node.id, found, False
    if func_node.id not in (imported := index.absolute_imports(path)):
        return None
    dotted, name = imported[func_node.id]
    target = index.module_path(dotted)
    found = _defined(index.module(target), name) if target else None
    return (target, name, found, False) if found else None


def _defined(module: ast.Module, qualname: str) -> ast.FunctionDef | None:
    return next((func for name, func in functions(module) if name == qualname), None)


def _bind(func: ast.FunctionDef, call: ast.Call, method: bool, names: dict[str, ast.expr]) -> dict[str, ast.expr]:
    """The callee's parameters -> the caller's arguments (in the entry's terms)."""
    params = [a.arg for a in func.args.posonlyargs + func.args.args]
    if method:
        params = params[1:]  # self is the caller's self
    bound = {}
    for param, arg in zip(params, call.args, strict=False):
        if not isinstance(arg, ast.Starred):
            bound[param] = substitute(arg, names)
    keywords = {a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs}
    for kw in call.keywords:
        if kw.arg in keywords:
            bound[kw.arg] = substitute(kw.value, names)
    return bound


def _required_when(here, conds, raise_guards: set[int], receiver: str, method: str) -> tuple[Condition, ...]:
    """The conditions ``here`` of a call the model must answer, but a raise's ``if not hasattr(model, m)``: it turns
    the AttributeError into another error, it is no condition."""
    return tuple(new for new, old in zip(here, conds, strict=True)
                 if id(old.test) not in raise_guards or not is_optional((new,), receiver, method))  # fmt: skip


def _handed_to(index: SourceIndex, path: Path, call: ast.Call, names, cls: str | None, is_model, seen: frozenset):
    """The SGLang function ``call`` hands the model to (as an argument), unless it is on the way already."""
    if not any(is_model(ast.unparse(substitute(a, names))) for a in [*call.args, *(k.value for k in call.keywords)]):
        return None
    found = _callee(index, path, call.func, cls)
    return None if found is None or (found[0], found[1]) in seen else found


def model_calls(
    index: SourceIndex,
    path: Path,
    qualname: str,
    func: ast.FunctionDef,
    is_model: Callable[[str], bool],
    *,
    _names: dict[str, ast.expr] | None = None,
    _conds: tuple[Condition, ...] = (),
    _guards: tuple[Condition, ...] = (),
    _via: tuple[str, ...] = (),
    _seen: frozenset = frozenset(),
) -> Iterator[ModelCall]:
    """Calls ``<model>.m(...)`` that ``func`` makes, itself or through helpers it hands the model to (``is_model``:
    whether an expression, in the entry function's terms, is the model); not those guarded by ``hasattr(model, "m")``
    (optional) nor those in ``except`` blocks."""
    facts = _facts(func)
    if not _names and MODEL_ATTRIBUTE not in facts.attributes:
        return  # an entry function that never reads ``<x>.model`` holds no model to call or hand on
    names = _local_names(func, facts.stores, _names or {})
    raise_guards, handling = facts.raise_guards, facts.handling
    cls = qualname.rsplit(".", 1)[0] if "." in qualname else None
    for stmt, conds in statements_with_conditions(func.body):
        if id(stmt) in handling:
            continue
        here = tuple(Condition(substitute(c.test, names), c.polarity) for c in conds)
        guards = _guards + tuple(new for new, old in zip(here, conds, strict=True) if id(old.test) not in raise_guards)
        for node in own_expressions(stmt):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Attribute):
                receiver = ast.unparse(substitute(node.func.value, names))
                if is_model(receiver):
                    method = node.func.attr
                    if not is_optional(guards, receiver, method):
                        kept = _required_when(here, conds, raise_guards, receiver, method)
                        yield ModelCall(method, path, node.lineno, qualname, _conds + kept, _via)
                    continue
            found = _handed_to(index, path, node, names, cls, is_model, _seen) if len(_via) < MAX_DEPTH else None
            if found is None:
                continue
            callee_path, callee_name, callee, is_method = found
            yield from model_calls(
                index, callee_path, callee_name, callee, is_model, _names=_bind(callee, node, is_method, names),
                _conds=_conds + here, _guards=guards, _via=(*_via, f"{index.rel(path)}:{node.lineno} in {qualname}"),
                _seen=_seen | {(path, qualname)},
            )  # fmt: skip
