"""What SGLang will do with a flag on a GPU generation (Effect, FlagEffect), and the readers the all-reduce
readings share: a constant table evaluated without eval(), a module's assignments, the majors an ``is_smNN``
helper admits, a table lookup that tolerates a missing key or not.
"""

from __future__ import annotations

import ast
import enum
import re
from dataclasses import dataclass

from .index import SourceIndex


class Effect(enum.StrEnum):
    """What SGLang will do with a flag on this GPU generation."""

    NOT_REQUESTED = "not requested"
    CRASH = "crash"  # the server dies at start-up
    DISABLED = "disabled"  # accepted, then turned off by SGLang itself
    LOADS = "loads"  # starts; may still disable itself at run time (see the warning)
    ACTIVE = "active"  # in effect because it was asked for
    AUTO = "auto"  # SGLang turns it on by itself here
    IGNORED = "ignored"  # accepted and silently without effect
    UNKNOWN = "not checked"  # depends on something the source does not let us decide


@dataclass
class FlagEffect:
    flag: str
    requested: bool
    effect: Effect
    detail: str
    warning: str | None = None  # something the user should know even though it starts


def _value(node: ast.expr, names: dict):
    """Evaluate a constant expression such as ``{9: {2: 64 * MiB}}`` without eval()."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add)):
        left, right = _value(node.left, names), _value(node.right, names)
        return left * right if isinstance(node.op, ast.Mult) else left + right
    if isinstance(node, ast.Dict):
        return {_value(k, names): _value(v, names) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e, names) for e in node.elts]
    raise ValueError(f"not a constant expression: {ast.unparse(node)}")


def _assignments(body: list[ast.stmt]) -> dict[str, ast.Assign]:
    return {
        t.id: node for node in body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)
    }


def _constants(body: list[ast.stmt]) -> dict:
    names: dict = {}
    for name, node in _assignments(body).items():
        try:
            names[name] = _value(node.value, names)
        except (ValueError, KeyError):
            pass
    return names


def _sm_majors(index: SourceIndex, function_name: str) -> list[int]:
    """``is_sm120_supported`` -> [12], from its partial(..., device_capability_majors=[12])."""
    common = index.tree.srt / "utils" / "common.py"
    node = _assignments(index.module(common).body).get(function_name)
    if node is None:
        match = re.fullmatch(r"is_sm(\d+)_supported", function_name)
        return [int(match.group(1)) // 10] if match else []
    for kw in (k for n in ast.walk(node.value) if isinstance(n, ast.Call) for k in n.keywords):
        if kw.arg == "device_capability_majors":
            return _value(kw.value, {})
    return []


def _lookup(cls: ast.ClassDef, table: str) -> tuple[int | None, bool]:
    """(line, tolerant) of the first lookup of ``table``: ``table.get(key)`` tolerates a missing key, ``table[key]``
    raises KeyError."""
    for n in ast.walk(cls):
        if isinstance(n, ast.Subscript) and ast.unparse(n.value).endswith(table):
            return n.lineno, False
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get":
            if ast.unparse(n.func.value).endswith(table):
                return n.lineno, True
    return None, False
