"""What a draft inherits, by running SGLang's own statements that source/draft_inheritance.py finds: the context
length ``get_context_length`` derives from a config.json, and what ModelConfig and get_config make of
``--json-model-override-args``. Each statement runs alone, on stand-ins, with no builtins beyond the few it needs;
running the tree's code is why this is judging's, not source/'s, which only reads.
"""

from __future__ import annotations

import ast
import json
from types import SimpleNamespace

from ..source.draft_inheritance import ContextRule, OverrideRule


def context_length(rule: ContextRule, config: dict) -> int | None:
    """What get_context_length returns for this config.json (top level or text_config), or None
    when it names none of the keys (then the transformers config class's default decides)."""
    if not any(config.get(key) is not None for key in rule.keys):
        return None
    func = _pure_copy(rule.function)
    namespace = {"__builtins__": {"getattr": getattr, "int": int}, "CONTEXT_LENGTH_KEYS": list(rule.keys)}
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


class _ConfigStandIn:
    """What get_config's ``config.update(...)`` is called on: transformers' PretrainedConfig.update sets each
    key of the dict as an attribute, so a key replaces the whole field (no merge into nested objects)."""

    def __init__(self, data: dict):
        self.data = dict(data)

    def update(self, config_dict) -> None:
        for key, value in config_dict.items():
            self.data[key] = value


def override_parsed(rule: OverrideRule, text: str):
    """What ModelConfig's own statement makes of the flag's text (json.JSONDecodeError when it is no JSON)."""
    namespace = {"__builtins__": {}, "json": json, "model_override_args": text, "self": SimpleNamespace()}
    exec(compile(ast.Module(body=[rule.parse_statement], type_ignores=[]), "<sglang source>", "exec"), namespace)
    return namespace["self"].model_override_args


def override_applied(rule: OverrideRule, config: dict, override) -> dict:
    """config.json as the model's config reads after get_config's own statement has run on it."""
    stand_in = _ConfigStandIn(config)
    namespace = {"__builtins__": {}, "config": stand_in, "model_override_args": override}
    exec(compile(ast.Module(body=[rule.statement], type_ignores=[]), "<sglang source>", "exec"), namespace)
    return stand_in.data
