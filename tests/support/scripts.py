"""The repository's standalone scripts (nix/scripts/*.py, kubernetes/generate.py) as modules, for tests of their
functions. They are files Nix and people run, not an importable package, so they are loaded by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_script(path: str | Path) -> ModuleType:
    """A fresh module of the script at ``path`` (relative to the repository, or absolute), named after the file
    ("cuda-dist-info.py": ``cuda_dist_info``) and registered in sys.modules as an import would be (dataclasses
    look their module up there)."""
    path = REPO / path
    name = path.stem.replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
