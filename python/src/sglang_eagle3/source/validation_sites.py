"""Every place SGLang's own start-up validation can refuse or change a setting, read from a tree with ``ast``.

SGLang validates its arguments in three steps before it loads anything: the parser (``choices=`` and ``type=`` of
each flag), then the resolution of the parsed values (0.5.9: ``ServerArgs.__post_init__`` and the ``_handle_*``
methods it calls; 0.5.23: ``ServerArgs.resolve_once``, whose pipeline runs the hooks of ``srt/arg_groups/``), then
``check_server_args`` (called by the engine before it starts the schedulers). This module lists each site of those
steps:

- ``raise`` and ``assert``: a setting refused (start-up stops);
- ``set FIELD``: a setting silently rewritten (0.5.9: an assignment to ``self.FIELD`` / ``server_args.FIELD``;
  0.5.23: a ``declare_resolution(..., FIELD=...)`` keyword, or a key of the dict a post-process pass returns);
- ``choices --flag`` and ``type --flag``: what the parser accepts for a flag.

The files read whole are the validation modules (``VALIDATION_FILES``: server_args.py and, where it exists,
srt/arg_groups/); every other function of the tree that they call, directly or through each other (a helper such
as srt/utils/common.py's get_device_memory_capacity), is read too. Each site has a key that does not depend on
its line (``srt/server_args.py::ServerArgs._handle_speculative_decoding::raise ValueError: trtllm_mha backend
only supports topk = 1 ...``), so a new release's new sites show up as new keys; lines are information.
"""

from __future__ import annotations

import ast
import functools
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from .sglang_source import SGLangTree, namespace_classes, parse_source

VALIDATION_FILES = ("srt/server_args.py", "srt/arg_groups")
# Where validation starts (those a tree has): the parse, the resolution, the engine's check before start-up.
ROOTS = (
    "prepare_server_args",
    "ServerArgs.from_cli_args",
    "ServerArgs.__post_init__",
    "ServerArgs.resolve_once",
    "ServerArgs.check_server_args",
)
KINDS = ("raise", "assert", "set", "choices", "type")
TEXT = 160  # characters of a site's source kept as information


@dataclass(frozen=True)
class Site:
    key: str  # file::function::kind detail (unique; #2, #3 for a repeated one in the same function)
    kind: str  # one of KINDS
    file: str  # relative to the sglang package: srt/server_args.py
    line: int
    function: str  # qualified name (Class.method, outer.inner), or the class.field of a parser field
    text: str  # the statement, shortened
    reached: bool | None  # called, directly or not, from ROOTS (static call graph); None: not computed
    choices: list | None = None  # a choices site: the values, where they are literals (None: computed)
    flag: str | None = None  # a parser site's flag
    parser_type: str | None = None  # a type site's callable, as written (int, float, json.loads, ...)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def to_dict(self) -> dict:
        data = {"kind": self.kind, "where": self.where, "function": self.function, "text": self.text}
        if self.reached is False:
            data["reached"] = False
        if self.kind == "choices":
            data["choices"] = self.choices
        return data


def key_matches(pattern: str, key: str) -> bool:
    """A site pattern (a rule's, a disposition of the audit's): the site's key, with * for any text and no other
    wildcard, as keys hold [ ] and ?."""
    return re.fullmatch(".*".join(re.escape(part) for part in pattern.split("*")), key, re.DOTALL) is not None


