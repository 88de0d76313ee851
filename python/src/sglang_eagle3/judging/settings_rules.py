"""The settings against the SGLang tree that will run them, by rules restated from its source.

Every flag and variable the settings give must be one this tree has (its parser, srt/environ.py), every value one
its parser takes, extra_args included, and every variable's text one its environ.py reads (environ_values.py runs
the tree's own parse()); and the combinations SGLang refuses while it resolves its arguments, restated in RULES,
each quoting the file:line of the tree's own check. These run without importing SGLang; where it can be imported,
preflight also runs SGLang's own validation (sglang_validation.py), which catches what nobody restated. The rule
audit (sglang_eagle3_audits/sglang_rules.py) maps every validation site of each pinned tree to one of these rules,
to that run, or to the reason it cannot be checked before start-up.
"""

from __future__ import annotations

import ast
import difflib
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import stacks
from ..errors import shown
from ..serving import credentials
from ..serving import settings as server_settings
from ..serving.settings import ServerSettings, field_flag
from ..source import allreduce_fusion, allreduce_gates, validation_sites
from ..source.server_args import Flags, environment_variables, server_args_field_names, server_flags
from ..source.tree import SGLangNotFound, SGLangTree, parse_source
from . import environ_values
from .findings import Report, Status

# Where SGLang's parser is read from (server_flags): 0.5.9 adds each flag in server_args.py, later
# releases derive most from the fields of srt/arg_groups/fields/.
PARSER = "its parser: srt/server_args.py ServerArgs.add_cli_args"
SPEC_V2 = "SGLANG_ENABLE_SPEC_V2"  # 0.5.9 only: its opt-in V2 worker takes top-k 1 only (rule spec-v2-topk)
ENV_TOOL_PREFIX = "SGLANG_EAGLE3_"


@functools.cache
def _sites(tree: SGLangTree, _stamp: int) -> tuple[validation_sites.Site, ...]:
    return tuple(validation_sites.sites(tree, helpers=False))


def tree_sites(tree: SGLangTree) -> tuple[validation_sites.Site, ...]:
    """The sites of the tree's validation files (every rule restated here is one of them, and the parser's), read
    once per tree (again if its server_args.py changes)."""
    return _sites(tree, validation_sites.server_args_stamp(tree))


# -- what the settings give SGLang ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Given:
    """One flag the server gets, its value (None for a switch), and how the user set it."""

    flag: str
    value: str | None
    setting: str  # "attention_backend", or "extra_args --page-size" for a flag of extra_args
    spellings: frozenset[str]  # every spelling of the flag (--tp-size, --tensor-parallel-size)

    def sets(self, field_name: str) -> bool:
        return f"--{field_name.replace('_', '-')}" in self.spellings


def given_flags(settings: ServerSettings, args: list[str], known: Flags) -> list[Given]:
    """Each flag of the launch plan's SGLang arguments ``args`` (the settings', then extra_args), with its value and
    the setting it comes from."""
    found, rendered = [], set(args)
    for name, value in settings:
        flag = field_flag(name)
        if flag and flag in rendered and value is not None and value is not False:
            spellings = known[flag][0] if flag in known else frozenset([flag])
            found.append(Given(flag, None if value is True else str(value), name, spellings))
    args = list(settings.extra_args)
    while args:
        token = args.pop(0)
        name, _, inline = token.partition("=")
        if not name.startswith("--") or name not in known:
            continue  # check_extra_args reports it
        value = inline if "=" in token else (args.pop(0) if known[name][1] and args else None)
        found.append(Given(name, value, f"extra_args {name}", known[name][0]))
    return found


def given_value(given: list[Given], field_name: str) -> Given | None:
    """The last flag that sets ``field_name`` (SGLang's parser keeps the last)."""
    return next((g for g in reversed(given) if g.sets(field_name)), None)


# -- the parser: choices and types ---------------------------------------------------------------------------------


