"""Decide, from SGLang's own source, whether a guarded call runs under a speculative algorithm.

The algorithms, their ``is_*()`` predicates, aliases such as NEXTN -> EAGLE, the worker module of each algorithm
and runner flags such as ``eagle_use_aux_hidden_state`` are all read from the installed SGLang. Conditions are
evaluated in three values: True (always taken), False (never taken), None (depends on something not known before
start-up, e.g. the draft's config).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import shown
from .index import Condition, SourceIndex, expect, statements_with_conditions

Tri = bool | None


def tri_not(value: Tri) -> Tri:
    return None if value is None else not value


def tri_and(values: list[Tri]) -> Tri:
    if any(v is False for v in values):
        return False
    return True if all(v is True for v in values) else None


def tri_or(values: list[Tri]) -> Tri:
    if any(v is True for v in values):
        return True
    return False if all(v is False for v in values) else None


@dataclass
class SpecAlgebra:
    members: list[str]
    predicates: dict[str, set[str]]  # "is_eagle" -> {"EAGLE", "EAGLE3"}
    aliases: dict[str, str]  # "NEXTN" -> "EAGLE"
    # runner flag -> the condition paths under which it is set to something not False
    flags: dict[str, list[tuple[Condition, ...]]] = field(default_factory=dict)
    # worker module file -> (worker class, condition paths under which create_worker picks it)
    workers: dict[Path, tuple[str, list[tuple[Condition, ...]]]] = field(default_factory=dict)

    def canonical(self, algorithm: str) -> str:
        name = algorithm.upper()
        name = self.aliases.get(name, name)
        if name not in self.members:
            known = sorted(set(self.members) | set(self.aliases))
            raise ValueError(f"unknown speculative algorithm {shown(algorithm)}; this SGLang knows {', '.join(known)}")
        return name

    def evaluate(self, expr: ast.expr, algorithm: str, _seen: frozenset = frozenset()) -> Tri:
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            return tri_not(self.evaluate(expr.operand, algorithm, _seen))
        if isinstance(expr, ast.BoolOp):
            values = [self.evaluate(v, algorithm, _seen) for v in expr.values]
            return tri_and(values) if isinstance(expr.op, ast.And) else tri_or(values)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and not expr.args:
            if expr.func.attr in self.predicates:
                return algorithm in self.predicates[expr.func.attr]
        if isinstance(expr, ast.Attribute) and expr.attr in self.flags and expr.attr not in _seen:
            paths = self.flags[expr.attr]
            seen = _seen | {expr.attr}
            possible = tri_or([self.path_value(p, algorithm, seen) for p in paths])
            return False if possible is False else None
        return None

    def path_value(self, path: tuple[Condition, ...], algorithm: str, _seen: frozenset = frozenset()) -> Tri:
        values = []
        for cond in path:
            value = self.evaluate(cond.test, algorithm, _seen)
            values.append(value if cond.polarity else tri_not(value))
        return tri_and(values)

    def describe(self, paths: list[tuple[Condition, ...]], algorithm: str) -> str:
        """Paths as text, leaving out what is already decided by the algorithm."""
        alternatives = []
        for path in paths:
            if self.path_value(path, algorithm) is False:
                continue
            open_terms = [c.text() for c in path if self._term(c, algorithm) is None]
            alternatives.append(" and ".join(open_terms) or "always")
        if "always" in alternatives:
            return "always"
        return " or ".join(f"({a})" if len(alternatives) > 1 else a for a in alternatives) or "never"

    def _term(self, cond: Condition, algorithm: str) -> Tri:
        value = self.evaluate(cond.test, algorithm)
        return value if cond.polarity else tri_not(value)

    def mentions_speculation(self, path: tuple[Condition, ...]) -> bool:
        """Whether a path is guarded by speculative decoding: never taken without it, or tested on the
        algorithm (an ``is_*()`` predicate, or a runner flag set only under one)."""
        return self.path_value(path, "NONE") is False or any(self._mentions(c.test) for c in path)

    def _mentions(self, expr: ast.expr, _seen: frozenset = frozenset()) -> bool:
        for node in ast.walk(expr):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args:
                if node.func.attr in self.predicates:
                    return True
            if isinstance(node, ast.Attribute) and node.attr in self.flags and node.attr not in _seen:
                seen = _seen | {node.attr}
                if any(self._mentions(c.test, seen) for p in self.flags[node.attr] for c in p):
                    return True
        return False


def _predicates(index: SourceIndex) -> tuple[list[str], dict[str, set[str]]]:
    path = index.tree.srt / "speculative" / "spec_info.py"
    cls = expect(index.find_class_in(path, "SpeculativeAlgorithm"), f"class SpeculativeAlgorithm in {index.rel(path)}")
    members = [t.id for node in cls.body if isinstance(node, ast.Assign)
               for t in node.targets if isinstance(t, ast.Name) and t.id.isupper()]  # fmt: skip
    predicates: dict[str, set[str]] = {}
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("is_"):
            returns = [n for n in ast.walk(node) if isinstance(n, ast.Return) and n.value is not None]
            compared = {a.attr for r in returns for a in ast.walk(r.value) if isinstance(a, ast.Attribute)
                        and isinstance(a.value, ast.Name) and a.value.id == "SpeculativeAlgorithm"}  # fmt: skip
            if compared:
                predicates[node.name] = compared & set(members)
    return members, predicates


def _aliases(index: SourceIndex) -> dict[str, str]:
    """``if self.speculative_algorithm == "NEXTN": self.speculative_algorithm = "EAGLE"``."""
    aliases = {}
    for node in ast.walk(index.module(index.tree.srt / "server_args.py")):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)):
            continue
        test = node.test
        if (
            isinstance(test.left, ast.Attribute)
            and test.left.attr == "speculative_algorithm"
            and isinstance(test.ops[0], ast.Eq)
            and isinstance(test.comparators[0], ast.Constant)
        ):
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and isinstance(stmt.targets[0], ast.Attribute)
                    and stmt.targets[0].attr == "speculative_algorithm"
                    and isinstance(stmt.value, ast.Constant)
                ):
                    aliases[str(test.comparators[0].value)] = str(stmt.value.value)
    return aliases


def _flags(index: SourceIndex, files: list[Path]) -> dict[str, list[tuple[Condition, ...]]]:
    """``self.X = <not False>`` assignments in ``files``, with the conditions they sit under; also
    ``config.X = ...`` on a local (0.5.23 sets the runner's flags on a config object it returns)."""
    flags: dict[str, list[tuple[Condition, ...]]] = {}
    for path in files:
        for node, conds in statements_with_conditions(index.module(path).body):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    if not (isinstance(node.value, ast.Constant) and node.value.value in (False, None)):
                        flags.setdefault(target.attr, []).append(conds)
    return flags


def _workers(index: SourceIndex) -> dict[Path, tuple[str, list[tuple[Condition, ...]]]]:
    """Which worker module ``SpeculativeAlgorithm.create_worker`` imports, and when."""
    spec_info = index.tree.srt / "speculative" / "spec_info.py"
    cls = expect(index.find_class_in(spec_info, "SpeculativeAlgorithm"), "class SpeculativeAlgorithm")
    create = expect(
        next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "create_worker"), None),
        f"SpeculativeAlgorithm.create_worker in {index.rel(spec_info)}",
    )
    workers: dict[Path, tuple[str, list[tuple[Condition, ...]]]] = {}
    for node, conds in statements_with_conditions(create.body):
        if isinstance(node, ast.ImportFrom) and node.module:
            path = index.module_path(node.module)
            if path is not None:
                name = node.names[0].name
                workers.setdefault(path, (name, []))[1].append(conds)
    # A worker that subclasses another inherits its __init__: the base's module runs too.
    for path, (name, paths) in list(workers.items()):
        resolved = index.resolve_name(path, name)
        if resolved is None:
            continue
        for base in resolved[1].bases:
            if isinstance(base, ast.Name):
                base_def = index.resolve_name(path, base.id)
                if base_def is not None and base_def[0] in workers and base_def[0] != path:
                    workers[base_def[0]][1].extend(paths)
    return workers


def load(index: SourceIndex, flag_files: list[Path]) -> SpecAlgebra:
    members, predicates = _predicates(index)
    algebra = SpecAlgebra(members, predicates, _aliases(index))
    algebra.flags = _flags(index, flag_files)
    algebra.workers = _workers(index)
    return algebra
