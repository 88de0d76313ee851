"""Every place SGLang's own start-up validation can refuse or change a setting, read from a tree with ``ast``.

SGLang validates its arguments in three steps before it loads anything: the parser (``choices=`` and ``type=`` of
each flag), the resolution of the parsed values (0.5.9: ``ServerArgs.__post_init__`` and its ``_handle_*``
methods; 0.5.23: ``ServerArgs.resolve_once``, whose pipeline runs the hooks of ``srt/arg_groups/``), then
``check_server_args``. A site (of KINDS) is a ``raise`` or ``assert`` (a setting refused), a ``set FIELD`` (a
setting silently rewritten: 0.5.9's ``self.FIELD = ``, 0.5.23's ``declare_resolution(..., FIELD=...)`` or a key of
the dict a post-process pass returns), or a parser's ``choices``/``type``. The VALIDATION_FILES are read whole, and
every function of the tree they call. Each site's key does not depend on its line, so a new release's new sites
show up as new keys; lines are information.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

from .constants import Constants, own_nodes
from .index import ParsedModule, SourceIndex, Target, module_dotted
from .server_args import namespace_classes, server_args_field_names
from .tree import SGLangNotFound, SGLangTree, parse_source

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


def _detail(node: ast.AST, fields: frozenset[str], names: _Names | None = None) -> list[tuple[str, str]]:
    """(kind, detail) of each site a statement or expression is; ``names`` follows a field's name given by a name."""
    if isinstance(node, ast.Raise):
        return [("raise", _raised(node))]
    if isinstance(node, ast.Assert):
        return [("assert", _short("assert " + ast.unparse(node.test), 100))]
    return [("set", f"set {name}") for name in _fields_set(node, fields, names)]


def _raised(node: ast.Raise) -> str:
    """``raise ValueError: its message`` (f-string values as {}), or ``raise (re-raised)``."""
    if node.exc is None:
        return "raise (re-raised)"
    exc = node.exc
    name = ast.unparse(exc.func if isinstance(exc, ast.Call) else exc)
    text = _message(exc.args[0]) if isinstance(exc, ast.Call) and exc.args else ""
    return _short(f"raise {name}: {text}" if text else f"raise {name}", 100)


class _Names:
    """A field named by an expression in one function, followed through constants.Constants; what it cannot resolve
    is kept in ``unresolved`` as (line, what is set, the expression)."""

    def __init__(self, flow: Constants, function: ast.AST):
        self.flow, self.function = flow, function
        self.unresolved: list[tuple[int, str, str]] = []
        self.returned = {
            n.value.id for n in _code(function) if isinstance(n, ast.Return) and isinstance(n.value, ast.Name)
        }

    def of(self, key: ast.AST, node: ast.AST, what: str) -> list:
        if isinstance(key, ast.Constant):
            return [key.value]
        values = self.flow.values(key, self.function)
        if values is None:
            self.unresolved.append((node.lineno, what, ast.unparse(key)))
            return []
        return values


def _fields_set(node: ast.AST, fields: frozenset[str], names: _Names | None = None) -> list[str]:
    """The ServerArgs fields a node rewrites: 0.5.9's ``self.FIELD = ...`` (or ``server_args.``/``args.``,
    ``setattr(self, "FIELD", ...)``), 0.5.23's ``declare_resolution(..., FIELD=...)`` and the keys of the dict a
    post-process pass returns (a literal, a comprehension, or a name it fills with ``declared[KEY] = ...``). A name
    for the field is followed through ``names``; one it cannot resolve is listed there."""
    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
        found = _assigned_fields(node, fields)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:  # declared["dsa_prefill_backend"] = ... in a pass that returns declared
            if (names is not None and isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                    and target.value.id in names.returned):  # fmt: skip
                found += [k for k in names.of(target.slice, node, "a key of the dict it returns") if k in fields]
        return found
    if isinstance(node, ast.Call):
        return _declared_fields(node, fields, names)
    if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):  # a post-process pass's decisions
        if names is None:
            keys = node.value.keys
            return [
                k.value for k in keys if isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value in fields
            ]
        found = []
        for key, value in zip(node.value.keys, node.value.values, strict=True):
            if key is None:  # {**other}
                names.unresolved.append((node.lineno, "a key of the dict it returns", "**" + ast.unparse(value)))
                continue
            found += [k for k in names.of(key, node, "a key of the dict it returns") if k in fields]
        return found
    if isinstance(node, ast.Return) and isinstance(node.value, ast.DictComp) and names is not None:
        return [k for k in names.of(node.value.key, node, "a key of the dict it returns") if k in fields]
    return []


