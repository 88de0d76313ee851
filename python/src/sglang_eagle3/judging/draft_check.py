"""Draft checks: will this EAGLE-3 draft work with this target on this SGLang, and will it see the
layers it was trained on?

Everything a wrong draft costs is found here in about a second, before the 600 GB target loads, from the draft's
and the target's config.json, the draft's safetensors headers and the SGLang tree's own source; the silent one is
ids in the "input to layer i" convention that SGLang 0.5.9 captures one layer too deep (patch 0004).

Layer numbers: SGLang's DeepSeek loop captures the *input* of layer i (the residual
stream before it, i.e. the output of layer i - 1). All "captured" and "intended" lists
here are such input indices; a draft id X in the "output of layer i" convention
(first id 1) means input index X + 1.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..errors import shown
from ..models import draft_inputs
from ..models.draft_inputs import DraftInputError, Fields
from ..serving import settings
from ..source import eagle3
from ..source.index import SourceIndex
from ..source.tree import SGLangTree
from ..trees import patchset
from . import capture_rule, findings
from .findings import Finding, Judged, Status

# WARN: loads, but something will not be as the draft was trained; FAIL: fails at draft load, or cannot work.
OK, WARN, FAIL = Status.OK, Status.WARN, Status.FAIL
DEFAULT_TARGET_ARCH = "KimiK25ForConditionalGeneration"
# Used only when the draft class is not one this SGLang has (so its source cannot say).
EAGLE3_WIDTH_FIELDS = ["target_hidden_size", "hidden_size"]

# What SGLang 0.5.9 reads from an EAGLE-3 draft's config when it builds the draft (srt/models/llama_eagle3.py
# on llama.py's decoder layer), as transformers' LlamaConfig hands it over: a field absent from config.json
# gets LlamaConfig's default (or, read with hasattr/getattr, SGLang's), a field present keeps its value, null
# included. So each field present must have the type SGLang uses: field -> (what it must be, test, why).
# vocab_size, draft_vocab_size, num_hidden_layers and tie_word_embeddings have checks of their own below.
_POSITIVE_INT = ("an integer >= 1", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1)
_NUMBER = ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool))
_NULL_OR = lambda kind: (f"{kind[0]} or null", lambda v: v is None or kind[1](v))  # noqa: E731
DRAFT_CONFIG_FIELDS = {
    "hidden_size": (*_POSITIVE_INT, "the draft's embedding, fc output and norms"),
    "target_hidden_size": (*_POSITIVE_INT, "read whenever present (hasattr): the fc takes 3 x target_hidden_size"),
    "num_attention_heads": (*_POSITIVE_INT, "the attention's heads"),
    "num_key_value_heads": (*_NULL_OR(_POSITIVE_INT), "the attention's KV heads (null: num_attention_heads)"),
    "head_dim": (*_NULL_OR(_POSITIVE_INT), "the attention's head size (null: hidden_size / num_attention_heads)"),
    "intermediate_size": (*_POSITIVE_INT, "the MLP's width"),
    "hidden_act": ('"silu"', lambda v: v == "silu", "LlamaMLP raises ValueError for any other activation"),
    "rms_norm_eps": (*_NUMBER, "the norms' epsilon"),
    "rope_theta": (*_NUMBER, "the rotary embedding's base"),
    "max_position_embeddings": (*_POSITIVE_INT, "the rotary embedding's length"),
    "partial_rotary_factor": (*_NUMBER, "the rotary embedding's share of the head"),
    "rope_scaling": ("a JSON object or null", lambda v: v is None or isinstance(v, dict), "the rotary scaling"),
}

__all__ = ["DraftInputError", "DraftReport", "check"]


UPSTREAM_0004 = ("already upstream", "not needed")  # patch check's outcomes for a tree that does not need 0004


@dataclass
class Capture:
    """Which target layers' inputs the draft wants and gets (input indices, see the module doc)."""

    convention: str
    layer_ids: list[int] | None
    intended: list[int] | None
    captured: list[int] | None  # by this tree, in the order the draft gets them
    without_0004: list[int] | None
    with_0004: list[int] | None
    patch_0004: str
    method: str | None  # file:line of the set_eagle3_layers_to_capture that runs


