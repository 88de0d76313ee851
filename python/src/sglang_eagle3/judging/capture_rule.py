"""Which target layers an SGLang tree captures for a draft's ids, with and without patch 0004.

``set_eagle3_layers_to_capture`` is small and pure (it only sets attributes), so its own statements are run on a
stand-in ``self`` with no builtins beyond a few pure ones. This stays right across SGLang versions (0.5.9,
0.5.9 + patch 0004, later upstream) without this project restating each version's rule. The method as the tree
would have it with patch 0004 applied (or reversed) comes from GNU patch on a scratch copy of its file. Running
the tree's code and patching a copy are why this is judging's, not source/'s, which only reads.
"""

from __future__ import annotations

import ast
import copy
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from ..source.eagle3 import CAPTURE_METHOD, find_method
from ..source.index import SourceIndex
from ..source.model_class import defines
from ..trees import patchset

CONVENTION_PATCH = "0004-deepseek-eagle3-aux-layer-convention.patch"


class _StandIn(SimpleNamespace):
    """``self`` for running a capture method: the attributes it reads, and whatever it sets."""


SAFE_BUILTINS = {f.__name__: f for f in (list, tuple, len, range, sorted, min, max, int, enumerate, isinstance)}


def run_capture_method(func: ast.FunctionDef, layer_ids: list[int] | None, num_layers: int) -> list[int]:
    """The ``layers_to_capture`` this method sets for ``layer_ids`` on a target with ``num_layers`` layers."""
    func = copy.deepcopy(func)
    func.decorator_list, func.returns = [], None
    for arg in func.args.args + func.args.kwonlyargs:
        arg.annotation = None
    module = ast.fix_missing_locations(ast.Module(body=[func], type_ignores=[]))
    namespace = {"__builtins__": SAFE_BUILTINS, "get_pp_group": lambda: _StandIn(is_last_rank=True)}
    exec(compile(module, "<sglang source>", "exec"), namespace)  # defines the one function, nothing else
    self = _StandIn(
        config=_StandIn(num_hidden_layers=num_layers),
        pp_group=_StandIn(is_last_rank=True),
        model=_StandIn(layers_to_capture=[]),
        capture_aux_hidden_states=False,
    )
    namespace[func.name](self, None if layer_ids is None else list(layer_ids))
    return [int(x) for x in self.model.layers_to_capture]


@dataclass
class CaptureRule:
    """How one tree maps a draft's ids to captured layers, and the same with and without patch 0004."""

    location: str  # file:line of the method that runs
    class_name: str
    patch_0004: str  # applied | not applied | conflict | does not apply to <file> | unknown (why)
    this_tree: ast.FunctionDef
    with_0004: ast.FunctionDef | None
    without_0004: ast.FunctionDef | None
    patch: patchset.Patch | None = None  # patch 0004 of this project's series, when found


def _patch_0004():
    try:
        series = patchset.PatchSeries.load()
    except patchset.PatchError as err:
        return None, f"unknown ({err})"
    patch = next((p for p in series.patches if p.name == CONVENTION_PATCH), None)
    return patch, None if patch else f"unknown ({CONVENTION_PATCH} is not in the series)"


def _method_in(source: str, class_name: str, method: str) -> ast.FunctionDef | None:
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            found = defines(node, method)
            return found if isinstance(found, ast.FunctionDef) else None
    return None


def _other_variant(patch: patchset.Patch, rel: str, path: Path, reverse: bool) -> str | None:
    """The file at ``path`` with patch 0004 applied (or reversed), via GNU patch in a scratch directory."""
    if shutil.which("patch") is None:
        return None
    with tempfile.TemporaryDirectory(prefix="sglang-eagle3-0004-") as scratch:
        copy_path = Path(scratch) / rel
        copy_path.parent.mkdir(parents=True)
        shutil.copyfile(path, copy_path)
        flags = [*patchset.PATCH_FLAGS, *(["--reverse"] if reverse else [])]
        result = subprocess.run(["patch", *flags, "-d", scratch, "-i", str(patch.path)], capture_output=True)
        return copy_path.read_text() if result.returncode == 0 else None


def capture_rule(index: SourceIndex, target_arch: str) -> CaptureRule | None:
    found = index.find_model_class(target_arch)
    resolved = find_method(index, *found, CAPTURE_METHOD) if found else None
    if resolved is None:
        return None
    path, cls, func = resolved
    rel = f"sglang/{index.rel(path)}"
    patch, unknown = _patch_0004()
    rule = CaptureRule(f"{index.rel(path)}:{func.lineno}", cls.name, unknown or "", func, None, None, patch)
    if patch is None:
        return rule
    if rel not in patch.files:
        rule.patch_0004 = f"does not apply to {index.rel(path)}"
        rule.with_0004 = rule.without_0004 = func
        return rule
    try:
        state = patchset.status(patch, index.tree).state
    except patchset.PatchError as err:  # GNU patch is not installed
        rule.patch_0004 = f"unknown ({err})"
        return rule
    rule.patch_0004 = state.value
    if state is patchset.PatchState.CONFLICT:
        return rule
    applied = state is patchset.PatchState.APPLIED
    other_text = _other_variant(patch, rel, path, reverse=applied)
    other = _method_in(other_text, cls.name, CAPTURE_METHOD) if other_text else None
    rule.with_0004, rule.without_0004 = (func, other) if applied else (other, func)
    return rule
