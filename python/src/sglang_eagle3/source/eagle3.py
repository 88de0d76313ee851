"""What an SGLang tree's own source says about EAGLE drafts, read without importing it: which architectures it
registers as drafts for an algorithm, what a draft class requires of its config, and where
``set_eagle3_layers_to_capture`` is (which layers it captures is judging/capture_rule.py's, which runs it).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from .index import SourceIndex, own_expressions, statements_with_conditions
from .model_class import attribute_class, defines, forward_target

CAPTURE_METHOD = "set_eagle3_layers_to_capture"
DRAFT_MODULE_GLOBS = {"EAGLE3": ("*eagle3*.py", None), "EAGLE": ("*eagle*.py", "*eagle3*.py")}


# -- registered draft classes ---------------------------------------------------------


def entry_classes(index: SourceIndex, path: Path) -> list[str]:
    """Names in the module's ``EntryClass = [A, B]`` (or ``EntryClass = A``)."""
    names = []
    for node in index.module(path).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            names += [v.id for v in values if isinstance(v, ast.Name)]
    return names


def registered_drafts(index: SourceIndex, algorithm: str) -> dict[str, str] | None:
    """Draft architecture -> where its class is defined, for EAGLE/EAGLE3; None for other algorithms."""
    if algorithm not in DRAFT_MODULE_GLOBS:
        return None
    pattern, exclude = DRAFT_MODULE_GLOBS[algorithm]
    models = index.tree.srt / "models"
    excluded = set(models.glob(exclude)) if exclude else set()
    drafts = {}
    for path in sorted(set(models.glob(pattern)) - excluded):
        for name in entry_classes(index, path):
            resolved = index.resolve_name(path, name)
            where = path if resolved is None else resolved[0]
            line = "" if resolved is None else f":{resolved[1].lineno}"
            drafts[name] = f"{index.rel(where)}{line}"
    return drafts


def aux_capture_gate(index: SourceIndex) -> str | None:
    """file:line where the target's model runner turns on the auxiliary hidden-state capture, for EAGLE3 only."""
    path = index.tree.srt / "model_executor" / "model_runner.py"
    if not path.is_file():
        return None
    for node in ast.walk(index.module(path)):
        if isinstance(node, ast.If) and ast.unparse(node.test) == (
            "self.spec_algorithm.is_eagle3() and (not self.is_draft_worker)"
        ):
            return f"{index.rel(path)}:{node.lineno}"
    return None


# -- what a draft class needs from its config -------------------------------------------


@dataclass
class DraftClassFacts:
    location: str
    required_layers: tuple[int, str] | None = None  # (count, file:line of the check)
    aux_states: tuple[int, str] | None = None  # (count the fc takes, file:line)
    width_fields: list[str] | None = None  # config fields for the aux state width, first present wins
    width_read: dict[str, str] | None = None  # field -> file:line where it is read
    # Unguarded reads of <config>.draft_vocab_size: (file:line, the tie_word_embeddings value it needs, or None)
    draft_vocab_reads: list[tuple[str, bool | None]] = field(default_factory=list)

    def draft_vocab_read(self, tied: bool) -> str | None:
        """Where a config without draft_vocab_size raises AttributeError, for this tie_word_embeddings."""
        return next((where for where, needs in self.draft_vocab_reads if needs in (None, tied)), None)


def _attribute_chain(node: ast.expr) -> str:
    return ast.unparse(node) if isinstance(node, (ast.Attribute, ast.Name)) else ""


def _hasattr_fields(conditions) -> set[str]:
    fields = set()
    for cond in conditions:
        for node in ast.walk(cond.test):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "hasattr"
                and len(node.args) == 2
                and isinstance(node.args[1], ast.Constant)
            ):
                fields.add(node.args[1].value)
    return fields


def draft_class_facts(index: SourceIndex, arch: str) -> DraftClassFacts | None:
    found = index.find_model_class(arch)
    if found is None:
        return None
    path, cls = found
    module, rel = index.module(path), index.rel(path)
    facts = DraftClassFacts(location=f"{rel}:{cls.lineno}")
    _read_init(facts, cls, rel)
    width_attr = _read_fc(facts, module, rel)
    if width_attr:
        _read_width(facts, module, rel, width_attr)
    return facts