@dataclass
class Target:
    given: str | None
    directory: str | None
    source: str
    architecture: str
    num_layers: int | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None

    @property
    def known(self) -> bool:
        return self.num_layers is not None


@dataclass
class DraftReport(Judged):
    draft: str
    draft_directory: str | None
    draft_source: str
    algorithm: str
    architecture: str | None
    target: Target
    findings: list[Finding] = field(default_factory=list)
    capture: Capture | None = None

    def add(self, name: str, status: Status, message: str) -> None:
        self.findings.append(Finding(name, status, message))

    def finding(self, name: str) -> Finding | None:
        return next((f for f in self.findings if f.name == name), None)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(findings.to_json(self.findings))
        return data

    def render_lines(self) -> list[str]:
        where = f"{self.draft_source}: {self.draft_directory}" if self.draft_directory else self.draft_source
        lines = [f"Draft {self.draft} ({where}), {self.architecture or 'architecture unknown'}, for {self.algorithm}"]
        t = self.target
        if t.known:
            lines.append(
                f"Target {t.given or t.architecture}: {t.architecture}, {t.num_layers} layers, "
                f"hidden size {t.hidden_size}, vocabulary {t.vocab_size}"
            )
        else:
            lines.append(f"Target {t.given or t.architecture}: config not available ({t.source})")
        lines += [f"  {f.render()}" for f in self.findings]
        c = self.capture
        if c is not None:
            lines.append(f"  Layers (inputs of target layers), {c.method or 'capture method not found'}:")
            lines.append(f"      draft names          {c.layer_ids}: {c.convention}")
            lines.append(f"      draft was trained on {_layers(c.intended)}")
            lines.append(f"      this tree captures   {_layers(c.captured)} (patch 0004 {c.patch_0004})")
            if c.patch_0004 not in UPSTREAM_0004:  # the tree's own rule is the patched one: no other variant
                lines.append(f"      without patch 0004   {_layers(c.without_0004)}")
                lines.append(f"      with patch 0004      {_layers(c.with_0004)}")
        return lines


def _layers(layers: list[int] | None) -> str:
    return "unknown" if layers is None else str(layers)


# -- the checks -----------------------------------------------------------------------


def read_target(given: str | None, target_arch: str | None) -> Target:
    """The target's text model: layers, hidden size, vocabulary (Kimi-K2.5: under text_config)."""
    if given is None:
        return Target(None, None, "no target model given", target_arch or DEFAULT_TARGET_ARCH)
    files = draft_inputs.locate(given, "target model")
    if files.directory is None:
        return Target(given, None, f"{given} is {files.source}", target_arch or DEFAULT_TARGET_ARCH)
    config = Fields(draft_inputs.read_config(files.directory, "target model"), f"{files.directory}/config.json")
    text = config.section("text_config") or config
    return Target(
        given,
        str(files.directory),
        files.source,
        target_arch or config.architecture(),
        num_layers=text.integer("num_hidden_layers", required=True),
        hidden_size=text.integer("hidden_size", required=True),
        vocab_size=text.integer("vocab_size", required=True),
    )


def check(
    tree: SGLangTree,
    draft: str,
    target: str | None = None,
    algorithm: str = settings.default("speculative_algorithm"),
    target_arch: str | None = None,
) -> DraftReport:
    """Check ``draft`` (directory or hub id) against ``target`` on ``tree``. Raises DraftInputError on bad input."""
    algorithm = algorithm.upper()
    files = draft_inputs.locate(draft, "draft model")
    report = DraftReport(
        draft, str(files.directory) if files.directory else None, files.source, algorithm, None,
        read_target(target, target_arch),
    )  # fmt: skip
    if files.directory is None:
        report.add(
            "files", WARN,
            f"{draft} is {files.source}: it is checked only after download (pinned: `sglang-eagle3 models lock "
            f"{draft} -o draft.lock.json` then `sglang-eagle3 models fetch --lock draft.lock.json --dir DIR`; or "
            f"`hf download {draft} --local-dir DIR`), then give that directory",
        )  # fmt: skip
        return report
    config = Fields(draft_inputs.read_config(files.directory, "draft model"), f"{files.directory}/config.json")
    report.architecture = config.architecture()
    index = SourceIndex(tree)
    drafts = eagle3.registered_drafts(index, algorithm)
    if drafts is None:
        report.add("algorithm", WARN, f"draft checks cover EAGLE3 and EAGLE; {algorithm} drafts are not checked")
        return report
    algorithm, drafts = _check_algorithm(report, index, drafts)
    facts = _check_architecture(report, index, tree, drafts, algorithm)
    if algorithm != "EAGLE3":
        _check_vocabulary(report, config, facts)
        return report
    _check_layers(report, config, facts)
    _check_field_types(config)
    _check_hidden_size(report, config, facts)
    _check_vocabulary(report, config, facts)
    _check_token_mapping(report, config, files.directory)
    _check_aux_layers(report, config, facts, index)
    return report


