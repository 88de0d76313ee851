"""The draft's settings: what SGLang gives the draft model of the target's settings (attention backend,
quantization, revision, context length, model implementation, load format, config override, chunked prefix
cache), judged against the draft's and the target's config.json and the tree's own source, before the load.

Each check adds findings to a report (preflight's); ``check_draft`` runs them all for the configured draft.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ..models import draft_inputs, lockfile
from ..serving.settings import ServerSettings
from ..source import attention_backends, draft_inheritance, eagle3
from ..source.index import SourceIndex, SourceLayoutError
from ..source.tree import SGLangTree
from ..trees import release
from . import draft_check, findings, inherited_values
from .findings import Finding, Report, Status


def check_draft(result: Report, settings: ServerSettings, tree: SGLangTree) -> None:
    """The draft checks of `probe --draft` for the configured draft and target (see draft_check)."""
    if settings.speculative_draft_model_path is None:
        return
    try:
        draft = draft_check.check(
            tree, settings.speculative_draft_model_path, settings.model_path, algorithm=settings.speculative_algorithm
        )
    except draft_check.DraftInputError as err:
        result.add("draft", Status.FAIL, str(err))
        return
    except SourceLayoutError as err:
        result.add("draft", Status.FAIL, release.layout_problem(tree, err))
        return
    result.findings += [f.prefixed("draft") for f in draft.findings]
    index = SourceIndex(tree)
    if draft.architecture:
        check_draft_attention(result, settings, index, draft.architecture)
        check_draft_model_impl(result, settings, index, draft.architecture)
        check_draft_chunked_prefix(result, settings, index, draft.architecture, draft.target.architecture)
    if draft.draft_directory:
        check_draft_quantization(result, settings, index, Path(draft.draft_directory))
        check_draft_context(result, settings, index, Path(draft.draft_directory), draft.target.directory)
        check_draft_load_format(result, settings, index, Path(draft.draft_directory))
        check_draft_model_override(result, settings, index, Path(draft.draft_directory), draft.target.directory)


def extra_arg(args: list[str], flag: str) -> str | None:
    """The value extra_args gives ``flag`` (``--flag V`` or ``--flag=V``; the last one wins), or None."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(f"{flag}="):
            value = arg.split("=", 1)[1]
    return value


def check_draft_quantization(result: Report, settings: ServerSettings, index: SourceIndex, draft: Path) -> None:
    """SGLang gives the draft the target's --quantization unless --speculative-draft-model-quantization is set:
    a target quantized that way (e.g. --quantization modelopt_fp4 for NVFP4) with a draft that is not fails to load."""
    name = "draft quantization"
    where = eagle3.draft_quantization_inheritance(index)
    target_method = extra_arg(settings.extra_args, "--quantization")
    draft_setting = extra_arg(settings.extra_args, "--speculative-draft-model-quantization")
    config = json.loads((draft / "config.json").read_text())  # read (and checked) by the draft checks already
    quant = config.get("quantization_config")
    draft_method = quant.get("quant_method") if isinstance(quant, dict) else None
    if where is None:
        result.add(
            name, Status.NOT_CHECKED, "how this SGLang picks the draft's quantization is not read from its source"
        )
    elif target_method is None or draft_setting is not None:
        how = f"--speculative-draft-model-quantization {draft_setting}" if draft_setting else "its own config.json"
        result.add(name, Status.OK, f"the draft's quantization comes from {how}, not from the target's", where)
    elif draft_method == target_method:
        result.add(
            name, Status.OK, f"the draft inherits --quantization {target_method}, which its config asks for", where
        )
    else:
        result.add(
            name, Status.FAIL,
            f"extra_args sets --quantization {target_method}, which SGLang also gives the draft unless "
            f"--speculative-draft-model-quantization is set; the draft {draft} is "
            f"{draft_method or 'not quantized'}, so it fails when it loads, after the target. Add "
            f"--speculative-draft-model-quantization {draft_method or 'unquant'} to extra_args",
            where,
        )  # fmt: skip


