"""What an SGLang tree's own source says about the problems patches 0002, 0003 and 0005 fix (0001 and 0004: read
by model_class.lookup and eagle3), so ``patch check`` can tell, for a patch that no longer applies, whether
upstream now does the same (or makes it moot) or the problem is still there. Each reading names its file:line.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .flag_effects import _constants
from .index import SourceIndex, SourceLayoutError

SIZES_TABLE = "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"
MULTIMEM_TABLE = "_WORLD_SIZES_MULTIMEM"


@dataclass(frozen=True)
class SymmMemLookup:
    """How TorchSymmMemCommunicator looks a compute capability major up in its tables."""

    majors: list[int]  # keys of TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES
    sizes_guarded: str | None  # file:line of ``sizes = TABLE.get(cap)`` followed by ``if sizes is None: return``
    multimem_guarded: str | None  # file:line of ``_WORLD_SIZES_MULTIMEM.get(cap, ())``
    subscripts: list[str]  # file:line of every ``TABLE[self.device_capability]`` (a KeyError for an unknown major)


def torch_symm_mem_lookup(index: SourceIndex) -> SymmMemLookup | None:
    """None when the tree has no torch symmetric-memory communicator this tool can read."""
    comm_dir = index.tree.srt / "distributed" / "device_communicators"
    utils_path, comm_path = comm_dir / "all_reduce_utils.py", comm_dir / "torch_symm_mem.py"
    try:
        sizes = _constants(index.module(utils_path).body).get(SIZES_TABLE)
        cls = index.find_class_in(comm_path, "TorchSymmMemCommunicator")
    except SourceLayoutError:
        return None
    if sizes is None or cls is None:
        return None
    where = lambda node: f"{index.rel(comm_path)}:{node.lineno}"  # noqa: E731
    subscripts, sizes_guarded, multimem_guarded = [], None, None
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Subscript)
            and ast.unparse(node.slice) == "self.device_capability"
            and ast.unparse(node.value).endswith((SIZES_TABLE, MULTIMEM_TABLE))
        ):
            subscripts.append(where(node))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and ast.unparse(node.args[0]) == "self.device_capability"
        ):
            table = ast.unparse(node.func.value)
            if table.endswith(MULTIMEM_TABLE) and len(node.args) == 2:
                multimem_guarded = where(node)
            elif table.endswith(SIZES_TABLE) and _none_returns(cls, node):
                sizes_guarded = where(node)
    return SymmMemLookup(sorted(sizes), sizes_guarded, multimem_guarded, subscripts)


def _none_returns(cls: ast.ClassDef, call: ast.Call) -> bool:
    """``name = <call>`` and, in the same block, ``if name is None: ... return``."""
    for func in (n for n in ast.walk(cls) if isinstance(n, ast.FunctionDef)):
        for block in (n.body for n in ast.walk(func) if hasattr(n, "body") and isinstance(n.body, list)):
            names = {
                s.targets[0].id
                for s in block
                if isinstance(s, ast.Assign) and s.value is call and isinstance(s.targets[0], ast.Name)
            }
            for stmt in block:
                if (
                    isinstance(stmt, ast.If)
                    and ast.unparse(stmt.test) in {f"{n} is None" for n in names}
                    and any(isinstance(s, ast.Return) for s in stmt.body)
                ):
                    return True
    return False


@dataclass(frozen=True)
class ServerArgsLog:
    """What SGLang logs as ``server_args=...`` at start-up, read from srt/entrypoints/engine.py."""

    where: str  # file:line of the first such logger call
    logged: str  # the expression logged, as source: "server_args" (its repr) or "helper(server_args)"
    via_resolved_dict: str | None  # file:line of the helper's ``.resolved_dict()`` when the log goes through it
    names_api_key: bool  # the helper mentions api_key (it could drop or redact it)
    redacted_by: str | None = (
        None  # file:line of the secret names the helper's redaction uses, when both keys are in them
    )


def server_args_log(index: SourceIndex) -> ServerArgsLog | None:
    path = index.tree.srt / "entrypoints" / "engine.py"
    try:
        module = index.module(path)
    except SourceLayoutError:
        return None
    helpers = {n.name: n for n in module.body if isinstance(n, ast.FunctionDef)}
    for node in ast.walk(module):
        if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "logger.info" and node.args):
            continue
        text = node.args[0]
        if not isinstance(text, ast.JoinedStr):
            continue
        for i, part in enumerate(text.values):
            prefix = text.values[i - 1] if i else None
            if not (
                isinstance(part, ast.FormattedValue)
                and isinstance(prefix, ast.Constant)
                and str(prefix.value).endswith("server_args=")
            ):
                continue
            logged = part.value
            resolved, names_key, redacted = None, False, None
            if isinstance(logged, ast.Call) and isinstance(logged.func, ast.Name) and logged.func.id in helpers:
                helper = helpers[logged.func.id]
                calls = [
                    n for n in ast.walk(helper)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "resolved_dict"
                ]  # fmt: skip
                resolved = f"{index.rel(path)}:{calls[0].lineno}" if calls else None
                names_key = "api_key" in ast.unparse(helper)
                redacted = _redaction_names_keys(index, module, helper)
            where = f"{index.rel(path)}:{node.lineno}"
            return ServerArgsLog(where, ast.unparse(logged), resolved, names_key, redacted)
    return None


API_KEYS = {"api_key", "admin_api_key"}


def _redaction_names_keys(index: SourceIndex, module: ast.Module, helper: ast.FunctionDef) -> str | None:
    """file:line of a module-level ``*SECRET*`` name set, in the module of a function the helper calls
    (e.g. 0.5.23's redact_watermark_secrets), that lists both API keys (directly or through a name it joins)."""
    imported = {a.asname or a.name: n.module for n in module.body if isinstance(n, ast.ImportFrom) for a in n.names}
    for call in (n for n in ast.walk(helper) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)):
        path = index.module_path(imported.get(call.func.id) or "")
        if path is None:
            continue
        assigns = [
            n for n in index.module(path).body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
        ]
        strings = {
            a.targets[0].id: {c.value for c in ast.walk(a.value) if isinstance(c, ast.Constant)} for a in assigns
        }
        for a in (a for a in assigns if "SECRET" in a.targets[0].id):
            joined = [strings.get(n.id, set()) for n in ast.walk(a.value) if isinstance(n, ast.Name)]
            if API_KEYS <= strings[a.targets[0].id].union(*joined):
                return f"{index.rel(path)}:{a.lineno}"
    return None


