"""The statements a start-up gate is read from: which expressions decide something (raise, warn, branch, value),
what they are part of (a whole test, a term of an and/or, a guard), and the scopes and names around them."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from .gates import COMPARE, RAISES, WARN_METHODS, WARNS


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