def check_draft_attention(result: Report, settings: ServerSettings, index: SourceIndex, draft_arch: str) -> None:
    """The draft runs with speculative_draft_attention_backend, else the target's attention_backend: that
    backend must serve the draft's attention (an MLA-only backend cannot run a Llama-architecture draft)."""
    name = "draft attention backend"
    chosen = settings.speculative_draft_attention_backend
    backend = chosen or settings.attention_backend
    table, mla, override = attention_backends.backends(index), attention_backends.mla_architectures(index), \
        attention_backends.draft_override(index)  # fmt: skip
    serves, where = table.get(backend, (attention_backends.Serves.UNKNOWN, None))
    if mla is None or serves is attention_backends.Serves.UNKNOWN:
        result.add(name, Status.NOT_CHECKED, f"which models the {backend} backend serves is not read from this "
                   "SGLang's source; the draft may or may not run with it", where)  # fmt: skip
        return
    draft_mla = draft_arch in mla[0]
    kind = attention_backends.Serves.MLA if draft_mla else attention_backends.Serves.MHA
    how = "set by speculative_draft_attention_backend" if chosen else (
        f"inherited from attention_backend: SGLang runs the draft with the target's backend unless "
        f"speculative_draft_attention_backend is set ({override})"
    )  # fmt: skip
    if serves in (attention_backends.Serves.BOTH, kind):
        result.add(
            name, Status.OK, f"{backend} ({how}) serves {serves.value}, the draft {draft_arch} among them", where
        )
        return
    fits = [b for b, (s, _) in table.items() if s in (attention_backends.Serves.BOTH, kind)]
    result.add(
        name, Status.FAIL,
        f"the draft {draft_arch} ({'MLA' if draft_mla else 'non-MLA'} attention, {mla[1]}) would run with {backend} "
        f"({how}), which serves {serves.value}: the draft fails when it loads, after the target. Set "
        f"speculative_draft_attention_backend to one that serves it ({', '.join(fits[:3])})",
        where,
    )  # fmt: skip


def check_draft_revision(result: Report, settings: ServerSettings, index: SourceIndex) -> None:
    """A pinned target revision reaches a draft hub id that has none of its own (the draft's repository has no
    such commit: the draft fails after the target has loaded). Local directories take no revision."""
    draft = settings.speculative_draft_model_path
    if settings.revision is None or draft is None or draft_inputs.looks_local(draft):
        return
    name = "draft revision"
    where = eagle3.draft_revision_inheritance(index)
    if settings.speculative_draft_model_revision is not None:
        result.add(name, Status.OK, f"{draft} has its own revision, {settings.speculative_draft_model_revision}", where)
    elif where is None:
        result.add(name, Status.NOT_CHECKED, "whether this SGLang gives the draft the target's revision is not in "
                   "its source; set speculative_draft_model_revision to be sure")  # fmt: skip
    else:
        result.add(
            name, Status.FAIL,
            f"revision {settings.revision} (the target's) is given to the draft {draft} too, since "
            f"speculative_draft_model_revision is not set; the draft's repository has no such commit, so the draft "
            f"fails after the target has loaded. Set speculative_draft_model_revision (`sglang-eagle3 models lock "
            f"{draft} -o {lockfile.file_name(draft)}` prints its commit)",
            where,
        )  # fmt: skip


def check_draft_path(result: Report, settings: ServerSettings, tree: SGLangTree, arch: str) -> None:
    """No draft path (only NEXTN gets past the settings without one): does SGLang take the target's own MTP
    layers, or load the whole target as the draft (sgl-project/sglang #36528)?"""
    if not settings.speculative_algorithm or settings.speculative_draft_model_path:
        return
    try:
        self_draft = eagle3.self_draft_targets(SourceIndex(tree))
    except SourceLayoutError:
        self_draft = None
    name = "draft model"
    if self_draft is None:
        result.add(name, Status.NOT_CHECKED, "speculative_draft_model_path is not set, and this SGLang's source does "
                   "not say which targets it drafts for themselves; set speculative_draft_model_path")  # fmt: skip
    elif arch in self_draft.architectures:
        result.add(name, Status.OK, f"speculative_draft_model_path not set: SGLang drafts {arch} with its own MTP "
                   "layers", self_draft.location)  # fmt: skip
    else:
        fallback = f" ({self_draft.fallback})" if self_draft.fallback else ""
        result.add(
            name, Status.FAIL,
            f"speculative_draft_model_path is not set: with speculative_algorithm {settings.speculative_algorithm} "
            f"SGLang {tree.version} fills it in only for {', '.join(self_draft.architectures)} "
            f"({self_draft.location}); "
            f"for {arch} the draft worker loads the target itself as the draft{fallback} and fails after the whole "
            "target has loaded. Set speculative_draft_model_path to an EAGLE-3 draft (e.g. AQ-MedAI/Kimi-K25-eagle3)",
            self_draft.location,
        )  # fmt: skip