def _check_algorithm(report: DraftReport, index: SourceIndex, drafts: dict[str, str]) -> tuple[str, dict[str, str]]:
    """EAGLE with an EAGLE-3 draft, or EAGLE3 with an EAGLE-1/2 draft: told apart by the algorithm the draft's
    class is registered for. Returns the algorithm the rest of the checks judge the draft by (its own)."""
    arch, algorithm = report.architecture, report.algorithm
    other = {"EAGLE3": "EAGLE", "EAGLE": "EAGLE3"}[algorithm]
    other_drafts = eagle3.registered_drafts(index, other) or {}
    gate = eagle3.aux_capture_gate(index)
    if arch in drafts:
        report.findings.append(Finding("algorithm", OK, f"{arch} is an {algorithm} draft", drafts[arch]))
        return algorithm, drafts
    if arch not in other_drafts:
        report.findings.append(Finding(
            "algorithm", Status.NOT_CHECKED,
            f"{arch} is registered as a draft for neither EAGLE3 nor EAGLE here; which speculative_algorithm it "
            "needs is not known",
        ))  # fmt: skip
        return algorithm, drafts
    at = f" ({gate})" if gate else ""
    if algorithm == "EAGLE":
        effect = (
            f"SGLang starts, but captures the target's auxiliary hidden states only for EAGLE3{at}, so the draft "
            "gets the last hidden state instead of the states its fc was trained on and proposes tokens that are "
            "almost never accepted (accept length about 1.0: speculation costs time and gains nothing, "
            "sgl-project/sglang #21272)"
        )
    else:
        effect = (
            f"SGLang captures auxiliary hidden states for EAGLE3{at}, which this draft's fc (built for the "
            "embedding and one hidden state) cannot take: the first draft step fails after the target has loaded"
        )
    report.findings.append(Finding(
        "algorithm", FAIL,
        f"speculative_algorithm is {algorithm}, but {arch} is an {other} draft: {effect}. Set "
        f"speculative_algorithm={other}",
        other_drafts[arch],
    ))  # fmt: skip
    return other, other_drafts


def _check_architecture(
    report: DraftReport, index: SourceIndex, tree: SGLangTree, drafts: dict[str, str], algorithm: str
):
    arch = report.architecture
    if arch in drafts:
        report.add("architecture", OK, f"{arch} is registered as an {algorithm} draft ({drafts[arch]})")
        return eagle3.draft_class_facts(index, arch)
    elsewhere = index.find_model_class(arch)
    registered = ", ".join(f"{name} ({where})" for name, where in drafts.items()) or "none"
    what = (
        f"{arch} is a model class here ({index.rel(elsewhere[0])}:{elsewhere[1].lineno}) but not an {algorithm} draft"
        if elsewhere
        else f"{f'SGLang {tree.version}' if tree.version else 'this SGLang'} has no class {arch}"
    )
    report.add(
        "architecture", FAIL,
        f"{what}; its {algorithm} drafts are {registered}. The server would fail when it loads the draft, "
        "after the target has loaded; use a draft of a registered architecture or an SGLang that has this one",
    )  # fmt: skip
    return None