def _assigned_fields(node: ast.Assign | ast.AugAssign | ast.AnnAssign, fields: frozenset[str]) -> list[str]:
    """``self.FIELD = ...``, ``server_args.FIELD += ...``, ``args.a, args.b = ...``."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    elements = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
    return [e.attr for e in elements if isinstance(e, ast.Attribute) and e.attr in fields
            and isinstance(e.value, ast.Name) and e.value.id in ("self", "server_args", "args")]  # fmt: skip


def _declared_fields(node: ast.Call, fields: frozenset[str], names: _Names | None = None) -> list[str]:
    """``declare_resolution(..., FIELD=value)`` and ``setattr(obj, "FIELD", value)``, the name followed."""
    name = ast.unparse(node.func)
    if name.endswith("declare_resolution"):
        if names is not None and any(k.arg is None for k in node.keywords):
            names.unresolved.append((node.lineno, "a keyword of declare_resolution", ast.unparse(node)[:100]))
        return [k.arg for k in node.keywords if k.arg in fields]
    if name == "setattr" and len(node.args) >= 2:
        if isinstance(node.args[1], ast.Constant) or names is None:
            value = node.args[1].value if isinstance(node.args[1], ast.Constant) else None
            return [value] if value in fields else []
        return [k for k in names.of(node.args[1], node, "the field setattr sets") if k in fields]
    return []


def _code(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function or module that run when it does: not the bodies of the functions, classes and
    lambdas nested in it."""
    return own_nodes(ast.iter_child_nodes(scope), lambdas=False)


def _index(tree: SGLangTree) -> SourceIndex:
    """A fresh index of the tree; a file it cannot parse raises SGLangNotFound, as the flags' reader does."""
    return SourceIndex(tree, SGLangNotFound)


def server_args_stamp(tree: SGLangTree) -> int:
    """What a cache of a tree's validation is keyed by besides the tree: its server_args.py's change (tests copy)."""
    return (tree.srt / "server_args.py").stat().st_mtime_ns


def _registered(module: ParsedModule, name: str) -> bool:
    """A function put in a registry by its decorator (``@register_post_process``, ``@_register_for(...)``), whose
    runner the resolution reaches; or an argparse action's ``__call__``, which the parser calls."""
    node = module.functions[name]
    if name.endswith(".__call__") and name.count(".") == 1:
        cls = module.class_of(name)
        return cls is not None and any(ast.unparse(b).endswith("Action") for b in module.classes[cls].bases)
    return any("register" in ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list)


def validation_modules(tree: SGLangTree) -> list[str]:
    """The dotted names of the files read whole (VALIDATION_FILES that this tree has)."""
    found = []
    for rel in VALIDATION_FILES:
        path = tree.package / rel
        paths = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
        found += [module_dotted(tree, p) for p in paths]
    return found


@functools.cache
def _call_graph(tree: SGLangTree, _stamp: int) -> tuple[SourceIndex, set[tuple[str, str]]]:
    """The static call graph from ROOTS: (file, function) of every function a reached one calls, passes on as a
    callback (run_hook(f, ...)), or calls as a method of a class it imports; and every registered one."""
    index = _index(tree)
    server_args = index.parsed("sglang.srt.server_args")
    reached: set[tuple[str, str]] = set()
    todo = [(server_args, name) for name in ROOTS if name in server_args.functions]
    for dotted in validation_modules(tree):  # functions a registry runs: @register_post_process, ...
        module = index.parsed(dotted)
        todo += [(module, name) for name in module.functions if _registered(module, name)]
    while todo:
        module, name = todo.pop()
        if (module.rel, name) in reached:
            continue
        reached.add((module.rel, name))
        todo += [f for f in _callees(index, module, name) if (f[0].rel, f[1]) not in reached]
    return index, reached


