"""Server settings the draft worker inherits from the target's, read from SGLang's source without importing it.

SGLang builds the draft's ModelConfig and model loader from the same ServerArgs as the target's
(``ModelConfig.from_server_args``, the draft ``ModelRunner``), so a setting made for the target also
reaches the draft unless a ``--speculative-draft-*`` flag overrides it (sgl-project/sglang #22780).
Each reading returns the file:line it comes from, or None where the source does not say it:

- context length: the EAGLE worker gives the draft the target's context length, and ModelConfig
  refuses one longer than the draft's own (derived by ``get_context_length``, run here on the draft's
  config) unless an environment variable allows it;
- model implementation: ``--model-impl`` values that build a model from another class than its own
  architecture (the draft would not be built as its EAGLE-3 class);
- load format: ``--load-format`` reaches the draft unless ``--speculative-draft-load-format`` is set;
  which weight files each format of the default loader looks for.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from .source_index import SourceIndex, statements_with_conditions

TARGET_CONTEXT = "server_args.context_length = target_worker.model_runner.model_config.context_len"


def _where(index: SourceIndex, path: Path, node: ast.AST) -> str:
    return f"{index.rel(path)}:{node.lineno}"


def _function(module: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in ast.walk(module) if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _list_of_strings(node: ast.expr | None) -> list[str] | None:
    if isinstance(node, (ast.List, ast.Tuple)) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    ):
        return [e.value for e in node.elts]
    return None


def inherited_keyword(index: SourceIndex, keyword: str, value: str) -> str | None:
    """file:line where ModelConfig.from_server_args passes ``keyword=value`` to target and draft alike."""
    path = index.tree.srt / "configs" / "model_config.py"
    func = _function(index.module(path), "from_server_args") if path.is_file() else None
    for node in ast.walk(func) if func else ():
        if isinstance(node, ast.keyword) and node.arg == keyword and ast.unparse(node.value) == value:
            return _where(index, path, node.value)
    return None


# -- context length ---------------------------------------------------------------------------


@dataclass
class ContextRule:
    override: str  # the draft worker sets the draft's context_length to the target's context_len
    refuse: str  # ModelConfig raises ValueError when that exceeds the draft's derived context length
    allow_env: list[str]  # environment variables that turn the ValueError into a warning
    true_values: list[str] | None  # what those variables count as true (EnvBool.parse), None: not read
    derive: str  # get_context_length, run on the draft's config
    keys: list[str]  # CONTEXT_LENGTH_KEYS: config fields it reads, the first present wins
    function: ast.FunctionDef

    def derived(self, config: dict) -> int | None:
        """What get_context_length returns for this config.json (top level or text_config), or None
        when it names none of the keys (then the transformers config class's default decides)."""
        if not any(config.get(key) is not None for key in self.keys):
            return None
        func = _pure_copy(self.function)
        namespace = {"__builtins__": {"getattr": getattr, "int": int}, "CONTEXT_LENGTH_KEYS": list(self.keys)}
        exec(compile(ast.Module(body=[func], type_ignores=[]), "<sglang source>", "exec"), namespace)
        try:
            return int(namespace[func.name](SimpleNamespace(**config)))
        except (AttributeError, TypeError, ValueError):  # a rope_scaling or length of a type SGLang cannot use
            return None


def _pure_copy(func: ast.FunctionDef) -> ast.FunctionDef:
    copy = ast.parse(ast.unparse(func)).body[0]
    copy.decorator_list, copy.returns = [], None
    for arg in copy.args.args:
        arg.annotation = None
    return ast.fix_missing_locations(copy)


def _envs_read(test: ast.expr) -> list[str]:
    """Names X in ``envs.X.get()`` calls of a condition."""
    return [
        n.func.value.attr
        for n in ast.walk(test)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "get"
        and isinstance(n.func.value, ast.Attribute)
        and ast.unparse(n.func.value.value) == "envs"
    ]


def _env_true_values(index: SourceIndex) -> list[str] | None:
    """EnvBool.parse's ``if value in [...]: return True`` (srt/environ.py)."""
    path = index.tree.srt / "environ.py"
    cls = next((n for n in ast.walk(index.module(path)) if isinstance(n, ast.ClassDef) and n.name == "EnvBool"), None)
    parse = _function(cls, "parse") if cls else None  # type: ignore[arg-type]
    for node in ast.walk(parse) if parse else ():
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.ops[0], ast.In)
            and any(isinstance(s, ast.Return) and ast.unparse(s.value) == "True" for s in node.body)
        ):
            return _list_of_strings(node.test.comparators[0])
    return None