def _check_field_types(config: Fields) -> None:
    """Every field the draft's class reads has the type it needs (see DRAFT_CONFIG_FIELDS), else DraftInputError."""
    config.integer("hidden_size", required=True)
    wrong = [
        f"{name} must be {expected}, not {shown(config.data[name])} ({why})"
        for name, (expected, ok, why) in DRAFT_CONFIG_FIELDS.items()
        if name in config.data and not ok(config.data[name])
    ]
    if wrong:
        raise DraftInputError(
            f"{config.where}: {'; '.join(wrong)}. SGLang would fail building the draft, after the target has "
            "loaded; correct the field, or remove it where its default is right"
        )


def _check_layers(report: DraftReport, config: Fields, facts) -> None:
    if facts is None or facts.required_layers is None:
        return
    required, where = facts.required_layers
    layers = config.integer("num_hidden_layers", required=True)
    if layers == required:
        report.add("layers", OK, f"{layers}, as {report.architecture} requires ({where})")
    else:
        report.add(
            "layers", FAIL,
            f"the draft has {layers} layers; {report.architecture} accepts {required} and raises ValueError "
            f"otherwise ({where}), after the target has loaded",
        )  # fmt: skip


def _check_hidden_size(report: DraftReport, config: Fields, facts) -> None:
    fields = (facts.width_fields if facts else None) or EAGLE3_WIDTH_FIELDS
    # As SGLang reads it: the first field present (hasattr: null counts), else the last one.
    name = next((f for f in fields[:-1] if f in config.data), fields[-1])
    read_by = f"read at {facts.width_read[name]}" if facts and facts.width_read else "the field EAGLE-3 drafts use"
    expected = config.integer(name, required=True)
    states = facts.aux_states[0] if facts and facts.aux_states else None
    fc = f" (its fc at {facts.aux_states[1]} takes {states} x {expected})" if states else ""
    target = report.target
    if not target.known:
        report.add(
            "hidden size", WARN,
            f"the draft expects target hidden states of width {expected} ({name}, {read_by}); "
            f"the target's config is not available ({target.source})",
        )  # fmt: skip
    elif expected == target.hidden_size:
        report.add("hidden size", OK, f"the draft expects {expected} ({name}, {read_by}), the target has {expected}")
    else:
        report.add(
            "hidden size", FAIL,
            f"the draft expects target hidden states of width {expected} ({name}, {read_by}){fc}, but the "
            f"target's hidden size is {target.hidden_size}: the first draft step fails after the target has "
            "loaded; this draft was trained for another target",
        )  # fmt: skip


def _check_vocabulary(report: DraftReport, config: Fields, facts) -> None:
    vocab = config.integer("vocab_size", required=True)
    draft_vocab = config.integer("draft_vocab_size")
    tied = config.boolean("tie_word_embeddings", False)
    target = report.target
    issues, notes = [], []
    if target.known and vocab != target.vocab_size:
        issues.append(
            f"vocab_size {vocab} differs from the target's {target.vocab_size}: the draft was trained for another "
            "tokenizer"
        )
    elif target.known:
        notes.append(f"vocab_size {vocab} = the target's")
    else:
        notes.append(f"vocab_size {vocab} (the target's is not known: {target.source})")
    read_at = facts.draft_vocab_read(tied) if facts and "draft_vocab_size" not in config.data else None
    if read_at:
        issues.append(
            f"no draft_vocab_size: {read_at} reads it ({'tied' if tied else 'untied'} embeddings), AttributeError "
            "when the draft loads; add draft_vocab_size (the rows of the draft's lm_head, or null for the full "
            "vocabulary) to its config.json"
        )
    elif draft_vocab is None:
        notes.append("draft vocabulary = the full vocabulary" + (" (tied embeddings)" if tied else ""))
    elif draft_vocab > vocab:
        issues.append(f"draft_vocab_size {draft_vocab} is larger than vocab_size {vocab}")
    else:
        notes.append(f"draft vocabulary {draft_vocab}")
    if issues:
        report.add("vocabulary", FAIL, "; ".join(issues))
    else:
        report.add("vocabulary", OK if target.known else WARN, "; ".join(notes))