def _callees(index: SourceIndex, module: ParsedModule, name: str) -> list[Target]:
    """What one function calls, and the callables it passes by name (callbacks run too)."""
    local = module.imports_in(module.functions[name])
    found = []
    for child in _code(module.functions[name]):
        if isinstance(child, ast.Call):
            for candidate in [child, *child.args]:
                if candidate is child or isinstance(candidate, ast.Name | ast.Attribute):
                    found += index.called(module, name, candidate, local)
    return found


def imported_by_validation(tree: SGLangTree) -> list[str]:
    """The tree's modules its validation imports: the validation files and what reached functions import inside
    themselves (SGLang imports lazily; sglang_validation_main imports them all before it answers the GPU facts).
    Read once per call graph: preflight and its tests ask for every judged setting."""
    return list(_imported_by_validation(tree, server_args_stamp(tree)))


@functools.cache
def _imported_by_validation(tree: SGLangTree, _stamp: int) -> tuple[str, ...]:
    index, reached = _call_graph(tree, _stamp)
    found = set(validation_modules(tree))
    by_rel = {m.rel: m for m in index.parsed_modules()}
    for rel, name in reached:
        module = by_rel[rel]
        for target in module.imports_in(module.functions[name]).values():
            found.add(target if index.parsed(target) is not None else target.rsplit(".", 1)[0])
    return tuple(sorted(m for m in found if index.parsed(m) is not None))


def sites(tree: SGLangTree, helpers: bool = True) -> list[Site]:
    """Every validation site of the tree, in file and line order. ``helpers=False``: those of the validation files
    only, without the call graph (``reached`` None), in a fraction of the time (preflight's rules need no more)."""
    return _scan(tree, helpers)[0]


def unresolved(tree: SGLangTree) -> list[dict]:
    """Where the functions ``sites`` reads set something named by an expression the reader cannot resolve to
    constants (``setattr(namespace, self.dest, ...)``, a key of a returned dict from a parameter): each with where,
    function, what it sets and the expression. Listed, never left out."""
    return _scan(tree, True)[1]


def _scan(tree: SGLangTree, helpers: bool) -> tuple[list[Site], list[dict]]:
    index, reached = _call_graph(tree, server_args_stamp(tree)) if helpers else (_index(tree), None)
    fields = server_args_field_names(tree)
    found: list[Site] = []
    missing: list[dict] = []
    flows: dict[str, Constants] = {}
    for module, name, is_reached in _functions_read(tree, index, reached):
        function = module.functions[name]
        flow = flows.setdefault(module.rel, Constants(module.tree))
        names = _Names(flow, function)
        for node in _code(function):
            for kind, detail in _detail(node, fields, names):
                found.append(Site(f"{module.rel}::{name}::{detail}", kind, module.rel, node.lineno, name,
                                  _short(ast.unparse(node)), is_reached))  # fmt: skip
        missing += [{"where": f"{module.rel}:{line}", "function": name, "sets": what, "expression": text}
                    for line, what, text in names.unresolved]  # fmt: skip
    found += parser_sites(tree, index)
    return _numbered(sorted(found, key=lambda s: (s.file, s.line, s.key))), missing


def _functions_read(tree: SGLangTree, index: SourceIndex, reached: set[tuple[str, str]] | None):
    """(module, function, reached) of every function of the validation files, then of every reached one elsewhere."""
    whole = [index.parsed(dotted) for dotted in validation_modules(tree)]
    for module in whole:
        yield from ((module, name, None if reached is None else (module.rel, name) in reached)
                    for name in module.functions)  # fmt: skip
    by_rel = {m.rel: m for m in index.parsed_modules()}
    whole_files = {m.rel for m in whole}
    for rel, name in sorted(reached or ()):
        if rel not in whole_files:
            yield by_rel[rel], name, True


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


def parser_sites(tree: SGLangTree, index: SourceIndex | None = None) -> list[Site]:
    """A ``choices`` and a ``type`` site for each flag that has them: add_argument calls in server_args.py, and
    (0.5.23) the ``Arg(choices=..., type_parser=...)`` or ``Literal[...]`` of the namespace classes' fields."""
    index = index or _index(tree)
    server_args = index.parsed("sglang.srt.server_args")
    found = []
    for function, definition in server_args.functions.items():
        for node in _code(definition):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                found += _argument_sites(index, server_args, function, node)
    for path, cls in namespace_classes(tree, server_args.tree):
        module = index.parsed(module_dotted(tree, path))
        for item in cls.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                found += _field_sites(index, module, cls, item)
    return found