def _text_config(config: dict) -> dict:
    """The part of a config.json SGLang reads the model's shape from (get_hf_text_config: text_config if any)."""
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def check_draft_context(
    result: Report, settings: ServerSettings, index: SourceIndex, draft: Path, target: str | None
) -> None:
    """The draft gets the target's context length; SGLang refuses one longer than the draft's own unless an
    environment variable allows it (then the draft runs past the length it was trained for)."""
    name = "draft context length"
    rule = draft_inheritance.context_rule(index)
    if rule is None:
        result.add(name, Status.NOT_CHECKED, "which context length this SGLang gives the draft is not read from "
                   "its source")  # fmt: skip
        return
    draft_length = inherited_values.context_length(rule, _text_config(json.loads((draft / "config.json").read_text())))
    if settings.context_length is not None:
        target_length, source = settings.context_length, "context_length"
    else:
        config = draft_inputs.read_config(Path(target), "target model") if target else None
        target_length, source = (
            (inherited_values.context_length(rule, _text_config(config)) if config else None),
            "the target's config",
        )
    if draft_length is None or target_length is None:
        unknown = "the draft's" if draft_length is None else f"the target's ({source})"
        result.add(
            name, Status.NOT_CHECKED,
            f"{unknown} config.json names none of {', '.join(rule.keys)} ({rule.derive}), so its context length is "
            f"what its transformers config class defaults to; SGLang gives the draft the target's ({rule.override}) "
            f"and refuses one longer than the draft's own ({rule.refuse})",
            rule.refuse,
        )  # fmt: skip
        return
    how = f"the draft gets the target's context length {target_length} (from {source}, {rule.override})"
    if target_length <= draft_length:
        result.add(name, Status.OK, f"{how}, within its own {draft_length}", rule.refuse)
        return
    environ = {**os.environ, **settings.environment}
    allowed = [v for v in rule.allow_env if environ.get(v, "").lower() in (rule.true_values or ())]
    if allowed:
        result.add(
            name, Status.WARN,
            f"{how}, longer than its own {draft_length}; {allowed[0]} lets SGLang stretch the draft to it, past "
            f"the length it was trained for: fewer tokens accepted on long prompts. Set context_length to "
            f"{draft_length} to stay within it",
            rule.refuse,
        )  # fmt: skip
        return
    allow = f", or {rule.allow_env[0]}=1 in environment (the draft then runs past its length)" if rule.allow_env else ""
    result.add(
        name, Status.FAIL,
        f"{how}, longer than the draft's own {draft_length} ({rule.derive}): SGLang raises ValueError when the draft "
        f"loads, after the target. Set context_length to at most {draft_length}{allow}",
        rule.refuse,
    )  # fmt: skip