def _read_init(facts: DraftClassFacts, cls: ast.ClassDef, rel: str) -> None:
    """From the class's __init__: the layer count it requires (``if config.num_hidden_layers != 1: raise``) and
    where it reads draft_vocab_size unguarded, each with the tie_word_embeddings branch it is on."""
    init = defines(cls, "__init__")
    for stmt, conditions in statements_with_conditions(init.body if init else []):
        test = conditions[-1].test if conditions else None
        if isinstance(stmt, ast.Raise) and _is_layer_count_test(test):
            facts.required_layers = (test.comparators[0].value, f"{rel}:{test.lineno}")
        tie = [c.polarity for c in conditions if _attribute_chain(c.test).endswith(".tie_word_embeddings")]
        guarded = "draft_vocab_size" in _hasattr_fields(conditions)
        for node in own_expressions(stmt):
            loads = isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
            if loads and node.attr == "draft_vocab_size" and not guarded:
                facts.draft_vocab_reads.append((f"{rel}:{node.lineno}", tie[-1] if tie else None))


def _is_layer_count_test(test: ast.expr | None) -> bool:
    """``<...>.num_hidden_layers != <constant>``."""
    return (
        isinstance(test, ast.Compare)
        and _attribute_chain(test.left).endswith(".num_hidden_layers")
        and isinstance(test.ops[0], ast.NotEq)
        and isinstance(test.comparators[0], ast.Constant)
    )


def _read_fc(facts: DraftClassFacts, module: ast.Module, rel: str) -> str | None:
    """``self.fc = torch.nn.Linear(self.<width> * K, ...)`` anywhere in the draft's module: K, the hidden states
    the draft takes, into ``facts``; the width's attribute chain (``self.hidden_size_in``) returned."""
    width_attr = None
    for node in ast.walk(module):
        if not (isinstance(node, ast.Assign) and _attribute_chain(node.targets[0]) == "self.fc"):
            continue
        product = node.value.args[0] if isinstance(node.value, ast.Call) and node.value.args else None
        if not (isinstance(product, ast.BinOp) and isinstance(product.op, ast.Mult)):
            continue
        left, right = product.left, product.right
        constant, other = (left, right) if isinstance(left, ast.Constant) else (right, left)
        if isinstance(constant, ast.Constant) and isinstance(constant.value, int):
            facts.aux_states = (constant.value, f"{rel}:{node.lineno}")
            width_attr = _attribute_chain(other)
    return width_attr


def _read_width(facts: DraftClassFacts, module: ast.Module, rel: str, width_attr: str) -> None:
    """The config fields the width is assigned from (``self.hidden_size_in = config.X``): those behind a hasattr
    guard first, then the fallbacks, each with where it is read."""
    guarded, fallback = [], []
    for func in (n for n in ast.walk(module) if isinstance(n, ast.FunctionDef)):
        for stmt, conditions in statements_with_conditions(func.body):
            if (
                isinstance(stmt, ast.Assign)
                and _attribute_chain(stmt.targets[0]) == width_attr
                and isinstance(stmt.value, ast.Attribute)
                and _attribute_chain(stmt.value.value) == "config"
            ):
                field = stmt.value.attr
                (guarded if field in _hasattr_fields(conditions) else fallback).append(field)
                facts.width_read = {**(facts.width_read or {}), field: f"{rel}:{stmt.lineno}"}
    facts.width_fields = guarded + fallback or None


# -- which layers a target captures ------------------------------------------------------


def _passes_through(func: ast.FunctionDef, method: str) -> bool:
    """``self.inner.method(a, b)`` called with exactly the function's own parameters: a pure forward."""
    params = [a.arg for a in func.args.args[1:]]
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method:
            return [ast.unparse(a) for a in node.args] == params and not node.keywords
    return False


