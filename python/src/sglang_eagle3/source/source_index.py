"""Read SGLang's Python source as syntax trees: modules, classes, and `if` conditions.

The probe answers questions about an SGLang install ("which methods does the
EAGLE-3 path call on the target model?", "does this class provide them?") by
reading its source, so it needs no GPU, no torch import and no weights, and it
stays right when SGLang's code moves.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ..errors import BadInput
from .sglang_source import SGLangTree


class SourceLayoutError(BadInput, ValueError):
    """The SGLang tree lacks a file, class or table this tool reads: not the layout of 0.5.9."""


def expect(value, what: str):
    """``value``, or SourceLayoutError naming what was looked for."""
    if value is None:
        raise SourceLayoutError(f"no {what}")
    return value


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


class SourceIndex:
    """Parsed modules of one SGLang tree, parsed lazily and cached."""

    def __init__(self, tree: SGLangTree):
        self.tree = tree
        self._modules: dict[Path, ast.Module] = {}

    def module(self, path: Path) -> ast.Module:
        if path not in self._modules:
            try:
                self._modules[path] = ast.parse(path.read_bytes(), filename=str(path))
            except OSError as err:
                raise SourceLayoutError(f"cannot read {self.rel(path)}: {err.strerror}") from None
            except (SyntaxError, ValueError) as err:  # ValueError: not UTF-8, NUL bytes
                raise SourceLayoutError(f"{self.rel(path)} is not Python source SGLang 0.5.9 has: {err}") from None
        return self._modules[path]

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
