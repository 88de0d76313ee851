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
    """Resolve ``target`` to an SGLang tree: the directory holding ``sglang/`` (site-packages, an unpacked wheel), the
    ``sglang`` package itself, or a git checkout (``python/sglang``); None: the sglang this interpreter imports."""
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
