"""Server settings the draft worker inherits from the target's, read from SGLang's source without importing it.

SGLang builds the draft's ModelConfig and model loader from the same ServerArgs as the target's, so a setting made
for the target also reaches the draft unless a ``--speculative-draft-*`` flag overrides it (sgl-project/sglang
#22780): the context length, the model implementation, the load format, the model override, and the other way
round the chunked prefix cache. Each reading returns the file:line it comes from, or None where the source does not
say it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from .index import SourceIndex, statements_with_conditions

TARGET_CONTEXT = "server_args.context_length = target_worker.model_runner.model_config.context_len"


def _where(index: SourceIndex, path: Path, node: ast.AST) -> str:
    return f"{index.rel(path)}:{node.lineno}"


def _sources(index: SourceIndex, *rels: str) -> list[Path] | None:
    """The tree's srt/ files ``rels``; None when one is missing (then the rule is not read)."""
    paths = [index.tree.srt / rel for rel in rels]
    return paths if all(path.is_file() for path in paths) else None


def _walk(node: ast.AST | None):
    return ast.walk(node) if node else ()


def _function(node: ast.AST | None, name: str) -> ast.FunctionDef | None:
    return next((n for n in _walk(node) if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _class(nodes, name: str) -> ast.ClassDef | None:
    return next((n for n in nodes if isinstance(n, ast.ClassDef) and n.name == name), None)


def _statement(nodes, code: str) -> ast.Assign | None:
    """The first assignment of ``nodes`` that reads ``code``."""
    return next((n for n in nodes if isinstance(n, ast.Assign) and ast.unparse(n) == code), None)


def _assignment(nodes, target: str) -> ast.Assign | None:
    return next((n for n in nodes if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == target), None)


def _strings_assigned(nodes, target: str) -> list[str] | None:
    """The strings of the first ``target = [...]`` of ``nodes``."""
    assigned = _assignment(nodes, target)
    return _list_of_strings(assigned.value) if assigned else None


def _if(node: ast.AST | None, test: str, body: list[str]) -> ast.If | None:
    """The first ``if test:`` under ``node`` whose body is ``body``."""
    return next((n for n in _walk(node) if isinstance(n, ast.If) and ast.unparse(n.test) == test
                 and [ast.unparse(s) for s in n.body] == body), None)  # fmt: skip


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
    for node in _walk(func):
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


def _envs_read(test: ast.expr) -> list[str]:
    """Names X in ``envs.X.get()`` calls of a condition."""
    return [n.func.value.attr for n in ast.walk(test) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "get" and isinstance(n.func.value, ast.Attribute)
            and ast.unparse(n.func.value.value) == "envs"]  # fmt: skip


def _env_true_values(index: SourceIndex) -> list[str] | None:
    """EnvBool.parse's ``if value in [...]: return True`` (srt/environ.py)."""
    path = index.tree.srt / "environ.py"
    parse = _function(_class(ast.walk(index.module(path)), "EnvBool"), "parse")
    for node in _walk(parse):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.ops[0], ast.In)
            and any(isinstance(s, ast.Return) and ast.unparse(s.value) == "True" for s in node.body)
        ):
            return _list_of_strings(node.test.comparators[0])
    return None


def context_rule(index: SourceIndex) -> ContextRule | None:
    files = _sources(index, "speculative/eagle_worker.py", "configs/model_config.py", "utils/hf_transformers_utils.py")
    if files is None:
        return None
    worker, config, utils = files
    override = _statement(ast.walk(index.module(worker)), TARGET_CONTEXT)
    derive_context = _function(index.module(config), "_derive_context_length")
    refuse, allow_env = None, []
    for stmt, conditions in statements_with_conditions(derive_context.body if derive_context else []):
        tests = [(ast.unparse(c.test), c.polarity) for c in conditions]
        if isinstance(stmt, ast.Raise) and ("context_length > derived_context_len", True) in tests:
            refuse = stmt
            allow_env = [name for c in conditions if not c.polarity for name in _envs_read(c.test)]
    module = index.module(utils)
    function = _function(module, "get_context_length")
    keys = _strings_assigned(module.body, "CONTEXT_LENGTH_KEYS")
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
    values = _enum_values(index.module(config), "ModelImpl")
    func = _function(index.module(loader), "get_model_architecture")
    replaced = {}
    for node in ast.walk(func) if func else ():
        if not isinstance(node, ast.If):
            continue
        for test in _or_terms(node.test):
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
    files = _sources(index, "managers/scheduler.py", "model_loader/loader.py", "configs/load_config.py")
    if files is None:
        return None
    scheduler, loader, config = files
    override = next((n for n in ast.walk(index.module(scheduler)) if isinstance(n, ast.If)
                     and ast.unparse(n.test) == "self.server_args.speculative_draft_load_format is not None"
                     and any(ast.unparse(s).startswith("self.server_args.load_format = ") for s in n.body)),
                    None)  # fmt: skip
    patterns, fallback = _allow_patterns(index, loader, _enum_values(index.module(config), "LoadFormat"))
    if override is None or not patterns:
        return None
    return LoadFormatRule(_where(index, scheduler, override), patterns, fallback)