def _short(text: str, limit: int = TEXT) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _message(node: ast.AST | None) -> str:
    """The constant text of an exception's message: f-string values become {}, other expressions their source."""
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _message(node.left) + _message(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _message(node.func.value)
    return ast.unparse(node)


def _detail(node: ast.AST, fields: frozenset[str]) -> list[tuple[str, str]]:
    """(kind, detail) of each site a statement or expression is."""
    if isinstance(node, ast.Raise):
        if node.exc is None:
            return [("raise", "raise (re-raised)")]
        exc = node.exc
        name = ast.unparse(exc.func if isinstance(exc, ast.Call) else exc)
        text = _message(exc.args[0]) if isinstance(exc, ast.Call) and exc.args else ""
        return [("raise", _short(f"raise {name}: {text}" if text else f"raise {name}", 100))]
    if isinstance(node, ast.Assert):
        return [("assert", _short("assert " + ast.unparse(node.test), 100))]
    found = []
    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for element in target.elts if isinstance(target, ast.Tuple) else [target]:
                if (
                    isinstance(element, ast.Attribute)
                    and element.attr in fields
                    and isinstance(element.value, ast.Name)
                    and element.value.id in ("self", "server_args", "args")
                ):
                    found.append(("set", f"set {element.attr}"))
    if isinstance(node, ast.Call):
        name = ast.unparse(node.func)
        if name.endswith("declare_resolution"):
            found += [("set", f"set {k.arg}") for k in node.keywords if k.arg in fields]
        elif name == "setattr" and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
            if node.args[1].value in fields:
                found.append(("set", f"set {node.args[1].value}"))
    if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):  # a post-process pass's decisions
        found += [
            ("set", f"set {k.value}")
            for k in node.value.keys
            if isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value in fields
        ]
    return found


@dataclass
class _Module:
    rel: str  # srt/server_args.py
    tree: ast.Module
    functions: dict[str, ast.AST] = field(default_factory=dict)  # qualname -> def
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted sglang name (module level)


class _Reader:
    """The tree's modules, parsed once each, and the call graph between their functions."""

    def __init__(self, tree: SGLangTree):
        self.tree = tree
        self.modules: dict[str, _Module | None] = {}

    def module(self, dotted: str) -> _Module | None:
        """``sglang.srt.server_args`` -> its parsed module (None: not a module of this tree)."""
        if dotted in self.modules:
            return self.modules[dotted]
        parts = dotted.split(".")
        base = self.tree.root.joinpath(*parts)
        path = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        found = None
        if parts[0] == "sglang" and path.is_file():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # invalid escape sequences in the tree are its own
                found = _Module(self.tree.relative(path), parse_source(path))
            _index(found, found.tree, "")
            found.imports = _imports(found.tree, dotted, path.name == "__init__.py")
        self.modules[dotted] = found
        return found

    def resolve(self, module: _Module, caller: str, local_imports: dict[str, str], cls: str | None, call: ast.AST):
        """[(module, qualname)] of the function(s) a call calls, where that can be told statically."""
        func = call.func if isinstance(call, ast.Call) else call
        imports = {**module.imports, **local_imports}
        if isinstance(func, ast.Name):
            if f"{caller}.{func.id}" in module.functions:  # a function nested in the caller
                return [(module, f"{caller}.{func.id}")]
            if func.id in module.functions:
                return [(module, func.id)]
            if func.id in module.classes:
                return _listed(self._class_entry(module, func.id))
            return _listed(self._imported(imports.get(func.id)))
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner, attr = func.value.id, func.attr
            if owner in ("self", "cls") and cls and f"{cls}.{attr}" in module.functions:
                return [(module, f"{cls}.{attr}")]
            if owner in module.classes and f"{owner}.{attr}" in module.functions:
                return [(module, f"{owner}.{attr}")]
            target = imports.get(owner)
            if target:
                found = self.module(target)
                if found is not None and attr in found.functions:  # import sglang.x.y as m; m.f()
                    return [(found, attr)]
                owner_module = self.module(target.rsplit(".", 1)[0]) if "." in target else None
                cls_name = target.rsplit(".", 1)[-1]  # from sglang.x import Cls; Cls.method()
                if owner_module is not None and f"{cls_name}.{attr}" in owner_module.functions:
                    return [(owner_module, f"{cls_name}.{attr}")]
            return self._method_of_imported_class(module, imports, attr)
        return []

    def _method_of_imported_class(self, module: _Module, imports: dict[str, str], method: str):
        """``obj.method()`` on an object of a class this module imports or defines: each of those classes' method of
        that name (``algo.handle_server_args(...)``, algo a SpeculativeAlgorithm or its CustomSpecAlgo)."""
        candidates = {(module.rel, f"{c}.{method}"): module for c in module.classes if f"{c}.{method}" in
                      module.functions}  # fmt: skip
        for target in set(imports.values()):
            cls = target.rsplit(".", 1)[-1]
            if "." not in target or not cls[:1].isupper():  # classes only (CapWords): a module is parsed for each
                continue
            owner = self.module(target.rsplit(".", 1)[0])
            if owner is not None and cls in owner.classes and f"{cls}.{method}" in owner.functions:
                candidates[(owner.rel, f"{cls}.{method}")] = owner
        return [(owner, name) for (_, name), owner in sorted(candidates.items())]

    def _imported(self, target: str | None):
        if not target or "." not in target:
            return None
        owner, name = target.rsplit(".", 1)
        found = self.module(owner)
        if found is None:
            return None
        if name in found.functions:
            return found, name
        if name in found.classes:
            return self._class_entry(found, name)
        if name in found.imports and found.imports[name] != target:  # re-exported (from .x import f in __init__)
            return self._imported(found.imports[name])
        return None

    @staticmethod
    def _class_entry(module: _Module, cls: str):
        for method in ("__post_init__", "__init__"):
            if f"{cls}.{method}" in module.functions:
                return module, f"{cls}.{method}"
        return None


