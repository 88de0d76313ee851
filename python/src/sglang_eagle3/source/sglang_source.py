"""Find an SGLang source tree (installed or on disk) and read its version, without importing it.

Importing sglang pulls in torch and CUDA libraries; everything in this project that
only needs SGLang's *source* (the patch tool, the probe, the check of extra_args) reads
the files instead.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadInput


class SGLangNotFound(BadInput):
    """No SGLang source tree where one was expected."""


@dataclass(frozen=True)
class SGLangTree:
    root: Path  # the directory that contains the ``sglang/`` package (patch -p1 runs here)
    version: str | None

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
                "no importable 'sglang' package in this Python environment; "
                "install it (pip install sglang==0.5.9) or give its directory"
            )
        package = Path(next(iter(spec.submodule_search_locations)))
        return SGLangTree(root=package.parent, version=_read_version(package))

    try:
        path = Path(target).expanduser().resolve()
    except (RuntimeError, OSError) as err:  # ~unknown-user, a symlink loop
        raise SGLangNotFound(f"{target}: {err}") from None
    if not path.is_dir():
        raise SGLangNotFound(f"{path} is not a directory")
    if (path / "srt").is_dir() and path.name == "sglang":  # the package directory itself
        path = path.parent
    for root in (path, path / "python"):  # site-packages / unpacked wheel, or a git checkout
        if (root / "sglang" / "srt").is_dir():
            return SGLangTree(root=root, version=_read_version(root / "sglang"))
    raise SGLangNotFound(
        f"{path} does not contain an SGLang source tree (expected sglang/srt/ in it, "
        "or the sglang package directory itself, or python/sglang/ of a git checkout)"
    )


def server_flags(tree: SGLangTree) -> dict[str, tuple[frozenset[str], bool]]:
    """Every flag ServerArgs.add_cli_args defines: flag -> (all its spellings, takes a value)."""
    flags = {}
    source = tree.srt / "server_args.py"
    try:
        module = ast.parse(source.read_bytes(), filename=str(source))
    except (OSError, SyntaxError, ValueError) as err:
        raise SGLangNotFound(f"cannot read SGLang's flags from {source}: {err}") from None
    for node in ast.walk(module):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            names = frozenset(
                a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")
            )
            action = next((k.value for k in node.keywords if k.arg == "action"), None)
            takes_value = not (isinstance(action, ast.Constant) and str(action.value).startswith("store_"))
            for name in names:
                flags[name] = (names, takes_value)
    return flags