def _enum_values(module: ast.Module, name: str) -> dict[str, str]:
    """An enum's members: LoadFormat's ``SAFETENSORS`` -> ``"safetensors"``."""
    enum = next(n for n in ast.walk(module) if isinstance(n, ast.ClassDef) and n.name == name)
    return {
        ast.unparse(s.targets[0]): s.value.value
        for s in enum.body
        if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)
    }


def _allow_patterns(
    index: SourceIndex, loader: Path, values: dict[str, str]
) -> tuple[dict[str, tuple[list[str], str]], list[str]]:
    """DefaultModelLoader._prepare_weights: each load format's allow_patterns (with where), and the patterns
    ``if fall_back_to_pt:`` adds."""
    prepare = _function(_class(index.module(loader).body, "DefaultModelLoader"), "_prepare_weights")
    patterns, fallback = {}, []
    for node in _walk(prepare):
        if not isinstance(node, ast.If):
            continue
        assigned = _strings_assigned(node.body, "allow_patterns")
        for test in _or_terms(node.test):
            text = ast.unparse(test)
            if assigned and text.startswith("load_format == LoadFormat.") and text.rsplit(".", 1)[1] in values:
                patterns[values[text.rsplit(".", 1)[1]]] = (assigned, _where(index, loader, node))
        if ast.unparse(node.test) == "fall_back_to_pt":
            fallback = next((_list_of_strings(s.value) or [] for s in node.body if isinstance(s, ast.AugAssign)), [])
    return patterns, fallback


def _or_terms(test: ast.expr) -> list[ast.expr]:
    """``a or b or c`` -> [a, b, c]; any other test -> [test]."""
    return test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]


# -- --json-model-override-args -----------------------------------------------------------------


@dataclass
class OverrideRule:
    inherit: str  # ModelConfig.from_server_args passes server_args.json_model_override_args to the draft too
    parse: str  # ModelConfig: self.model_override_args = json.loads(model_override_args)
    apply: str  # get_config: if model_override_args: config.update(model_override_args)
    replaced: str | None  # the EAGLE worker gives the draft another override instead (--speculative-token-map)
    parse_statement: ast.Assign
    statement: ast.If


def override_rule(index: SourceIndex) -> OverrideRule | None:
    inherit = inherited_keyword(index, "model_override_args", "server_args.json_model_override_args")
    files = _sources(index, "configs/model_config.py", "utils/hf_transformers_utils.py", "speculative/eagle_worker.py")
    if inherit is None or files is None:
        return None
    config, utils, worker = files
    init = _function(_class(index.module(config).body, "ModelConfig"), "__init__")
    parse = _statement(_walk(init), "self.model_override_args = json.loads(model_override_args)")
    get_config = _function(index.module(utils), "get_config")
    apply = _if(get_config, "model_override_args", ["config.update(model_override_args)"])
    replaced = _assignment(ast.walk(index.module(worker)), "server_args.json_model_override_args")
    if parse is None or apply is None:
        return None
    return OverrideRule(
        inherit, _where(index, config, parse), _where(index, utils, apply),
        _where(index, worker, replaced) if replaced else None, parse, apply,
    )  # fmt: skip


# -- the chunked prefix cache (the other way round: the draft changes the target's setting) ------------

TURN_OFF_TEST = (
    "not self.use_mla_backend or server_args.attention_backend not in CHUNKED_PREFIX_CACHE_SUPPORTED_ATTENTION_BACKENDS"
)
FLAG = "get_global_server_args().disable_chunked_prefix_cache"


