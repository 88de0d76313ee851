"""Find an SGLang source tree (installed or on disk) and read its version, without importing it.

Importing sglang pulls in torch and CUDA libraries; everything in this project that
only needs SGLang's *source* (the patch tool, the probe, the check of extra_args) reads
the files instead.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadInput, shown_path


class SGLangNotFound(BadInput):
    """No SGLang source tree where one was expected."""


@dataclass(frozen=True)
class SGLangTree:
    root: Path  # the directory that contains the ``sglang/`` package (patch -p1 runs here)
    version: str | None
    release: str | None = None  # the wheel this tree was unpacked from, to be read (trees/release.py), else None

    @property
    def package(self) -> Path:
        return self.root / "sglang"

    @property
    def srt(self) -> Path:
        return self.package / "srt"

    def relative(self, path: Path) -> str:
        """A path inside the tree as users see it in tracebacks: ``srt/models/x.py``."""
        return path.relative_to(self.package).as_posix()


def _read_version(package: Path) -> str | None:
    # Wheels ship setuptools-scm's generated _version.py ("__version__ = version = '0.5.9'").
    version_file = package / "_version.py"
    if version_file.is_file():
        match = re.search(
            r"^__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]",
            version_file.read_text(errors="replace"),
            re.MULTILINE,
        )
        if match:
            return match.group(1)
    # An installed wheel also has dist-info metadata beside the package.
    for metadata in sorted(package.parent.glob("sglang-*.dist-info/METADATA")):
        match = re.search(r"^Version:\s*(\S+)", metadata.read_text(errors="replace"), re.MULTILINE)
        if match:
            return match.group(1)
    return None


def locate(target: str | Path | None = None) -> SGLangTree:
    """Resolve ``target`` to an SGLang tree.

    ``target`` may be the directory holding ``sglang/`` (site-packages, an unpacked
    wheel), the ``sglang`` package directory itself, or an SGLang git checkout
    (``python/sglang``). ``None`` means the sglang importable by this interpreter.
    """
    if target is None:
        spec = importlib.util.find_spec("sglang")  # finds, does not import
        if spec is None or not spec.submodule_search_locations:
            raise SGLangNotFound(
                "no importable 'sglang' package in this Python environment; name the SGLang to read with "
                "--sglang: a release version (e.g. --sglang 0.5.9: its pristine wheel is fetched and read, "
                "nothing is installed), a wheel file or a directory; or install it (pip install sglang==0.5.9)"
            )
        package = Path(next(iter(spec.submodule_search_locations)))
        return SGLangTree(root=package.parent, version=_read_version(package))

    try:
        path = Path(target).expanduser().resolve()
    except (RuntimeError, OSError) as err:  # ~unknown-user, a symlink loop
        raise SGLangNotFound(f"{shown_path(target)}: {err}") from None
    if not path.is_dir():
        raise SGLangNotFound(f"{shown_path(path)} is not a directory")
    if (path / "srt").is_dir() and path.name == "sglang":  # the package directory itself
        path = path.parent
    for root in (path, path / "python"):  # site-packages / unpacked wheel, or a git checkout
        if (root / "sglang" / "srt").is_dir():
            return SGLangTree(root=root, version=_read_version(root / "sglang"))
    raise SGLangNotFound(
        f"{shown_path(path)} does not contain an SGLang source tree (expected sglang/srt/ in it, "
        "or the sglang package directory itself, or python/sglang/ of a git checkout)"
    )


Flags = dict[str, tuple[frozenset[str], bool]]


def parse_source(path: Path, error: type[BadInput] = SGLangNotFound, shown: str | None = None) -> ast.Module:
    """``path`` parsed: the one parser of the tree's files (index.py and every audit read through it).
    ``error`` (the one its callers catch) names the file (as ``shown``) when it cannot be read or is not Python.
    SyntaxWarnings (invalid escapes in the tree's strings) are the tree's own, not ours to print.

    A file is parsed once while it is unchanged (its size and mtime): preflight's rules locate their sites in
    server_args.py again and again. The tree is shared, so readers copy before they change a node."""
    try:
        stat = path.stat()
        return _parsed(str(path), stat.st_mtime_ns, stat.st_size)
    except OSError as err:
        raise error(f"cannot read {shown or path}: {err.strerror or err}") from None
    except (SyntaxError, ValueError) as err:  # ValueError: not UTF-8, NUL bytes
        raise error(f"{shown or path} is not Python source: {err}") from None


@functools.lru_cache(maxsize=256)
def _parsed(path: str, _mtime_ns: int, _size: int) -> ast.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return ast.parse(Path(path).read_bytes(), filename=path)


def server_flags(tree: SGLangTree) -> Flags:
    """Every flag ServerArgs.add_cli_args defines: flag -> (all its spellings, takes a value).

    0.5.9 calls parser.add_argument for each flag in srt/server_args.py. Later releases declare
    most flags as annotated fields of namespace classes (srt/arg_groups/fields/) and add only a
    few by hand; both are read.
    """
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
    listed = next(
        (
            [e.id for e in node.value.elts if isinstance(e, ast.Name)]
            for node in server_args.body
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "_INPUT_NAMESPACES" for t in node.targets)
            and isinstance(node.value, ast.List)
        ),
        [],
    )
    imported = {
        alias.asname or alias.name: node.module
        for node in server_args.body
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sglang.")
        for alias in node.names
    }
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
    return {
        t.id: node.lineno
        for node in envs.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