def find_method(index: SourceIndex, path: Path, cls: ast.ClassDef, method: str, _depth: int = 0):
    """(path, class, function) that really runs for ``cls.method``: through bases and forwarding wrappers."""
    if _depth > 12:
        return None
    found = defines(cls, method)
    if isinstance(found, ast.FunctionDef):
        inner = forward_target(found, method) if _passes_through(found, method) else None
        if inner is None:
            return path, cls, found
        inner_cls = attribute_class(index, path, cls, inner)
        return find_method(index, *inner_cls, method, _depth + 1) if inner_cls else None
    for base in cls.bases:
        if isinstance(base, ast.Name):
            resolved = index.resolve_name(path, base.id)
            if resolved is not None:
                result = find_method(index, *resolved, method, _depth + 1)
                if result is not None:
                    return result
    return None


# -- the draft path SGLang fills in itself -------------------------------------------------


@dataclass
class SelfDraft:
    """Targets whose own checkpoint SGLang takes as the draft when no draft path is given (MTP)."""

    architectures: list[str]
    location: str  # file:line of the ``if model_arch in [...]`` that sets the draft path to the model path
    fallback: str | None  # file:line where a None draft path becomes the target's model_path when loading


def self_draft_targets(index: SourceIndex) -> SelfDraft | None:
    """Read ServerArgs._handle_speculative_decoding: ``if model_arch in [...]: if draft path is None: draft
    path = self.model_path``; and ModelConfig.from_server_args' ``model_path or server_args.model_path``."""
    server_args = index.tree.srt / "server_args.py"
    if not server_args.is_file():
        return None
    found = None
    for node in ast.walk(index.module(server_args)):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and ast.unparse(node.test.left) == "model_arch"
            and isinstance(node.test.ops[0], ast.In)
            and isinstance(node.test.comparators[0], ast.List)
            and any(
                isinstance(n, ast.Assign)
                and ast.unparse(n.targets[0]) == "self.speculative_draft_model_path"
                and ast.unparse(n.value) == "self.model_path"
                for n in ast.walk(node)
            )
        ):
            names = [e.value for e in node.test.comparators[0].elts if isinstance(e, ast.Constant)]
            found = (names, f"{index.rel(server_args)}:{node.lineno}")
            break
    if found is None:
        return None
    fallback = None
    model_config = index.tree.srt / "configs" / "model_config.py"
    if model_config.is_file():
        for node in ast.walk(index.module(model_config)):
            if (
                isinstance(node, ast.keyword)
                and node.arg == "model_path"
                and ast.unparse(node.value) == "model_path or server_args.model_path"
            ):
                fallback = f"{index.rel(model_config)}:{node.value.lineno}"
    return SelfDraft(found[0], found[1], fallback)


def draft_quantization_inheritance(index: SourceIndex) -> str | None:
    """file:line where ServerArgs gives the draft the target's --quantization when
    --speculative-draft-model-quantization is not set (``if ... is None: ... = self.quantization``), or None."""
    path = index.tree.srt / "server_args.py"
    if not path.is_file():
        return None
    for node in ast.walk(index.module(path)):
        if (
            isinstance(node, ast.If)
            and ast.unparse(node.test) == "self.speculative_draft_model_quantization is None"
            and any(
                ast.unparse(s) == "self.speculative_draft_model_quantization = self.quantization" for s in node.body
            )
        ):
            return f"{index.rel(path)}:{node.lineno}"
    return None


def draft_revision_inheritance(index: SourceIndex) -> str | None:
    """file:line where ModelConfig.from_server_args gives a model without a revision of its own the target's
    (``revision=model_revision or server_args.revision``): a draft hub id then loads the target's commit."""
    path = index.tree.srt / "configs" / "model_config.py"
    if not path.is_file():
        return None
    for node in ast.walk(index.module(path)):
        if (
            isinstance(node, ast.keyword)
            and node.arg == "revision"
            and (ast.unparse(node.value) == "model_revision or server_args.revision")
        ):
            return f"{index.rel(path)}:{node.value.lineno}"
    return None