def check_draft_model_impl(result: Report, settings: ServerSettings, index: SourceIndex, draft_arch: str) -> None:
    """--model-impl reaches the draft too (there is no draft-only flag): an implementation that builds models from
    another class than their architecture does not build the draft as its EAGLE-3 class."""
    value = extra_arg(settings.extra_args, "--model-impl")
    if value is None:
        return
    name = "draft model implementation"
    rule = draft_inheritance.model_impl_rule(index)
    if rule is None or value not in rule.values:
        result.add(name, Status.NOT_CHECKED, f"what --model-impl {value} does to the draft is not read from this "
                   "SGLang's source")  # fmt: skip
    elif value in rule.replaced:
        result.add(
            name, Status.FAIL,
            f"extra_args sets --model-impl {value}, which SGLang gives the draft too ({rule.inherit}): the draft "
            f"{draft_arch} is then not built from its own class and fails when it loads, "
            "after the target. Remove --model-impl from extra_args (SGLang has no draft-only setting for it)",
            rule.replaced[value],
        )  # fmt: skip
    else:
        result.add(name, Status.OK, f"--model-impl {value} (given to the draft too, {rule.inherit}) builds the draft "
                   f"from its own class, {draft_arch}", rule.inherit)  # fmt: skip


def check_draft_load_format(result: Report, settings: ServerSettings, index: SourceIndex, draft: Path) -> None:
    """--load-format reaches the draft unless --speculative-draft-load-format is set: a format whose weight files
    the draft's directory does not have fails the draft's load, after the target's."""
    target_format = extra_arg(settings.extra_args, "--load-format")
    draft_format = extra_arg(settings.extra_args, "--speculative-draft-load-format")
    if target_format is None and draft_format is None:
        return
    name = "draft load format"
    rule = draft_inheritance.load_format_rule(index)
    used = draft_format or target_format
    if rule is None or used not in rule.patterns:
        result.add(name, Status.NOT_CHECKED, f"which weight files the {used} loader reads is not read from this "
                   "SGLang's source")  # fmt: skip
        return
    how = f"--speculative-draft-load-format {draft_format}" if draft_format else (
        f"--load-format {target_format}, which SGLang gives the draft too unless --speculative-draft-load-format "
        f"is set ({rule.override})"
    )  # fmt: skip

    def files(patterns: list[str]) -> list[str]:
        wanted = dict.fromkeys([*patterns, *rule.fallback])  # the default loader also takes these (fall_back_to_pt)
        return sorted({p.name for pattern in wanted for p in draft.glob(pattern)})

    patterns, where = rule.patterns[used]
    found = files(patterns)
    if found:
        result.add(name, Status.OK, f"the draft loads with {how}: {', '.join(found[:3])}", where)
        return
    fits = [f for f, (p, _) in rule.patterns.items() if files(p)]
    result.add(
        name, Status.FAIL,
        f"the draft loads with {how}; {draft} has no {' or '.join(dict.fromkeys([*patterns, *rule.fallback]))} "
        f"file, so it fails when it loads, after the target. Add --speculative-draft-load-format "
        f"{fits[0] if fits else 'auto'} to extra_args",
        where,
    )  # fmt: skip