def resolved_dict_drops_api_key(index: SourceIndex) -> tuple[bool, str] | None:
    """(drops, file:line) for ServerArgs.resolved_dict: whether its source mentions api_key at all."""
    path = index.tree.srt / "server_args.py"
    try:
        cls = index.find_class_in(path, "ServerArgs")
    except SourceLayoutError:
        return None
    method = next(
        (n for n in (cls.body if cls else []) if isinstance(n, ast.FunctionDef) and n.name == "resolved_dict"), None
    )
    if method is None:
        return None
    return "api_key" in ast.unparse(method), f"{index.rel(path)}:{method.lineno}"


@dataclass(frozen=True)
class FusionGate:
    """A check that refuses FlashInfer's all-reduce fusion outside listed GPU generations."""

    where: str  # file:line of the ``if`` that raises
    test: str  # its condition, as source
    allows_sm120: bool


def fusion_backend_gate(index: SourceIndex) -> FusionGate | None:
    """The ``if not (...is_sm90 or ...is_sm100): raise`` in srt/layers/flashinfer_comm_fusion.py (after
    0.5.9 the fusion is chosen by a backend resolver there, not gated in layers/communicator.py)."""
    path = index.tree.srt / "layers" / "flashinfer_comm_fusion.py"
    try:
        module = index.module(path)
    except SourceLayoutError:
        return None
    for node in ast.walk(module):
        if isinstance(node, ast.If) and any(isinstance(s, ast.Raise) for s in node.body):
            test = ast.unparse(node.test)
            if "is_sm90" in test and "is_sm100" in test:
                return FusionGate(f"{index.rel(path)}:{node.lineno}", test, "sm120" in test or "is_sm12" in test)
    return None