def _index(module: _Module, node: ast.AST, prefix: str) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            module.functions[prefix + child.name] = child
            _index(module, child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            if not prefix:
                module.classes[child.name] = child
            _index(module, child, f"{prefix}{child.name}.")


def _listed(found) -> list:
    return [found] if found else []


def _registered(module: _Module, name: str) -> bool:
    """A function put in a registry by its decorator (``@register_post_process``, ``@_register_for(...)``), whose
    runner the resolution reaches; or an argparse action's ``__call__``, which the parser calls."""
    node = module.functions[name]
    if name.endswith(".__call__") and name.count(".") == 1:
        bases = [ast.unparse(b) for b in module.classes[name.split(".")[0]].bases] if name.split(".")[0] in \
            module.classes else []  # fmt: skip
        return any(b.endswith("Action") for b in bases)
    return any("register" in ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list)


def _imports(node: ast.AST, dotted: str, package: bool) -> dict[str, str]:
    """Local name -> dotted sglang name, for the imports directly in ``node``'s body (not in nested functions)."""
    found = {}
    for child in _own_nodes(node):
        if isinstance(child, ast.ImportFrom):
            base = child.module or ""
            if child.level:
                parts = dotted.split(".")[: len(dotted.split(".")) - child.level + (1 if package else 0)]
                base = ".".join([*parts, base] if base else parts)
            if base.startswith("sglang"):
                found.update({a.asname or a.name: f"{base}.{a.name}" for a in child.names if a.name != "*"})
        elif isinstance(child, ast.Import):
            found.update({a.asname or a.name: a.name for a in child.names if a.name.startswith("sglang") and a.asname})
    return found


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function or module, not those of the functions and classes nested in it."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def server_args_fields(tree: SGLangTree) -> frozenset[str]:
    """The names of ServerArgs' fields: 0.5.9's dataclass annotations, 0.5.23's namespace classes' fields."""
    module = parse_source(tree.srt / "server_args.py")
    names = set()
    for node in module.body:
        if isinstance(node, ast.ClassDef) and node.name == "ServerArgs":
            names |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    for _path, cls in namespace_classes(tree, module):
        names |= {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    return frozenset(names)


def _dotted(tree: SGLangTree, path: Path) -> str:
    rel = path.relative_to(tree.root).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def validation_modules(tree: SGLangTree) -> list[str]:
    """The dotted names of the files read whole (VALIDATION_FILES that this tree has)."""
    found = []
    for rel in VALIDATION_FILES:
        path = tree.package / rel
        paths = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
        found += [_dotted(tree, p) for p in paths]
    return found


def _reached(tree: SGLangTree) -> tuple[_Reader, set[tuple[str, str]]]:
    """_call_graph, read once per tree (and again when its server_args.py changes, as tests' copies do)."""
    return _call_graph(tree, (tree.srt / "server_args.py").stat().st_mtime_ns)


@functools.cache
def _call_graph(tree: SGLangTree, _stamp: int) -> tuple[_Reader, set[tuple[str, str]]]:
    """The static call graph from ROOTS: (file, function) of every function a reached one calls, passes on as a
    callback (run_hook(f, ...)), or calls as a method of a class it imports; and every registered one."""
    reader = _Reader(tree)
    server_args = reader.module("sglang.srt.server_args")
    reached: set[tuple[str, str]] = set()
    todo = [(server_args, name) for name in ROOTS if name in server_args.functions]
    for dotted in validation_modules(tree):  # functions a registry runs: @register_post_process, ...
        module = reader.module(dotted)
        todo += [(module, name) for name in module.functions if _registered(module, name)]
    while todo:
        module, name = todo.pop()
        if (module.rel, name) in reached:
            continue
        reached.add((module.rel, name))
        node = module.functions[name]
        cls = name.split(".")[0] if name.split(".")[0] in module.classes else None
        local = _local_imports(tree, module, node)
        for child in _own_nodes(node):
            if isinstance(child, ast.Call):
                for candidate in [child, *child.args]:  # callbacks passed by name run too
                    if candidate is child or isinstance(candidate, ast.Name | ast.Attribute):
                        found = reader.resolve(module, name, local, cls, candidate)
                        todo += [f for f in found if (f[0].rel, f[1]) not in reached]
    return reader, reached


def _local_imports(tree: SGLangTree, module: _Module, node: ast.AST) -> dict[str, str]:
    return _imports(node, _dotted(tree, tree.package / module.rel), module.rel.endswith("__init__.py"))


def imported_by_validation(tree: SGLangTree) -> list[str]:
    """The tree's modules its validation imports: the validation files and what reached functions import inside
    themselves (SGLang imports lazily; sglang_validation_main imports them all before it answers the GPU facts)."""
    reader, reached = _reached(tree)
    found = set(validation_modules(tree))
    by_rel = {m.rel: m for m in reader.modules.values() if m is not None}
    for rel, name in reached:
        module = by_rel[rel]
        for target in _local_imports(tree, module, module.functions[name]).values():
            found.add(target if reader.module(target) is not None else target.rsplit(".", 1)[0])
    return sorted(m for m in found if reader.module(m) is not None)


def sites(tree: SGLangTree, helpers: bool = True) -> list[Site]:
    """Every validation site of the tree (see the module docstring), in file and line order. ``helpers=False``:
    those of the validation files only, without the call graph (``reached`` None: not computed), in a fraction of
    the time (preflight's restated rules need no more)."""
    reader, reached = _reached(tree) if helpers else (_Reader(tree), None)
    fields = server_args_fields(tree)
    whole = validation_modules(tree)
    functions: list[tuple[_Module, str, bool | None]] = []
    for dotted in whole:
        module = reader.module(dotted)
        functions += [(module, name, None if reached is None else (module.rel, name) in reached)
                      for name in module.functions]  # fmt: skip
    whole_files = {reader.module(d).rel for d in whole}
    for rel, name in sorted(reached or ()):
        if rel not in whole_files:
            module = next(m for m in reader.modules.values() if m is not None and m.rel == rel)
            functions.append((module, name, True))
    found: list[Site] = []
    for module, name, is_reached in functions:
        for node in _own_nodes(module.functions[name]):
            for kind, detail in _detail(node, fields):
                found.append(Site(f"{module.rel}::{name}::{detail}", kind, module.rel, node.lineno, name,
                                  _short(ast.unparse(node)), is_reached))  # fmt: skip
    found += parser_sites(tree, reader)
    return _numbered(sorted(found, key=lambda s: (s.file, s.line, s.key)))


def _numbered(found: list[Site]) -> list[Site]:
    """Repeated keys (the same check twice in one function) get #2, #3, ... in line order."""
    seen: dict[str, int] = {}
    numbered = []
    for site in found:
        seen[site.key] = seen.get(site.key, 0) + 1
        key = site.key if seen[site.key] == 1 else f"{site.key}#{seen[site.key]}"
        numbered.append(replace(site, key=key))
    return numbered


# -- the parser --------------------------------------------------------------------------------------------------


def parser_sites(tree: SGLangTree, reader: _Reader | None = None) -> list[Site]:
    """A ``choices`` and a ``type`` site for each flag that has them: add_argument calls in server_args.py, and
    (0.5.23) the ``Arg(choices=..., type_parser=...)`` or ``Literal[...]`` of the namespace classes' fields."""
    reader = reader or _Reader(tree)
    server_args = reader.module("sglang.srt.server_args")
    found = []
    for function, definition in server_args.functions.items():
        for node in _own_nodes(definition):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_argument"):  # fmt: skip
                continue
            flags = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
            if flags:
                keywords = {k.arg: k.value for k in node.keywords}
                found += _flag_sites(reader, server_args, function, flags[0], node.lineno, keywords.get("choices"),
                                     keywords.get("type"))  # fmt: skip
    for path, cls in namespace_classes(tree, server_args.tree):
        module = reader.module(_dotted(tree, path))
        for item in cls.body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                continue
            ann = item.annotation
            if not (isinstance(ann, ast.Subscript) and ast.unparse(ann.value) in ("A", "Annotated")):
                continue
            elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            arg = next((e for e in elts[1:] if isinstance(e, ast.Call) and ast.unparse(e.func) == "Arg"), None)
            keywords = {k.arg: k.value for k in arg.keywords} if arg is not None else {}
            if arg is None and not any(isinstance(e, ast.Constant) for e in elts[1:]):
                continue  # no Arg nor help: not a flag
            if "no_cli" in keywords and ast.unparse(keywords["no_cli"]) == "True":
                continue
            cli = keywords.get("cli_name")
            flag = cli.value if isinstance(cli, ast.Constant) else "--" + item.target.id.replace("_", "-")
            choices, kind = keywords.get("choices"), keywords.get("type_parser")
            literal = _literal_annotation(elts[0])
            if choices is None and literal is not None:
                choices = literal
            if kind is None:
                inner = ast.unparse(elts[0]).replace(" ", "")
                scalar = re.fullmatch(r"(?:Optional\[)?(int|float)(?:\])?|(int|float)\|None|None\|(int|float)", inner)
                kind = ast.Name(next(g for g in scalar.groups() if g)) if scalar else None
                if literal is not None and literal.elts and isinstance(literal.elts[0], ast.Constant):
                    first = literal.elts[0].value
                    kind = ast.Name(type(first).__name__) if isinstance(first, int | float) else None
            found += _flag_sites(reader, module, f"{cls.name}.{item.target.id}", flag, item.lineno, choices, kind)
    return found


def _literal_annotation(node: ast.AST) -> ast.List | None:
    """``Literal["a", "b"]`` (or Optional of it) as a list node of its values; None for anything else."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Subscript) and ast.unparse(sub.value) in ("Literal", "typing.Literal"):
            values = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
            return ast.List(elts=list(values))
    return None


def _flag_sites(reader, module, function, flag, line, choices, kind) -> list[Site]:
    found = []
    if choices is not None:
        values = _values(reader, module, choices)
        text = _short(f"{flag} choices={ast.unparse(choices)}")
        found.append(Site(f"{module.rel}::{function}::choices {flag}", "choices", module.rel, line, function, text,
                          True, values, flag))  # fmt: skip
    if kind is not None and ast.unparse(kind) != "str":  # str() takes any text: nothing refused
        text = f"{flag} type={ast.unparse(kind)}"
        found.append(Site(f"{module.rel}::{function}::type {flag}", "type", module.rel, line, function, text, True,
                          None, flag, ast.unparse(kind)))  # fmt: skip
    return found


def _values(reader: _Reader, module: _Module, node: ast.AST, depth: int = 0) -> list | None:
    """The values of a choices expression where they can be read without running code: literals, module-level
    names bound to literals (here or imported from the tree), list()/sorted()/tuple() of those, keys of a literal
    dict, and sums of lists. None: computed at run time (SGLang's own parser run checks those)."""
    if depth > 5:
        return None
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        values = [_values(reader, module, e, depth + 1) if not isinstance(e, ast.Constant) else [e.value]
                  for e in node.elts]  # fmt: skip
        if any(v is None or len(v) != 1 for v in values):
            return None
        return [v[0] for v in values]
    if isinstance(node, ast.Constant):
        return [node.value]
    if isinstance(node, ast.Dict):
        return _values(reader, module, ast.List(elts=list(node.keys)), depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _values(reader, module, node.left, depth + 1), _values(reader, module, node.right, depth + 1)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("list", "tuple", "sorted"):
        return _values(reader, module, node.args[0], depth + 1) if len(node.args) == 1 else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "keys":
        return _values(reader, module, node.func.value, depth + 1)
    if isinstance(node, ast.Name):
        for statement in module.tree.body:
            targets = statement.targets if isinstance(statement, ast.Assign) else (
                [statement.target] if isinstance(statement, ast.AnnAssign) and statement.value else [])  # fmt: skip
            if any(isinstance(t, ast.Name) and t.id == node.id for t in targets):
                return _values(reader, module, statement.value, depth + 1)
        target = module.imports.get(node.id)
        if target and "." in target:
            owner = reader.module(target.rsplit(".", 1)[0])
            if owner is not None:
                return _values(reader, owner, ast.Name(target.rsplit(".", 1)[1]), depth + 1)
    return None


# -- reading one site again: what it tests, which fields it names ------------------------------------------------


@dataclass(frozen=True)
class Located:
    """A statement of the tree and the ``if`` tests it sits under, innermost last."""

    statement: ast.stmt
    tests: list[ast.expr]
    module: _Module
    reader: _Reader


def locate(tree: SGLangTree, where: str) -> Located | None:
    """The statement at ``srt/x.py:N`` (the innermost that starts there) and the tests of the ifs around it."""
    rel, _, line = where.rpartition(":")
    if not rel or not line.isdigit() or not (tree.package / rel).is_file():
        return None
    reader = _Reader(tree)
    module = reader.module(_dotted(tree, tree.package / rel))
    found: list[Located] = []

    def visit(node: ast.AST, tests: list[ast.expr]) -> None:
        if isinstance(node, ast.stmt) and node.lineno == int(line):
            found.append(Located(node, tests, module, reader))
        if isinstance(node, ast.If):  # its body runs when the test holds; its else branch when it does not
            for child in node.body:
                visit(child, [*tests, node.test])
            for child in node.orelse:
                visit(child, tests)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, tests)

    visit(module.tree, [])
    return found[-1] if found else None


def fields_named(tree: SGLangTree, where: str) -> set[str]:
    """ServerArgs fields a site's statement and its if tests name (``self.page_size``, ``cfg.attention_backend``,
    ``"page_size"``): the settings a refusal there is about."""
    located = locate(tree, where)
    if located is None:
        return set()
    fields = server_args_fields(tree)
    names = set()
    for node in [located.statement, *located.tests]:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute):
                names.add(sub.attr)
            elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                names.add(sub.value)
    return names & fields


def tested_values(tree: SGLangTree, where: str, field_name: str) -> list | None:
    """The values a site's if tests compare ``field_name`` with by ``in``/``not in`` (``self.attention_backend not
    in ["flashinfer", "fa3"]``, a tuple named in the function or module), where they are literals; else None."""
    located = locate(tree, where)
    if located is None:
        return None
    for test in reversed(located.tests):
        for sub in ast.walk(test):
            if (isinstance(sub, ast.Compare) and len(sub.ops) == 1 and isinstance(sub.ops[0], ast.In | ast.NotIn)
                    and ast.unparse(sub.left).endswith(f".{field_name}")):  # fmt: skip
                values = _values(located.reader, located.module, sub.comparators[0])
                if values is None and isinstance(sub.comparators[0], ast.Name):  # bound in the function itself
                    values = _function_constant(located, sub.comparators[0].id)
                return values
    return None


def _function_constant(located: Located, name: str) -> list | None:
    for function in located.module.functions.values():
        if any(node is located.statement for node in ast.walk(function)):
            for node in _own_nodes(function):
                if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                    return _values(located.reader, located.module, node.value)
    return None


def worker_assertion(tree: SGLangTree, message: str, rel: str = "srt/speculative/eagle_worker_v2.py") -> str | None:
    """``file:line`` of the assert in ``rel`` whose message contains ``message`` (a check a worker makes when it
    starts, after the load, outside the validation files); None where the tree has none."""
    path = tree.package / rel
    if not path.is_file():
        return None
    for node in ast.walk(parse_source(path)):
        if isinstance(node, ast.Assert) and node.msg is not None and message in _message(node.msg):
            return f"{rel}:{node.lineno}"
    return None


def roots(tree: SGLangTree) -> list[str]:
    """The ROOTS this tree defines (qualified names in srt/server_args.py): where its validation starts."""
    functions = _Reader(tree).module("sglang.srt.server_args").functions
    return [name for name in ROOTS if name in functions]