def value_problems(given: list[Given], tree: SGLangTree, known: Flags) -> list[tuple[Given, str]]:
    """(flag, problem) for each value the tree's parser refuses: not of its ``type=`` (int, float), or not one
    of its ``choices=`` (where they are literals; computed ones are left to SGLang's own run)."""
    by_flag = {}
    for site in tree_sites(tree):
        if site.kind in ("choices", "type") and site.flag in known and KIND_RULE[site.kind] in PARSER_RULES:
            for spelling in known[site.flag][0]:
                by_flag.setdefault(spelling, {})[site.kind] = site
    problems = []
    for g in given:
        parser = by_flag.get(g.flag, {})
        if g.value is None or not parser:
            continue
        value: object = g.value
        kind = parser.get("type")
        convert = {"int": int, "float": float}.get(kind.parser_type if kind else "")
        if convert is not None:
            try:
                value = convert(g.value)
            except ValueError:
                problems.append((g, f"{g.setting}: SGLang {tree.version}'s parser wants {convert.__name__} for "
                                    f"{g.flag}, not {shown(g.value)} ({kind.where})"))  # fmt: skip
                continue
        choices = parser.get("choices")
        if choices is not None and choices.choices is not None and value not in choices.choices:
            close = difflib.get_close_matches(str(value), [str(c) for c in choices.choices], n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            listed = ", ".join(str(c) for c in choices.choices)
            problems.append((g, f"{g.setting}: SGLang {tree.version} refuses {shown(g.value)} for {g.flag}: its parser "
                                f"takes one of {listed} ({choices.where}){hint}"))  # fmt: skip
    return problems


# -- combinations SGLang refuses while it resolves its arguments ----------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One check of SGLang's, restated: which of its sites (audit keys, globs) it restates, what settings trigger
    it (tests/test_sglang_rules.py shows preflight FAILs on them), and the check itself."""

    name: str
    refuses: str  # what SGLang refuses, in a line (docs/draft-checks.md lists them)
    sites: tuple[str, ...]  # key globs; the rule applies to a tree that has a site matching one
    trigger: dict  # ServerSettings values SGLang refuses
    judge: Callable[..., str | None] = field(compare=False, repr=False)  # (settings, given, tree, site) -> problem
    by_gpu: bool = False  # the judge also takes the GPUs' compute capability major (a keyword, ``major``)

    def site(self, tree: SGLangTree) -> validation_sites.Site | None:
        return next((s for s in tree_sites(tree) for g in self.sites if validation_sites.key_matches(g, s.key)), None)


def _topk(settings: ServerSettings) -> int | None:
    return settings.speculative_eagle_topk if settings.speculative_algorithm else None


def _int(g: Given | None) -> int | None:
    try:
        return int(g.value) if g is not None and g.value is not None else None
    except ValueError:
        return None  # value_problems reports it


def _page_tree(settings, given, tree, site) -> str | None:
    page, topk = given_value(given, "page_size"), _topk(settings)
    allowed = validation_sites.tested_values(tree, site.where, "attention_backend")
    if not (topk and topk > 1 and (_int(page) or 1) > 1 and allowed is not None):
        return None
    if settings.attention_backend in allowed:
        return None
    return (
        f"speculative_eagle_topk: {topk} with {page.setting} {page.value} on attention_backend "
        f"{settings.attention_backend}: SGLang {tree.version} refuses a draft tree (top-k > 1) on pages larger than "
        f"1 except on {', '.join(allowed)} (ValueError at {site.where}); set speculative_eagle_topk 1, page size 1, "
        f"or attention_backend {allowed[0]}"
    )


def _moe_runner(settings, given, tree, site) -> str | None:
    g = given_value(given, "speculative_moe_runner_backend")
    if not (settings.speculative_algorithm and g and g.value == "flashinfer_trtllm"):
        return None
    return (
        f"{g.setting}: SGLang {tree.version} refuses flashinfer_trtllm as the draft's MoE runner backend "
        f"(AssertionError at {site.where}, 'for risk in some draft models'); drop it or choose another backend"
    )


def _trtllm_mha(settings, given, tree, site) -> str | None:
    topk = _topk(settings)
    backends = [("attention_backend", settings.attention_backend)] + [
        (g.setting, g.value) for f in ("decode_attention_backend", "prefill_attention_backend")
        if (g := given_value(given, f))
    ]  # fmt: skip
    named = [name for name, value in backends if value == "trtllm_mha"]
    if not (topk and topk > 1 and named):
        return None
    return (
        f"speculative_eagle_topk: {named[0]} trtllm_mha supports only top-k 1, not {topk} (SGLang {tree.version} "
        f"refuses it: ValueError at {site.where}); set speculative_eagle_topk 1 or another backend"
    )


def _spec_v2(settings, given, tree, site) -> str | None:
    topk, value = _topk(settings), settings.environment.get(SPEC_V2)
    reading = environ_values.read(tree, SPEC_V2, value) if value is not None else None
    if not (topk and topk > 1 and reading is not None and reading.value is True):  # as the tree's EnvBool reads it
        return None
    return (
        f"speculative_eagle_topk: environment {SPEC_V2} supports only top-k 1, not {topk} (SGLang {tree.version} "
        f"refuses it: ValueError at {site.where}); set speculative_eagle_topk 1 or drop the variable"
    )


def _rejection_sampling(settings, given, tree, site) -> str | None:
    g, topk = given_value(given, "speculative_use_rejection_sampling"), _topk(settings)
    if not (g and topk and topk != 1):
        return None
    worker = validation_sites.worker_assertion(tree, "Chain speculative sampling supports only topk=1")
    also = f"; its V2 draft worker asserts the same when it starts, after the load ({worker})" if worker else ""
    return (
        f"speculative_eagle_topk: {topk} with {g.setting}: SGLang {tree.version} samples with rejection only along "
        f"a chain, top-k 1 (ValueError at {site.where}{also}); set speculative_eagle_topk 1 or drop {g.flag}"
    )


FUSION = "enable_flashinfer_allreduce_fusion"
FUSION_BACKEND = "flashinfer_allreduce_fusion_backend"  # releases after 0.5.9: the switch becomes backend "auto"
RESOLVER = ("srt/layers/flashinfer_comm_fusion.py", "_resolve_backend")  # those releases' backend resolver


def _fusion_asked(settings: ServerSettings, given: list[Given]) -> tuple[str, str] | None:
    """(the setting that asks for FlashInfer's all-reduce fusion, the backend it asks for); None: not asked. An
    explicit backend (0.5.23's flag, in extra_args) wins over the switch, which SGLang makes "auto" only without
    one (srt/arg_groups/serving_hook.py handle_deprecated_args)."""
    g = given_value(given, FUSION_BACKEND)
    if g is not None and g.value is not None:
        return g.setting, g.value
    return (FUSION, "auto") if settings.enable_flashinfer_allreduce_fusion else None


def _single_node_term(tree: SGLangTree, site: validation_sites.Site) -> tuple[ast.expr, ast.If] | None:
    """The term of the tests around the auto-enable ``site`` that keeps it to one node (0.5.9's ``self.nnodes ==
    1``, 0.5.23's ``(view.nnodes == 1 or get_platform().is_sm100)``), and its ``if``; None where the tree has none."""
    located = validation_sites.locate(tree, site.where)
    for test in located.tests if located else []:
        for term in test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]:
            if re.search(r"\.nnodes == 1\b", ast.unparse(term)):
                statement = next(n for n in ast.walk(located.module.tree) if isinstance(n, ast.If) and n.test is test)
                return term, statement
    return None


def _comment_above(tree: SGLangTree, rel: str, statement: ast.stmt, words: str) -> tuple[str, str] | None:
    """(file:line, text) of a comment holding ``words`` in the block of lines just above ``statement`` (up to the
    blank line before it): 0.5.9's "TODO: currently, it is only supported in the single node scenario"."""
    lines = (tree.package / rel).read_text(errors="replace").splitlines()
    number = statement.lineno - 1
    while number > 0 and lines[number - 1].strip():
        text = lines[number - 1].strip()
        if text.startswith("#") and words in text.lower():
            return f"{rel}:{number}", text.lstrip("# ")
        number -= 1
    return None


def _call_line(tree: SGLangTree, rel: str, name: str) -> str | None:
    """file:line of the first call of a function whose name contains ``name`` in ``rel``; None if none."""
    path = tree.package / rel
    if not path.is_file():
        return None
    for node in ast.walk(parse_source(path)):
        if isinstance(node, ast.Call) and name in ast.unparse(node.func).rsplit(".", 1)[-1]:
            return f"{rel}:{node.lineno}"
    return None


def _resolver(tree: SGLangTree) -> ast.FunctionDef | None:
    path = tree.package / RESOLVER[0]
    if not path.is_file():
        return None
    module = parse_source(path)
    return next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == RESOLVER[1]), None)


def _multi_node_refusal(resolver: ast.FunctionDef, backend: str) -> tuple[int, str, set[int]] | None:
    """Where the backend resolver refuses ``backend`` across nodes: (line of the raise, its message, the GPU majors
    it resolves that backend for across nodes instead, from the ifs that return before the raise); None where it
    does not (a backend it refuses for another reason is not this rule's: SGLang's own run and the probe judge it)."""

    def names_backend(test: ast.expr) -> bool:
        return any(isinstance(n, ast.Compare) and ast.unparse(n.left) == "backend" and isinstance(n.ops[0], ast.Eq)
                   and isinstance(n.comparators[0], ast.Constant) and n.comparators[0].value == backend
                   for n in ast.walk(test))  # fmt: skip

    def across_nodes(test: ast.expr) -> bool:  # is_multi_node itself, not handed to a helper
        calls = {id(a) for n in ast.walk(test) if isinstance(n, ast.Call) for a in ast.walk(n)}
        return any(isinstance(n, ast.Name) and n.id == "is_multi_node" and id(n) not in calls for n in ast.walk(test))

    def visit(body: list[ast.stmt], tests: list[ast.expr]):
        for i, node in enumerate(body):
            if isinstance(node, ast.Raise) and any(map(names_backend, tests)) and any(map(across_nodes, tests)):
                exc = node.exc
                first = exc.args[0] if isinstance(exc, ast.Call) and exc.args else None
                message = first.value if isinstance(first, ast.Constant) else ast.unparse(first or exc)
                returns = [b.test for b in body[:i] if isinstance(b, ast.If) and any(isinstance(r, ast.Return)
                                                                                     for r in b.body)]  # fmt: skip
                instead = {m for test in returns for m in allreduce_fusion.sm_majors(test)}
                return node.lineno, message, instead
            if isinstance(node, ast.If):
                found = visit(node.body, [*tests, node.test]) or visit(node.orelse, tests)
                if found:
                    return found
        return None

    return visit(resolver.body, [])


def _fusion_turned_off(tree: SGLangTree, given: list[Given]) -> bool:
    """Whether a switch the settings give makes SGLang drop the fusion backend before start-up (0.5.23's
    --enforce-disable-flashinfer-allreduce-fusion, --enable-deterministic-inference): the passes that set it to
    None, and the fields their ifs test."""
    for site in tree_sites(tree):
        if site.kind == "set" and site.key.endswith(f"::set {FUSION_BACKEND}") and site.text.endswith("None}"):
            located = validation_sites.locate(tree, site.where)
            fields = {n.attr for t in (located.tests if located else []) for n in ast.walk(t)
                      if isinstance(n, ast.Attribute)} & server_args_field_names(tree)  # fmt: skip
            switches = [given_value(given, f) for f in fields - {FUSION_BACKEND}]
            if switches and all(g is not None and g.value is None for g in switches):
                return True
    return False


def _fusion_across_nodes(settings, given, tree, site, major: int | None = None) -> str | None:
    asked = _fusion_asked(settings, given)
    single = _single_node_term(tree, site) if settings.nnodes > 1 and asked else None
    if single is None or _fusion_turned_off(tree, given):
        return None
    (setting, backend), (term, statement) = asked, single
    major = allreduce_gates.capability_major(server_settings.TUNED_COMPUTE_CAPABILITY) if major is None else major
    fix = (f"set {FUSION}=false for a multi-node group" if setting == FUSION
           else f"drop {setting.removeprefix('extra_args ')} from extra_args for a multi-node group")  # fmt: skip
    resolver = _resolver(tree)
    if resolver is None:  # 0.5.9: a comment says so, and the auto-enable keeps to one node
        said = _comment_above(tree, site.file, statement, "single node")
        said = f"SGLang {tree.version} says so at {said[0]} ({said[1]!r}) and" if said else f"SGLang {tree.version}"
        ipc = _call_line(tree, "srt/layers/flashinfer_comm_fusion.py", "create_ipc_workspace")
        ipc = f"; its TRT-LLM workspace is shared over CUDA IPC across the whole TP group ({ipc})" if ipc else ""
        return (
            f"{setting}: FlashInfer's all-reduce fusion works within one node only, not across nnodes "
            f"{settings.nnodes}: {said} turns it on by itself only when nnodes == 1 ({site.where}){ipc}; {fix}"
        )
    refusal = _multi_node_refusal(resolver, backend)
    if refusal is None or major in refusal[2]:
        return None
    line, message, instead = refusal
    where = f"{RESOLVER[0]}:{line}"
    if setting == FUSION:
        made = next((s.where for s in tree_sites(tree) if s.kind == "set" and s.key.endswith(f"::set {FUSION_BACKEND}")
                     and "'auto'" in s.text), None)  # fmt: skip
        asked_as = f"makes {FUSION} the backend 'auto'{f' ({made})' if made else ''}, which"
    else:
        asked_as = f"resolves the backend {shown(backend)}, which"
    only = f"only on {', '.join(f'SM{m}x' for m in sorted(instead))}" if instead else "on no GPU"
    return (
        f"{setting}: FlashInfer's all-reduce fusion cannot span nnodes {settings.nnodes} on SM{major}x: SGLang "
        f"{tree.version} {asked_as} spans nodes {only} and raises ValueError {message!r} at {where} when it builds "
        f"the fusion workspaces, after the weights have loaded; it turns the fusion on by itself only when "
        f"{ast.unparse(term)} ({site.where}); {fix}"
    )


SPEC_ALGORITHM = {name: server_settings.default(name) for name in ("speculative_algorithm", "speculative_num_steps")}
DRAFT_TREE = {**SPEC_ALGORITHM, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}  # top-k > 1
RULES = (
    Rule("spec-page-tree", "top-k > 1 with a page size > 1 on an attention backend without the paged draft tree",
         ("*::raise ValueError: speculative_eagle_topk > 1 with page_size > 1 *",),
         {**DRAFT_TREE, "attention_backend": "flashmla", "extra_args": ["--page-size", "64"]}, _page_tree),
    Rule("spec-moe-runner", "flashinfer_trtllm as the draft's MoE runner backend",
         ("*::assert not MoeRunnerBackend(self.speculative_moe_runner_backend).is_flashinfer_trtllm()",),
         {"extra_args": ["--speculative-moe-runner-backend", "flashinfer_trtllm"]}, _moe_runner),
    Rule("spec-trtllm-mha", "top-k > 1 with a trtllm_mha attention backend (prefill, decode or both)",
         ("*::raise ValueError: trtllm_mha backend only supports topk = 1 for speculative decoding.",),
         {**SPEC_ALGORITHM, "speculative_eagle_topk": 2, "speculative_num_draft_tokens": 4,
          "extra_args": ["--decode-attention-backend", "trtllm_mha"]}, _trtllm_mha),
    Rule("spec-v2-topk", "top-k > 1 with SGLANG_ENABLE_SPEC_V2 (0.5.9's opt-in V2 worker)",
         ("*::raise ValueError: Spec v2 currently only supports topk = 1 for speculative decoding.",),
         {**DRAFT_TREE, "environment": {SPEC_V2: "1"}}, _spec_v2),
    Rule("spec-rejection-sampling",
         "rejection sampling (--speculative-use-rejection-sampling) with top-k > 1 (the V2 worker's chain sampler)",
         ("*::raise ValueError: --speculative-use-rejection-sampling requires --speculative-eagle-topk=1.",),
         {**DRAFT_TREE, "extra_args": ["--speculative-use-rejection-sampling"]}, _rejection_sampling),
    Rule("fusion-multi-node",
         "FlashInfer's all-reduce fusion across nodes (nnodes > 1): one node only (0.5.9), SM10x's mnnvl only (0.5.23)",
         ("*::ServerArgs._handle_model_specific_adjustments::set enable_flashinfer_allreduce_fusion",
          "*::_flashinfer_allreduce_fusion_auto_enable::set flashinfer_allreduce_fusion_backend"),
         {"nnodes": 2, "dist_init_addr": "10.0.0.1:50000", FUSION: True}, _fusion_across_nodes, by_gpu=True),
)  # fmt: skip
# The parser's own rules, applied to every flag: name -> (what it refuses, site globs, trigger).
PARSER_RULES = {
    "choices": ("a value outside a flag's choices", ("*::choices --*",), {"attention_backend": "nope_backend"}),
    "types": ("a value a flag's int/float type cannot read", ("*::type --*",),
              {"extra_args": ["--chunked-prefill-size", "many"]}),
}  # fmt: skip


KIND_RULE = {"choices": "choices", "type": "types"}  # the parser rule of each kind of parser site


def check_settings_version(
    result: Report, settings: ServerSettings, args: list[str], tree: SGLangTree, compute_capability: str | None = None
) -> None:
    """Every setting SGLang gets (a flag of ``args``, the launch plan's SGLang arguments, or a variable of its
    environ.py) must be one this SGLang has: a flag it lacks stops it at start-up, a variable it lacks is silently
    ignored; every value one its parser takes; and no combination a restated rule of this tree refuses. Read from
    the tree's own source. ``compute_capability``: the GPUs' (None: the tuned host's), for the rules that depend
    on it."""
    try:
        known, variables = server_flags(tree), environment_variables(tree)
    except SGLangNotFound as err:
        result.add("settings", Status.FAIL, str(err))
        return
    given = given_flags(settings, args, known)
    applied = [(rule, site) for rule in RULES if (site := rule.site(tree)) is not None]  # the tree has the check
    problems = [
        *_settings_it_lacks(settings, set(args), tree, known, variables),
        *_environment_it_ignores(settings, tree, variables),
        *(p for g, p in value_problems(given, tree, known) if not g.setting.startswith("extra_args")),
        *_restated_rules_refusing(settings, given, tree, applied, compute_capability),
    ]
    if problems:
        result.add("settings", Status.FAIL, "; ".join(problems))
    elif stacks.get(tree.version) is None:
        result.add("settings", Status.NOT_CHECKED, f"{stacks.not_a_stack(tree.version)}: its flags were read from "
                   "its source and every rendered one is there, but their meaning is not checked")  # fmt: skip
    else:
        result.add("settings", Status.OK, f"every flag, value and variable the settings give is one SGLang "
                   f"{tree.version} takes, and none of the {len(applied)} of its rules restated here refuses them "
                   "(docs/sglang-rules.md)")  # fmt: skip


def _settings_it_lacks(
    settings: ServerSettings, rendered: set[str], tree: SGLangTree, known: Flags, variables: dict[str, int]
) -> list[str]:
    """Settings whose flag (rendered) or variable (switched on) this SGLang does not have, and secrets' files whose
    flag it lacks (the launcher hands a secret over as its flag)."""
    problems = []
    for name, value in settings:
        flag, env = field_flag(name), server_settings.field_env(name)
        missing = (flag in rendered and flag not in known) or (env and value is True and env not in variables)
        if not missing:
            continue
        version, where = server_settings.field_origin(name)
        what = f"no flag {flag} ({PARSER})" if flag else f"no variable {env} (srt/environ.py, class Envs)"
        close = difflib.get_close_matches(flag, list(known), n=1) if flag else []
        instead = f"; its nearest flag is {close[0]} (put it in extra_args)" if close else ""
        problems.append(
            f"{name}: SGLang {tree.version} has {what}; it is in SGLang {version}"
            f"{f' ({where})' if where else ''}{instead}. Unset {name}, or use the {version} stack: "
            f"nix run .#{stacks.stacks()[version].app}"
        )
    for secret in credentials.SECRET_ARGS:
        if getattr(settings, secret.setting) is not None and secret.flag not in known:
            problems.append(
                f"{secret.setting}: SGLang {tree.version} has no flag {secret.flag} ({PARSER}): it would refuse "
                f"the {secret.field.replace('_', ' ')} at launch. Unset {secret.setting}, or serve with an SGLang "
                f"that has {secret.flag}"
            )
    return problems


def _environment_it_ignores(settings: ServerSettings, tree: SGLangTree, variables: dict[str, int]) -> list[str]:
    """SGLANG_ variables this SGLang never reads, and values of those it reads that its own parse() refuses."""
    problems = []
    for variable in sorted(v for v in settings.environment if v.startswith("SGLANG_") and v not in variables):
        if not variable.startswith(ENV_TOOL_PREFIX) and not _mentioned(tree, variable):
            problems.append(
                f"environment: SGLang {tree.version} does not read {variable} (not in srt/environ.py's Envs nor "
                f"anywhere in its source): it would be silently ignored; drop it or check its name"
            )
    problems += [p for variable, text in sorted(settings.environment.items())
                 if variable in variables and (p := _unread(tree, variable, text))]  # fmt: skip
    return problems


def _restated_rules_refusing(
    settings: ServerSettings, given: list[Given], tree: SGLangTree, applied: list[tuple[Rule, validation_sites.Site]],
    compute_capability: str | None,
) -> list[str]:  # fmt: skip
    """What the restated rules of this tree refuse; the GPU-dependent ones judged for ``compute_capability``."""
    try:
        major = allreduce_gates.capability_major(compute_capability or server_settings.TUNED_COMPUTE_CAPABILITY)
    except ValueError:  # no NVIDIA GPU's: the probe says so
        major = None
    problems = []
    for rule, site in applied:
        problem = rule.judge(settings, given, tree, site, **({"major": major} if rule.by_gpu else {}))
        problems += [problem] if problem else []
    return problems


def _unread(tree: SGLangTree, variable: str, text: str) -> str | None:
    """A variable's text the tree's own parse() refuses: SGLang warns and runs with the default instead."""
    reading = environ_values.read(tree, variable, text)
    if reading is None or reading.error is None:
        return None
    fallback = f" ({reading.fallback_at})" if reading.fallback_at else ""
    return (
        f"environment {variable}: SGLang {tree.version} cannot read {shown(text)} ({reading.kind}.parse at "
        f"{reading.parse_at}: {reading.error}); it warns and runs with the default {reading.default} instead"
        f"{fallback}, not what the settings say; give a value {reading.kind} reads"
    )


def _mentioned(tree: SGLangTree, variable: str) -> bool:
    """Whether any of SGLang's Python files names the variable (read with os.environ rather than Envs)."""
    needle = variable.encode()
    return any(needle in path.read_bytes() for path in tree.package.rglob("*.py"))


def check_extra_args(result: Report, settings: ServerSettings, args: list[str], tree: SGLangTree) -> None:
    """extra_args must be flags this SGLang knows, not ones a setting already owns, with values its parser takes
    (``args``: the launch plan's SGLang arguments, which end with them)."""
    if not settings.extra_args:
        return
    try:
        known = server_flags(tree)
    except SGLangNotFound as err:
        result.add("extra_args", Status.FAIL, str(err))
        return
    problem = _unknown_or_owned_flag(settings.extra_args, tree, known) or "; ".join(
        p for g, p in value_problems(given_flags(settings, args, known), tree, known)
        if g.setting.startswith("extra_args")
    )  # fmt: skip
    if problem:
        result.add("extra_args", Status.FAIL, problem)
    else:
        result.add("extra_args", Status.OK, " ".join(settings.extra_args))


def _unknown_or_owned_flag(extra_args: list[str], tree: SGLangTree, known: Flags) -> str | None:
    """The first of extra_args that is not a flag this SGLang has, is a setting's flag, or lacks its value."""
    owner = {spelling: name for name in ServerSettings.model_fields
             if (flag := field_flag(name)) in known for spelling in known[flag][0]}  # fmt: skip
    args = list(extra_args)
    while args:
        token = args.pop(0)
        name = token.split("=", 1)[0]
        if not name.startswith("--"):
            return f"{shown(token)} is not a flag; extra_args are SGLang flags and their values"
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            return (f"SGLang {tree.version} has no flag {name}{hint} ({PARSER}; flags differ between SGLang versions: "
                    "use one that this SGLang's `python -m sglang.launch_server --help` lists)")  # fmt: skip
        if name in owner:
            return f"{name} is the setting {shown(owner[name])}; set it there, not in extra_args"
        if known[name][1] and "=" not in token:
            if not args or args[0].startswith("--"):
                return f"{name} needs a value"
            args.pop(0)
    return None