def _argument_sites(index: SourceIndex, module: ParsedModule, function: str, call: ast.Call) -> list[Site]:
    """The sites of one ``parser.add_argument("--flag", choices=..., type=...)``."""
    flags = [a.value for a in call.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
    if not flags:
        return []
    keywords = {k.arg: k.value for k in call.keywords}
    return _flag_sites(index, module, function, flags[0], call.lineno, keywords.get("choices"), keywords.get("type"))


def _field_sites(index: SourceIndex, module: ParsedModule, cls: ast.ClassDef, item: ast.AnnAssign) -> list[Site]:
    """The sites of one ``name: A[type, Arg(...) | "help"]`` field of a namespace class (none: not a flag)."""
    ann = item.annotation
    if not (isinstance(ann, ast.Subscript) and ast.unparse(ann.value) in ("A", "Annotated")):
        return []
    elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
    arg = next((e for e in elts[1:] if isinstance(e, ast.Call) and ast.unparse(e.func) == "Arg"), None)
    keywords = {k.arg: k.value for k in arg.keywords} if arg is not None else {}
    if arg is None and not any(isinstance(e, ast.Constant) for e in elts[1:]):
        return []  # no Arg nor help: not a flag
    if "no_cli" in keywords and ast.unparse(keywords["no_cli"]) == "True":
        return []
    cli = keywords.get("cli_name")
    flag = cli.value if isinstance(cli, ast.Constant) else "--" + item.target.id.replace("_", "-")
    literal = _literal_annotation(elts[0])
    choices = keywords.get("choices")
    if choices is None and literal is not None:
        choices = literal
    kind = keywords.get("type_parser") or _field_type(elts[0], literal)
    return _flag_sites(index, module, f"{cls.name}.{item.target.id}", flag, item.lineno, choices, kind)


def _field_type(annotation: ast.expr, literal: ast.List | None) -> ast.Name | None:
    """The type a field's flag parses its value with, where the annotation says one that refuses text: int or
    float (or Optional of one), or a Literal of numbers."""
    inner = ast.unparse(annotation).replace(" ", "")
    scalar = re.fullmatch(r"(?:Optional\[)?(int|float)(?:\])?|(int|float)\|None|None\|(int|float)", inner)
    kind = ast.Name(next(g for g in scalar.groups() if g)) if scalar else None
    if literal is not None and literal.elts and isinstance(literal.elts[0], ast.Constant):
        first = literal.elts[0].value
        kind = ast.Name(type(first).__name__) if isinstance(first, int | float) else None
    return kind


def _literal_annotation(node: ast.AST) -> ast.List | None:
    """``Literal["a", "b"]`` (or Optional of it) as a list node of its values; None for anything else."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Subscript) and ast.unparse(sub.value) in ("Literal", "typing.Literal"):
            values = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
            return ast.List(elts=list(values))
    return None


def _flag_sites(index, module, function, flag, line, choices, kind) -> list[Site]:
    found = []
    if choices is not None:
        values = _values(index, module, choices)
        text = _short(f"{flag} choices={ast.unparse(choices)}")
        found.append(Site(f"{module.rel}::{function}::choices {flag}", "choices", module.rel, line, function, text,
                          True, values, flag))  # fmt: skip
    if kind is not None and ast.unparse(kind) != "str":  # str() takes any text: nothing refused
        text = f"{flag} type={ast.unparse(kind)}"
        found.append(Site(f"{module.rel}::{function}::type {flag}", "type", module.rel, line, function, text, True,
                          None, flag, ast.unparse(kind)))  # fmt: skip
    return found


def _values(index: SourceIndex, module: ParsedModule, node: ast.AST, depth: int = 0) -> list | None:
    """The values of a choices expression where they can be read without running code: literals, module-level
    names bound to literals (here or imported from the tree), list()/sorted()/tuple() of those, keys of a literal
    dict, and sums of lists. None: computed at run time (SGLang's own parser run checks those)."""
    if depth > 5:
        return None
    if isinstance(node, ast.Constant):
        return [node.value]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return _listed_values(index, module, node.elts, depth + 1)
    if isinstance(node, ast.Dict):
        return _values(index, module, ast.List(elts=list(node.keys)), depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _values(index, module, node.left, depth + 1), _values(index, module, node.right, depth + 1)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Call):
        return _call_values(index, module, node, depth)
    if isinstance(node, ast.Name):
        return _name_values(index, module, node.id, depth)
    return None


def _listed_values(index: SourceIndex, module: ParsedModule, elements: list, depth: int) -> list | None:
    """The values of a literal list's elements (read at ``depth``), each one value; None if any is not."""
    values = [[e.value] if isinstance(e, ast.Constant) else _values(index, module, e, depth) for e in elements]
    if any(v is None or len(v) != 1 for v in values):
        return None
    return [v[0] for v in values]


def _call_values(index: SourceIndex, module: ParsedModule, node: ast.Call, depth: int) -> list | None:
    """``list(X)``, ``tuple(X)``, ``sorted(X)`` and ``X.keys()``: the values of X."""
    if isinstance(node.func, ast.Name) and node.func.id in ("list", "tuple", "sorted"):
        return _values(index, module, node.args[0], depth + 1) if len(node.args) == 1 else None
    if isinstance(node.func, ast.Attribute) and node.func.attr == "keys":
        return _values(index, module, node.func.value, depth + 1)
    return None


def _name_values(index: SourceIndex, module: ParsedModule, name: str, depth: int) -> list | None:
    """The values of a module-level name: bound in this module, or imported from another of the tree."""
    for statement in module.tree.body:
        targets = statement.targets if isinstance(statement, ast.Assign) else (
            [statement.target] if isinstance(statement, ast.AnnAssign) and statement.value else [])  # fmt: skip
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return _values(index, module, statement.value, depth + 1)
    target = module.imports.get(name)
    if target and "." in target:
        owner = index.parsed(target.rsplit(".", 1)[0])
        if owner is not None:
            return _values(index, owner, ast.Name(target.rsplit(".", 1)[1]), depth + 1)
    return None


# -- reading one site again: what it tests, which fields it names ------------------------------------------------


@dataclass(frozen=True)
class Located:
    """A statement of the tree and the ``if`` tests it sits under, innermost last."""

    statement: ast.stmt
    tests: list[ast.expr]
    module: ParsedModule
    index: SourceIndex


def locate(tree: SGLangTree, where: str) -> Located | None:
    """The statement at ``srt/x.py:N`` (the innermost that starts there) and the tests of the ifs around it."""
    rel, _, line = where.rpartition(":")
    if not rel or not line.isdigit() or not (tree.package / rel).is_file():
        return None
    return _located(tree, rel, int(line), (tree.package / rel).stat().st_mtime_ns)


@functools.lru_cache(maxsize=1024)
def _located(tree: SGLangTree, rel: str, line: int, _stamp: int) -> Located | None:
    """locate's answer, found once while the file is unchanged (every judged setting asks again)."""
    index = _index(tree)
    module = index.parsed(module_dotted(tree, tree.package / rel))
    found: list[Located] = []

    def visit(node: ast.AST, tests: list[ast.expr]) -> None:
        if isinstance(node, ast.stmt) and node.lineno == int(line):
            found.append(Located(node, tests, module, index))
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
    fields = server_args_field_names(tree)
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
                values = _values(located.index, located.module, sub.comparators[0])
                if values is None and isinstance(sub.comparators[0], ast.Name):  # bound in the function itself
                    values = _function_constant(located, sub.comparators[0].id)
                return values
    return None


def _function_constant(located: Located, name: str) -> list | None:
    """The values of the last assignment to ``name`` in the (outermost) function around the located statement."""
    for function in located.module.functions.values():
        if any(node is located.statement for node in ast.walk(function)):
            bound = [node for node in _code(function) if isinstance(node, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)]  # fmt: skip
            if bound:
                return _values(located.index, located.module, bound[-1].value)
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
    functions = _index(tree).parsed("sglang.srt.server_args").functions
    return [name for name in ROOTS if name in functions]