@dataclass
class ChunkedPrefixRule:
    turn_off: str  # model_specific_adjustment: non-MLA model, or a backend outside the list -> flag on
    supported: list[str]  # CHUNKED_PREFIX_CACHE_SUPPORTED_ATTENTION_BACKENDS
    every_runner: str  # ModelRunner.__init__ runs that adjustment for every runner, the draft's too
    draft_after_target: str  # Scheduler.init_model_worker builds the target's worker, then the draft's
    model_keeps: str  # the target's MLA attention keeps the value it finds when it is built
    reads: dict[str, list[tuple[str, bool]]]  # backend -> (file:line, read per request) of the flag in its classes


def chunked_prefix_rule(index: SourceIndex) -> ChunkedPrefixRule | None:
    files = _sources(index, "model_executor/model_runner.py", "managers/scheduler.py")
    if files is None:
        return None
    runner, scheduler = files
    module = index.module(runner)
    supported = _strings_assigned(module.body, "CHUNKED_PREFIX_CACHE_SUPPORTED_ATTENTION_BACKENDS")
    cls = _class(module.body, "ModelRunner")
    adjust, init = _function(cls, "model_specific_adjustment"), _function(cls, "__init__")
    turn_off = _if(adjust, TURN_OFF_TEST, ["server_args.disable_chunked_prefix_cache = True"])
    every = next(
        (s for s, conditions in statements_with_conditions(init.body if init else [])
         if not conditions and ast.unparse(s) == "self.model_specific_adjustment()"), None,
    )  # fmt: skip
    workers = _function(index.module(scheduler), "init_model_worker")
    calls = [ast.unparse(s) for s in workers.body[:2]] if workers else []
    keeps = _model_keeps(index)
    if not (supported and turn_off and every and keeps) or calls != [
        "self.init_tp_model_worker()", "self.maybe_init_draft_worker()"
    ]:  # fmt: skip
        return None
    return ChunkedPrefixRule(
        _where(index, runner, turn_off), supported, _where(index, runner, every),
        _where(index, scheduler, workers.body[1]), keeps, _backend_reads(index),
    )  # fmt: skip


def _model_keeps(index: SourceIndex) -> str | None:
    """Where DeepSeek's MLA attention (Kimi-K2.5's text model) copies the flag into itself when it is built."""
    for path in sorted((index.tree.srt / "models" / "deepseek_common").rglob("*.py")):
        if node := _statement(ast.walk(index.module(path)), f"self.disable_chunked_prefix_cache = {FLAG}"):
            return _where(index, path, node)
    return None


def _backend_reads(index: SourceIndex) -> dict[str, list[tuple[str, bool]]]:
    """Each registered backend's reads of the flag in the classes its factory builds (and their SGLang bases):
    in ``__init__`` (when the backend is built) or in another method (on each forward)."""
    registry = index.tree.srt / "layers" / "attention" / "attention_registry.py"
    found = {}
    for factory in index.module(registry).body if registry.is_file() else []:
        name = next(
            (d.args[0].value for d in getattr(factory, "decorator_list", []) if isinstance(d, ast.Call)
             and ast.unparse(d.func) == "register_attention_backend" and d.args
             and isinstance(d.args[0], ast.Constant)), None,
        )  # fmt: skip
        if name is not None and (classes := _built_classes(index, factory)):
            found[name] = sorted(set(_class_reads(index, classes)))
    return found


def _built_classes(index: SourceIndex, factory: ast.stmt) -> list[tuple[Path, ast.ClassDef]] | None:
    """The classes a backend's factory builds (those it imports); None when one cannot be followed: what the
    backend reads is not known."""
    imported = {alias.asname or alias.name: node.module for node in ast.walk(factory)
                if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}  # fmt: skip
    classes = []
    for node in ast.walk(factory):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in imported:
            path = index.module_path(imported[node.func.id])
            resolved = index.resolve_name(path, node.func.id) if path else None
            if resolved is None:
                return None
            classes.append(resolved)
    return classes


def _class_reads(index: SourceIndex, classes: list[tuple[Path, ast.ClassDef]], depth: int = 0):
    for path, cls in classes:
        for method in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            for node in ast.walk(method):
                if isinstance(node, ast.Attribute) and ast.unparse(node) == FLAG:
                    yield _where(index, path, node), method.name != "__init__"
        bases = [index.resolve_name(path, ast.unparse(b)) for b in cls.bases if isinstance(b, ast.Name)]
        if depth < 5:
            yield from _class_reads(index, [b for b in bases if b], depth + 1)
