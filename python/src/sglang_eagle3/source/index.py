"""Read SGLang's Python source as syntax trees: the one parser and call resolver every reader of it uses.

The probe answers questions about an SGLang install ("which methods does the EAGLE-3 path call on the target
model?", "does this class provide them?") by reading its source, so it needs no GPU, no torch import and no weights,
and it stays right when SGLang's code moves. The audits (validation_sites.py, secret_exits.py, and the sibling
package sglang_eagle3_audits) read it the same way. SourceIndex resolves a call by its imports and classes where that
can be told statically (``called``), or by the function's name alone where it is defined once in the tree
(``defined_once``: the secret-exit scan, which must follow a call whatever its receiver).
"""

from __future__ import annotations

import ast
import difflib
import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..errors import BadInput
from .constants import import_aliases, own_nodes
from .tree import SGLangTree, parse_source


class SourceLayoutError(BadInput, ValueError):
    """The SGLang tree lacks a file, class or table this tool reads: not the layout of 0.5.9."""


def expect(value, what: str):
    """``value``, or SourceLayoutError naming what was looked for."""
    if value is None:
        raise SourceLayoutError(f"no {what}")
    return value


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
        self._absolute_imports: dict[Path, dict[str, tuple[str, str]]] = {}

    def module(self, path: Path) -> ast.Module:
        if path not in self._modules:
            self._modules[path] = parse_source(path, self.error, self.rel(path))
        return self._modules[path]

    def absolute_imports(self, path: Path) -> dict[str, tuple[str, str]]:
        """The names the module at ``path`` imports absolutely, inside its functions too (SGLang defers many): local
        name -> (module, name there). The first import of a name wins, in ast.walk's order."""
        if path not in self._absolute_imports:
            found: dict[str, tuple[str, str]] = {}
            for node in ast.walk(self.module(path)):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    for alias in node.names:
                        found.setdefault(alias.asname or alias.name, (node.module, alias.name))
            self._absolute_imports[path] = found
        return self._absolute_imports[path]

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
        return next((c for c in (base.with_suffix(".py"), base / "__init__.py") if c.is_file()), None)

    def rel(self, path: Path) -> str:
        try:
            return self.tree.relative(path)
        except ValueError:  # outside the package (e.g. flashinfer beside it)
            return str(path)

    # -- classes -------------------------------------------------------------------

    def find_class_in(self, path: Path, name: str) -> ast.ClassDef | None:
        return next((n for n in self.module(path).body if isinstance(n, ast.ClassDef) and n.name == name), None)

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
        found = [re.findall(r"^class (\w+)\(", p.read_text(errors="replace"), re.MULTILINE) for p in self.model_files]
        return difflib.get_close_matches(name, sorted({m for names in found for m in names}), n=3)


def _listed(found: Target | None) -> list[Target]:
    return [found] if found else []


def _constructor(module: ParsedModule, cls: str) -> Target | None:
    """What calling a class runs of its own: its __post_init__ (a dataclass) or its __init__."""
    for method in ("__post_init__", "__init__"):
        if f"{cls}.{method}" in module.functions:
            return module, f"{cls}.{method}"
    return None