def context_rule(index: SourceIndex) -> ContextRule | None:
    srt = index.tree.srt
    worker, config, utils = (srt / "speculative" / "eagle_worker.py", srt / "configs" / "model_config.py",
                             srt / "utils" / "hf_transformers_utils.py")  # fmt: skip
    if not (worker.is_file() and config.is_file() and utils.is_file()):
        return None
    override = next(
        (n for n in ast.walk(index.module(worker)) if isinstance(n, ast.Assign) and ast.unparse(n) == TARGET_CONTEXT),
        None,
    )
    derive_context = _function(index.module(config), "_derive_context_length")
    refuse, allow_env = None, []
    for stmt, conditions in statements_with_conditions(derive_context.body if derive_context else []):
        tests = [(ast.unparse(c.test), c.polarity) for c in conditions]
        if isinstance(stmt, ast.Raise) and ("context_length > derived_context_len", True) in tests:
            refuse = stmt
            allow_env = [name for c in conditions if not c.polarity for name in _envs_read(c.test)]
    module = index.module(utils)
    function = _function(module, "get_context_length")
    keys = next(
        (
            _list_of_strings(n.value)
            for n in module.body
            if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "CONTEXT_LENGTH_KEYS"
        ),
        None,
    )
    if override is None or refuse is None or function is None or not keys:
        return None
    return ContextRule(
        _where(index, worker, override), _where(index, config, refuse), allow_env, _env_true_values(index),
        _where(index, utils, function), keys, function,
    )  # fmt: skip


# -- model implementation -----------------------------------------------------------------------


@dataclass
class ModelImplRule:
    inherit: str  # ModelConfig.from_server_args passes server_args.model_impl to the draft too
    replaced: dict[str, str]  # --model-impl value -> file:line where the model is built from another class
    values: list[str]  # every ModelImpl value; the others build the draft from its own class


def model_impl_rule(index: SourceIndex) -> ModelImplRule | None:
    """Read get_model_architecture's ``if model_config.model_impl == ModelImpl.X`` branches (one test, or an
    ``or`` of tests): X builds every model, the draft included, from another class than its architecture."""
    inherit = inherited_keyword(index, "model_impl", "server_args.model_impl")
    config, loader = index.tree.srt / "configs" / "model_config.py", index.tree.srt / "model_loader" / "utils.py"
    if inherit is None or not loader.is_file():
        return None
    enum = next(n for n in ast.walk(index.module(config)) if isinstance(n, ast.ClassDef) and n.name == "ModelImpl")
    values = {
        ast.unparse(s.targets[0]): s.value.value
        for s in enum.body
        if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)
    }
    func = _function(index.module(loader), "get_model_architecture")
    replaced = {}
    for node in ast.walk(func) if func else ():
        if not isinstance(node, ast.If):
            continue
        tests = node.test.values if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.Or) else [
            node.test
        ]  # fmt: skip
        for test in tests:
            text = ast.unparse(test)
            if text.startswith("model_config.model_impl == ModelImpl."):
                name = text.rsplit(".", 1)[1]
                if name in values:
                    replaced[values[name]] = _where(index, loader, node)
    return ModelImplRule(inherit, replaced, list(values.values())) if replaced else None


# -- load format --------------------------------------------------------------------------------


@dataclass
class LoadFormatRule:
    override: str  # the scheduler gives the draft --speculative-draft-load-format instead, when set
    patterns: dict[str, tuple[list[str], str]]  # load format -> (weight files it looks for, file:line)
    fallback: list[str]  # added when the model class allows it (fall_back_to_pt, True by default)


def load_format_rule(index: SourceIndex) -> LoadFormatRule | None:
    """The draft's override in the scheduler, and DefaultModelLoader._prepare_weights's
    ``if load_format == LoadFormat.X: allow_patterns = [...]`` chain."""
    srt = index.tree.srt
    scheduler, loader, config = (srt / "managers" / "scheduler.py", srt / "model_loader" / "loader.py",
                                 srt / "configs" / "load_config.py")  # fmt: skip
    if not (scheduler.is_file() and loader.is_file() and config.is_file()):
        return None
    override = next(
        (
            n
            for n in ast.walk(index.module(scheduler))
            if isinstance(n, ast.If)
            and ast.unparse(n.test) == "self.server_args.speculative_draft_load_format is not None"
            and any(ast.unparse(s).startswith("self.server_args.load_format = ") for s in n.body)
        ),
        None,
    )
    enum = next(n for n in ast.walk(index.module(config)) if isinstance(n, ast.ClassDef) and n.name == "LoadFormat")
    values = {
        ast.unparse(s.targets[0]): s.value.value
        for s in enum.body
        if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)
    }
    module = index.module(loader)
    cls = next((n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "DefaultModelLoader"), None)
    prepare = _function(cls, "_prepare_weights") if cls else None  # type: ignore[arg-type]
    patterns, fallback = {}, []
    for node in ast.walk(prepare) if prepare else ():
        if not isinstance(node, ast.If):
            continue
        assigned = next(
            (_list_of_strings(s.value) for s in node.body
             if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "allow_patterns"), None,
        )  # fmt: skip
        tests = node.test.values if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.Or) else [
            node.test
        ]  # fmt: skip
        for test in tests:
            text = ast.unparse(test)
            if assigned and text.startswith("load_format == LoadFormat.") and text.rsplit(".", 1)[1] in values:
                patterns[values[text.rsplit(".", 1)[1]]] = (assigned, _where(index, loader, node))
        if ast.unparse(node.test) == "fall_back_to_pt":
            fallback = next((_list_of_strings(s.value) or [] for s in node.body if isinstance(s, ast.AugAssign)), [])
    if override is None or not patterns:
        return None
    return LoadFormatRule(_where(index, scheduler, override), patterns, fallback)