def check_draft_model_override(
    result: Report, settings: ServerSettings, index: SourceIndex, draft: Path, target: str | None
) -> None:
    """--json-model-override-args reaches the draft's config too (get_config applies it to every model's): the
    draft checks run again on the draft's and the target's config.json as SGLang overrides them."""
    text = extra_arg(settings.extra_args, OVERRIDE_FLAG)
    if text is None:
        return
    name = "draft model override"
    rule = draft_inheritance.override_rule(index)
    if rule is None:
        result.add(name, Status.NOT_CHECKED, f"how this SGLang applies {OVERRIDE_FLAG} is not read from its source")
        return
    if rule.replaced and extra_arg(settings.extra_args, "--speculative-token-map") is not None:
        result.add(name, Status.NOT_CHECKED, f"with --speculative-token-map the EAGLE worker may give the draft an "
                   f"override of its own instead of {OVERRIDE_FLAG} ({rule.replaced})", rule.replaced)  # fmt: skip
        return
    try:
        override = inherited_values.override_parsed(rule, text)
    except json.JSONDecodeError as err:  # the value is not shown: extra_args may hold secrets
        result.add(
            name, Status.FAIL,
            f"extra_args gives {OVERRIDE_FLAG} a value that is not JSON ({err.msg} at column {err.colno}): SGLang "
            f"parses it with json.loads ({rule.parse}) and stops when it reads the target's config. Write it as a "
            f"JSON object of config fields, e.g. {OVERRIDE_FLAG} '{{\"max_position_embeddings\": 131072}}'",
            rule.parse,
        )  # fmt: skip
        return
    if not override:
        result.add(name, Status.OK, f"{OVERRIDE_FLAG} is empty: SGLang applies it only when it is not "
                   f"({rule.apply})", rule.apply)  # fmt: skip
        return
    if not isinstance(override, dict) or "text_config" in override:
        what = "replaces the whole text_config" if isinstance(override, dict) else (
            f"is a JSON {type(override).__name__}, not an object of config fields"
        )  # fmt: skip
        result.add(name, Status.NOT_CHECKED, f"{OVERRIDE_FLAG} {what}; what the transformers config's update "
                   f"({rule.apply}) makes of it is not checked here", rule.apply)  # fmt: skip
        return
    keys = ", ".join(sorted(override))
    try:
        problems = _overridden_draft_problems(result, settings, index, rule, override, draft, target)
    except OSError as err:  # no scratch directory or links here (read-only /tmp, no symlinks)
        result.add(name, Status.NOT_CHECKED, f"the draft with {OVERRIDE_FLAG} applied could not be copied to check "
                   f"it: {err.strerror or err}", rule.apply)  # fmt: skip
        return
    reaches = f"{OVERRIDE_FLAG} ({keys}), which SGLang applies to the draft's config too ({rule.inherit}, {rule.apply})"
    if not problems:
        result.add(
            name, Status.OK, f"extra_args sets {reaches}; the draft checks come out the same with it", rule.apply
        )
        return
    worst = findings.verdict(problems)
    said = "; ".join(f"{f.name}: {f.message}" for f in problems)
    outcome = {
        Status.FAIL: f"with it the draft fails: {said}. SGLang has no draft-only override: keep in {OVERRIDE_FLAG} "
        "only keys the draft can take, or remove it",
        Status.WARN: f"with it: {said}",
    }.get(worst, f"with it these draft checks cannot tell: {said}")
    result.add(name, worst, f"extra_args sets {reaches}; {outcome}", rule.apply)


OVERRIDE_FLAG = "--json-model-override-args"


def _overridden_draft_problems(
    result: Report, settings: ServerSettings, index: SourceIndex, rule, override: dict, draft: Path,
    target: str | None,
) -> list[Finding]:  # fmt: skip
    """The draft checks (those that read a config.json) on scratch copies of the draft and the target with the
    override applied; the findings worse than without it, named as the draft checks name them."""
    before = {f.name: f.status for f in result.findings}
    checked = Report()
    with tempfile.TemporaryDirectory(prefix="sglang-eagle3-override-") as tmp:
        copy = _overridden_copy(rule, override, draft, Path(tmp) / "draft")
        target_copy = str(_overridden_copy(rule, override, Path(target), Path(tmp) / "target")) if target else None
        shown = {str(copy): str(draft), str(target_copy): str(target)}  # the messages name the real directories
        try:
            report = draft_check.check(
                index.tree, str(copy), target_copy or settings.model_path, algorithm=settings.speculative_algorithm
            )
        except draft_check.DraftInputError as err:
            return [Finding("draft config", Status.FAIL, _shown(str(err), shown))]
        checked.findings += [f.prefixed("draft") for f in report.findings]
        if report.architecture:
            check_draft_attention(checked, settings, index, report.architecture)
        check_draft_quantization(checked, settings, index, copy)
        check_draft_context(checked, settings, index, copy, target_copy)
        rank = list(Status).index
        return [
            Finding(f.name, f.status, _shown(f.message, shown), f.where)
            for f in checked.findings
            if rank(f.status) > rank(before.get(f.name, Status.OK))
        ]


def _overridden_copy(rule, override: dict, model: Path, copy: Path) -> Path:
    """``copy``: the model's config.json with the override applied (get_config's own statement), and links to
    every other file of the model (the draft checks read the weights' headers)."""
    copy.mkdir()
    config = json.loads((model / "config.json").read_text())  # read and checked by the draft checks already
    (copy / "config.json").write_text(json.dumps(inherited_values.override_applied(rule, config, override)))
    for entry in model.iterdir():
        if entry.name != "config.json":
            (copy / entry.name).symlink_to(entry.resolve())
    return copy