def _check_token_mapping(report: DraftReport, config: Fields, directory) -> None:
    vocab = config.integer("vocab_size", required=True)
    draft_vocab = config.integer("draft_vocab_size")
    if draft_vocab is None or draft_vocab >= vocab:
        report.add("token mapping", OK, "the draft predicts over the full vocabulary; no d2t mapping needed")
        return
    lookup = draft_inputs.find_tensors(directory, "d2t")
    need = f"draft vocabulary {draft_vocab} < vocab_size {vocab} needs the d2t mapping"
    if not lookup.found:
        if lookup.problem:
            report.add("token mapping", WARN, f"{need}; not checked: {lookup.problem}")
        else:
            report.add(
                "token mapping", FAIL,
                f"{need}, and {lookup.searched} has no d2t tensor: SGLang would take draft token ids for target "
                "ids, so almost nothing is accepted; use the draft's complete weights",
            )  # fmt: skip
        return
    name, shape = next(iter(lookup.found.items()))
    if shape is None:
        report.add("token mapping", WARN, f"{need}; {name} is listed in {lookup.searched} but its shard is not here")
    elif shape != [draft_vocab]:
        report.add("token mapping", FAIL, f"{need}; {name} has shape {shape}, expected [{draft_vocab}]")
    else:
        report.add("token mapping", OK, f"{name} {shape} in {lookup.searched} maps draft ids to target ids")


def _convention(layer_ids: list[int]) -> tuple[str, list[int] | None]:
    first = layer_ids[0]
    if first == 1:
        return "output of layer i (first id 1)", [i + 1 for i in layer_ids]
    if first >= 2:
        return "input to layer i (first id 2 or more)", list(layer_ids)
    return f"neither convention (first id {first}; outputs start at 1, inputs at 2)", None


def _out_of_range(layers: list[int], num_layers: int) -> list[str]:
    """Why each input index cannot be captured by a loop over layers 0..n-1 that captures before layer i."""
    reasons = []
    for i in layers:
        if i == 0:
            reasons.append("the input of layer 0 (there is no residual stream before it: TypeError)")
        elif i < 0:
            reasons.append(f"layer {i} (negative)")
        elif i == num_layers:
            reasons.append(
                f"the input of layer {i}, i.e. the output of the last layer {num_layers - 1} (only the inputs of "
                f"layers 1-{num_layers - 1} are captured)"
            )
        elif i > num_layers:
            reasons.append(f"layer {i} (the target has layers 0-{num_layers - 1})")
    return reasons


def _check_aux_layers(report: DraftReport, config: Fields, facts, index: SourceIndex) -> None:
    eagle = config.section("eagle_config")
    layer_ids = eagle.int_list("eagle_aux_hidden_state_layer_ids") if eagle else None
    if eagle and not eagle.boolean("use_aux_hidden_state", True):
        report.add("aux layer ids", OK, "use_aux_hidden_state is false: the draft gets the target's last state")
        return
    target = report.target
    n = target.num_layers
    expected = facts.aux_states if facts and facts.aux_states else None
    if layer_ids is None:
        convention, intended = "none named: SGLang's default", None
        report.add(
            "aux layer ids", WARN,
            "the draft's config does not name the layers it was trained on (eagle_config."
            "eagle_aux_hidden_state_layer_ids); SGLang captures its default, which cannot be checked against the "
            "draft's training",
        )  # fmt: skip
    elif not layer_ids:
        raise DraftInputError(f"{config.where}: eagle_aux_hidden_state_layer_ids is empty")
    else:
        convention, intended = _convention(layer_ids)
        issues, doubts, notes = [], [], [f"{layer_ids}: {convention}"]
        if expected and len(layer_ids) != expected[0]:
            issues.append(f"{len(layer_ids)} ids, but the draft's fc takes {expected[0]} states ({expected[1]})")
        if len(set(layer_ids)) != len(layer_ids):
            issues.append("an id is repeated: SGLang captures each layer once, so the draft gets fewer states")
        elif layer_ids != sorted(layer_ids):
            doubts.append(f"not increasing: SGLang captures in layer order, so the draft gets {sorted(layer_ids)}")
        if intended is None:
            doubts.append("which layers the draft means is not known")
        elif n is None:
            doubts.append(f"range not checked ({target.source})")
        else:
            bad = _out_of_range(intended, n)
            if bad:
                issues.append(f"names {'; '.join(bad)}, which SGLang cannot capture")
            else:
                notes.append(f"within the target's {n} layers")
        status = FAIL if issues else WARN if doubts else OK
        report.add("aux layer ids", status, "; ".join(issues + doubts + notes))
    _check_captured_layers(report, index, layer_ids, convention, intended, expected)


