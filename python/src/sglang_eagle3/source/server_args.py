"""What SGLang's server takes, read from its source: ServerArgs' fields (with their help and flag, in 0.5.9's
dataclass and 0.5.23's namespaces), every flag its parser defines (and whether it takes a value), and the
variables srt/environ.py declares.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from .index import SourceLayoutError
from .tree import SGLangNotFound, SGLangTree, parse_source

Flags = dict[str, tuple[frozenset[str], bool]]


# -- the parser's flags ---------------------------------------------------------------------------------------------


def server_flags(tree: SGLangTree) -> Flags:
    """Every flag ServerArgs.add_cli_args defines: flag -> (all its spellings, takes a value). 0.5.9 adds each in
    srt/server_args.py; later releases declare most as annotated fields of srt/arg_groups/fields/ classes."""
    module = parse_source(tree.srt / "server_args.py")
    flags: Flags = {}
    for node in ast.walk(module):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            names = frozenset(
                a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")
            )
            action = next((k.value for k in node.keywords if k.arg == "action"), None)
            takes_value = not (isinstance(action, ast.Constant) and str(action.value).startswith("store_"))
            if isinstance(action, ast.Name) and action.id.startswith("Deprecated"):  # DeprecatedStoreTrueAction
                takes_value = "StoreTrue" not in action.id
            for name in names:
                flags[name] = (names, takes_value)
    for _path, cls in namespace_classes(tree, module):
        for field in cls.body:
            if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name):
                for names, takes_value in _field_flags(field):
                    flags.update(dict.fromkeys(names, (names, takes_value)))
    return flags


def namespace_classes(tree: SGLangTree, server_args: ast.Module):
    """The classes listed in server_args.py's _INPUT_NAMESPACES, found through its imports."""
    listed = next(([e.id for e in node.value.elts if isinstance(e, ast.Name)] for node in server_args.body
                   if isinstance(node, ast.Assign) and isinstance(node.value, ast.List)
                   and any(isinstance(t, ast.Name) and t.id == "_INPUT_NAMESPACES" for t in node.targets)),
                  [])  # fmt: skip
    imported = {alias.asname or alias.name: node.module for node in server_args.body if isinstance(node, ast.ImportFrom)
                and node.module and node.module.startswith("sglang.") for alias in node.names}  # fmt: skip
    for name in listed:
        if name not in imported:
            raise SGLangNotFound(f"cannot find where srt/server_args.py imports {name} (of _INPUT_NAMESPACES) from")
        path = tree.root.joinpath(*imported[name].split(".")).with_suffix(".py")
        cls = next((n for n in parse_source(path).body if isinstance(n, ast.ClassDef) and n.name == name), None)
        if cls is None:
            raise SGLangNotFound(f"{tree.relative(path)} has no class {name} (of _INPUT_NAMESPACES)")
        yield path, cls


def _field_flags(field: ast.AnnAssign):
    """The flags of one ``name: A[T, "help" | Arg(...)]`` field, as add_cli_args_from_dataclass derives them
    (srt/arg_groups/arg_utils.py): no Arg or help -> no flag; Arg(no_cli=True) -> none; cli_name and aliases;
    a bool (or Optional[bool]) is store_true; BooleanOptionalAction adds --no-NAME; anything else takes a value."""
    ann = field.annotation
    if not (isinstance(ann, ast.Subscript) and ast.unparse(ann.value) in ("A", "Annotated")):
        return
    elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
    meta = next((e for e in elts[1:] if isinstance(e, ast.Constant) and isinstance(e.value, str)), None)
    arg = next((e for e in elts[1:] if isinstance(e, ast.Call) and ast.unparse(e.func) == "Arg"), None)
    if meta is None and arg is None:
        return
    keywords = {k.arg: k.value for k in arg.keywords} if arg is not None else {}
    if ast.unparse(keywords.get("no_cli", ast.Constant(False))) == "True":
        return
    cli_name = keywords.get("cli_name")
    primary = cli_name.value if isinstance(cli_name, ast.Constant) else "--" + field.target.id.replace("_", "-")
    aliases = [e.value for e in getattr(keywords.get("aliases"), "elts", []) if isinstance(e, ast.Constant)]
    action = ast.unparse(keywords["action"]) if "action" in keywords else None
    inner = ast.unparse(elts[0]).replace(" ", "")
    boolean = inner in ("bool", "Optional[bool]", "bool|None", "None|bool")
    if action is not None and action.endswith("BooleanOptionalAction"):
        yield frozenset([primary, *aliases]), False
        yield frozenset("--no-" + n.removeprefix("--") for n in [primary, *aliases]), False
    else:
        yield frozenset([primary, *aliases]), action is not None or not boolean


