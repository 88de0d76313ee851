"""Which attention backends serve which models, read from SGLang's source without importing it.

The draft worker runs with ``speculative_draft_attention_backend`` when it is set, else with the target's backend:
one that serves only MLA models (Kimi-K2.5's attention) cannot serve a Llama-architecture (MHA) draft, and the
other way round. A registered backend serves MLA only when its factory raises unless ``runner.use_mla_backend`` or
builds only a ``*MLA*`` class, MHA only when it raises if ``runner.use_mla_backend``, both when it chooses by it
without raising; otherwise it is not known.
"""

from __future__ import annotations

import ast
import enum

from .index import SourceIndex


class Serves(enum.StrEnum):
    MLA = "MLA models only"
    MHA = "non-MLA models only"
    BOTH = "MLA and non-MLA models"
    UNKNOWN = "models its factory does not tell apart"


def draft_override(index: SourceIndex) -> str | None:
    """file:line where the draft worker takes speculative_draft_attention_backend instead of the target's backend."""
    path = index.tree.srt / "model_executor" / "model_runner.py"
    if not path.is_file():
        return None
    for node in ast.walk(index.module(path)):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "self.is_draft_worker and draft_attn_backend":
            return f"{index.rel(path)}:{node.lineno}"
    return None


def mla_architectures(index: SourceIndex) -> tuple[set[str], str] | None:
    """(architectures run with MLA attention, file:line of the first such branch), or None."""
    path = index.tree.srt / "configs" / "model_config.py"
    if not path.is_file():
        return None
    names, first = set(), None
    for node in ast.walk(index.module(path)):
        if isinstance(node, ast.If) and any(_sets_mla(stmt) for stmt in node.body):
            names |= _architecture_names(node.test)
            first = first or f"{index.rel(path)}:{node.lineno}"
    return (names, first) if names else None


def backends(index: SourceIndex) -> dict[str, tuple[Serves, str]]:
    """Registered backend name -> (what it serves, file:line of its factory)."""
    path = index.tree.srt / "layers" / "attention" / "attention_registry.py"
    if not path.is_file():
        return {}
    found = {}
    for node in index.module(path).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            if (
                isinstance(decorator, ast.Call)
                and ast.unparse(decorator.func) == "register_attention_backend"
                and decorator.args
                and isinstance(decorator.args[0], ast.Constant)
            ):
                found[decorator.args[0].value] = (_serves(node), f"{index.rel(path)}:{node.lineno}")
    return found


def _sets_mla(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Assign)
        and any(isinstance(t, ast.Attribute) and t.attr == "attention_arch" for t in stmt.targets)
        and ast.unparse(stmt.value) == "AttentionArch.MLA"
    )


def _architecture_names(test: ast.expr) -> set[str]:
    return {node.left.value for node in ast.walk(test) if isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant) and isinstance(node.ops[0], ast.In)
            and ast.unparse(node.comparators[0]).endswith("architectures")}  # fmt: skip


def _serves(factory: ast.FunctionDef) -> Serves:
    for node in ast.walk(factory):
        if isinstance(node, ast.If) and any(isinstance(s, ast.Raise) for s in node.body):
            test = ast.unparse(node.test)
            if test == "not runner.use_mla_backend":
                return Serves.MLA
            if test == "runner.use_mla_backend":
                return Serves.MHA
    built = {
        ast.unparse(node.func)
        for node in ast.walk(factory)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id[:1].isupper()
    }
    if built and all("MLA" in name for name in built):
        return Serves.MLA
    if "runner.use_mla_backend" in ast.unparse(factory):
        return Serves.BOTH
    return Serves.UNKNOWN