def _predict(function, layer_ids, num_layers) -> list[int] | None:
    if function is None or (layer_ids is None and num_layers is None):
        return None
    try:
        layers = capture_rule.run_capture_method(function, layer_ids, num_layers or 0)
    except Exception:  # a capture method this reader cannot run: no prediction
        return None
    # The forward loop captures each listed layer once, in layer order: that is what the draft gets.
    return sorted(set(layers))


def _label_upstream_0004(index: SourceIndex, rule: capture_rule.CaptureRule) -> str | None:
    """A tree patch 0004 does not apply to: patch check's reading of it (one source of truth), which runs the
    tree's own capture method for a draft of each convention. Upstream (0.5.23, PR #25454): the tree's rule is the
    patched one, so with and without the patch are this tree."""
    if rule.patch is None or rule.patch_0004 != patchset.PatchState.CONFLICT.value:
        return None
    from . import patch_check  # patch_check imports probe, which imports this module

    checked = patch_check.check_one(rule.patch, index.tree, index)
    if checked.outcome in (patch_check.Outcome.UPSTREAM, patch_check.Outcome.NOT_NEEDED):
        rule.patch_0004 = str(checked.outcome)
        rule.with_0004 = rule.without_0004 = rule.this_tree
        return checked.how
    return None


def _check_captured_layers(report: DraftReport, index, layer_ids, convention, intended, expected) -> None:
    target = report.target
    rule = capture_rule.capture_rule(index, target.architecture)
    if rule is None:
        report.capture = Capture(convention, layer_ids, intended, None, None, None, "unknown", None)
        report.add(
            "captured layers", WARN,
            f"{target.architecture} has no {eagle3.CAPTURE_METHOD} this probe can follow (see the methods "
            "above); which layers are captured is not known",
        )  # fmt: skip
        return
    upstream = _label_upstream_0004(index, rule)
    n = target.num_layers
    captured = _predict(rule.this_tree, layer_ids, n)
    capture = Capture(
        convention, layer_ids, intended, captured, _predict(rule.without_0004, layer_ids, n),
        _predict(rule.with_0004, layer_ids, n), rule.patch_0004, f"{rule.class_name} at {rule.location}",
    )  # fmt: skip
    report.capture = capture
    where = f"{rule.class_name} at {rule.location}, patch 0004 {rule.patch_0004}" + (
        f": {upstream}" if upstream else ""
    )
    fix = (
        f" Fix: apply patch 0004 (sglang-eagle3 patch apply), which captures {capture.with_0004}."
        if capture.with_0004 is not None and capture.with_0004 != captured and capture.with_0004 == intended
        else ""
    )
    if captured is None:
        reason = "the target's layer count is not known" if n is None else "this reader cannot run that method"
        report.add("captured layers", WARN, f"not predicted ({where}): {reason}")
        return
    lost = _out_of_range(captured, n) if n is not None else []
    if lost:
        states = len(captured) - len(lost)
        wanted = f", its fc takes {expected[0]}" if expected else ""
        report.add(
            "captured layers", FAIL,
            f"this tree captures the inputs of layers {captured} ({where}): it asks for {'; '.join(lost)}; the "
            f"draft gets {states} states{wanted}.{fix}",
        )  # fmt: skip
    elif intended is None:
        report.add(
            "captured layers", WARN,
            f"this tree captures the inputs of layers {captured} ({where}); what the draft was trained on is "
            "not known",
        )  # fmt: skip
    elif captured == intended:
        report.add("captured layers", OK, f"the inputs of layers {captured}, as the draft was trained ({where})")
    else:
        offset = {c - i for c, i in zip(captured, intended, strict=False)}
        by = f" (off by {offset.pop():+d})" if len(offset) == 1 else ""
        report.add(
            "captured layers", WARN,
            f"this tree captures the inputs of layers {captured}, the draft was trained on {intended}{by} "
            f"({where}): it starts, but accepts fewer tokens.{fix}",
        )  # fmt: skip