def environment_variables(tree: SGLangTree) -> dict[str, int]:
    """The variables srt/environ.py's Envs class declares (``NAME = EnvBool(...)``): name -> line."""
    module = parse_source(tree.srt / "environ.py")
    envs = next((n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "Envs"), None)
    if envs is None:
        raise SGLangNotFound(f"{tree.srt / 'environ.py'} has no class Envs")
    return {t.id: node.lineno for node in envs.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
            for t in node.targets if isinstance(t, ast.Name)}  # fmt: skip


# -- ServerArgs' fields ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerArgsField:
    name: str
    where: str  # srt/server_args.py:404
    annotation: str
    help: str
    flag: str | None  # "--api-key" when SGLang's parser takes it, else None
    namespace: str | None = None  # 0.5.23: "serving", "exec.features"


def server_args_fields(root: Path) -> list[ServerArgsField]:
    """Every field of the tree's ServerArgs (``root`` holds ``sglang/``), with its help text and flag: 0.5.9's
    dataclass (srt/server_args.py), 0.5.23's namespaces (srt/arg_groups/fields/*.py)."""
    srt = root / "sglang" / "srt"
    if (srt / "arg_groups" / "fields").is_dir():
        return _namespace_fields(root, srt / "arg_groups" / "fields")
    if (srt / "server_args.py").is_file():
        return _dataclass_fields(root, srt / "server_args.py")
    raise SourceLayoutError(f"{srt} has neither server_args.py nor arg_groups/fields/: is this an SGLang tree?")


def server_args_field_names(tree: SGLangTree) -> frozenset[str]:
    """The names of ServerArgs' fields: what ``self.FIELD`` may name in its validation."""
    return frozenset(f.name for f in server_args_fields(tree.root))


def _text(node: ast.expr | None) -> str:
    if node is None:
        return ""
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)  # an f-string help: its source, which holds its words
    return value if isinstance(value, str) else ""


def _dataclass_fields(root: Path, path: Path) -> list[ServerArgsField]:
    """0.5.9: the dataclass's annotated fields; help and flag from ``add_cli_args``'s ``add_argument`` calls."""
    rel = path.relative_to(root / "sglang").as_posix()
    module = parse_source(path, SourceLayoutError, rel)
    cls = next((n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs"), None)
    if cls is None:
        raise SourceLayoutError(f"{path} defines no ServerArgs class")
    helps: dict[str, tuple[str, str]] = {}
    for call in ast.walk(cls):
        if isinstance(call, ast.Call) and ast.unparse(call.func).endswith("add_argument"):
            flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            keywords = {k.arg: k.value for k in call.keywords}
            dest = keywords.get("dest")
            name = dest.value if isinstance(dest, ast.Constant) else (flags[0][2:].replace("-", "_") if flags else "")
            if name and name not in helps:
                helps[name] = (_text(keywords.get("help")), flags[0] if flags else "")
    return [
        ServerArgsField(
            n.target.id, f"{rel}:{n.lineno}", ast.unparse(n.annotation), *helps.get(n.target.id, ("", None))
        )  # fmt: skip
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    ]


def _namespace_fields(root: Path, directory: Path) -> list[ServerArgsField]:
    """0.5.23: the ``A[type, help]`` / ``A[type, Arg(help=..., no_cli=...)]`` fields of classes with ``_NS_PATH``."""
    found = []
    for path in sorted(directory.glob("*.py")):
        rel = path.relative_to(root / "sglang").as_posix()
        for cls in (n for n in parse_source(path, SourceLayoutError, rel).body if isinstance(n, ast.ClassDef)):
            ns = next((ast.literal_eval(s.value) for s in cls.body if isinstance(s, ast.Assign)
                       and ast.unparse(s.targets[0]) == "_NS_PATH"), None)  # fmt: skip
            if ns is not None:
                found += [_namespace_field(stmt, rel, ns) for stmt in cls.body
                          if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)]  # fmt: skip
    if not found:
        raise SourceLayoutError(f"{directory} declares no namespace fields (classes with _NS_PATH)")
    return found


def _namespace_field(stmt: ast.AnnAssign, rel: str, namespace: str) -> ServerArgsField:
    """One ``name: A[type, "help" | Arg(help=..., no_cli=True, cli_name=...)]`` field of a namespace class."""
    annotation, help_node, flag = stmt.annotation, None, "--" + stmt.target.id.replace("_", "-")
    if isinstance(annotation, ast.Subscript) and isinstance(annotation.slice, ast.Tuple):
        annotation, help_node = annotation.slice.elts[0], annotation.slice.elts[1]
        if isinstance(help_node, ast.Call):
            keywords = {k.arg: k.value for k in help_node.keywords}
            help_node = keywords.get("help")
            if _text(keywords.get("cli_name")):
                flag = "--" + _text(keywords["cli_name"]).lstrip("-")
            if isinstance(keywords.get("no_cli"), ast.Constant) and keywords["no_cli"].value is True:
                flag = None
    return ServerArgsField(stmt.target.id, f"{rel}:{stmt.lineno}", ast.unparse(annotation), _text(help_node), flag,
                           namespace)  # fmt: skip