def _shown(message: str, paths: dict[str, str]) -> str:
    for scratch, real in paths.items():
        message = message.replace(scratch, real)
    return message


def check_draft_chunked_prefix(
    result: Report, settings: ServerSettings, index: SourceIndex, draft_arch: str, target_arch: str
) -> None:
    """The other way round (sgl-project/sglang #22780): the draft's runner turns the chunked prefix cache off in
    the server args it shares with the target, after the target was built with it on. A backend that reads the
    flag again on each prefill then finds it off on the target's MLA chunked-prefix path, and asserts."""
    name, flag = "draft chunked prefix cache", "--disable-chunked-prefix-cache"
    rule, mla = draft_inheritance.chunked_prefix_rule(index), attention_backends.mla_architectures(index)
    backend = settings.attention_backend
    split = [f for f in ("--prefill-attention-backend", "--decode-attention-backend") if extra_arg(
        settings.extra_args, f) is not None]  # fmt: skip
    if rule is None or mla is None:
        result.add(name, Status.NOT_CHECKED, "whether the draft's runner changes the target's chunked prefix cache "
                   "is not read from this SGLang's source")  # fmt: skip
    elif flag in settings.extra_args:
        result.add(
            name, Status.OK, f"extra_args sets {flag}: the target is built with the chunked prefix cache off, so the "
            f"draft's runner turning it off ({rule.turn_off}) changes nothing", rule.turn_off,
        )  # fmt: skip
    elif why := _unchanged_by_the_draft(rule, mla[0], backend, draft_arch, target_arch):
        result.add(name, Status.OK, f"{why}: the draft's runner turns the chunked prefix cache off ({rule.turn_off}) "
                   "only where the target's own runner already has", rule.turn_off)  # fmt: skip
    elif split or backend not in rule.reads:
        what = f"with {split[0]} in extra_args, which backend runs" if split else f"which classes {backend} builds for"
        result.add(name, Status.NOT_CHECKED, f"{what} the target's prefill, and whether it reads the chunked prefix "
                   "cache flag on each prefill, is not read here", rule.turn_off)  # fmt: skip
    else:
        per_request = [where for where, each in rule.reads[backend] if each]
        how = (
            f"the draft {draft_arch} is not MLA, so its runner ({rule.every_runner}) turns "
            f"disable_chunked_prefix_cache on ({rule.turn_off}) in the server args it shares with the target, after "
            f"the target was built ({rule.draft_after_target}) and its MLA attention kept the flag off "
            f"({rule.model_keeps})"
        )  # fmt: skip
        if not per_request:
            built = ", ".join(where for where, _ in rule.reads[backend]) or "nowhere"
            result.add(name, Status.OK, f"{how}; {backend} reads the flag only when it is built ({built}), before "
                       "that: the target keeps its chunked prefix cache", rule.turn_off)  # fmt: skip
            return
        calm = [b for b in rule.supported if rule.reads.get(b) and not any(each for _, each in rule.reads[b])]
        result.add(
            name, Status.WARN,
            f"{how}; {backend} reads it again on each prefill ({per_request[0]}: asserts it is off), so the first "
            "prefill of a long prompt that attends to a cached or earlier chunk's prefix on the target's "
            "chunked-prefix path raises AssertionError and stops the server (sgl-project/sglang #22780). Add "
            f"{flag} to extra_args" + (f", or set attention_backend {calm[0]}" if calm else ""),
            per_request[0],
        )  # fmt: skip


def _unchanged_by_the_draft(rule, mla: set[str], backend: str, draft_arch: str, target_arch: str) -> str | None:
    """Why the draft's runner turning the chunked prefix cache off leaves the target as it was; None: it does not."""
    if target_arch not in mla:
        return f"the target {target_arch} is not MLA"
    if backend not in rule.supported:
        return f"attention_backend {backend} is not one of {', '.join(rule.supported)}"
    return f"the draft {draft_arch} is MLA, as the target is" if draft_arch in mla else None
